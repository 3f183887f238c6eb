"""A job whose function asks a service over the network, recorded unchanged: the recording says
which operator connected (core/network_calls.py), since tt does not log what the peer answered.

`tests/jobs/hooked_network.py`'s `priced` asks a price service, a TCP server this test runs, for
each row's price; `Tagged` asks nothing. The job's own output (collected by Spark) is the oracle
of what the service answered.
"""

from __future__ import annotations

import socketserver
import threading
from pathlib import Path

import pytest

from plain_jobs import record_on_and_off

from tt.cli.main import main
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_network.py"


class _Prices(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(f"{int(line) * 7}\n".encode())


@pytest.fixture(scope="module")
def service():
    """A price service on this machine's loopback: `HOST:PORT`."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Prices)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def recorded(spark, service, tmp_path_factory):
    events = []
    run, on, off = record_on_and_off(JOB, tmp_path_factory.mktemp("hooked_network"), [service],
                                     on_event=lambda kind, info: events.append((kind, info)))
    return run, on, off, [info["message"] for kind, info in events if kind == "warning"]


def test_the_recording_says_which_operator_asked_the_network_and_only_it(recorded, service):
    run, on, off, printed = recorded
    assert on == off
    assert [p for _, p, _ in on["priced"]] == [7 * i for i in range(12)]   # what the service answered
    said = [w for w in printed if "connected to" in w]
    assert len(said) == 1, printed   # once for the operator, whichever workers' tasks connected
    assert said[0].startswith(f"priced: a step connected to {service}; ")
    assert "tt does not log what a network peer answers" in said[0]
    reader = RunReader(run)
    try:
        assert [w for w in reader.warnings() if "connected to" in w] == said   # kept in the run
    finally:
        reader.close()


def test_tt_inspect_says_it_again(recorded, capsys):
    run, *_ = recorded
    assert main(["inspect", str(run)]) == 0
    out = capsys.readouterr().out
    assert "priced: a step connected to 127.0.0.1:" in out
    assert "Tagged: a step connected" not in out

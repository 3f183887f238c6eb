"""A job whose function asks a service over the network, recorded unchanged: the recording says
which operator connected (core/outside_effects.py), since tt does not log what the peer answered.

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
from tt.tui.app import DebuggerApp

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_network.py"


class _Prices(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(f"{int(line) * 7}\n".encode())


class _Service:
    """A price service on this machine's loopback, at `address` (`HOST:PORT`) until `stop`."""

    def __init__(self):
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Prices)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def service():
    running = _Service()
    yield running.address
    running.stop()


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


def test_the_debugger_says_it_when_its_replay_engine_is_ready(recorded):
    from test_tui import drive, message

    run, *_ = recorded
    app = DebuggerApp(run)

    async def script(pilot):
        return message(app), app.query_one("#message").has_class("-warning")
    said, warning = drive(app, script)
    assert said.startswith("replay engine ready · the recording warned: priced: a step connected to 127.0.0.1:"), said
    assert warning   # (in the warning colour)


def test_the_dag_marks_the_operator_a_warning_concerns(recorded):
    """`priced` connected: `!` beside it in the DAG (the key that lists the warnings); `Tagged`
    asked nothing, and has none."""
    from test_tui import drive

    from tt.tui.widgets.dag_view import DagView

    run, *_ = recorded
    app = DebuggerApp(run)

    async def script(pilot):
        return "\n".join(line.plain for line in app.query_one(DagView)._dag_lines)
    drawn = drive(app, script)
    assert "[priced θ×2 !]" in drawn and "[Tagged×2]" in drawn, drawn


def test_a_replay_without_the_service_diverges_and_verify_says_why(spark, tmp_path, capsys):
    """The service gone, as on a laptop a run was copied to: the replayed step's connection is
    refused where the recorded one was answered, and `tt verify` says so, then the warning."""
    running = _Service()
    try:
        run, on, off = record_on_and_off(JOB, tmp_path, [running.address])
    finally:
        running.stop()
    assert on == off
    assert main(["verify", str(run)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "replay diverges" in lines[0] and "priced:" in lines[0] and "ConnectionRefusedError" in lines[0], lines
    assert lines[1] == f"{run}: the recording warned: priced: a step connected to {running.address}; " \
                       f"tt does not log what a network peer answers, so a replay connects again: offline it " \
                       f"fails, and a peer that answers otherwise gives other states than the recording's " \
                       f"(tt verify compares them)"


@pytest.fixture(scope="module")
def warned_twice(spark, service, tmp_path_factory):
    """A recording with a `--when` that raises on `priced`'s rows: two warnings, one flush."""
    run, on, off = record_on_and_off(JOB, tmp_path_factory.mktemp("hooked_network_when"), [service],
                                     when="row['nope'] > 0")
    assert on == off
    reader = RunReader(run)
    try:
        return run, reader.warnings()
    finally:
        reader.close()


def test_a_task_says_every_warning_it_has_in_one_flush(warned_twice, service):
    """`priced`'s tasks are over in one flush, with two things to say: its connection, and that
    `--when` raised on its rows. Both reach the run (a flush's warnings are a list, not one slot)."""
    _, warned = warned_twice
    assert [w for w in warned if w.startswith(f"priced: a step connected to {service}; ")], warned
    assert [w for w in warned if w.startswith("--when \"row['nope'] > 0\" raised TypeError")], warned


def test_the_debugger_lists_every_warning_on_a_key(warned_twice):
    """The message line says the first warning and how many more; `!` lists them all, as the run
    file keeps them, and Esc returns; the palette offers it too."""
    from test_tui import drive, keys, message, position, until

    from tt.tui.warnings_screen import WarningsScreen

    run, warned = warned_twice
    assert len(warned) == 2, warned
    app = DebuggerApp(run)

    async def script(pilot):
        said = message(app)
        palette = {c.title: c.help for c in app.get_system_commands(app.screen)}
        await keys(pilot, "exclamation_mark")
        await until(pilot, lambda: isinstance(app.screen, WarningsScreen), what="the warnings")
        listed = _plain(app.screen.query_one("#warnings-list").content)
        shown = str(app.screen.query_one("#warnings-title").render())
        at, before = position(app), message(app)
        await keys(pilot, "n", "f")   # a page to read: keys do nothing behind it (f, greyed, says nothing)
        assert isinstance(app.screen, WarningsScreen) and position(app) == at and message(app) == before
        await keys(pilot, "escape")
        return said, palette, listed, shown, isinstance(app.screen, WarningsScreen)
    said, palette, listed, shown, still_open = drive(app, script)
    assert said == f"replay engine ready · the recording warned: {warned[0]} (and 1 more: ! lists them)", said
    assert palette["Recording warnings"].startswith("! · every warning the recording made")
    assert listed == [f"{n}. {w}" for n, w in enumerate(warned, 1)], listed   # as drawn, each whole
    assert shown.startswith("The recording warned of 2 things"), shown
    assert not still_open


def _plain(renderable) -> list[str]:
    """A rich renderable's lines as text, wide enough that nothing wraps."""
    import io

    from rich.console import Console

    console = Console(width=2000, record=True, file=io.StringIO())
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines() if line.strip()]

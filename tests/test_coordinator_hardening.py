"""The coordinator under hostile connections (issue 10, item 3).

While a real recording runs, peers connect to the coordinator's port and send
garbage, a header claiming a 2 GiB frame, a non-JSON header and a JSON list,
both without the run's secret and with it. Each connection must be closed
without the coordinator reading (or allocating) what the peer claims, the
recording must complete, and replay must verify it.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading

import pytest
import workloads

from tt.cli.main import main as tt_main
from tt.recorder import wire
from tt.recorder.coordinator import Coordinator
from tt.store.reader import RunReader

_HEAD = struct.Struct("<II")
FLOOD = 768 << 20      # what a peer tries to push after a header claiming 2 GiB
CHUNK = 1 << 20


def _vm_hwm_kib() -> int:
    """This process's peak resident set size (the coordinator runs in it)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/self/status")


def _connect(address, secret=None) -> socket.socket:
    s = socket.create_connection(address, timeout=60)  # a guard against a hang, not a synchronization
    nonce = _read(s, wire.NONCE_BYTES)
    assert len(nonce) == wire.NONCE_BYTES, "the coordinator opens with its nonce"
    if secret is not None:
        s.sendall(wire.proof(secret, nonce))
    return s


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = s.recv(n - len(out))
        if not got:
            break
        out += got
    return out


def _closed_by_peer(s: socket.socket) -> bool:
    """Read until the coordinator closes the connection; True if it did (EOF or reset)."""
    try:
        while True:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    finally:
        s.close()


def _flood(s: socket.socket, first: bytes) -> int:
    """Send `first`, then up to FLOOD bytes; returns how many were sent before the peer reset."""
    sent = 0
    chunk = os.urandom(CHUNK)
    try:
        s.sendall(first)
        while sent < FLOOD:
            s.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def _attacks(address, secret, run_id) -> dict:
    out = {}
    non_json = b"{not json at all"
    a_list = b"[1, 2, 3]"
    wrong_hello = b'{"t": "hello", "run": "%s", "stage": "zero", "partition": []}' % run_id.encode()
    for auth in (False, True):
        key = "auth" if auth else "anon"
        who = secret if auth else None

        s = _connect(address, who)
        s.sendall(os.urandom(4096))
        out[f"{key} garbage"] = _closed_by_peer(s)

        s = _connect(address, who)
        sent = _flood(s, _HEAD.pack(1 << 31, 16))
        out[f"{key} 2 GiB header: flood refused"] = sent < FLOOD // 4
        out[f"{key} 2 GiB header"] = _closed_by_peer(s)

        for name, header in (("non-JSON header", non_json), ("JSON list", a_list), ("bad hello", wrong_hello)):
            s = _connect(address, who)
            s.sendall(_HEAD.pack(4 + len(header), len(header)) + header)
            try:
                s.shutdown(socket.SHUT_WR)  # unauthenticated, it may be too short for a proof: end it
            except OSError:
                pass  # the coordinator has closed the connection already
            out[f"{key} {name}"] = _closed_by_peer(s)
    return out


def test_hostile_connections_during_a_recording(record, caplog):
    caplog.set_level(logging.WARNING, logger="tt.coordinator")
    seen: dict = {}

    def before_run(session):
        original = session.on_event

        def on_event(kind, info):
            # the first interaction is taken while θ's tasks run; the task that triggered
            # it waits for its reply until the attacks are over
            if kind == "interaction" and "attacks" not in seen:
                seen["attacks"] = None
                c = session.coordinator
                seen["bind"] = c.server.server_address[0]
                hwm = _vm_hwm_kib()
                try:
                    seen["attacks"] = _attacks(c.address, c.secret, session.run_id)
                except Exception as e:  # reported by the test, not by the coordinator's thread
                    seen["error"] = repr(e)
                seen["hwm_growth_mib"] = (_vm_hwm_kib() - hwm) / 1024
            original(kind, info)

        session.on_event = on_event

    path = record(workloads.build_keyed, watch="FE", when="row['amount'] > 300", before_run=before_run)

    assert "error" not in seen, seen.get("error")
    assert seen["bind"] == "127.0.0.1", "a local master's coordinator listens on loopback only"
    attacks = seen["attacks"]
    assert attacks and all(attacks.values()), attacks
    assert len(attacks) == 12
    assert seen["hwm_growth_mib"] < 500, f"peak RSS grew by {seen['hwm_growth_mib']:.0f} MiB"
    # one line per dropped connection, no traceback
    lines = [r for r in caplog.records if r.name == "tt.coordinator"]
    assert lines and all(r.exc_info is None for r in lines)
    assert any("not JSON" in r.getMessage() for r in lines)
    assert any("JSON list" in r.getMessage() for r in lines)
    assert any("did not prove" in r.getMessage() for r in lines)

    assert 0 < len(record.result["S"]) < workloads.PAYMENTS
    reader = RunReader(path)
    try:
        assert reader.status == "complete"
        assert len(reader.interactions()) == len(reader.interactions_all) >= 3
        statuses = [row[0] for row in reader.conn.execute("SELECT status FROM attempts")]
        assert statuses and set(statuses) == {"committed"}, "no hostile connection became an attempt"
    finally:
        reader.close()
    assert tt_main(["verify", str(path)]) == 0


def test_frames_are_checked_before_they_are_read(monkeypatch):
    a, b = socket.socketpair()
    try:
        a.sendall(_HEAD.pack(1 << 31, 8))
        with pytest.raises(wire.FrameError, match="malformed frame"):
            wire.recv(b)
        for header, message in ((b"{nope", "not JSON"), (b"[1]", "JSON list"), (b"42", "JSON int"),
                                (b'{"blobs": [3]}', "do not add up")):
            a.sendall(_HEAD.pack(4 + len(header), len(header)) + header)
            with pytest.raises(wire.FrameError, match=message):
                wire.recv(b)
        big = [b"x" * (3 * CHUNK + 5), b"yz"]  # read in chunks as it arrives
        sender = threading.Thread(target=wire.send, args=(a, {"t": "log"}, big))
        sender.start()
        header, blobs = wire.recv(b)
        sender.join()
        assert header["t"] == "log" and blobs == big
        monkeypatch.setattr(wire, "MAX_FRAME", CHUNK)
        with pytest.raises(wire.FrameError, match="over the channel's limit"):
            wire.pack({"t": "log"}, [b"\0" * CHUNK])
        a.sendall(_HEAD.pack(CHUNK + 1, 2))
        with pytest.raises(wire.FrameError, match="malformed frame"):
            wire.recv(b)
    finally:
        a.close()
        b.close()


def test_the_proof_is_fixed_size_and_bound_to_the_secret_and_nonce():
    p = wire.proof("s3cret", b"n" * wire.NONCE_BYTES)
    assert len(p) == wire.PROOF_BYTES
    assert wire.check("s3cret", b"n" * wire.NONCE_BYTES, p)
    assert not wire.check("other", b"n" * wire.NONCE_BYTES, p)
    assert not wire.check("s3cret", b"m" * wire.NONCE_BYTES, p)
    assert not wire.check("s3cret", b"n" * wire.NONCE_BYTES, p[:-1])


def test_bind_address():
    assert Coordinator.bind_address("local[2]", {"spark.driver.host": "10.0.0.7"}) == "127.0.0.1"
    assert Coordinator.bind_address("local-cluster[2,1,1024]", {}) == "127.0.0.1"
    assert Coordinator.bind_address("spark://10.0.0.7:7077", {"spark.driver.host": "10.0.0.7"}) == "10.0.0.7"
    assert Coordinator.bind_address("yarn", {"spark.driver.host": "node-3.example",
                                             "spark.driver.bindAddress": "10.0.0.9"}) == "10.0.0.9"

"""Everything replay unpickles is covered by the user's key, not only the code.

A run signed with the user's own key, into which someone put a malicious pickle
(a recorded tuple chunk, a chunk of log_result values, a checkpoint), must not
run it on `tt verify` or `tt replay` without --trust: one line on stderr, a
non-zero exit, and the pickle's payload (creating a marker file) never runs.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

import tt
import workloads
from tt.cli.main import main
from tt.core import logs
from tt.store import blobs, trust
from tt.store.reader import RunReader


class Lucky(workloads.Detect):
    """A stateful operator in G(θ) that draws through log_result."""

    def __init__(self):
        super().__init__()
        self.luck = 0.0

    def process(self, row, port=0):
        self.luck = round(self.luck + tt.log_result(random.random), 6)
        yield from super().process(row, port)


def _build(spark):
    flow = tt.Dataflow("sealed")
    fe = flow.source("U", workloads.payments_df(spark, 3000, 2)).process(workloads.Enrich(), name="FE")
    fe.key_by(lambda r: r["customer"], partitions=2).process(Lucky(), name="FD").collect("S")
    return flow


@pytest.fixture(scope="module")
def signed_run(spark, tmp_path_factory):
    """One recording for the module (as the `record` fixture makes it): θ = FD, so the
    tuples FE sends it are recorded with the pickle codec, and FD logs results."""
    from tt.recorder.session import RecordingSession

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    out = tmp_path_factory.mktemp("sealed") / "run.db"
    session = RecordingSession(out, Path(__file__), [], watch="FD", every=0.2)
    try:
        with session:
            _build(spark).run()
    finally:
        session.close()
    return out


class Payload:
    """Unpickling this creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def _copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


def _tt(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TT_TRUST"}  # the test key file is inherited
    return subprocess.run([sys.executable, "-m", "tt", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def _last_k(run: Path) -> int:
    reader = RunReader(run)
    try:
        return reader.interactions()[-1].k
    finally:
        reader.close()


def _replace(run: Path, sql_select: str, table: str, data: bytes) -> None:
    conn = sqlite3.connect(run)
    rowid = conn.execute(sql_select).fetchone()[0]
    conn.execute(f"UPDATE {table} SET data=? WHERE rowid=?", (data, rowid))
    conn.commit()
    conn.close()


def _refused(proc: subprocess.CompletedProcess, marker: Path, words: str) -> None:
    err = proc.stderr.strip().splitlines()
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert words in err[0] and "--trust" in err[0], err[0]
    assert not marker.exists(), "the tampered pickle ran"


def test_an_untampered_signed_run_verifies_without_trust(signed_run, tmp_path):
    run = _copy(signed_run, tmp_path / "run.db")
    proc = _tt("verify", str(run))
    assert proc.returncode == 0, proc.stderr[-3000:]
    reader = RunReader(run)
    kinds = {c for (c,) in reader.conn.execute("SELECT DISTINCT codec FROM entry_chunks")}
    assert blobs.PICKLE in kinds
    res = [d for (d,) in reader.conn.execute("SELECT data FROM log_chunks WHERE kind='res'")]
    assert res and all(d.startswith(trust.SEAL) for d in res)
    # random floats survive JSON exactly: stored as JSON, nothing to unpickle
    assert all(blobs.decompress(reader.open_blob("res", d)).startswith(b"[") for d in res)
    fd = reader.operator("FD")
    assert sum(len(reader.results(fd.id, i)) for i in range(fd.instances)) > 100


def test_log_results_fall_back_to_pickle_only_when_json_is_not_exact():
    exact = [(3, 0, "f", v) for v in (0.25, -0.0, 2**62, "x", None, True, [1, {"a": [2.5]}])]
    assert logs.pack_results(exact)[:1] == b"["
    assert [(r.value, type(r.value)) for r in logs.unpack_results(logs.pack_results(exact))] == \
        [(r[3], type(r[3])) for r in exact]
    for inexact in ((1, 2), 2**64, float("nan"), {1: "a"}, {"a": (1,)}, b"x", "\ud800"):   # (a lone surrogate: orjson refuses it)
        data = logs.pack_results([*exact, (0, 0, "f", inexact)])
        assert data[:1] != b"[", inexact
        back = logs.unpack_results(data)
        assert [(r.value, type(r.value)) for r in back[:-1]] == [(r[3], type(r[3])) for r in exact]
        assert back[-1].value == inexact or back[-1].value != back[-1].value


def test_a_tampered_recorded_tuple_chunk_is_refused(signed_run, tmp_path):
    run = _copy(signed_run, tmp_path / "run.db")
    marker = tmp_path / "pwned-entry"
    evil = blobs.compress(pickle.dumps([Payload(marker)]))
    _replace(run, "SELECT rowid FROM entry_chunks WHERE codec='pickle' ORDER BY rowid LIMIT 1", "entry_chunks", evil)
    _refused(_tt("verify", str(run)), marker, "not signed")
    _refused(_tt("replay", str(run), "--to", str(_last_k(run))), marker, "not signed")
    # the check is what stops it: with --trust the payload does run
    _tt("verify", str(run), "--trust")
    assert marker.exists()


def test_a_forged_log_result_chunk_is_refused(signed_run, tmp_path):
    run = _copy(signed_run, tmp_path / "run.db")
    marker = tmp_path / "pwned-res"
    body = blobs.compress(pickle.dumps([(0, 0, "random.random", Payload(marker))]))
    forged = trust.SEAL + b"\0" * 32 + body  # looks sealed, with a MAC made without the key
    _replace(run, "SELECT rowid FROM log_chunks WHERE kind='res' ORDER BY rowid LIMIT 1", "log_chunks", forged)
    _refused(_tt("verify", str(run)), marker, "was altered")
    _refused(_tt("replay", str(run), "--to", "0"), marker, "was altered")


def test_a_tampered_checkpoint_is_refused(signed_run, tmp_path):
    run = _copy(signed_run, tmp_path / "run.db")
    assert main(["checkpoint", str(run), "--tau", "1s", "--policy", "all"]) == 0
    reader = RunReader(run)
    sealed = [d for (d,) in reader.conn.execute("SELECT data FROM checkpoints")]
    reader.close()
    assert sealed and all(d.startswith(trust.SEAL) for d in sealed)
    assert _tt("verify", str(run)).returncode == 0  # sealed checkpoints verify without --trust

    marker = tmp_path / "pwned-checkpoint"
    evil = blobs.compress(cloudpickle.dumps(Payload(marker)))
    _replace(run, "SELECT rowid FROM checkpoints WHERE kind='full' ORDER BY k DESC LIMIT 1", "checkpoints", evil)
    _refused(_tt("verify", str(run)), marker, "not signed")
    _refused(_tt("replay", str(run), "--to", str(_last_k(run))), marker, "not signed")


def test_a_run_sealed_with_another_key_needs_trust(signed_run, tmp_path):
    """Someone else's key: the code check refuses it first; with --trust it verifies."""
    run = _copy(signed_run, tmp_path / "run.db")
    other = tmp_path / "other-key"
    other.write_text(os.urandom(32).hex())
    env = {**os.environ, "TT_KEY_FILE": str(other)}
    env.pop("TT_TRUST", None)
    proc = subprocess.run([sys.executable, "-m", "tt", "verify", str(run)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert "--trust" in proc.stderr and f"does not match your key in {other}" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "tt", "verify", str(run), "--trust"], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_run_opened_where_there_is_no_key_says_so(signed_run, tmp_path, monkeypatch):
    """On a laptop that never recorded, there is no key: the refusal says that, not that the
    signature "does not match your key" in a file that does not exist."""
    missing = tmp_path / "no-such-folder" / "key"
    monkeypatch.setenv("TT_KEY_FILE", str(missing))
    monkeypatch.delenv("TT_TRUST", raising=False)
    with pytest.raises(trust.UntrustedRunError) as raised:
        trust.require_trust(signed_run, RunReader(signed_run).run.get("signature"),
                            RunReader(signed_run).signed_code(), trust=False)
    assert str(raised.value) == (f"{signed_run} was not recorded by you (you have no key here to check its code "
                                 f"signature against: {missing} does not exist, so it was recorded on another "
                                 f"machine or by another user); replaying it runs the code it contains. If you "
                                 f"trust its author, pass --trust")
    assert not missing.exists(), "checking makes no key"


def test_a_run_from_before_sealing_opens_and_replays_only_with_trust(signed_run, tmp_path):
    """Blobs written by an older tt carry no seal: the run still opens and its facts read,
    but replaying it needs --trust (with it, it verifies)."""
    run = _copy(signed_run, tmp_path / "old.db")
    conn = sqlite3.connect(run)
    n = len(trust.SEAL) + 32
    for table, where in (("entry_chunks", "codec='pickle'"), ("log_chunks", "kind='res'")):
        conn.execute(f"UPDATE {table} SET data=substr(data, {n + 1}) WHERE {where} AND substr(data, 1, 4)=?",
                     (trust.SEAL,))
    conn.commit()
    conn.close()
    assert _tt("inspect", str(run)).returncode == 0
    proc = _tt("verify", str(run))
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert "not signed" in proc.stderr and "--trust" in proc.stderr
    proc = _tt("verify", str(run), "--trust")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_threads_and_processes_that_make_the_key_at_once_all_get_the_same_one(tmp_path, monkeypatch):
    """The first recording on a machine makes the key while the coordinator's threads seal
    their first blobs: none may read a half-written key (an empty key sealed chunks that
    the reader then refused)."""
    import threading

    path = tmp_path / "fresh" / "key"
    monkeypatch.setenv("TT_KEY_FILE", str(path))
    code = ("import sys; from tt.store import trust; sys.stdout.write(trust._key(create=True).hex())")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    keys: list[bytes] = []
    threads = [threading.Thread(target=lambda: keys.append(trust._key(create=True))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keys += [bytes.fromhex(p.communicate()[0]) for p in procs]
    assert len(keys) == 11 and all(len(k) == 32 for k in keys)
    assert len(set(keys)) == 1
    assert bytes.fromhex(path.read_text()) == keys[0]
    assert [p.name for p in path.parent.iterdir()] == ["key"]   # no temporary file left behind

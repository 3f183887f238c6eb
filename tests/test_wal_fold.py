"""A recorder killed with -9 leaves most of its run in run.db-wal. The first reader
that opens the run once no recorder holds it folds the log into run.db, so that
copying run.db alone (what users do to move a run) keeps every interaction; while
a recorder is alive the log is left alone, and `tt inspect` says it is there."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import workloads
from tt.cli.main import main
from tt.store.reader import RunReader


@pytest.fixture(scope="module")
def complete_run(spark, tmp_path_factory):
    from tt.recorder.session import RecordingSession

    out = tmp_path_factory.mktemp("wal") / "complete.db"
    session = RecordingSession(out, Path(__file__), [], watch="FE", every=0.2)
    try:
        with session:
            workloads.build_keyed(spark).run()
    finally:
        session.close()
    return out


def _interactions(path: Path) -> int:
    reader = RunReader(path)
    try:
        return len(reader.interactions())
    finally:
        reader.close()


def _killed_mid_run(complete: Path, out: Path, *, pid: int | None = None) -> Path:
    """`out` as a recorder killed with -9 leaves it: the .db holds the run up to
    interaction 0, the -wal file everything after (never checkpointed). The writing
    process exits without closing SQLite; the run names it as its recorder (or `pid`)."""
    out.write_bytes(complete.read_bytes())
    conn = sqlite3.connect(out)
    for table in ("interactions", "barriers", "finals"):
        conn.execute(f"DELETE FROM {table}" + (" WHERE k > 0" if table == "interactions" else ""))
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    child = textwrap.dedent(f"""
        import os, sqlite3
        conn = sqlite3.connect({str(out)!r}, isolation_level=None)
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("ATTACH ? AS done", ({str(complete)!r},))
        conn.execute("BEGIN")
        for table in ("interactions", "barriers", "finals"):
            conn.execute(f"INSERT OR REPLACE INTO main.{{table}} SELECT * FROM done.{{table}}")
        conn.execute("UPDATE main.run SET status='recording', recorder_pid=?, recorder_host=?",
                     ({pid} or os.getpid(), {socket.gethostname()!r}))
        conn.execute("COMMIT")
        os._exit(0)  # as kill -9: SQLite never checkpoints nor removes the -wal file
    """)
    subprocess.run([sys.executable, "-c", child], check=True, timeout=120)
    assert Path(str(out) + "-wal").stat().st_size > 0
    return out


def test_the_first_reader_folds_a_dead_recorders_wal(complete_run, tmp_path):
    expected = _interactions(complete_run)
    assert expected >= 3
    run = _killed_mid_run(complete_run, tmp_path / "run.db")

    unfolded = _copy_db_alone(run, tmp_path / "before.db")
    assert _interactions(unfolded) == 1  # what a copy lost before: only I_0

    reader = RunReader(run)  # the first reader, as `tt inspect` or `tt debug` opens it
    assert reader.status == "incomplete"
    assert len(reader.interactions()) == expected
    reader.close()
    assert Path(str(run) + "-wal").stat().st_size == 0

    moved = _copy_db_alone(run, tmp_path / "moved.db")
    assert _interactions(moved) == expected


def test_a_live_recorders_wal_is_left_alone_and_inspect_says_so(complete_run, tmp_path, capsys):
    run = _killed_mid_run(complete_run, tmp_path / "live.db", pid=os.getpid())  # "recorder" alive: us
    wal = Path(str(run) + "-wal").stat().st_size
    reader = RunReader(run)
    assert reader.status == "recording"
    reader.close()
    assert Path(str(run) + "-wal").stat().st_size == wal
    assert main(["inspect", str(run)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("wal ")]
    assert len(lines) == 1 and "live.db-wal" in lines[0] and "recorder is writing" in lines[0], out


def _copy_db_alone(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


def test_reading_a_finished_run_leaves_no_file_beside_it(complete_run, tmp_path, capsys):
    """SQLite makes a -wal and a -shm file for any reader of a WAL file and removes them when
    the last connection closes, but not a read-only (`mode=ro`) one's: every `tt inspect` of a
    finished run left both beside it."""
    run = tmp_path / "done.db"
    run.write_bytes(complete_run.read_bytes())
    assert main(["inspect", str(run)]) == 0
    assert main(["inspect", str(run), "interactions", "--json"]) == 0
    assert "complete" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done.db"]
    reader = RunReader(run)
    try:   # and a reader cannot write into it
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.conn.execute("DELETE FROM interactions")
    finally:
        reader.close()
    assert _interactions(run) == _interactions(complete_run)

"""`tt record` when something goes wrong around the job: a full disk, Ctrl-C, a bad -o,
absurd durations, interactions left incomplete. One line on stderr, a non-zero exit,
no traceback, and a run file that still opens."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tt.cli.main import main
from tt.store.reader import RunReader, ranges

JOBS = Path(__file__).parent / "jobs"

# The operator of the jobs below: it counts its rows and passes them on.
COUNT = textwrap.dedent("""
    class Count(tt.Operator):
        def __init__(self):
            self.n = 0
        def process(self, row, port=0):
            self.n += 1
            yield row
""")

# A job whose run file outgrows a small disk: its source is copied into the run file
# (an in-memory source), and its rows hardly compress.
BIG_JOB = textwrap.dedent("""
    import sys
    import tt
""") + COUNT + textwrap.dedent("""
    rows = int(sys.argv[1])
    spark = tt.spark_session("big")
    df = spark.range(rows).selectExpr(
        "id", "concat(sha2(cast(id as string), 256), sha2(cast(-id as string), 256)) as pad").repartition(2)
    flow = tt.Dataflow("big")
    flow.source("U", df).process(Count(), name="C").key_by(lambda r: r["id"] % 5, partitions=2) \\
        .process(Count(), name="K").collect("S")
    flow.run()
""")

SMALL_JOB = textwrap.dedent("""
    import tt
""") + COUNT + textwrap.dedent("""
    spark = tt.spark_session("t")
    df = spark.createDataFrame([{"id": i} for i in range(100)], "id long")
    flow = tt.Dataflow("small")
    flow.source("U", df).process(Count(), name="C").collect("S")
    flow.run()
""")


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _tt(*args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tt", *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


@pytest.fixture
def job(tmp_path):
    def write(text: str, name: str = "job.py") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p
    return write


# --- bad -o and durations: refused before Spark starts ------------------------------------------

def test_out_is_a_directory(job, tmp_path, capsys):
    target = tmp_path / "runs"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    for extra in ([], ["--force"]):
        assert main(["record", str(job(SMALL_JOB)), "-o", str(target), *extra]) == 2
        lines = _lines(capsys.readouterr().err)
        assert len(lines) == 1 and lines[0].startswith("tt: error:") and "is a directory" in lines[0], lines
    assert (target / "keep.txt").read_text() == "keep"


def test_out_in_a_missing_directory(job, tmp_path, capsys):
    out = tmp_path / "nonexistent" / "x.db"
    assert main(["record", str(job(SMALL_JOB)), "-o", str(out)]) == 2
    lines = _lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert "does not exist" in lines[0] and str(out.parent) in lines[0] and "damaged" not in lines[0]
    assert not out.parent.exists()


@pytest.mark.parametrize("flag", ["--every", "--tau"])
def test_absurd_durations_are_refused(job, tmp_path, capsys, flag):
    extra = ["--checkpoint", "online"] if flag == "--tau" else []
    assert main(["record", str(job(SMALL_JOB)), flag, "99999999999999999999s", *extra,
                 "-o", str(tmp_path / "r.db")]) == 2
    lines = _lines(capsys.readouterr().err)
    assert len(lines) == 1 and "bad duration" in lines[0] and "at most" in lines[0], lines
    assert not (tmp_path / "r.db").exists()


def test_longest_duration_accepted():
    from tt.recorder.triggers import parse_duration

    assert parse_duration("8760h") == 365 * 24 * 3600
    with pytest.raises(Exception, match="at most"):
        parse_duration("1" + "0" * 400 + "s")


# --- the writer when a commit fails ------------------------------------------------------------

def test_writer_failure_is_heard_once_and_a_last_word_still_fits(tmp_path):
    from tt.core.errors import RunFileWriteError, TTError
    from tt.store.writer import Writer

    conn = sqlite3.connect(tmp_path / "w.db", check_same_thread=False, isolation_level=None)
    conn.execute("CREATE TABLE t (x INTEGER)")
    w = Writer(conn)
    heard = []
    w.on_error(heard.append)
    w.submit([("INSERT INTO t VALUES (?)", [(1,)])])
    w.flush()
    w.submit([("INSERT INTO t VALUES (?)", [(2,)]), ("INSERT INTO nope VALUES (1)", [()])])
    with pytest.raises(RunFileWriteError, match=r"w\.db: writing the run file failed .*no such table: nope"):
        w.flush()
    assert len(heard) == 1 and isinstance(heard[0], TTError) and "\n" not in str(heard[0])
    w.submit([("INSERT INTO t VALUES (?)", [(3,)])])  # dropped: nothing more is written, nothing raised
    with pytest.raises(RunFileWriteError):
        w.call(lambda c: c.execute("SELECT 1").fetchone())  # raises instead of waiting forever
    assert w.salvage([("INSERT INTO t VALUES (?)", [(7,)])])
    with pytest.raises(RunFileWriteError):
        w.close()
    assert [x for (x,) in conn.execute("SELECT x FROM t ORDER BY x")] == [1, 7]
    assert len(heard) == 1


def test_disk_full_is_said_as_such(tmp_path):
    import errno

    from tt.store.writer import describe_failure

    full = describe_failure(OSError(errno.ENOSPC, "No space left on device"), str(tmp_path / "run.db"))
    assert str(full).startswith(f"{tmp_path / 'run.db'}: disk full (") and "free in" in str(full)
    other = describe_failure(sqlite3.OperationalError("disk I/O error"), str(tmp_path / "run.db"))
    assert "disk full" not in str(other) and "disk I/O error" in str(other)


# --- a full disk ------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 1 MB filesystem (tmpfs), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    where = tmp_path / "disk"
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_disk_full_stops_the_job_with_one_line(job, small_disk):
    out = small_disk / "run.db"
    proc = _tt("record", str(job(BIG_JOB)), "-o", str(out), "--", "60000")
    lines = _lines(proc.stderr)
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("tt: error:") and "disk full" in lines[0] and str(out) in lines[0], lines
    # what was written still opens, and says the run did not complete
    reader = RunReader(out)
    try:
        assert reader.status in ("failed", "incomplete")
        if reader.status == "failed":
            assert "disk full" in reader.run["error"]
        assert reader.theta.name == "C"
    finally:
        reader.close()
    shown = _tt("inspect", str(out), timeout=120)
    assert "Traceback" not in shown.stderr
    assert "failed" in shown.stdout or "incomplete" in shown.stdout, shown.stdout + shown.stderr


# --- Ctrl-C -----------------------------------------------------------------------------------

def _tasks_started(path: Path) -> bool:
    """The recording is under way: the plan is stored and a task has reported to the coordinator."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
    except sqlite3.Error:
        return False
    try:
        return conn.execute("SELECT count(*) FROM attempts").fetchone()[0] > 0
    except sqlite3.Error:  # not created yet, or being written
        return False
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ctrl_c_prints_one_line_and_keeps_the_run(tmp_path):
    out = tmp_path / "int.db"
    # Ctrl-C in a terminal signals the whole foreground process group: its own session here
    proc = subprocess.Popen([sys.executable, "-m", "tt", "record", str(JOBS / "slow_keyed.py"), "--watch", "FE",
                             "-o", str(out), "--", "8000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and not _tasks_started(out) and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the run file's state, bounded by the deadline
        assert proc.poll() is None, f"tt record ended before it could be interrupted: {proc.stderr.read()[-3000:]}"
        assert _tasks_started(out), "no task reported to the coordinator in time"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = _lines(err)
    assert len(lines) == 1 and lines[0].startswith("tt: error: interrupted"), err[-3000:]
    assert lines[0].count("recorded") == 1  # said once, not twice
    reader = RunReader(out)
    try:
        assert reader.status == "interrupted"
        assert reader.theta.name == "FE"
    finally:
        reader.close()


# --- interactions that stay incomplete in a complete run ----------------------------------------

@pytest.mark.slow
def test_warning_for_interactions_left_incomplete(record, tmp_path, capsys):
    import workloads

    from tt.cli.record import incomplete_warning

    path = record(workloads.build_chain, watch="A", when="row['amount'] > 400")
    assert incomplete_warning(path) is None  # a sound run: nothing to warn about
    reader = RunReader(path)
    total = len(reader.interactions_all)
    reader.close()
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT b.attempt, b.op, b.k FROM barriers b JOIN attempts a ON a.id = b.attempt "
                           "WHERE b.k > 0 AND a.status = 'committed' ORDER BY b.k LIMIT 1").fetchone()
        assert row is not None, "the run took no barrier to remove"
        attempt, op, k = row
        # lose that instance's state at k: interaction k can no longer be complete
        conn.execute("DELETE FROM barriers WHERE attempt=? AND op=? AND k=?", (attempt, op, k))
        conn.commit()
    finally:
        conn.close()
    warning = incomplete_warning(path)
    assert warning is not None and warning.startswith(f"1 of {total} interactions stayed incomplete")
    assert f"k = {k})" in warning
    # asked for its states, tt says it is incomplete, not that it is missing, and names the others
    capsys.readouterr()
    assert main(["inspect", str(path), "state", "--at", str(k)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"interaction {k} is not complete in {path}" in err[0], err
    others = [i for i in range(total) if i != k]
    assert err[0].endswith(f"complete ones: {ranges(others)}"), err


# --- an unknown --watch: refused when the plan is known, before any task runs ------------------

@pytest.mark.slow
def test_unknown_watch_is_refused_before_any_task(spark, job, tmp_path, capsys):
    out = tmp_path / "r.db"
    assert main(["record", str(job(SMALL_JOB)), "--watch", "NOPE", "-o", str(out)]) == 2
    lines = _lines(capsys.readouterr().err)
    assert len(lines) == 1 and "unknown operator 'NOPE'" in lines[0] and "U, C, S" in lines[0], lines
    conn = sqlite3.connect(out)
    try:
        assert conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 0  # no task ever started
        assert conn.execute("SELECT status FROM run").fetchone()[0] == "failed"
    finally:
        conn.close()


# --- Spark fails a task before its first row reached tt ----------------------------------------

FIRST_BATCH_FAILS = textwrap.dedent("""
    import tt
    from pyspark.sql.functions import udf
""") + COUNT + textwrap.dedent("""
    @udf("long")
    def broken(x):
        raise ValueError("no row for you")

    spark = tt.spark_session("t")
    df = spark.range(100, numPartitions=2).select(broken("id").alias("id"))
    flow = tt.Dataflow("first")
    flow.source("U", df).process(Count(), name="C").collect("S")
    flow.run()
""")


@pytest.mark.slow
def test_a_task_whose_first_batch_fails_leaves_no_attempt_running(spark, job, tmp_path, capsys):
    """A task starts its handshake with the coordinator, then pulls Spark's first batch while
    the coordinator answers (recorder/task.py `_first_pulled`). When that pull fails, the
    connection is closed: the coordinator marks the attempt lost, and the run says why."""
    out = tmp_path / "r.db"
    assert main(["record", str(job(FIRST_BATCH_FAILS)), "-o", str(out)]) == 1
    lines = _lines(capsys.readouterr().err)
    # the cause, not the first line of Spark's PythonException ("An exception was thrown from the Python worker:")
    assert len(lines) == 1 and "PythonException: ValueError: no row for you;" in lines[0], lines
    conn = sqlite3.connect(out)
    try:
        statuses = [s for (s,) in conn.execute("SELECT status FROM attempts")]
        assert conn.execute("SELECT status FROM run").fetchone()[0] == "failed"
    finally:
        conn.close()
    assert statuses and "running" not in statuses and "committed" not in statuses, statuses


@pytest.mark.slow
def test_a_channel_still_open_at_the_runs_end_leaves_no_attempt_running(record):
    """The race behind the test above, made certain: a task attempt whose channel is still
    open when the run ends (its Spark task failed, and the coordinator has not read the close
    yet; or it hangs) must be stored as lost. The run's end ends the channel and waits until
    its handler has stored that, instead of leaving the attempt `running`."""
    import workloads

    from tt.recorder.client import ControlClient

    held: dict = {}

    def before_run(session):
        original = session.on_event

        def on_event(kind, info):
            if kind == "begin":   # the coordinator listens, no task has run yet
                c = session.coordinator
                # a real task's handshake for the first stage's instance 0, before Spark's own task's
                held["client"] = ControlClient(c.address, c.secret, {
                    "run": session.run_id, "stage": 0, "partition": 0, "host": "held-open:1", "number": 0})
                held["attempt"] = held["client"].welcome
            original(kind, info)

        session.on_event = on_event

    try:
        path = record(workloads.build_keyed, before_run=before_run)
    finally:
        if "client" in held:
            held["client"].close()
    assert held["attempt"]["mode"] == "record", held["attempt"]
    conn = sqlite3.connect(path)
    try:
        statuses = dict(conn.execute("SELECT host, status FROM attempts"))
        run_status = conn.execute("SELECT status FROM run").fetchone()[0]
    finally:
        conn.close()
    assert statuses.pop("held-open:1") == "lost"
    assert statuses and set(statuses.values()) == {"committed"}, statuses
    assert run_status == "complete"
    assert main(["verify", str(path)]) == 0

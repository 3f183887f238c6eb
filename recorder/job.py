"""Running a job file under recording: what `tt record job.py -- args` does.

The job runs in this process (as `__main__`, with its directory on `sys.path`,
as `python job.py` would run it) while a recording session is active. Whatever
way it ends (success, an exception in the job or in an operator, Ctrl-C, a job
that never runs a dataflow) the run file is left readable, with a status that
says which.
"""

from __future__ import annotations

import logging
import os
import runpy
import signal
import sqlite3
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..core.errors import JobError, RunFileWriteError, TTError, UsageError, first_line
from ..store.writer import describe_failure
from . import hooks
from .session import RecordingSession, ensure_python_for_workers
from .triggers import check_condition


@dataclass
class RecordOutcome:
    status: str                  # complete | failed | interrupted
    error: str | None = None
    exit_code: int = 0
    events: list = field(default_factory=list)


def record_job(job: str | Path, args: list[str], out: str | Path, *, watch: str | None = None,
               every: float | None = None, when: str | None = None, master: str | None = None,
               checkpoint_tau: float | None = None,
               force: bool = False, on_event: Callable[[str, dict], None] | None = None,
               on_session: Callable[[RecordingSession], None] | None = None,
               debug: bool = False, spark_log: Path | None = None, copy_sources: bool = False,
               lineage: bool = False) -> RecordOutcome:
    """Record `job`; Spark's own output (JVM and executors) goes to `spark_log` if given."""
    job = Path(job)
    out = Path(out)
    if not job.exists():
        raise UsageError(f"job file {job} not found")
    if not job.is_file():
        raise UsageError(f"{job} is not a file")
    _check_out(out)
    if out.exists() and not force:
        raise UsageError(f"{out} exists; pass --force to overwrite it or choose another file with -o")
    if out.resolve() == job.resolve():
        raise UsageError("the run file would overwrite the job file")
    if when:
        check_condition(when)
    try:
        source = job.read_text()
        compile(source, str(job), "exec")
    except SyntaxError as e:
        raise UsageError(f"{job} line {e.lineno}: {e.msg}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {job}: {e}") from None

    ensure_python_for_workers()
    if master:
        check_master(master)
        os.environ["TT_SPARK_MASTER"] = master
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--master {master} pyspark-shell"
    try:
        session = RecordingSession(out, job, args, watch=watch, every=every, when=when,
                                   checkpoint_tau=checkpoint_tau, on_event=on_event, copy_sources=copy_sources,
                                   lineage=lineage)
    except (sqlite3.Error, OSError) as e:
        cause = describe_failure(e, str(out)) if _disk_full(e) else f"cannot create the run file {out} ({e})"
        raise RunFileWriteError(str(cause)) from None
    if on_session is not None:
        on_session(session)
    outcome = RecordOutcome("complete")
    redirect = _StderrToFile(spark_log) if spark_log is not None else None
    old_usr1 = _install_user_signal(session)
    quiet_py4j = None if debug else _QuietPy4J()
    try:
        with session:
            uninstall = hooks.install(session)
            try:
                run_as_main(job, args)
            finally:
                uninstall()
        if session.graph is None:
            outcome = RecordOutcome("failed", _nothing_recorded(job), 1)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code != 0:
            outcome = RecordOutcome("failed", f"the job exited with status {code}", code)
    except KeyboardInterrupt:
        outcome = RecordOutcome("interrupted", "interrupted", 130)
    except UsageError as e:
        outcome = RecordOutcome("failed", str(e), 2)
    except TTError as e:
        outcome = RecordOutcome("failed", str(e), 1)
    except Exception as e:  # the job's own code raised
        if debug:
            traceback.print_exc()
        outcome = RecordOutcome("failed", _job_error(e, job, session), 1)
    finally:
        if redirect is not None:
            redirect.restore()
        if old_usr1 is not None:
            signal.signal(signal.SIGUSR1, old_usr1)
        if quiet_py4j is not None:
            quiet_py4j.remove()
        if not session.finished:
            session.end(ok=outcome.status == "complete" and session.graph is not None,
                        status=None if outcome.status == "complete" else outcome.status,
                        error=outcome.error)
        try:
            session.close()
        except RunFileWriteError:
            pass  # reported below, in place of what the cancelled job raised
    if session.writer.failed:
        return RecordOutcome("failed", str(session.write_failure), 1)
    if session.interrupted:  # Ctrl-C cancelled Spark's jobs: what the job then raised is not the story
        return RecordOutcome("interrupted", "interrupted", 130)
    return outcome


def run_as_main(job: Path, args: list[str]) -> None:
    """`python JOB ARGS...` in this process: the file run as `__main__` with those arguments and
    its folder first on `sys.path` (its own modules import), both put back after. What `tt
    record` runs inside a recording, and benches and tests with recording off."""
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = [str(job), *args]
    sys.path.insert(0, str(job.resolve().parent))
    try:
        runpy.run_path(str(job.absolute()), run_name="__main__")   # absolute, as `python job.py` makes __file__ and tracebacks
    finally:
        sys.argv, sys.path[:] = old_argv, old_path


def _nothing_recorded(job: Path) -> str:
    """Why a job that ran to its end left nothing to debug, in one line."""
    connect = sys.modules.get("pyspark.sql.connect.session")
    if connect is not None and getattr(connect.SparkSession, "_default_session", None) is not None:
        return (f"{job} runs on Spark Connect, which tt does not record yet (its functions run on the "
                f"server's executors); use a classic SparkSession (SparkSession.builder without .remote)")
    return (f"{job} ran no tt dataflow and called no PySpark method tt records (Dataflow.run(), "
            f"mapInPandas, mapInArrow, applyInPandas, applyInArrow and their cogrouped forms, "
            f"transformWithStateInPandas, transformWithState, applyInPandasWithState, "
            f"rdd.mapPartitions/mapPartitionsWithIndex/map/flatMap/filter, foreachPartition and foreach (an "
            f"RDD's or a DataFrame's), a streaming writeStream.foreach writer, iterator UDFs (pandas_udf, "
            f"arrow_udf over an iterator of batches), "
            f"Python and Arrow UDTFs)")


def _disk_full(e: BaseException) -> bool:
    return "disk full" in str(describe_failure(e, ""))


def _check_out(out: Path) -> None:
    """Say what is wrong with `-o` before Spark starts: a directory, a missing directory."""
    if out.is_dir():
        raise UsageError(f"{out} is a directory; -o takes the run file to write, e.g. -o {out / 'run.db'}")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.exists():
        raise UsageError(f"cannot write {out}: directory {parent} does not exist")
    if not parent.is_dir():
        raise UsageError(f"cannot write {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {out}: directory {parent} is not writable")


class _StderrToFile:
    """Send file descriptor 2 (the JVM, executors, native libraries) to a log file.

    Python's `sys.stderr` keeps writing to the terminal, so tt's own messages stay
    visible while Spark's startup warnings and task tracebacks go to the log. The
    JVM inherits the descriptor when the job starts Spark, so this must happen
    before the job runs.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        sys.stderr.flush()
        self.saved = os.dup(2)
        self.log = open(self.path, "wb", buffering=0)
        os.dup2(self.log.fileno(), 2)
        self.old_stderr = sys.stderr
        _pyspark_loggers()   # made now, while `sys.stderr` writes to descriptor 2: to the log
        self.terminal = os.fdopen(os.dup(self.saved), "w", buffering=1)
        sys.stderr = self.terminal

    def restore(self) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        sys.stderr = self.old_stderr
        self.terminal.close()
        self.log.close()


def _pyspark_loggers() -> None:
    """PySpark's own Python loggers, made before the job runs: each writes to the `sys.stderr`
    there is when it is made (a `StreamHandler`), and the one an AnalysisException logs to,
    made when the job's query fails, would put a page of JSON above tt's one line."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:   # (a pyspark without its structured logger)
        return
    PySparkLogger.getLogger("SQLQueryContextLogger")


class _QuietPy4J(logging.Filter):
    """py4j logs a traceback (on the root logger) for every call a Ctrl-C or a stopped
    JVM breaks; tt reports the interruption itself, in one line."""

    def __init__(self):
        super().__init__()
        self.root = logging.getLogger()
        self.root.addFilter(self)
        self.py4j = logging.getLogger("py4j")
        self.level = self.py4j.level
        self.py4j.setLevel(logging.CRITICAL)

    def filter(self, record: logging.LogRecord) -> bool:
        return "py4j" not in record.pathname.replace("\\", "/").split("/")

    def remove(self) -> None:
        self.root.removeFilter(self)
        self.py4j.setLevel(self.level)


def _install_user_signal(session: RecordingSession):
    """`kill -USR1 <pid>` takes an interaction, like pressing a key would."""
    if not hasattr(signal, "SIGUSR1"):
        return None

    def handler(signum, frame):
        if session.coordinator is not None:
            session.coordinator.interaction("user", {"via": "SIGUSR1"})
    try:
        return signal.signal(signal.SIGUSR1, handler)
    except ValueError:  # not the main thread
        return None


def check_master(master: str) -> None:
    """A standalone master (`spark://host:port`, or several for standby masters) that answers on
    none of its addresses is named at once: Spark retries for over a minute, then says only that
    it could not create the session (the cause, "All masters are unresponsive", is in its log)."""
    import socket

    if not master.startswith("spark://"):
        return
    refused = []
    for address in master[len("spark://"):].split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(f"--master {master}: {address!r} is not host:port (spark://127.0.0.1:7077)")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=3).close()
            return
        except OSError as e:
            refused.append(f"{address}: {e.strerror or e}")
    raise UsageError(f"no Spark master answers at {master} ({'; '.join(refused)}): start it "
                     f"(spark-class org.apache.spark.deploy.master.Master), or check --master")


def _job_error(e: BaseException, job: Path, session: RecordingSession) -> str:
    if session.hooked and session.coordinator is not None and session.coordinator.failures:
        from .execute import failure_message  # a hooked function raised: name it and its input

        return failure_message(session, e)
    tb = traceback.extract_tb(e.__traceback__)
    where = ""
    for frame in reversed(tb):
        if Path(frame.filename).resolve() == job.resolve():
            where = f" ({job.name} line {frame.lineno})"
            break
    first = first_line(e)
    return f"the job raised {type(e).__name__}{': ' + first[:300] if first else ''}{where}"


__all__ = ["record_job", "run_as_main", "RecordOutcome", "JobError"]

"""Recording from a notebook or a script: `tt.hook(spark, "run.db")`.

`tt record job.py` runs a whole job and records it. In a notebook there is no job to
run: `tt.hook` opens the same `RecordingSession` and installs the same hooks
(recorder/hooks.py), so the PySpark calls that follow are recorded, until `stop()`
(or the end of a `with` block, or the interpreter's exit) writes the run's end.
"""

from __future__ import annotations

import atexit
import sys
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from . import hooks
from .job import _check_out
from .session import RecordingSession, active


class HookedRecording:
    """A recording opened by `tt.hook`; `stop()` ends it and returns the run file's path."""

    def __init__(self, session: RecordingSession, uninstall):
        self.session = session
        self._uninstall = uninstall
        self.stopped = False
        atexit.register(self.stop)

    @property
    def path(self) -> Path:
        return self.session.out

    def stop(self, ok: bool = True, error: str | None = None) -> Path:
        """Put PySpark back and write the run's end (idempotent)."""
        if self.stopped:
            return self.path
        self.stopped = True
        atexit.unregister(self.stop)
        s = self.session
        try:
            self._uninstall()
            if not s.finished:
                s.end(ok=ok and s.graph is not None, error=error if ok else (error or "stopped by an error"))
            s.close()
        finally:
            s.__exit__(None, None, None)
        return self.path

    def __enter__(self) -> "HookedRecording":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(ok=exc_type is None, error=None if exc is None else f"{type(exc).__name__}: {exc}")

    def __repr__(self) -> str:
        return f"<tt recording into {self.path}{' (stopped)' if self.stopped else ''}>"


def hook(spark: Any, out: str | Path = "run.db", *, watch: str | None = None, every: float | None = None,
         when: str | None = None, force: bool = False) -> HookedRecording:
    """Record the PySpark calls tt hooks (mapInPandas, applyInPandas, rdd.mapPartitions, UDTFs…)
    that this process makes from now on into `out`, until `.stop()`:

        rec = tt.hook(spark, "run.db", every=10)
        df.mapInPandas(Enrich(), schema).collect()
        rec.stop()                      # then: tt debug run.db
    """
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        raise UsageError("tt does not record Spark Connect sessions yet: its functions run on the "
                         "server's executors; use a classic SparkSession (SparkSession.builder without .remote)")
    if active() is not None:
        raise UsageError("a recording is already under way in this process; stop() it first")
    out = Path(out)
    _check_out(out)
    if out.exists() and not force:
        raise UsageError(f"{out} exists; pass force=True to overwrite it, or choose another file")
    if when:
        from .triggers import check_condition

        check_condition(when)
    main = Path(sys.argv[0]) if sys.argv and sys.argv[0] and Path(sys.argv[0]).is_file() else Path("<interactive>")
    session = RecordingSession(out, main, sys.argv[1:], watch=watch, every=every, when=when)
    session.__enter__()
    try:
        uninstall = hooks.install(session)
    except BaseException:
        session.__exit__(None, None, None)
        raise
    return HookedRecording(session, uninstall)


__all__ = ["hook", "HookedRecording"]

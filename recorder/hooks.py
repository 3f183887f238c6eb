"""Hooks that let `tt record` record an unmodified PySpark job (docs/HOOKS.md).

`install(session)` patches PySpark's methods that take the job's stateful Python
code (today `DataFrame.mapInPandas`, classic PySpark). A patched method asks the
recording session to make its call site an operator of the run, then hands Spark
a `HookedCall` in place of the user's function: in the executor, that runs the
function through the one runtime (`StageTask.run_units`), logged like any
operator. Calls made by PySpark itself pass through untouched, and nothing is
patched unless `tt record` runs the job.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from ..core.graph import Graph
from ..core.hooked import name_of
from .task import Recording, StageTask

class HookedCall:
    """What Spark runs in place of a hooked function: one hooked stage per task.

    It keeps the function's name (Spark shows it in EXPLAIN and the UI); the function
    itself travels inside the stage's graph, as the operator's code."""

    def __init__(self, fn: Any, graph: Graph, stage_id: int, recording: Recording | None):
        self.graph = graph
        self.stage_id = stage_id
        self.recording = recording
        self.__name__ = name_of(fn)

    def __call__(self, iterator: Iterator) -> Iterator:
        from pyspark import TaskContext

        tc = TaskContext.get()
        attempt = {"spark_attempt": tc.taskAttemptId(), "number": tc.attemptNumber()}
        task = StageTask(self.graph, self.stage_id, tc.partitionId(), self.recording, attempt)
        return task.run_units(iterator)


def install(session: Any) -> Callable[[], None]:
    """Patch PySpark for `session`; returns the function that puts everything back."""
    from pyspark.sql.classic.dataframe import DataFrame

    original = DataFrame.mapInPandas

    def mapInPandas(self, func, schema, barrier=False, profile=None):
        site = _user_site()
        if site is None or not callable(func):  # PySpark calling itself, or an error PySpark reports
            return original(self, func, schema, barrier, profile)
        hooked = session.hook(func, "mapInPandas", site, self.sparkSession)
        return original(self, hooked, schema, barrier, profile)

    mapInPandas.__doc__ = original.__doc__
    mapInPandas.__wrapped__ = original
    DataFrame.mapInPandas = mapInPandas

    def uninstall() -> None:
        DataFrame.mapInPandas = original
    return uninstall


def _user_site() -> str | None:
    """`file:line` of the job's call, or None when PySpark (or tt) itself made it."""
    frame = sys._getframe(2)   # _user_site <- the patched method <- its caller
    if _library(frame):
        return None
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"


def _library(frame) -> bool:
    module = frame.f_globals.get("__name__", "")
    return module.split(".")[0] in ("pyspark", "tt")


__all__ = ["install", "HookedCall"]

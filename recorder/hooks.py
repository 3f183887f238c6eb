"""Hooks that let `tt record` record an unmodified PySpark job (docs/HOOKS.md).

`install(session)` patches PySpark's methods that take the job's stateful Python
code (`DataFrame.mapInPandas` / `mapInArrow` and the RDD's `mapPartitions`,
`mapPartitionsWithIndex`, `map`, `flatMap`, `filter`; classic PySpark). A patched method asks the
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

    def __call__(self, *args: Any) -> Iterator:
        """`(iterator)` for the DataFrame APIs, `(partition, iterator)` for the RDD's."""
        from pyspark import TaskContext

        tc = TaskContext.get()
        partition, units = args if len(args) == 2 else (tc.partitionId(), args[0])
        attempt = {"spark_attempt": tc.taskAttemptId(), "number": tc.attemptNumber()}
        task = StageTask(self.graph, self.stage_id, partition, self.recording, attempt)
        return task.run_units(units)


def install(session: Any) -> Callable[[], None]:
    """Patch PySpark for `session`; returns the function that puts everything back."""
    from pyspark.core.rdd import RDD
    from pyspark.sql.classic.dataframe import DataFrame

    originals: list[tuple[type, str, Callable]] = []
    with_index = RDD.mapPartitionsWithIndex

    def patch(cls: type, name: str, make: Callable[[Callable], Callable]) -> None:
        original = getattr(cls, name)
        patched = make(original)
        patched.__name__, patched.__doc__, patched.__wrapped__ = name, original.__doc__, original
        originals.append((cls, name, original))
        setattr(cls, name, patched)

    def dataframe_map(kind: str):
        """`df.mapInPandas(f, schema, ...)`, `df.mapInArrow(f, schema, ...)`."""
        def make(original):
            def patched(self, func, *args, **kwargs):
                site = _user_site()
                if site is None or not callable(func):  # PySpark calling itself, or an error it reports
                    return original(self, func, *args, **kwargs)
                hooked = session.hook(func, kind, site, self.sparkSession.sparkContext)
                return original(self, hooked, *args, **kwargs)
            return patched
        return make

    def rdd_map(kind: str):
        """`rdd.mapPartitions(f, preservesPartitioning)` and its kin: what Spark runs is always
        `mapPartitionsWithIndex(HookedCall)`, which hands the call the partition it runs."""
        def make(original):
            def patched(self, f, *args, **kwargs):
                site = _user_site()
                if site is None or not callable(f):
                    return original(self, f, *args, **kwargs)
                hooked = session.hook(f, kind, site, self.context)
                if kind == "filter":  # PySpark's filter keeps the partitioning, and so does the hook
                    args, kwargs = (True,), {}
                return with_index(self, hooked, *args, **kwargs)
            return patched
        return make

    for kind in ("mapInPandas", "mapInArrow"):
        patch(DataFrame, kind, dataframe_map(kind))
    for kind in ("mapPartitions", "mapPartitionsWithIndex", "map", "flatMap", "filter"):
        patch(RDD, kind, rdd_map(kind))

    def uninstall() -> None:
        for cls, name, original in reversed(originals):
            setattr(cls, name, original)
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

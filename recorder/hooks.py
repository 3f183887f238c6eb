"""Hooks that let `tt record` record an unmodified PySpark job (docs/HOOKS.md).

`install(session)` patches PySpark's methods that take the job's stateful Python
code (`DataFrame.mapInPandas` / `mapInArrow`, `GroupedData.applyInPandas` /
`applyInArrow` and their cogrouped forms, the RDD's `mapPartitions`,
`mapPartitionsWithIndex`, `map`, `flatMap`, `filter`, and Python UDTF classes; classic
PySpark). A patched method asks the
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
from .task import Recording, StageTask


class HookedCall:
    """What Spark runs in place of a hooked function: one hooked stage per task.

    It keeps the function's name (Spark shows it in EXPLAIN and the UI); the function
    itself travels inside the stage's graph, as the operator's code."""

    def __init__(self, fn: Any, graph: Graph, stage_id: int, recording: Recording | None):
        self.graph = graph
        self.stage_id = stage_id
        self.recording = recording
        self.__name__ = graph.nodes[graph.stages[stage_id].nodes[-1]].name   # the operator's, unique in the run

    def __call__(self, *args: Any) -> Iterator:
        """`(iterator)` for the DataFrame APIs, `(partition, iterator)` for the RDD's."""
        from pyspark import TaskContext

        tc = TaskContext.get()
        partition, units = args if len(args) == 2 else (tc.partitionId(), args[0])
        attempt = {"spark_attempt": tc.taskAttemptId(), "number": tc.attemptNumber()}
        task = StageTask(self.graph, self.stage_id, partition, self.recording, attempt)
        return task.run_units(units)


class TaskFeed:
    """The task of a hooked stage whose function Spark calls many times per task (once per
    group, or per UDTF row): opened at the first call of each task attempt, fed one unit
    per call. PySpark has no task-end callback in Python; the task is ended when the
    worker sends the task's accumulator updates, after its last output (`_TaskEnd`)."""

    def __init__(self, graph: Graph, stage_id: int, recording: Recording | None, task_end: Any):
        self.graph = graph
        self.stage_id = stage_id
        self.recording = recording
        self.task_end = task_end   # an accumulator: the worker pickles its value when the task ends
        self._task: StageTask | None = None
        self._attempt: int | None = None

    def feed(self, unit: Any) -> list:
        from pyspark import TaskContext

        tc = TaskContext.get()
        if self._task is None or self._attempt != tc.taskAttemptId():
            attempt = {"spark_attempt": tc.taskAttemptId(), "number": tc.attemptNumber()}
            self._task = StageTask(self.graph, self.stage_id, tc.partitionId(), self.recording, attempt)
            self._attempt = tc.taskAttemptId()
            self._task.open_units()
            self.task_end._value = _TaskEnd(self)
        return self._task.feed_unit(unit)

    def operator(self) -> Any:
        """The operator object running in this task, if one is open."""
        return self._task._unit_head.op if self._task is not None else None

    def end(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.end_units()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_task": None, "_attempt": None}


class _TaskEnd:
    """An accumulator value that ends a `TaskFeed`'s task when the worker pickles it:
    PySpark sends accumulator updates once the task's last output is written."""

    def __init__(self, feed: TaskFeed):
        self.feed = feed

    def __reduce__(self):
        try:
            self.feed.end()
        except BaseException:  # noqa: BLE001  the task's output is already Spark's; its log is lost
            pass
        return (int, (0,))


class GroupedCall:
    """What Spark runs in place of a grouped function (`applyInPandas` and kin): one group
    per call, fed to the call site's task.

    It declares `(key, *frames)` through `__signature__`, which is what PySpark counts, so
    Spark always hands it the key; the operator then calls the user's function with or
    without it, as PySpark would have (core/hooked.py `GroupOperator`)."""

    def __init__(self, fn: Any, kind: str, feed: TaskFeed):
        import inspect

        self.feed = feed
        g = feed.graph
        self.__name__ = g.nodes[g.stages[feed.stage_id].nodes[-1]].name   # the operator's, unique in the run
        frames = ["left", "right"] if kind.startswith("cogroup.") else ["data"]
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ["key", *frames]])
        self.__annotations__: dict = {}   # no type hints: PySpark picks the one-group-per-call form

    def __call__(self, key: Any, *frames: Any) -> Any:
        return self.feed.feed((key, *frames))[0]   # the function's one result for this group


def hooked_udtf_class(cls: type, feed: TaskFeed) -> type:
    """The class PySpark runs in place of a UDTF class: a subclass whose handler calls
    (`__init__`, `eval`, `terminate`, and `cleanup` on the operator's handler) are units fed
    to the call site's task, where the operator runs the user's own class. It defines only
    the methods the user's class has, with their signatures, as PySpark checks them."""
    import functools

    def __init__(self):
        type(self)._tt_feed.feed(("init",))

    @functools.wraps(cls.eval)
    def eval(self, *args, **kwargs):
        return iter(type(self)._tt_feed.feed(("eval", args, kwargs)))

    ns = {"__init__": __init__, "eval": eval, "_tt_hooked": True, "_tt_feed": feed,
          "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    if hasattr(cls, "terminate"):
        @functools.wraps(cls.terminate)
        def terminate(self):
            return iter(type(self)._tt_feed.feed(("terminate",)))
        ns["terminate"] = terminate
    if hasattr(cls, "cleanup"):
        @functools.wraps(cls.cleanup)
        def cleanup(self):
            op = type(self)._tt_feed.operator()
            if op is not None and op._handler is not None:
                cls.cleanup(op._handler)
        ns["cleanup"] = cleanup
    return type(cls.__name__, (cls,), ns)


def install(session: Any) -> Callable[[], None]:
    """Patch PySpark for `session`; returns the function that puts everything back."""
    from pyspark.core.rdd import RDD
    from pyspark.sql.classic.dataframe import DataFrame

    from pyspark.sql.group import GroupedData
    from pyspark.sql.udtf import UserDefinedTableFunction
    from pyspark.sql.pandas.group_ops import PandasCogroupedOps

    originals: list[tuple[type, str, Callable | None]] = []
    with_index = RDD.mapPartitionsWithIndex

    def patch(cls: type, name: str, make: Callable[[Callable], Callable]) -> None:
        original = getattr(cls, name)
        patched = make(original)
        patched.__name__, patched.__doc__, patched.__wrapped__ = name, original.__doc__, original
        originals.append((cls, name, cls.__dict__.get(name)))   # None: inherited, deleted again
        setattr(cls, name, patched)

    def dataframe_map(kind: str):
        """`df.mapInPandas(f, schema, ...)`, `df.mapInArrow(f, schema, ...)`."""
        def make(original):
            def patched(self, func, *args, **kwargs):
                site = _user_site()
                if site is None or not callable(func):  # PySpark calling itself, or an error it reports
                    return original(self, func, *args, **kwargs)
                upstream = spark_upstream(session, [self])
                hooked = session.hook(func, kind, site, self.sparkSession.sparkContext, upstream)
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
                hooked = session.hook(f, kind, site, self.context, rdd_upstream(self))
                if kind == "rdd.filter":  # PySpark's filter keeps the partitioning, and so does the hook
                    args, kwargs = (True,), {}
                out = with_index(self, hooked, *args, **kwargs)
                out._tt_operator = hooked.__name__   # what a hooked call on `out` is fed by
                return out
            return patched
        return make

    def grouped(kind: str, spark_of: Callable[[Any], Any], frames_of: Callable[[Any], list]):
        """`gdf.applyInPandas(f, schema)` and kin. A function with type hints asking for
        PySpark's iterator form runs unrecorded (its groups arrive as batches)."""
        def make(original):
            def patched(self, func, schema):
                site = _user_site()
                if site is None or not callable(func):
                    return original(self, func, schema)
                why = _unhookable_group_function(func, kind)
                if why:
                    session.unrecorded(func, kind, site, why)
                    return original(self, func, schema)
                upstream = spark_upstream(session, frames_of(self))
                hooked = session.hook(func, kind, site, spark_of(self).sparkContext, upstream)
                return original(self, hooked, schema)
            return patched
        return make

    hooked_classes: dict[type, type] = {}   # register() builds a second UDTF from the same class

    def udtf(original):
        """A UDTF's class is pickled where PySpark first needs it (`_create_judtf`: its first
        call, or `spark.udtf.register`); that is where it is swapped for the hooked class."""
        def patched(self, func):
            if not isinstance(func, type) or func.__dict__.get("_tt_hooked"):
                return original(self, func)
            if func in hooked_classes:
                return original(self, hooked_classes[func])
            site = _class_site(func)
            why = _unhookable_udtf(func, self.evalType)
            if why:
                session.unrecorded(func, "udtf", site, why)
                return original(self, func)
            from pyspark.sql import SparkSession

            sc = SparkSession._getActiveSessionOrCreate().sparkContext
            hooked = hooked_classes[func] = session.hook(func, "udtf", site, sc)
            return original(self, hooked)
        return patched

    for kind in ("mapInPandas", "mapInArrow"):
        patch(DataFrame, kind, dataframe_map(kind))
    for name in ("mapPartitions", "mapPartitionsWithIndex", "map", "flatMap", "filter"):
        patch(RDD, name, rdd_map(f"rdd.{name}"))
    for name in ("applyInPandas", "applyInArrow"):
        patch(GroupedData, name, grouped(name, lambda gd: gd.session, lambda gd: [gd]))
        patch(PandasCogroupedOps, name, grouped(f"cogroup.{name}", lambda cg: cg._gd1.session,
                                                lambda cg: [cg._gd1, cg._gd2]))
    patch(UserDefinedTableFunction, "_create_judtf", udtf)

    def uninstall() -> None:
        for cls, name, original in reversed(originals):
            if original is None:
                delattr(cls, name)
            else:
                setattr(cls, name, original)
    return uninstall


# --- what Spark does between two hooked operators (opaque edges of the DAG) ---------------------

#: Spark's logical plan nodes, as a user would name what they do; others are shown lowercased.
PLAN_WORDS = {"Filter": "filter", "Join": "join", "Aggregate": "aggregate", "Repartition": "shuffle",
              "RepartitionByExpression": "shuffle", "Sort": "sort", "Union": "union", "Window": "window",
              "Deduplicate": "distinct", "Distinct": "distinct", "GlobalLimit": "limit", "Sample": "sample",
              "Expand": "expand", "Generate": "explode"}
_QUIET = {"Project", "SubqueryAlias", "LocalLimit", "View", "ResolvedHint"}


def spark_upstream(session: Any, inputs: list) -> list[tuple[str, str]]:
    """(hooked operator, what Spark did to its rows) for each hooked operator whose output
    reaches this call through `inputs` (DataFrames, or grouped data), from Spark's own
    analyzed plan. Best effort: a plan tt cannot read gives no edge, never an error."""
    names = session.hooked_names()
    if not names:
        return []
    out: list[tuple[str, str]] = []
    for x in inputs:
        try:
            df = x if hasattr(x, "_jdf") else None
            if df is None:   # GroupedData: its DataFrame, and the shuffle by its keys
                df = x._df
                keys = _grouping_keys(x._jgd.toString())
                first = f"shuffle by {keys}" if keys else "shuffle by key"
            else:
                first = ""
            text = df._jdf.queryExecution().analyzed().toString()
        except Exception:  # noqa: BLE001
            continue
        for name in names:
            label = plan_path_label(text, name)
            if label is not None:
                out.append((name, ", ".join(w for w in (first, label) if w) or "as is"))
    return out


def rdd_upstream(rdd: Any) -> list[tuple[str, str]]:
    """The hooked operator an RDD call is pipelined after, if any (PySpark chains the
    Python functions of one stage as `PipelinedRDD.prev`)."""
    seen = 0
    while rdd is not None and seen < 32:
        name = getattr(rdd, "_tt_operator", None)
        if name is not None:
            return [(name, "pipelined" if seen == 0 else "pipelined through PySpark's own functions")]
        rdd, seen = getattr(rdd, "prev", None), seen + 1
    return []


def plan_path_label(plan: str, name: str) -> str | None:
    """What lies between the root of an analyzed plan (its tree text) and the node that runs
    the hooked function `name`: the kinds of the nodes on that path, as words. None when
    the plan does not run `name`."""
    lines = plan.splitlines()
    at = next((i for i, line in enumerate(lines) if f" {name}(" in line or f"], {name}(" in line), None)
    if at is None:
        return None
    depth, words = _plan_depth(lines[at]), []
    for line in reversed(lines[:at]):   # up the tree: in the order the rows went through
        d = _plan_depth(line)
        if d < depth:
            depth = d
            kind = line[d:].split(" ", 1)[0]
            word = PLAN_WORDS.get(kind, kind.lower())
            if kind not in _QUIET and word not in words:
                words.append(word)
    return ", ".join(words)


def _plan_depth(line: str) -> int:
    return next((i for i, c in enumerate(line) if c.isalnum()), len(line))


def _grouping_keys(text: str) -> str:
    """`customer` from `RelationalGroupedDataset: [grouping expressions: [customer], …`."""
    import re

    m = re.search(r"grouping expressions: \[([^\]]*)\]", text)
    return ", ".join(k.split(":")[0].strip() for k in m.group(1).split(",")) if m else ""


def _unhookable_group_function(func: Any, kind: str) -> str | None:
    """Why PySpark would not call `func` once per whole group, if it would not."""
    from pyspark.sql.pandas import typehints

    infer = (typehints.infer_group_arrow_eval_type_from_func if kind.endswith("Arrow")
             else typehints.infer_group_pandas_eval_type_from_func)
    try:
        eval_type = None if kind.startswith("cogroup.") else infer(func)
    except Exception:  # noqa: BLE001  PySpark warns about the hints itself
        return None
    if eval_type is not None and "ITER" in _eval_type_name(eval_type):
        return "its type hints ask for the iterator form, which tt does not record yet"
    return None


def _unhookable_udtf(cls: type, eval_type: int) -> str | None:
    from pyspark.util import PythonEvalType

    if eval_type == PythonEvalType.SQL_ARROW_UDTF:
        return "an Arrow UDTF (its eval takes Arrow batches), which tt does not record yet"
    if hasattr(cls, "analyze"):
        return "its handler is made from analyze()'s result, which tt does not record yet"
    return None


def _class_site(cls: type) -> str:
    """`file:line` of a class's definition (a UDTF is hooked where PySpark first uses it)."""
    import inspect

    try:
        return f"{Path(inspect.getsourcefile(cls) or '?').name}:{inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        return f"{cls.__module__}.{cls.__qualname__}"


def _eval_type_name(eval_type: int) -> str:
    from pyspark.util import PythonEvalType

    return next((n for n, v in vars(PythonEvalType).items() if v == eval_type), "")


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

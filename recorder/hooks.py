"""Hooks that let `tt record` record an unmodified PySpark job (docs/HOOKS.md).

`install(session)` patches PySpark's methods that take the job's stateful Python
code (`DataFrame.mapInPandas` / `mapInArrow`, `GroupedData.applyInPandas` /
`applyInArrow` and their cogrouped forms, `transformWithState`,
`transformWithStateInPandas`, `applyInPandasWithState`, the RDD's `mapPartitions`,
`mapPartitionsWithIndex`, `map`, `flatMap`, `filter`, `foreachPartition` and `foreach` (the
DataFrame's too), a streaming `writeStream.foreach` writer, iterator UDFs (`@pandas_udf`,
`@arrow_udf`) and Python UDTF classes; classic PySpark). A patched method asks the
recording session to make its call site an operator of the run, and hands Spark what the
session returns in place of the user's function (recorder/hooked_calls.py): in the executor,
that runs the function through the one runtime, logged like any operator. Calls made by
PySpark itself pass through untouched, and nothing is patched unless `tt record` (or
`tt.hook`) runs.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
from pathlib import Path
from typing import Any, Callable

from ..core.hooked import GROUP_STATE_KIND, PROCESSOR_KINDS, name_of
from . import frames
from .spark_edges import note_plan_node, rdd_upstream, spark_upstream


def install(session: Any) -> Callable[[], None]:
    """Patch PySpark for `session`; returns the function that puts everything back."""
    from pyspark.core.rdd import RDD, RDDBarrier
    from pyspark.sql.classic.dataframe import DataFrame
    from pyspark.sql.group import GroupedData
    from pyspark.sql.pandas.group_ops import PandasCogroupedOps
    from pyspark.sql.streaming.readwriter import DataStreamWriter
    from pyspark.sql.udf import UserDefinedFunction
    from pyspark.sql.udtf import UserDefinedTableFunction
    from pyspark.util import PythonEvalType

    originals: list[tuple[type, str, Callable | None]] = []
    with_index = RDD.mapPartitionsWithIndex

    said: dict[Any, Any] = {}   # id -> function (or (site, method) -> function): what was said, or looked for

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
                    _say_pandas_on_spark(session, func, said)
                    return original(self, func, *args, **kwargs)
                upstream = spark_upstream(session, [self])
                hooked = session.hook(func, kind, site, self.sparkSession.sparkContext, upstream)
                if self.isStreaming:   # (its micro-batch ends are interactions, as a processor's are)
                    session.watch_micro_batches(self.sparkSession)
                data = session.referenced_units(self, hooked, kind)
                return original(data, hooked, *args, **kwargs)
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
                hooked = session.hook(f, kind, site, self.context, rdd_upstream(session, self))
                if kind == "rdd.filter":  # PySpark's filter keeps the partitioning, and so does the hook
                    args, kwargs = (True,), {}
                out = with_index(self, hooked, *args, **kwargs)
                out._tt_operator = hooked.__name__   # what a hooked call on `out` is fed by
                return out
            return patched
        return make

    def grouped(kind: str, spark_of: Callable[[Any], Any], frames_of: Callable[[Any], list]):
        """`gdf.applyInPandas(f, schema)` and kin; a function with type hints asking for
        PySpark's iterator form is of the kind `KIND.iter` (its groups arrive as batches)."""
        def make(original):
            def patched(self, func, schema):
                site = _user_site()
                if site is None or not callable(func):
                    _say_pandas_on_spark(session, func, said)
                    return original(self, func, schema)
                upstream = spark_upstream(session, frames_of(self))
                hooked = session.hook(func, _grouped_kind(func, kind), site, spark_of(self).sparkContext, upstream)
                return original(self, hooked, schema)
            return patched
        return make

    def stateful(kind: str, argument: str, streaming_only: bool = False):
        """`gdf.transformWithStateInPandas(statefulProcessor=..., ...)`, `transformWithState`,
        and `applyInPandasWithState(func, ...)`: the processor (the function) named `argument` is
        swapped for tt's stand-in; an initial state is a second upstream; a streaming query's
        micro-batch ends are watched. `streaming_only`: Spark refuses the API in a batch query,
        so that one runs unhooked and Spark's own error shows."""
        def make(original):
            import inspect

            signature = inspect.signature(original)

            def patched(self, *args, **kwargs):
                site = _user_site()
                try:
                    bound = signature.bind(self, *args, **kwargs)
                except TypeError:   # PySpark reports the bad call itself
                    return original(self, *args, **kwargs)
                user, streaming = bound.arguments.get(argument), self._df.isStreaming
                if site is None or user is None or (streaming_only and not (streaming and callable(user))):
                    return original(self, *args, **kwargs)
                initial = bound.arguments.get("initialState")
                upstream = spark_upstream(session, [self] + ([initial] if initial is not None else []))
                teed = kind == "transformWithStateInPandas" and initial is None and frames.available() is None
                hooked = session.hook(user, kind, site, self.session.sparkContext, upstream,
                                      tee=frames.conversion(self.session) if teed else None)
                bound.arguments[argument] = hooked
                if streaming:
                    session.watch_micro_batches(self.session)
                result = original(*bound.args, **bound.kwargs)
                if hooked is not user:   # (PySpark's plan names a processor's node by its own wrapper)
                    note_plan_node(session, getattr(hooked, "__name__", None), result)
                return result
            return patched
        return make

    def foreach(kind: str, upstream_of: Callable[[Any], list]):
        """`rdd.foreachPartition(f)`, `rdd.foreach(f)` and the DataFrame's: PySpark runs `f` in
        `mapPartitions` for its effects (a sink: rows written to a database, in batches it
        keeps) and counts what comes back; its own wrapper, called from PySpark, would pass
        unhooked, so the hook runs `f` as PySpark does, hooked."""
        def make(original):
            def patched(self, f):
                site = _user_site()
                if site is None or not callable(f):
                    return original(self, f)
                rdd = self.rdd if isinstance(self, DataFrame) else self
                caller = sys._getframe(1)
                with _call_site(rdd.context, f"{original.__name__} at {caller.f_code.co_filename}:{caller.f_lineno}"):
                    with_index(rdd, session.hook(f, kind, site, rdd.context, upstream_of(self))).count()
            return patched
        return make

    def stream_foreach(original):
        """`writeStream.foreach(writer)`: PySpark wraps the writer in a function of its own
        (`_construct_foreach_function`: `open`, `process` per row, `close`) that the JVM runs in
        each micro-batch's tasks. The hook hands PySpark tt's call instead, which runs that same
        loop as an operator of the run (core/hooked.py `ForeachWriterOperator`)."""
        def patched(self, f):
            site = _user_site()
            if site is None or f is None:
                return original(self, f)
            upstream = spark_upstream(session, [self._df])
            call = session.hook(f, "writeStream.foreach", site, self._spark.sparkContext, upstream)
            if call is f:   # (the job records a tt.Dataflow: the writer runs unrecorded, said)
                return original(self, f)
            session.watch_micro_batches(self._spark)
            return original(self, _HookedWriter(call))
        return patched

    construct = DataStreamWriter.__dict__["_construct_foreach_function"]   # a staticmethod
    make_function = getattr(construct, "__func__", construct)

    def constructed(f):
        return f.call if isinstance(f, _HookedWriter) else make_function(f)
    originals.append((DataStreamWriter, "_construct_foreach_function", construct))
    DataStreamWriter._construct_foreach_function = staticmethod(constructed)

    def udtf(original):
        """A UDTF registered for SQL (`spark.udtf.register`): its class is pickled here
        (`_create_judtf`), where it is swapped for the hooked class, at the line that defines
        it; each registration an operator. A use in a query from Python is hooked by
        `per_use`, whose hooked class passes."""
        def patched(self, func):
            if not isinstance(func, type) or func.__dict__.get("_tt_hooked"):
                return original(self, func)
            from pyspark.sql import SparkSession

            sc = SparkSession._getActiveSessionOrCreate().sparkContext
            return original(self, session.hook(func, "udtf", _definition_site(func), sc, shared=True,
                                               columns=_udtf_columns(self)))
        return patched

    iter_udf_kinds = {PythonEvalType.SQL_SCALAR_PANDAS_ITER_UDF: "pandas_udf.iter",
                      PythonEvalType.SQL_SCALAR_ARROW_ITER_UDF: "arrow_udf.iter"}

    def per_use(kind_of: Callable[[Any], str | None], placeholder: str):
        """A use of a UDF or a UDTF in a query (`f("amount")`, `Words(lit("a b"))`): an
        operator of its own, named after the function or class, at the line of the use: a copy
        of the UDF whose function is the hooked call (`kind_of` the UDF: its operator's kind,
        or None where it is not hooked; `placeholder`: the attribute its JVM function is cached
        in). PySpark would run every use through the one JVM function the UDF makes once, and
        tt would take the tasks of a second query for more attempts of the first's: its units
        went unrecorded."""
        def make(original):
            def patched(self, *args, **kwargs):
                kind = kind_of(self)
                site = _caller_site() if kind is not None and not _library_function(self.func) else None
                if site is None:
                    _say_pandas_on_spark(session, self.func, said)
                    return original(self, *args, **kwargs)
                from pyspark.sql import SparkSession

                spark = SparkSession._getActiveSessionOrCreate()
                call = session.hook(self.func, kind, site, spark.sparkContext,
                                    columns=_udtf_columns(self) if kind == "udtf" else None)
                if call is self.func:   # (the job records a tt.Dataflow: it runs unrecorded, said)
                    return original(self, *args, **kwargs)
                use = copy.copy(self)
                use.func = call
                setattr(use, placeholder, None)
                session.watch_micro_batches(spark)   # (over a stream: each micro-batch's task an instance)
                return original(use, *args, **kwargs)
            return patched
        return make

    def iter_udf(original):
        """Where PySpark pickles a UDF's function (`_create_judf`). An iterator UDF (`@pandas_udf`
        or `@arrow_udf` over `Iterator[pd.Series]`, or `Iterator[Tuple[...]]` of several columns)
        is called once per task with the task's batches, as a `mapInPandas` function is, and
        keeps what it likes between them (a running total, a model loaded once). One registered
        for SQL (`spark.udf.register`) is hooked here, at the line that defines it, each
        registration an operator, since no use of it is a Python call (a use in a query is hooked by `per_use`, whose hooked call passes
        here as tt's own). Other UDFs (one call per row or batch) pass unhooked; one whose code
        writes module globals is said to keep state unrecorded."""
        def patched(self, func, *args, **kwargs):
            kind = iter_udf_kinds.get(self.evalType)
            if _library_function(func):
                return original(self, func, *args, **kwargs)
            if kind is None:
                _say_unrecorded_state(session, func, self.evalType, said)
                return original(self, func, *args, **kwargs)
            from pyspark.sql import SparkSession

            spark = SparkSession._getActiveSessionOrCreate()
            call = session.hook(func, kind, _definition_site(func), spark.sparkContext, shared=True)
            session.watch_micro_batches(spark)   # (over a stream: each micro-batch's task an instance)
            return original(self, call, *args, **kwargs)
        return patched

    for kind in ("mapInPandas", "mapInArrow"):
        patch(DataFrame, kind, dataframe_map(kind))
    for name in ("mapPartitions", "mapPartitionsWithIndex", "map", "flatMap", "filter"):
        patch(RDD, name, rdd_map(f"rdd.{name}"))
    for name in ("foreachPartition", "foreach"):
        patch(RDD, name, foreach(f"rdd.{name}", lambda rdd: rdd_upstream(session, rdd)))
        patch(DataFrame, name, foreach(f"rdd.{name}", lambda df: spark_upstream(session, [df])))
    patch(DataStreamWriter, "foreach", stream_foreach)

    def dataframe_rdd(original):
        """`df.rdd` (a `cached_property`): the RDD marked with its DataFrame, so that a hooked
        RDD function over it is linked to the hooked operators the DataFrame's plan runs
        (`rdd_upstream`)."""
        def rdd(self):
            out = original.func(self)
            out._tt_dataframe = self
            return out
        marked = functools.cached_property(rdd)
        marked.__set_name__(DataFrame, "rdd")   # (not called by `setattr` on a class)
        return marked

    if isinstance(DataFrame.__dict__.get("rdd"), functools.cached_property):   # (PySpark 4's; another: no such edge)
        patch(DataFrame, "rdd", dataframe_rdd)
    for name in ("applyInPandas", "applyInArrow"):
        patch(GroupedData, name, grouped(name, lambda gd: gd.session, lambda gd: [gd]))
        patch(PandasCogroupedOps, name, grouped(f"cogroup.{name}", lambda cg: cg._gd1.session,
                                                lambda cg: [cg._gd1, cg._gd2]))
    patch(UserDefinedTableFunction, "_create_judtf", udtf)
    patch(UserDefinedFunction, "_create_judf", iter_udf)
    patch(UserDefinedFunction, "__call__", per_use(lambda u: iter_udf_kinds.get(u.evalType), "_judf_placeholder"))
    patch(UserDefinedTableFunction, "__call__", per_use(
        lambda u: "udtf" if isinstance(u.func, type) and not u.func.__dict__.get("_tt_hooked") else None,
        "_judtf_placeholder"))

    def barrier(original):
        """`rdd.barrier().mapPartitions(f)`: a barrier stage's tasks start together and may wait
        for each other (`BarrierTaskContext.barrier()`), which a replay of one task alone cannot
        do; tt leaves it unhooked, and says so once per call site."""
        def patched(self, f, *args, **kwargs):
            site = _user_site()
            if site is not None and callable(f) and (site, original.__name__) not in said:
                said[(site, original.__name__)] = f
                session.on_event("warning", {"message": (
                    f"{name_of(f)} (barrier().{original.__name__} at {site}) runs unrecorded: tt does not hook "
                    f"barrier stages, whose tasks wait for each other, so its steps and the state it keeps are "
                    f"not in the run")})
            return original(self, f, *args, **kwargs)
        return patched

    patch(RDDBarrier, "mapPartitions", barrier)
    patch(RDDBarrier, "mapPartitionsWithIndex", barrier)
    for name in sorted(PROCESSOR_KINDS):
        patch(GroupedData, name, stateful(name, "statefulProcessor"))
    patch(GroupedData, GROUP_STATE_KIND, stateful(GROUP_STATE_KIND, "func", streaming_only=True))

    def uninstall() -> None:
        for cls, name, original in reversed(originals):
            if original is None:
                delattr(cls, name)
            else:
                setattr(cls, name, original)
    return uninstall


class _HookedWriter:
    """What the patched `writeStream.foreach` hands PySpark's own: tt's call, which PySpark's
    `_construct_foreach_function` (patched too) gives back as the function the JVM runs."""

    def __init__(self, call: Any):
        self.call = call


def _grouped_kind(func: Any, kind: str) -> str:
    """`kind`, or `kind.iter` where `func`'s type hints ask PySpark for the iterator form (a
    group's batches as an iterator: core/hooked.py `GroupIterOperator`)."""
    from pyspark.sql.pandas import typehints

    infer = (typehints.infer_group_arrow_eval_type_from_func if kind.endswith("Arrow")
             else typehints.infer_group_pandas_eval_type_from_func)
    try:
        eval_type = None if kind.startswith("cogroup.") else infer(func)
    except Exception:  # noqa: BLE001  PySpark warns about the hints itself
        return kind
    return f"{kind}.iter" if eval_type is not None and "ITER" in _eval_type_name(eval_type) else kind


def _definition_site(obj: Any) -> str:
    """`file:line` of a class's or function's definition (its decorator's line, as Python
    numbers it): a UDTF or a UDF registered for SQL is hooked where PySpark first pickles it,
    far from the job's line that made it; a `functools.partial`'s function's."""
    import inspect

    target = getattr(obj, "func", obj) if not isinstance(obj, type) else obj
    if not (inspect.isfunction(target) or inspect.ismethod(target) or isinstance(target, type)):
        target = type(target)   # a callable object: its class's
    try:
        return f"{Path(inspect.getsourcefile(target) or '?').name}:{inspect.getsourcelines(target)[1]}"
    except (OSError, TypeError):
        return f"{obj.__module__}.{obj.__qualname__}" if isinstance(obj, type) else name_of(obj)


def _eval_type_name(eval_type: int) -> str:
    from pyspark.util import PythonEvalType

    return next((n for n, v in vars(PythonEvalType).items() if v == eval_type), "")


def _call_site(sc: Any, site: str) -> Any:
    """The Spark job a hook runs for the user's call named as PySpark names it (`foreachPartition
    at job.py:23`, in the Spark UI and the tasks' `callSite.short`), not by tt's line that runs it:
    PySpark names a job by the first frame outside its own files. An outer `SCCallSiteSync` holds
    the name; the action's own, inside it, leaves it."""
    try:
        from pyspark.traceback_utils import SCCallSiteSync

        sync = SCCallSiteSync(sc)
        sync._call_site = site
        return sync
    except (ImportError, AttributeError):   # (another PySpark: its own name, tt's line)
        return contextlib.nullcontext()


def _user_site() -> str | None:
    """`file:line` of the job's call, or None when PySpark (or tt) itself made it."""
    frame = sys._getframe(2)   # _user_site <- the patched method <- its caller
    if _library(frame):
        return None
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"


def _udtf_columns(udtf: Any) -> list[str] | None:
    """The names of the columns a UDTF's rows have (its `returnType`), which its `eval` and
    `terminate` yield as plain tuples: `tt lineage --where` names them. None where it declares
    none (`analyze()` decides) or PySpark cannot say."""
    try:
        return [f.name for f in udtf.returnType.fields]
    except Exception:  # noqa: BLE001
        return None


def _say_unrecorded_state(session: Any, func: Any, eval_type: int, said: dict[int, Any]) -> None:
    """A UDF PySpark calls per row or per batch is not hooked: what it keeps between calls is
    state no log sees, and its replay cannot be checked. Where its code writes module globals,
    or a callable object's methods its own attributes (core/written_globals.py), the recording
    says so, once per function."""
    from ..core.written_globals import written_attributes, written_globals

    if id(func) in said:
        return
    said[id(func)] = func   # (kept: another function must not take its id)
    try:
        written = sorted(written_globals(func)) + [f"self.{a}" for a in written_attributes(func)]
    except Exception:  # noqa: BLE001  (code tt cannot read: nothing said, as before)
        return
    if written:
        session.on_event("warning", {"message": (
            f"{name_of(func)} (a UDF at {_definition_site(func)}) keeps state in {', '.join(written)}, which tt does "
            f"not record: PySpark calls it once per {_udf_unit(eval_type)}; an iterator UDF (@pandas_udf over "
            f"Iterator[pd.Series]) or mapInPandas keeps it where tt records it")})


def _say_pandas_on_spark(session: Any, func: Any, said: dict[int, Any]) -> None:
    """pandas-on-Spark (`apply_batch`, `transform_batch`, `apply`, `groupby(...).apply`) runs
    the job's function through PySpark's own `mapInPandas`, `applyInPandas` or a UDF, which tt
    leaves unhooked as PySpark's. The job's `tt record` failed with "called no PySpark method tt
    records", or recorded without a word of it: where the call came from pandas-on-Spark and a
    function of the job's is inside what it hands PySpark, the recording says so, once per
    function."""
    api = _pandas_on_spark_api()
    if api is None:
        return
    user = _job_function(func)
    if user is None or id(user) in said:
        return
    said[id(user)] = user
    session.on_event("warning", {"message": (
        f"{name_of(user)} (at {_definition_site(user)}) ran through pandas-on-Spark's {api}, whose own calls of "
        f"PySpark tt does not record: its steps and the state it keeps are not in the run; a DataFrame's "
        f"mapInPandas, or groupBy(...).applyInPandas, with it records them")})


def _pandas_on_spark_api() -> str | None:
    """The pandas-on-Spark method the job called, where the patched method was called from inside
    pandas-on-Spark: the outermost `pyspark.pandas` frame under the job's."""
    frame, api = sys._getframe(3), None   # <- _say_pandas_on_spark <- the patched method <- its caller
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("pyspark.pandas"):
            api = frame.f_code.co_name
        elif not module.startswith("pyspark"):
            return api if module.split(".")[0] != "tt" else None
        frame = frame.f_back
    return None


def _job_function(func: Any, depth: int = 6) -> Any | None:
    """The first function of the job's that `func` (pandas-on-Spark's wrapper of it) holds in
    its closure, through nested closures and partials, or None."""
    seen, todo = set(), [(func, 0)]
    while todo:
        f, d = todo.pop(0)
        f = getattr(f, "func", f)   # (a functools.partial)
        if id(f) in seen or d > depth:
            continue
        seen.add(id(f))
        code = getattr(f, "__code__", None)
        if code is None:
            continue
        if (getattr(f, "__module__", None) or "").split(".")[0] not in ("pyspark", "tt"):
            return f
        for cell in getattr(f, "__closure__", None) or ():
            try:
                todo.append((cell.cell_contents, d + 1))
            except ValueError:   # (an empty cell)
                pass
    return None


def _udf_unit(eval_type: int) -> str:
    """What PySpark calls a UDF of `eval_type` on, each time."""
    name = _eval_type_name(eval_type)
    if name in ("SQL_BATCHED_UDF", "SQL_ARROW_BATCHED_UDF"):   # (@udf: rows, however they travel)
        return "row"
    return "group" if "AGG" in name else "batch"


def _caller_site() -> str | None:
    """`file:line` of the job's frame nearest the patched method (a decorated UDF is called
    through PySpark's own wrapper), or None when PySpark or tt made the whole call."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "pyspark":
        frame = frame.f_back
    if frame is None or _library(frame):   # (tt's own call)
        return None
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"


def _library_function(func: Any) -> bool:
    """A function of PySpark's or tt's own (pandas-on-Spark makes iterator UDFs of its own)."""
    module = getattr(getattr(func, "func", func), "__module__", None) or ""
    return module.split(".")[0] in ("pyspark", "tt")


def _library(frame) -> bool:
    module = frame.f_globals.get("__name__", "")
    return module.split(".")[0] in ("pyspark", "tt")


__all__ = ["install"]

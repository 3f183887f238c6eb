"""A function an unmodified PySpark job hands to Spark, as an operator of the one runtime.

`tt record` wraps the function a job passes to `mapInPandas`, `mapInArrow`,
`applyInPandas`, `rdd.mapPartitions` and the other hooked APIs (docs/HOOKS.md). In
the executor and in the replay engine alike it runs as an operator of the one
runtime, so the runner, the logs, interactions, steps and the TUI treat it like any
operator: an `IteratorOperator` for the iterator APIs, an `ElementOperator` for the
RDD's element functions, a `GroupOperator` for the grouped APIs (a `GroupIterOperator`
for their iterator form), a `UdtfOperator` for a UDTF class. Spark's iterator
APIs are pull-based and the runtime pushes one unit per step: `core/pulled.py`
bridges the two, so a step is one unit (a batch for `mapInPandas`, an element for
`mapPartitions`) and the outputs the function yields before pulling the next unit
are that unit's.

Its state is what a user would look at: the attributes of a callable instance (or
of a bound method's instance), its closure cells, the module globals its code
assigns, and the locals of its generator's frame. A suspended generator cannot be
saved, so an instance is put back at a position by replaying its inputs from the
start of its partition (`restore_by_replay`); the replay engine and the checkpoint
planner honour that.
"""

from __future__ import annotations

import dis
import functools
import inspect
import types
from typing import Any, Callable

from . import values
from .nondeterministic import VERSION
from .operator import CONTEXT, Operator
from .pulled import Pulled
from .written_globals import class_shared_writes, is_code, shared_class_attributes, written_globals

#: The kind of a hooked operator in the DAG (the PySpark method it was handed to; the RDD's
#: are `rdd.`-prefixed, apart from the built-in `map` and `filter` of a tt.Dataflow), and the
#: unit of one of its steps as the debugger names it.
UNITS = {"mapInPandas": "batch", "mapInArrow": "batch",
         "pandas_udf.iter": "batch", "arrow_udf.iter": "batch",
         "rdd.mapPartitions": "row", "rdd.mapPartitionsWithIndex": "row",
         "rdd.map": "row", "rdd.flatMap": "row", "rdd.filter": "row",
         "rdd.foreachPartition": "row", "rdd.foreach": "row", "writeStream.foreach": "row",
         "applyInPandas": "group", "applyInArrow": "group",
         "applyInPandas.iter": "batch", "applyInArrow.iter": "batch",
         "cogroup.applyInPandas": "group", "cogroup.applyInArrow": "group",
         "udtf": "call",
         "transformWithStateInPandas": "chunk", "transformWithState": "row",
         "applyInPandasWithState": "chunk"}
HOOKED_KINDS = frozenset(UNITS)
#: What `--when` is handed as `row` where θ's unit is no row of named values, for the warning of
#: a condition that raised on it (`row['amount'] > 1000`, `tt record --help`'s example, on a UDTF)
WHEN_ROWS = {"mapInPandas": "a pandas DataFrame, a batch: e.g. \"bool((row['amount'] > 1000).any())\"",
             "mapInArrow": "an Arrow RecordBatch: e.g. \"pc.max(row['amount']).as_py() > 1000\"",
             "applyInPandas": "(key, DataFrame): e.g. \"row[0] == ('Bob',)\"",
             "applyInArrow": "(key, Arrow table): e.g. \"row[0] == ('Bob',)\"",
             "udtf": "('init',), ('eval', args, kwargs) or ('terminate',): e.g. "
                     "\"row[0] == 'eval' and row[1][0]['amount'] > 1000\"",
             "transformWithStateInPandas": "('one_row', key, times, DataFrame) for a key of one DataFrame, else "
                                           "('rows', key, times), ('row', DataFrame)…, ('rows_end',); ('timer', key, "
                                           "times, expiry); ('init',), ('close',): e.g. \"row[0] in ('one_row', "
                                           "'rows') and row[1] == ('Bob',)\"",
             "transformWithState": "('one_row', key, times, rows) for a key of one batch of Rows, else ('rows', key, "
                                   "times), ('row', Row)…, ('rows_end',); ('timer', key, times, expiry); ('init',), "
                                   "('close',): e.g. \"row[0] in ('one_row', 'rows') and row[1] == ('Bob',)\"",
             "applyInPandasWithState": "('one_chunk', key, GroupState, DataFrame) for a key of one DataFrame, else "
                                       "('key', key, GroupState), ('chunk', DataFrame)…, ('key_end',): e.g. "
                                       "\"row[0] in ('one_chunk', 'key') and row[1] == ('Bob',)\""}
#: The APIs whose function is run for its effects (PySpark counts its outputs, and drops them).
SINK_KINDS = frozenset({"rdd.foreachPartition", "rdd.foreach", "writeStream.foreach"})
#: RDD APIs whose function takes one element, not an iterator (`ElementOperator`).
ELEMENT_KINDS = frozenset({"rdd.map", "rdd.flatMap", "rdd.filter", "rdd.foreach"})
#: Grouped APIs: the function takes one group per call (`GroupOperator`).
GROUP_KINDS = frozenset(k for k, unit in UNITS.items() if unit == "group")
#: Their iterator form: the function takes a group's batches as an iterator (`GroupIterOperator`).
GROUP_ITER_KINDS = frozenset({"applyInPandas.iter", "applyInArrow.iter"})
#: The APIs that take a StatefulProcessor (core/processor.py `ProcessorOperator`).
PROCESSOR_KINDS = frozenset({"transformWithStateInPandas", "transformWithState"})
#: The API whose function gets a key's `GroupState` (core/group_state.py `GroupStateOperator`).
GROUP_STATE_KIND = "applyInPandasWithState"
#: The APIs whose function runs as a generator over its task's units, suspended between two
#: (`IteratorOperator`, `GroupIterOperator`, a foreach writer): its state lives in its frame
#: while it runs, gone once it returns.
ITERATOR_KINDS = HOOKED_KINDS - GROUP_KINDS - ELEMENT_KINDS - PROCESSOR_KINDS - {"udtf", GROUP_STATE_KIND}


class HookedOperator(Operator):
    """What every hooked function shares: its kind, its call site, and its state, which is
    what a user would look at (the callable's attributes, its closure cells)."""

    restore_by_replay = False
    done = False      # the function stopped pulling input (only an iterator function can)
    failed = False    # the function raised and can take nothing more
    #: State fields shown only when they hold something (a processor's `timers`): a condition
    #: reads them as `{}` meanwhile.
    empty_fields: frozenset = frozenset()
    #: Its code's clock reads, random draws and ids are logged (core/nondeterministic.py): the
    #: version of what is logged, set by `operator_for` for a new recording (`VERSION`); a run
    #: recorded before replays without it (0), or with what its version logged (True is 1).
    logs_nondeterministic = 0
    #: What its state shows, set by `operator_for` for a new recording (`STATE_VERSION`); an
    #: operator pickled by an earlier tt shows what it showed then, so a run's states stay what
    #: it recorded. 1: the module globals its code assigns (`globals`; a processor's and a
    #: UDTF's too), and a function wrapped in `functools.partial` seen through (its closure, its
    #: instance's attributes). 2: the globals its code writes into as well (`CACHE[k] = v`:
    #: core/written_globals.py), the arguments a `functools.partial` binds (`arguments`), and a
    #: plain function's own attributes (`dedupe.seen = set()`). 3: the class attributes an
    #: object's methods write into through `self` (`self.totals[k] += 1` on `totals = {}` in the
    #: class body), which every task of a Python worker shares (`shared_class_attributes`).
    state_version = 0

    #: The names of the columns of the tuples it yields, where its API declares them (a UDTF's
    #: `returnType`): `tt lineage --where` reads a row's values by them.
    output_columns: list[str] | None = None

    def __init__(self, fn: Callable, kind: str, site: str = ""):
        self._fn = fn
        self._kind = kind
        self._site = site          # file:line of the call in the job, shown beside the name

    def fields_owner(self) -> Any:
        """The user's function or object, whose own fields `state()` shows (row lineage reads
        its class's code for counters: replay/state_access.py)."""
        return self._fn

    def state(self) -> dict:
        version = self.state_version
        fn = _unwrapped(self._fn) if version >= 1 else self._fn
        owner = getattr(fn, "__self__", None) if inspect.ismethod(fn) else fn
        out: dict = {}
        own = getattr(owner, "__dict__", None)
        if owner is not None and isinstance(own, dict) and (not inspect.isroutine(owner) or (
                version >= 2 and isinstance(owner, types.FunctionType))):   # (a function's own: `f.seen = set()`)
            out.update(values.public_attrs(own))
            if version >= 3:
                out.update(shared_class_attributes(owner))
        cells = _closure(fn)
        if cells:
            out["closure"] = cells
        bound = _bound_arguments(self._fn) if version >= 2 else None
        if bound:
            out["arguments"] = bound
        return self._with_globals(out, fn)

    def _with_globals(self, out: dict, code: Any) -> dict:
        """`out` with `globals`, the module globals `code` assigns and writes into
        (core/written_globals.py), where it has any, as the tt that recorded the operator showed
        them (`state_version`)."""
        found = written_globals(code, in_place=self.state_version >= 2) if self.state_version >= 1 else None
        if found:
            out["globals"] = found
        return out

    def shared_attributes(self) -> list[str]:
        """Its class's attributes that its code writes into, shared by every instance and every
        task of a Python worker (`shared_attributes_of`): state no task owns."""
        return shared_attributes_of(self._fn)

    def __repr__(self) -> str:
        return f"<{self._kind} {self._tt_name or name_of(self._fn)}>"


class ElementOperator(HookedOperator):
    """`rdd.map(f)`, `flatMap(f)`, `filter(f)`: `f` takes one element per step. Nothing is
    suspended between two steps, so the instance is saved and restored like any operator."""

    def process(self, row: Any, port: int = 0) -> list:
        fn, kind = self._fn, self._kind
        if kind == "rdd.map":
            return [fn(row)]
        if kind == "rdd.filter":
            return [row] if fn(row) else []
        return list(fn(row))


class ForeachOperator(ElementOperator):
    """`rdd.foreach(f)`: `f` on one element per step, for its effects; no outputs. (A class of
    its own keeps the branch out of `ElementOperator.process`, which runs per element.)"""

    def process(self, row: Any, port: int = 0) -> list:
        self._fn(row)
        return []


class GroupOperator(HookedOperator):
    """`applyInPandas(f)` and the other grouped APIs: one group `(key, *frames)` per step,
    `f` called with or without the key as PySpark calls it (`with_key`, decided on the
    driver by PySpark's own rule: without the key when `getfullargspec(f).args`, which
    counts a callable instance's `self`, holds exactly one name per frame)."""

    def __init__(self, fn: Callable, kind: str, site: str = ""):
        super().__init__(fn, kind, site)
        frames = 2 if kind.startswith("cogroup.") else 1
        self._with_key = len(inspect.getfullargspec(fn).args) != frames

    def process(self, unit: tuple, port: int = 0) -> list:
        key, *frames = unit
        return [self._fn(key, *frames) if self._with_key else self._fn(*frames)]


class UdtfOperator(HookedOperator):
    """A Python UDTF class. PySpark makes a handler per task (per partition key with
    PARTITION BY), calls `eval` per row and `terminate` at the end of each handler; each
    of those calls is one step, so the handler's own lifecycle is replayed as Spark ran it:
    `("init",)` makes a fresh handler (the user's `__init__`; `("init", (result,))` where it
    takes the class's `analyze()` result, as PySpark then passes it), `("eval", args, kwargs)`
    and `("terminate",)` call it. The state is the current handler's attributes."""

    def __init__(self, cls: type, kind: str = "udtf", site: str = ""):
        super().__init__(cls, kind, site)
        self._handler: Any = None

    def process(self, unit: tuple, port: int = 0) -> list:
        cls = self._fn
        if unit[0] == "init":
            self._handler = cls(*(unit[1] if len(unit) > 1 else ()))
            return []
        if self._handler is None:  # a unit before any init: PySpark always makes one first
            self._handler = cls()
        method = cls.eval if unit[0] == "eval" else cls.terminate
        out = method(self._handler, *unit[1], **unit[2]) if unit[0] == "eval" else method(self._handler)
        return outputs(out)

    @property
    def fields_known(self) -> bool:
        """Its state is the handler's attributes: before the first handler is made, any field
        may still come (a condition on one was refused at a replay's start)."""
        return self._handler is not None

    @staticmethod
    def replaces_state(unit: Any) -> bool:
        """`("init",)` makes a fresh handler, which reads nothing the one before held: row
        lineage through its state starts there (replay/state_access.py). With `PARTITION BY`,
        a key's summary linked back through every earlier key's rows of the task."""
        return type(unit) is tuple and bool(unit) and unit[0] == "init"

    def state(self) -> dict:
        h = self._handler
        attrs = getattr(h, "__dict__", None)
        out = values.public_attrs(attrs) if isinstance(attrs, dict) else {}
        if self.state_version >= 3:
            out.update(shared_class_attributes(h))
        return self._with_globals(out, self._fn)


class IteratorOperator(HookedOperator):
    """`fn(iterator of units) -> iterator of outputs`, one unit per step
    (`fn(partition, iterator)` for `mapPartitionsWithIndex`)."""

    #: A running generator cannot be pickled: restore this instance by replaying its inputs.
    restore_by_replay = True
    #: Its frame's `locals` exist while the function runs, not before its first unit nor after
    #: it returned: a condition on them (`running.locals.get('total', 0) > 100`) is a condition
    #: on a field of its state from the start (it was refused as an unknown field).
    empty_fields = frozenset({"locals"})

    def __init__(self, fn: Callable, kind: str = "mapInPandas", site: str = ""):
        super().__init__(fn, kind, site)
        self._pulled: Pulled | None = None

    def _begin(self) -> Pulled:
        fn = self._fn
        if self._kind == "rdd.mapPartitionsWithIndex":  # the instance is the partition Spark passes
            fn = functools.partial(fn, CONTEXT.runner.instance)
        elif self._kind == "rdd.foreachPartition":
            fn = functools.partial(_for_effects, fn)
        self._pulled = Pulled(fn)
        return self._pulled

    @property
    def done(self) -> bool:
        """The function returned: it pulls no more units (Spark stops feeding it too)."""
        return self._pulled is not None and self._pulled.finished

    @property
    def failed(self) -> bool:
        """The function raised: only a fresh start can bring it back."""
        return self._pulled is not None and self._pulled.failed

    def process(self, row: Any, port: int = 0) -> list:
        p = self._pulled
        if p is None:  # outputs yielded before the first pull are the first unit's
            p = self._begin()
            outs = p.start()
            return outs + p.feed(row) if not p.finished else outs
        return p.feed(row)

    def finish(self) -> list:
        p = self._pulled or self._begin()
        return p.end()

    def close(self) -> None:
        """Spark stopped pulling this instance's outputs (`take`): its function is closed, as
        PySpark closes it (`Pulled.close`). Not a step: the task has taken its end snapshot."""
        if self._pulled is not None:
            self._pulled.close()

    def state(self) -> dict:
        out = super().state()
        frame_locals = self._frame_locals()
        if frame_locals:
            out["locals"] = frame_locals
        return out

    def _frame_locals(self) -> dict:
        p = self._pulled
        gen = p.returned if p is not None else None
        frame = getattr(gen, "gi_frame", None)
        if frame is None and p is not None and self.state_version >= 2:   # (a function, not a generator)
            frame = p.frame_of(_code_of(self._fn))
        if frame is None:
            return {}
        out = {}
        for name, value in frame.f_locals.items():
            if name == "self" or name.startswith("_") or is_code(value) or type(value).__name__ == "_Inputs":
                continue
            out[name] = value  # a DataFrame is shown as its shape and a digest (values.encode)
        return out

    def __getstate__(self) -> dict:
        if self._pulled is not None:
            raise TypeError(f"{self._tt_name or self._kind}: a running generator cannot be saved; "
                            f"tt restores it by replaying its inputs (restore_by_replay)")
        return self.__dict__


class ForeachWriterOperator(IteratorOperator):
    """`writeStream.foreach(writer)`, run as PySpark runs it (`_construct_foreach_function`):
    a task's first unit `("open", partition, epoch)` is the step that calls
    `writer.open(partition, epoch)`, each row after it one `writer.process(row)`, and the END
    step `writer.close(None)`, or `close(error)` where `process` raised. The recorder hands the
    partition and the micro-batch in that first unit (PySpark reads the batch from the task),
    so a replay opens the writer as Spark did. A writer that is a function takes the rows alone."""

    def process(self, unit: Any, port: int = 0) -> list:
        p = self._pulled
        if p is None:   # ("open", partition, epoch)
            self._pulled = Pulled(functools.partial(_write_rows, self._fn, unit[1], unit[2]))
            return self._pulled.start()
        return [] if p.finished else p.feed(unit)   # (`open` returned False: PySpark hands it no row)

    def finish(self) -> list:
        return self._pulled.end() if self._pulled is not None else []


def _write_rows(writer: Any, partition: int, epoch: int, rows: Any) -> Any:
    """PySpark's loop around a ForeachWriter (a function of one row, where it is callable)."""
    if callable(writer):
        for row in rows:
            writer(row)
        return iter(())
    opened = writer.open(partition, epoch) if hasattr(writer, "open") else True
    error = None
    try:
        if opened:
            for row in rows:
                writer.process(row)
    except Exception as e:  # noqa: BLE001  (handed to close, then raised, as PySpark does)
        error = e
    finally:
        if hasattr(writer, "close"):
            writer.close(error)
        if error:
            raise error
    return iter(())


class GroupIterOperator(IteratorOperator):
    """The iterator form of `applyInPandas(f)` and `applyInArrow(f)`: `f(key, batches)` (or
    `f(batches)`) is called once per group and pulls that group's batches, as PySpark calls it.
    A group is `("group", key)`, one `("batch", frame)` per batch and `("group_end",)`: each a
    step, a batch's outputs those `f` yields before it pulls the next (`Pulled`, one per group).
    A function that returns before its group's last batch takes no more of them (PySpark drains
    the rest), and the next group starts afresh."""

    def __init__(self, fn: Callable, kind: str = "applyInPandas.iter", site: str = ""):
        super().__init__(fn, kind, site)
        self._with_key = len(inspect.getfullargspec(fn).args) != 1   # PySpark's own rule (worker.py)

    @property
    def done(self) -> bool:
        return False   # a group's function returning ends its group, not the task

    def process(self, unit: tuple, port: int = 0) -> list:
        what = unit[0]
        if what == "group":
            fn = functools.partial(self._fn, unit[1]) if self._with_key else self._fn
            self._pulled = Pulled(fn)
            return self._pulled.start()
        p = self._pulled
        if what == "batch":
            return p.feed(unit[1]) if p is not None and not p.finished else []
        self._pulled = None   # ("group_end",)
        return p.end() if p is not None else []

    def finish(self) -> list:
        return []


def _for_effects(fn: Callable, rows: Any) -> Any:
    """`rdd.foreachPartition(fn)` as PySpark runs it: what `fn` returns is iterated where it is
    iterable (a generator runs), else nothing."""
    returned = fn(rows)
    try:
        return iter(returned)
    except TypeError:
        return iter(())


def _code_of(fn: Any) -> Any:
    """The code object a hooked function runs (a callable instance's `__call__`'s)."""
    fn = _unwrapped(fn)
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code if code is not None else getattr(getattr(type(fn), "__call__", None), "__code__", None)


def outputs(returned: Any) -> list:
    """What a user's method returned (a generator, a list, or None), as its step's outputs."""
    return list(returned) if returned is not None else []


def name_of(fn: Any) -> str:
    """The name a hooked function goes by: its own (through `functools.partial`), or its class's
    for a callable instance."""
    fn = _unwrapped(fn)
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or name == "<lambda>":
        name = type(fn).__name__ if not inspect.isroutine(fn) else "lambda"
    return name


def shared_attributes_of(fn: Any) -> list[str]:
    """The class attributes the hooked `fn`'s methods write into through `self`, which every
    task of a Python worker shares (core/written_globals.py `shared_class_attributes`): a
    UDTF's class, a processor or callable object, the instance a bound method has. Code tt
    cannot read has none."""
    try:
        fn = _unwrapped(fn)
        if isinstance(fn, type):
            return class_shared_writes(fn)
        owner = fn.__self__ if inspect.ismethod(fn) else fn
        return sorted(shared_class_attributes(owner))
    except Exception:  # noqa: BLE001
        return []


def _unwrapped(fn: Any) -> Any:
    """The function a `functools.partial` binds arguments to (`mapInPandas(partial(score, t=3))`)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def _bound_arguments(fn: Any) -> dict:
    """The arguments a `functools.partial` binds, by the names of the parameters they bind
    (`partial(score, cache={})`: a dict the function fills is its state), code left out."""
    if not isinstance(fn, functools.partial):
        return {}
    try:
        bound = inspect.signature(_unwrapped(fn)).bind_partial(*fn.args, **fn.keywords).arguments
    except (TypeError, ValueError):   # (a builtin without a signature, or arguments it does not take)
        bound = {**{f"arg{i}": a for i, a in enumerate(fn.args)}, **fn.keywords}
    return {name: value for name, value in bound.items() if not name.startswith("_") and not is_code(value)}


def _closure(fn: Any) -> dict:
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None)
    if code is None or not cells:
        return {}
    out = {}
    for name, cell in zip(code.co_freevars, cells):
        try:
            value = cell.cell_contents
        except ValueError:  # not yet bound
            continue
        if not name.startswith("_") and not is_code(value):
            out[name] = value
    return out


#: What a new recording's hooked operators show as their state (`HookedOperator.state_version`).
STATE_VERSION = 3


def operator_for(fn: Callable, kind: str, site: str) -> HookedOperator:
    """The operator that runs `fn` as PySpark's `kind` would call it, in a new recording."""
    op = _operator_for(fn, kind, site)
    op.logs_nondeterministic = VERSION
    op.state_version = STATE_VERSION
    return op


def _operator_for(fn: Callable, kind: str, site: str) -> HookedOperator:
    if kind in GROUP_KINDS:
        return GroupOperator(fn, kind, site)
    if kind in GROUP_ITER_KINDS:
        return GroupIterOperator(fn, kind, site)
    if kind == "udtf":
        return UdtfOperator(fn, kind, site)
    if kind == "writeStream.foreach":
        return ForeachWriterOperator(fn, kind, site)
    if kind in PROCESSOR_KINDS:
        from .processor import ProcessorOperator   # it builds on HookedOperator, above

        return ProcessorOperator(fn, kind, site)
    if kind == GROUP_STATE_KIND:
        from .group_state import GroupStateOperator

        return GroupStateOperator(fn, kind, site)
    if kind == "rdd.foreach":
        return ForeachOperator(fn, kind, site)
    return (ElementOperator if kind in ELEMENT_KINDS else IteratorOperator)(fn, kind, site)


__all__ = ["outputs", "HookedOperator", "IteratorOperator", "ElementOperator", "ForeachOperator", "ForeachWriterOperator", "GroupOperator", "GroupIterOperator",
           "UdtfOperator", "operator_for", "HOOKED_KINDS", "SINK_KINDS", "GROUP_KINDS", "GROUP_ITER_KINDS", "PROCESSOR_KINDS", "GROUP_STATE_KIND", "UNITS", "name_of"]

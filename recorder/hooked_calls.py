"""What Spark runs in place of a hooked function (docs/HOOKS.md §5).

Each is picklable, travels to the executors inside Spark's plan, and there runs the
user's function through the one runtime (`StageTask`), logged like any operator:

- `HookedCall`: the iterator APIs (`mapInPandas`, `mapInArrow`, the RDD's), called
  once per task and pulled by Spark (`StageTask.run_units`);
- `GroupedCall` and `hooked_udtf_class`: the grouped APIs and UDTFs, called many times
  per task; each call is one unit pushed into the task a `TaskFeed` keeps open;
- `HookedProcessor`: a transformWithState processor, and `HookedGroupStateFunction`: an
  applyInPandasWithState function, whose every call becomes units of that task too
  (core/processor.py, core/group_state.py).
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Iterator

from ..core.graph import Graph
from ..core.group_state import snapshot
from ..core.logs import kept_apart
from ..core.values import immutable
from .task import Recording, StageTask


class HookedCall:
    """What Spark runs in place of a hooked function: one hooked stage per task.

    It keeps the function's name (Spark shows it in EXPLAIN and the UI); the function
    itself travels inside the stage's graph, as the operator's code."""

    def __init__(self, fn: Any, graph: Graph, stage_id: int, recording: Recording | None):
        self.graph = graph
        self.stage_id = stage_id
        self.recording = recording
        self.__name__ = graph.hooked_node(stage_id).name   # the operator's, unique in the run
        self.source_ref = None   # a TaskRef when its units are read by reference (`referenced_units`)
        self._opens_writer = graph.hooked_node(stage_id).kind == "writeStream.foreach"

    def __call__(self, *args: Any) -> Iterator:
        """`(iterator)` for the DataFrame APIs, `(partition, iterator)` for the RDD's."""
        from pyspark import TaskContext

        tc = TaskContext.get()
        partition, units = args if len(args) == 2 else (tc.partitionId(), args[0])
        attempt = _attempt(tc)
        task = StageTask(self.graph, self.stage_id, partition, self.recording, attempt)
        task.source_ref = self.source_ref
        task.join_pipeline(attempt["spark_attempt"])
        if self._opens_writer:   # a ForeachWriter's `open(partition, epoch)`: the task's first step
            units = itertools.chain([("open", partition, micro_batch(tc))], units)
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
        self._context: Any = None   # the TaskContext of the task attempt `_task` runs
        self._connecting: tuple[Any, Any] | None = None   # (TaskContext, Connecting) started ahead (`connect_ahead`)

    def connect_ahead(self) -> None:
        """Start the handshake of this worker's task attempt with the coordinator now, while
        PySpark reads the task's input: two round trips to the driver, which a job at Spark's
        default 200 shuffle partitions would otherwise wait for 200 times (the keyed TWS job
        there: 3.47 ms a task waiting for the welcome, 0.65 ms so). Only where the task surely
        opens (a batch query's processor: `init` is called in every task)."""
        from .task import connect

        tc = _task_context()
        if self.recording is None or tc is None or micro_batch(tc) is not None:
            return
        self._connecting = (tc, connect(self.graph, self.stage_id, tc.partitionId(), self.recording, _attempt(tc)))

    def feed(self, unit: Any, attach: Any = None, run: int = 0, logged: tuple | None = None) -> list:
        """One unit into this task attempt's stage (opened at its first unit). `attach`: what
        the operator is given before this unit (a processor's Spark handle, a GroupState).
        `run`: which of the task's Python runs this is, where Spark makes more than one.
        `logged`: what the log keeps in place of `unit` (its DataFrame's place in the task's
        batches, recorder/teed_batches.py)."""
        tc = _task_context()
        if self._task is None or tc is not self._context:   # (a worker makes a TaskContext per task)
            attempt = _attempt(tc, run)
            ahead, self._connecting = self._connecting, None
            connecting = ahead[1] if ahead is not None and ahead[0] is tc and not run else None
            self._task = StageTask(self.graph, self.stage_id, tc.partitionId(), self.recording, attempt, connecting)
            self._context = tc
            self._task.open_units()
            self.task_end._value = _TaskEnd(self)
        if attach is not None:
            self._task._unit_head.op.attach(attach)
        return self._task.feed_unit(unit, logged)

    def operator(self) -> Any:
        """The operator object running in this task, if one is open."""
        head = self._task._unit_head if self._task is not None else None   # (None once the task is over)
        return head.op if head is not None else None

    def end(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.end_units()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_task": None, "_context": None, "_connecting": None}


_TaskContext: Any = None


def _task_context() -> Any:
    """PySpark's TaskContext of the running task (the class imported once: a unit is fed per
    row, and `from pyspark import …` runs importlib's Python code at every call)."""
    global _TaskContext
    if _TaskContext is None:
        from pyspark import TaskContext

        _TaskContext = TaskContext
    return _TaskContext.get()


def micro_batch(tc: Any) -> int | None:
    """The micro-batch a streaming query's task runs, None outside Structured Streaming."""
    batch = tc.getLocalProperty("streaming.sql.batchId")
    return None if batch is None else int(batch)


def _attempt(tc: Any, run: int = 0) -> dict:
    """What a hooked task attempt tells the coordinator it is: Spark's attempt, and its slot in
    a streaming query (whose micro-batches run the same partitions again)."""
    return {"spark_attempt": tc.taskAttemptId(), "number": tc.attemptNumber(), "spark_stage": tc.stageId(),
            **_slot(tc, run)}


def _slot(tc: Any, run: int = 0) -> dict:
    """A streaming task's instance is not its partition (every micro-batch runs fresh tasks on
    the same partitions): the coordinator numbers (micro-batch, partition) slots densely, and
    (micro-batch, partition, run) for a task's later Python run (applyInPandasWithState's
    timed-out keys run in a second Python worker, after the keys with data)."""
    batch = micro_batch(tc)
    if batch is None:
        return {}
    return {"slot": [batch, tc.partitionId()] + ([run] if run else []),
            "query": tc.getLocalProperty("sql.streaming.queryId")}


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
        self.__name__ = feed.graph.hooked_node(feed.stage_id).name   # the operator's, unique in the run
        frames = ["left", "right"] if kind.startswith("cogroup.") else ["data"]
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ["key", *frames]])
        self.__annotations__: dict = {}   # no type hints: PySpark picks the one-group-per-call form

    def __call__(self, key: Any, *frames: Any) -> Any:
        return self.feed.feed((key, *frames))[0]   # the function's one result for this group


class GroupedIterCall:
    """What Spark runs in place of a grouped function in its iterator form (`applyInPandas`
    or `applyInArrow` with `Iterator[...]` type hints): one group per call, its batches fed to
    the call site's task one by one, between a unit to start the group and one to end it
    (core/hooked.py `GroupIterOperator`). It declares `(key, batches)` with the iterator hints,
    so PySpark calls it in that form and always hands it the key."""

    def __init__(self, fn: Any, kind: str, feed: TaskFeed):
        import inspect

        if kind.startswith("applyInArrow"):
            import pyarrow as pa
            batch: Any = pa.RecordBatch
        else:
            import pandas as pd
            batch = pd.DataFrame
        self.feed = feed
        self.__name__ = feed.graph.hooked_node(feed.stage_id).name
        hints = {"key": Any, "batches": Iterator[batch], "return": Iterator[batch]}
        self.__signature__ = inspect.Signature(   # (PySpark reads the hints off the signature, then these)
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=hints[n]) for n in ("key", "batches")],
            return_annotation=hints["return"])
        self.__annotations__ = hints

    def __call__(self, key: Any, batches: Any) -> Iterator:
        yield from self.feed.feed(("group", key))
        for batch in batches:
            yield from self.feed.feed(("batch", batch))
        yield from self.feed.feed(("group_end",))


def hooked_udtf_class(cls: type, feed: TaskFeed) -> type:
    """The class PySpark runs in place of a UDTF class: a subclass whose handler calls
    (`__init__`, `eval`, `terminate`, and `cleanup` on the operator's handler) are units fed
    to the call site's task, where the operator runs the user's own class. It defines only
    the methods the user's class has, with their signatures, as PySpark checks them."""
    import functools
    import inspect

    if len(inspect.getfullargspec(cls).args) == 2:   # `__init__(self, analyze_result)`: PySpark passes it
        def __init__(self, analyze_result):
            type(self)._tt_feed.feed(("init", (analyze_result,)))
    else:
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


class HookedProcessor:
    """What Spark runs in place of a transformWithState `StatefulProcessor`: each call Spark
    makes on it becomes units of the call site's task (core/processor.py), where the operator
    runs the user's own processor; the rows of one key are handed over one by one.

    Spark accepts new state variables only until `init` returns, so `init` runs when Spark
    calls it. In a batch query it opens the task then. A streaming query runs a task per
    partition in every micro-batch, most of them with nothing to do; there `init` runs on a
    copy of the processor, keeping the variables it made (`_Prepared`), and the task is
    opened only at its first key or timer, whose `init` step is handed those same variables:
    a micro-batch task with no key and no timer is not recorded. The driver-side `init` and
    `close` a streaming query makes to learn the variables' schemas run unrecorded."""

    def __init__(self, feed: TaskFeed, tee_settings: dict | None = None):
        self.feed = feed
        self._unrecorded = False
        self._prepared: _Prepared | None = None   # a streaming task's init, until its first unit
        self._copy: Any = None                    # the processor that init ran on
        self.__name__ = feed.graph.hooked_node(feed.stage_id).name
        self._tee_settings = tee_settings         # transformWithStateInPandas: keep the task's batches
        self._tee: Any = None                     # the Tee of this task (recorder/teed_batches.py)

    def __setstate__(self, state: dict) -> None:
        """Unpickled in a Python worker, before PySpark reads the task's input: arm the Tee,
        and start the task's handshake (`TaskFeed.connect_ahead`)."""
        self.__dict__.update(state)
        if self._tee_settings is not None and self.feed.recording is not None:
            from .teed_batches import arm

            self._tee = arm(self._tee_settings)
        self.feed.connect_ahead()

    def _processor(self) -> Any:
        """The user's processor, as the stage's graph carries it."""
        return self.feed.graph.hooked_node(self.feed.stage_id).op._fn

    def init(self, handle: Any) -> None:
        import cloudpickle
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is None:   # the driver's schema pass, not a task
            self._unrecorded = True
            self._processor().init(handle)
            return
        if micro_batch(tc) is None:
            self.feed.feed(("init",), attach=handle)
            return
        self._prepared = _Prepared(handle)
        self._copy = cloudpickle.loads(cloudpickle.dumps(self._processor()))
        self._copy.init(self._prepared)

    def _unit(self, unit: tuple, logged: tuple | None = None) -> list:
        if self._prepared is not None:   # a streaming task's first unit: its init comes first
            prepared, self._prepared, self._copy = self._prepared, None, None
            self.feed.feed(("init",), attach=prepared)
        return self.feed.feed(unit, logged=logged)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator:
        """A key whose rows are one element is one unit (`one_row`), run as Spark calls this (the
        step's outputs are a list); any other key, a unit to start, one per element and one to
        end, run as Spark pulls (`_only` reads Spark's iterator ahead to know). With a Tee, each
        DataFrame is logged as its rows' place in the task's batches."""
        only, rows = _only(rows)
        times = _times(timerValues)
        if rows is None:
            unit = ("one_row", key, times, only)
            return iter(self._unit(unit, self._logged(unit)))
        return self._rows(key, times, rows)

    def _rows(self, key: Any, times: tuple[int, int], rows: Iterator) -> Iterator:
        """A key of several DataFrames: its units, each fed as Spark pulls the outputs before it."""
        yield from self._unit(("rows", key, times))
        for row in rows:
            unit = ("row", row)
            yield from self.feed.feed(unit, logged=self._logged(unit))
        yield from self.feed.feed(("rows_end",))

    def _logged(self, unit: tuple) -> tuple | None:
        """What the log keeps of a unit whose last item is a DataFrame PySpark handed over: the
        unit with the frame's place in the task's batches (`Tee.logged`), or None (the unit,
        frozen as ever)."""
        tee = self._tee
        if tee is None:
            return None
        task = self.feed._task
        if task is not None and task._unit_log is None:   # a task that logs no units keeps no batches
            tee.stop()
            self._tee = None
            return None
        place = tee.logged(unit[-1])
        if place is unit[-1]:
            return None
        head = unit[:-1]   # ("one_row", key, times): a key's values are scalars, unless an array's
        return (*(head if immutable(head) else kept_apart(head, packed_by_pickle=True)), place)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator:
        return iter(self._unit(("timer", key, _times(timerValues), expiredTimerInfo.getExpiryTimeInMs())))

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        self._unit(("initial", key, _times(timerValues), initialState))

    def close(self) -> None:
        if self._unrecorded:
            self._processor().close()
            return
        if self._prepared is not None:   # a micro-batch task with nothing to do
            copy, self._prepared, self._copy = self._copy, None, None
            copy.close()
            return
        self.feed.feed(("close",))
        self.feed.end()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_unrecorded": False, "_prepared": None, "_copy": None, "_tee": None}


class HookedGroupStateFunction:
    """What Spark runs in place of an `applyInPandasWithState` function: each call (one key of
    one micro-batch) becomes units of the call site's task (core/group_state.py), where the
    operator runs the user's function on Spark's own GroupState; the key's DataFrames are
    handed over one by one. Spark runs the keys with data in one Python worker and the
    timed-out keys in another, after it: each is an instance of its own."""

    def __init__(self, feed: TaskFeed):
        self.feed = feed
        self.__name__ = feed.graph.hooked_node(feed.stage_id).name

    def __call__(self, key: Any, chunks: Any, state: Any) -> Iterator:
        """A key whose data is one DataFrame is one unit (`one_chunk`), as a processor's key of
        one element is (`HookedProcessor.handleInputRows`); any other, a unit to start, one per
        DataFrame and one to end."""
        run = int(state.hasTimedOut)
        only, chunks = _only(chunks)
        if chunks is None:
            yield from self.feed.feed(("one_chunk", key, snapshot(state), only), attach=state, run=run)
            return
        yield from self.feed.feed(("key", key, snapshot(state)), attach=state, run=run)
        for chunk in chunks:
            yield from self.feed.feed(("chunk", chunk))
        yield from self.feed.feed(("key_end",))


class _Prepared:
    """Spark's handle for a streaming task whose `init` ran before tt opened the task: the
    state variables made then are handed out again by name (Spark makes no new ones after
    `init`); timers and the rest go to Spark's handle."""

    def __init__(self, handle: Any):
        self._handle = handle
        self._made: dict[str, Any] = {}

    def _variable(self, make: str, name: str, *args: Any) -> Any:
        if name not in self._made:
            self._made[name] = getattr(self._handle, make)(name, *args)
        return self._made[name]

    def getValueState(self, stateName: str, *args: Any) -> Any:
        return self._variable("getValueState", stateName, *args)

    def getListState(self, stateName: str, *args: Any) -> Any:
        return self._variable("getListState", stateName, *args)

    def getMapState(self, stateName: str, *args: Any) -> Any:
        return self._variable("getMapState", stateName, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _only(elements: Iterable) -> tuple[Any, Iterator | None]:
    """`(its element, None)` where `elements` has exactly one, else `(None, every element)`:
    Spark's iterator read at most two ahead."""
    it = iter(elements)
    ahead = list(itertools.islice(it, 2))
    if len(ahead) == 1:
        return ahead[0], None
    return None, itertools.chain(ahead, it)


def _times(tv: Any) -> tuple[int, int]:
    return int(tv.getCurrentProcessingTimeInMs()), int(tv.getCurrentWatermarkInMs())


__all__ = ["HookedCall", "TaskFeed", "GroupedCall", "GroupedIterCall", "hooked_udtf_class", "HookedProcessor", "HookedGroupStateFunction"]

"""PySpark's shared variables an operator uses, as a replay gets them: a broadcast's value as
the driver held it, and an accumulator as a task starts with it.

**Broadcasts.** A job's function reads a broadcast's `.value` (a lookup table sent to every
executor once). An executor loads that value from a file Spark wrote, and PySpark pickles a
broadcast as its id only (`_from_id`), which no replay can load: `tt verify` stopped with
"Broadcast variable 0 not loaded". So where tt pickles an operator on the driver, a broadcast it
holds (as a global, a closure cell or an attribute) is pickled as its id and its value
(`code_pickle`), and unpickles as a `RecordedBroadcast` that hands that value back; a checkpoint
an executor takes names the id alone (`by_id`), served from the value the operator's own pickle
brought. The value is stored once per operator that uses it, in the run's operators table. A
state shows either kind as `<Broadcast>` (core/values.py): it is the job's input, not the
operator's state.

**Accumulators.** A function adds to an accumulator (`WRITTEN.add(n)`: rows a sink wrote); each
task starts from its zero and Spark sums the tasks' on the driver. PySpark unpickles one through
a registry kept per process (`_deserialize_accumulator`), which the worker clears at each task
but a replay does not: every instance, and every replay again, would add to the same one. It is
pickled by tt as a `RecordedAccumulator` (`reduce_spark_accumulator`): from the driver, at its
zero, as a task gets it; from an executor (a checkpoint), with what that task added so far. A
state shows either kind by its id and that value (core/values.py).
"""

from __future__ import annotations

import sys
from typing import Any

from .errors import RunFileError

_RECORDED: dict[int, "RecordedBroadcast"] = {}   # id -> what a replay's operators were given


class RecordedBroadcast:
    """A broadcast variable in a replay: `.value` as the recording's driver held it."""

    __slots__ = ("_id", "_value")

    def __init__(self, bid: int, value: Any):
        self._id, self._value = bid, value

    @property
    def value(self) -> Any:
        return self._value

    def unpersist(self, blocking: bool = False) -> None:
        """Nothing to free: a replay holds the value itself."""

    def destroy(self, blocking: bool = False) -> None:
        """As `unpersist`."""

    def __reduce__(self):
        return recorded, (self._id, self._value)

    def __repr__(self) -> str:
        return f"<Broadcast {self._id} (recorded)>"


def recorded(bid: int, value: Any) -> RecordedBroadcast:
    """Unpickle a broadcast as the driver pickled it (its id and value)."""
    got = _RECORDED.get(bid)
    if got is None or got._value is not value:
        got = _RECORDED[bid] = RecordedBroadcast(bid, value)
    return got


def by_id(bid: int) -> RecordedBroadcast:
    """Unpickle a broadcast an executor pickled (a checkpoint): the value came with its operator."""
    got = _RECORDED.get(bid)
    if got is None:
        raise RunFileError(f"broadcast variable {bid} is used by a checkpoint, but no operator of this run "
                           f"recorded its value: restore this instance by replaying it from its start")
    return got


def is_spark_broadcast_class(t: type) -> bool:
    """PySpark's `Broadcast` (by name: the core does not import PySpark)."""
    return t.__name__ == "Broadcast" and t.__module__ in ("pyspark.core.broadcast", "pyspark.broadcast")


def reduce_spark_broadcast(obj: Any) -> tuple | None:
    """How tt pickles a PySpark broadcast: on the driver, by id and value; in an executor, by id
    (its value lies in a file Spark wrote; PySpark's own pickling refuses there). None where the
    id cannot be told (PySpark pickles it its own way then)."""
    jbroadcast = getattr(obj, "_jbroadcast", None)
    if jbroadcast is not None:
        return recorded, (int(jbroadcast.id()), obj.value)
    registry = getattr(sys.modules.get("pyspark.core.broadcast"), "_broadcastRegistry", None) or {}
    bid = next((b for b, v in registry.items() if v is obj), None)
    return (by_id, (bid,)) if bid is not None else None


class RecordedAccumulator:
    """An accumulator in a replay: what the operator's task added to it, from its zero."""

    __slots__ = ("aid", "_value", "accum_param")

    def __init__(self, aid: int, value: Any, accum_param: Any):
        self.aid, self._value, self.accum_param = aid, value, accum_param

    def add(self, term: Any) -> None:
        self._value = self.accum_param.addInPlace(self._value, term)

    def __iadd__(self, term: Any) -> "RecordedAccumulator":
        self.add(term)
        return self

    @property
    def value(self) -> Any:
        raise RuntimeError("Accumulator.value cannot be accessed inside tasks")   # (as in the task it replays)

    def __reduce__(self):
        return RecordedAccumulator, (self.aid, self._value, self.accum_param)

    def __repr__(self) -> str:
        return f"<Accumulator {self.aid}: {self._value!r} (recorded)>"


def is_spark_accumulator_class(t: type) -> bool:
    """PySpark's `Accumulator` (by name, as `is_spark_broadcast_class`)."""
    return t.__name__ == "Accumulator" and t.__module__ == "pyspark.accumulators"


def reduce_spark_accumulator(obj: Any) -> tuple:
    """How tt pickles a PySpark accumulator: at its zero from the driver (a task starts so),
    with its task's sum from an executor (PySpark marks the ones it unpickled there)."""
    param = obj.accum_param
    value = obj._value if getattr(obj, "_deserialized", False) else param.zero(obj._value)
    return RecordedAccumulator, (obj.aid, value, param)


__all__ = ["RecordedBroadcast", "recorded", "by_id", "is_spark_broadcast_class", "reduce_spark_broadcast",
           "RecordedAccumulator", "is_spark_accumulator_class", "reduce_spark_accumulator"]

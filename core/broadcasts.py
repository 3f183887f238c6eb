"""A PySpark broadcast variable an operator uses, as a replay gets it: its value, recorded.

A job's function reads a broadcast's `.value` (a lookup table sent to every executor once). An
executor loads that value from a file Spark wrote, and PySpark pickles a broadcast as its id
only (`_from_id`), which no replay can load: `tt verify` stopped with "Broadcast variable 0 not
loaded". So where tt pickles an operator on the driver, a broadcast it holds (as a global, a
closure cell or an attribute) is pickled as its id and its value (`code_pickle`), and unpickles
as a `RecordedBroadcast` that hands that value back; a checkpoint an executor takes names the
id alone (`by_id`), served from the value the operator's own pickle brought. The value is
stored once per operator that uses it, in the run's operators table. A state shows either kind
as `<Broadcast>` (core/values.py): it is the job's input, not the operator's state.
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


__all__ = ["RecordedBroadcast", "recorded", "by_id", "is_spark_broadcast_class", "reduce_spark_broadcast"]

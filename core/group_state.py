"""`applyInPandasWithState` as an operator of the one runtime, and its `GroupState`.

PySpark calls the job's function once per key and micro-batch, `func(key, chunks, state)`:
`chunks` a lazy iterator of the key's pandas DataFrames, `state` a `GroupState` holding the
key's value and timeout, which Spark reads back once the function's output is exhausted
(docs/PROCESSORS.md §6). `tt record` hands Spark a stand-in (recorder/hooked_calls.py) that
turns each call into units of the call site's task, one step each:

| unit | what the function is asked to do |
|---|---|
| `("key", key, before)` | start `func(key, chunks, state)`; `before` is the GroupState as Spark built it |
| `("chunk", frame)` | hand it the key's next DataFrame |
| `("key_end",)` | the key's chunks ran out: run it to its end |
| `("one_chunk", key, before, frame)` | a key whose data is one DataFrame: the whole call, one step |

While recording the function gets Spark's own GroupState, so the job runs as without tt.
A replay has no Spark: it gets tt's `GroupState`, built from `before`, which behaves as
PySpark's does. The GroupState after each call is logged (`log_result`), and a replay whose
GroupState ends a call differently stops with a divergence. The state shown is the
function's own (closure, attributes) plus `state` (`{key: value}`) and `timeouts`
(`{key: timestamp}`) of the keys this task has called it for.
"""

from __future__ import annotations

import calendar
import datetime
import json
import time
from typing import Any

from .errors import ReplayDivergence
from .hooked import HookedOperator, outputs
from .operator import CONTEXT, log_result
from .pulled import Pulled
from .state_handle import plain, same, shown

NO_TIMESTAMP = -1
TIMEOUTS = ("NoTimeout", "ProcessingTimeTimeout", "EventTimeTimeout")


def snapshot(state: Any) -> dict:
    """What a GroupState holds (Spark's or tt's): its JSON properties and its value."""
    return {"props": json.loads(state.json()), "value": plain(state.getOption)}


class GroupState:
    """PySpark's `GroupState` (pyspark/sql/streaming/state.py), without PySpark: the same
    properties and methods, the same checks, so a replayed call behaves as the recorded one."""

    NO_TIMESTAMP = NO_TIMESTAMP

    def __init__(self, before: dict):
        p = before["props"]
        self._value = before["value"]
        self._batch_processing_time_ms = p["batchProcessingTimeMs"]
        self._event_time_watermark_ms = p["eventTimeWatermarkMs"]
        self._timeout_conf = p["timeoutConf"]
        self._has_timed_out = p["hasTimedOut"]
        self._watermark_present = p["watermarkPresent"]
        self._defined = p["defined"]
        self._updated = p["updated"]
        self._removed = p["removed"]
        self._timeout_timestamp = self._old_timeout_timestamp = p["timeoutTimestamp"]

    @property
    def exists(self) -> bool:
        return self._defined

    @property
    def get(self) -> tuple:
        if not self._defined:
            raise ValueError("[STATE_NOT_EXISTS] State is either not defined or has already been removed.")
        return tuple(self._value)

    @property
    def getOption(self) -> tuple | None:
        return tuple(self._value) if self._defined else None

    @property
    def hasTimedOut(self) -> bool:
        return self._has_timed_out

    @property
    def oldTimeoutTimestamp(self) -> int:
        return self._old_timeout_timestamp

    def update(self, newValue: tuple) -> None:
        if newValue is None:
            raise TypeError("[CANNOT_BE_NONE] Argument `newValue` cannot be None.")
        self._value = tuple(_python(v) for v in newValue)
        self._defined, self._updated, self._removed = True, True, False

    def remove(self) -> None:
        self._defined, self._updated, self._removed = False, False, True

    def setTimeoutDuration(self, durationMs: int) -> None:
        if isinstance(durationMs, str):
            raise TypeError(f"[NOT_EXPECTED_TYPE] Argument `durationMs` should be int, got {type(durationMs).__name__}.")
        if self._timeout_conf != "ProcessingTimeTimeout":
            raise RuntimeError("[CANNOT_WITHOUT] Cannot set timeout duration without enabling processing time "
                               "timeout in applyInPandasWithState.")
        if durationMs <= 0:
            raise ValueError(f"[VALUE_NOT_POSITIVE] Value for `durationMs` must be positive, got "
                             f"'{type(durationMs).__name__}'.")
        self._timeout_timestamp = durationMs + self._batch_processing_time_ms

    def setTimeoutTimestamp(self, timestampMs: Any) -> None:
        if self._timeout_conf != "EventTimeTimeout":
            raise RuntimeError("[CANNOT_WITHOUT] Cannot set timeout duration without enabling processing time "
                               "timeout in applyInPandasWithState.")
        if isinstance(timestampMs, datetime.datetime):
            timestampMs = _timestamp_us(timestampMs) / 1000
        if timestampMs <= 0:
            raise ValueError(f"[VALUE_NOT_POSITIVE] Value for `timestampMs` must be positive, got "
                             f"'{type(timestampMs).__name__}'.")
        if self._event_time_watermark_ms != NO_TIMESTAMP and timestampMs < self._event_time_watermark_ms:
            raise ValueError(f"[INVALID_TIMEOUT_TIMESTAMP] Timeout timestamp ({timestampMs}) cannot be earlier "
                             f"than the current watermark ({self._event_time_watermark_ms}).")
        self._timeout_timestamp = timestampMs

    def getCurrentWatermarkMs(self) -> int:
        if not self._watermark_present:
            raise RuntimeError("[CANNOT_WITHOUT] Cannot get event time watermark timestamp without setting "
                               "watermark before applyInPandasWithState.")
        return self._event_time_watermark_ms

    def getCurrentProcessingTimeMs(self) -> int:
        return self._batch_processing_time_ms

    def json(self) -> str:
        return json.dumps({
            "optionalValue": None,
            "batchProcessingTimeMs": self._batch_processing_time_ms,
            "eventTimeWatermarkMs": self._event_time_watermark_ms,
            "timeoutConf": self._timeout_conf,
            "hasTimedOut": self._has_timed_out,
            "watermarkPresent": self._watermark_present,
            "defined": self._defined,
            "updated": self._updated,
            "removed": self._removed,
            "timeoutTimestamp": self._timeout_timestamp,
        })

    def __str__(self) -> str:
        return f"GroupState({self.get})" if self.exists else "GroupState(<undefined>)"


#: For row lineage, how each step of a key's call of several units touches its `locals` (the
#: generator's variables): the first step starts them, each DataFrame adds to them, the last reads them.
_CALL_STEPS = {"key": "write", "chunk": "change", "key_end": "read"}


class GroupStateOperator(HookedOperator):
    """An `applyInPandasWithState` function, one unit per step (the table above)."""

    empty_fields = frozenset({"timeouts"})
    _before: dict | None = None   # the GroupState the key's call was handed
    _observer: Any = None         # row lineage's tracked replay (`watch_state_calls`)
    _on_write: Any = None         # `tt verify --statestore` (`watch_store_writes`)

    def __init__(self, fn: Any, kind: str = "applyInPandasWithState", site: str = ""):
        super().__init__(fn, kind, site)
        self._spark_state: Any = None   # recording: Spark's GroupState for the next key
        self._recording = False
        self._key: Any = None
        self._state: Any = None         # the GroupState of the key being called
        self._group: Pulled | None = None
        self._values: dict = {}         # {key: value} after each call of this task
        self._timeouts: dict = {}       # {key: timeout timestamp} where one is set

    def attach(self, spark_state: Any) -> None:
        """Recording: the next key's call gets Spark's own GroupState."""
        self._spark_state = spark_state

    def process(self, unit: tuple, port: int = 0) -> list:
        what = unit[0]
        if self._observer is not None:   # every step of a key's call may read its GroupState
            k = shown(unit[1] if what in ("key", "one_chunk") else self._key)
            self._observer("read", "state", k)
            self._observer("read", "timeouts", k)
            if what in _CALL_STEPS:   # the call's variables carry what earlier DataFrames gave
                self._observer(_CALL_STEPS[what], "locals", k)
        if what == "chunk":
            group = self._group
            return [] if group.finished else group.feed(unit[1])   # a function may stop pulling early
        if what == "key":
            key, fn, state = unit[1], self._fn, self._begin(unit[1], unit[2])
            self._group = Pulled(lambda chunks: fn(key, chunks, state))
            return self._group.start()
        if what == "key_end":
            group, self._group = self._group, None
            out = group.end()
            self._end()
            return out
        if what == "one_chunk":   # no greenlet: nothing is handed over after the call starts
            out = outputs(self._fn(unit[1], iter(unit[3:4]), self._begin(unit[1], unit[2])))
            self._end()
            return out
        raise ValueError(f"not an applyInPandasWithState unit: {what!r}")

    def _begin(self, key: Any, before: dict) -> Any:
        """The GroupState a call for `key` gets: Spark's while recording, else tt's from `before`."""
        self._recording = self._spark_state is not None
        state = self._spark_state if self._recording else GroupState(before)
        self._spark_state, self._key, self._state, self._before = None, key, state, before
        return state

    def _end(self) -> None:
        """The call's output is exhausted: Spark reads its GroupState back now."""
        after = snapshot(self._state)
        self._ended(after)
        if self._observer is not None:
            k, props = shown(self._key), after["props"]
            if props.get("updated") or props.get("removed"):
                self._observer("change", "state", k)
            if props["timeoutTimestamp"] != self._before["props"].get("timeoutTimestamp", NO_TIMESTAMP):
                self._observer("change", "timeouts", k)
        if self._on_write is not None:
            write = store_write(self._before, after)
            if write is not None:
                self._on_write(shown(self._key), write)
        self._key = self._state = self._before = None

    def _ended(self, after: dict) -> None:
        """Log the GroupState a call left (replay: check it) and fold it into the view."""
        logged = log_result(_After(after))
        runner = CONTEXT.runner
        if not self._recording and runner is not None and not same(logged, after):
            raise ReplayDivergence(
                f"{runner.label} input #{runner.count}: the call for key {shown(self._key)!r} left GroupState "
                f"{_described(after)} in replay, but {_described(logged)} when recorded",
                op=runner.name, instance=runner.instance, position=runner.count)
        _folded(self._values, self._timeouts, self._key, after)
        self.__dict__.setdefault("_called", set()).add(shown(self._key))   # (an operator pickled before has none)

    def store_layer(self) -> tuple[dict, dict, set]:
        """What this task's calls left of its partition's state store, for the partition's store
        over its micro-batches (replay/partition_store.py): the values and timeouts of the keys
        they left a state, and every key they were for (one left without a state is gone from the
        store). A call running counts as it stands."""
        values, timeouts, called = self._values, self._timeouts, set(self.__dict__.get("_called", ()))
        if self._state is not None:
            values, timeouts = dict(values), dict(timeouts)
            _folded(values, timeouts, self._key, snapshot(self._state))
            called.add(shown(self._key))
        return values, timeouts, called

    @property
    def failed(self) -> bool:
        return self._group is not None and self._group.failed

    def own_fields(self) -> dict:
        """The function's own state (closure, attributes), beside the GroupStates per key."""
        return super().state()

    def watch_state_calls(self, observer: Any) -> None:
        """Row lineage's tracked replay (replay/state_access.py): `observer(kind, field, key)`
        hears that each step of a key's call read the key's `state` and `timeouts`, and which
        of them the call changed (updated or removed its value; set another timeout)."""
        self._observer = observer

    def watch_store_writes(self, on_write: Any) -> None:
        """`tt verify --statestore` (replay/verify.py): `on_write(key, write)` hears, after each
        call, what Spark writes into its state store for the key (`store_write`)."""
        self._on_write = on_write

    def state(self) -> dict:
        out = super().state()
        values, timeouts, _ = self.store_layer()   # (in a call: the key's GroupState as it is now)
        out["state"] = values
        if timeouts:
            out["timeouts"] = timeouts
        return out

    def __getstate__(self) -> dict:
        if self._group is not None:
            raise TypeError(f"{self._tt_name or self._kind}: a call is running and cannot be saved; "
                            f"tt restores it by replaying its inputs")
        return {**self.__dict__, "_spark_state": None, "_observer": None, "_on_write": None}


class _After:
    """The GroupState a call left, as `log_result` names it (`GroupState.after`)."""

    __module__ = None   # type: ignore[assignment]  callable_name then gives just the qualname

    def __init__(self, after: dict):
        self.__qualname__ = "GroupState.after"
        self._after = after

    def __call__(self) -> dict:
        return self._after


def store_write(before: dict, after: dict) -> tuple | None:
    """What Spark writes into its state store for a key once a call has left the GroupState
    `after` (FlatMapGroupsInPandasWithStateExec, as its change feed shows it): `("delete",)`
    where the call removed the state and set no timeout; `("update", value or None, timeout)`
    where it updated or removed the state or changed the timeout; None, nothing, otherwise."""
    p = after["props"]
    timeout = p["timeoutTimestamp"]
    if p["removed"] and timeout == NO_TIMESTAMP:
        return ("delete",)
    if p["updated"] or p["removed"] or timeout != before["props"].get("timeoutTimestamp", NO_TIMESTAMP):
        return ("update", shown(after["value"]) if p["defined"] else None, timeout)
    return None


def _folded(values: dict, timeouts: dict, key: Any, snap: dict) -> None:
    """Put a key's GroupState into the view: its value while defined, its timeout while set."""
    k, props = shown(key), snap["props"]
    values.pop(k, None)
    timeouts.pop(k, None)
    if props["defined"]:
        values[k] = shown(snap["value"])
        if props["timeoutTimestamp"] != NO_TIMESTAMP:
            timeouts[k] = props["timeoutTimestamp"]


def _described(snap: dict) -> str:
    p = snap["props"]
    value = shown(snap["value"]) if p["defined"] else "<undefined>"
    timeout = p["timeoutTimestamp"]
    return f"{value!r}" + (f" (timeout {timeout})" if timeout != NO_TIMESTAMP else "")


def _python(v: Any) -> Any:
    """What PySpark's `GroupState.update` makes of a value: numpy and pandas as Python's."""
    if type(v).__module__ == "numpy" and type(v).__name__ != "ndarray" and hasattr(v, "tolist"):
        return v.tolist()
    if hasattr(v, "to_pytimedelta"):
        return v.to_pytimedelta()
    if hasattr(v, "to_pydatetime"):
        return v.to_pydatetime()
    return v


def _timestamp_us(dt: datetime.datetime) -> int:
    """PySpark's `TimestampType().toInternal`: a naive datetime is local time."""
    seconds = calendar.timegm(dt.utctimetuple()) if dt.tzinfo else time.mktime(dt.timetuple())
    return int(seconds) * 1000000 + dt.microsecond


__all__ = ["GroupState", "GroupStateOperator", "snapshot", "store_write", "TIMEOUTS"]

"""The state handle a hooked `StatefulProcessor` is given, in the executor and in replay alike.

Spark keeps a transformWithState processor's state in its state store, behind a
`StatefulProcessorHandle`: `ValueState`, `ListState`, `MapState` variables and timers,
each call made under the grouping key PySpark set before calling the processor
(docs/PROCESSORS.md §3). tt hands the processor's `init` a `Handle` instead, whose
variables forward every call to Spark's own while recording and log it, with its key,
arguments and answer, as a logged result (`log_result`, the runtime's record of
non-deterministic calls). In replay there is no Spark: each call is answered from the
log, and its key and arguments are checked against the recorded ones, so a replay that
calls the store differently stops with a divergence instead of going on silently.

Every call also updates a `StoreView`, the state as the processor's calls showed it:
`{variable: {key: value}}` and `{key: [timers]}`. That view is what the debugger shows and
what conditions read (`FraudDetector.blacklist['Bob']`); it is built by the same code from
the same answers in both places, so the recorded and the replayed states compare equal.
"""

from __future__ import annotations

from typing import Any

from .errors import ReplayDivergence
from .operator import CONTEXT, log_result
from .values import immutable

class TimerValues:
    """What PySpark's `TimerValues` tells a processor (the same two methods)."""

    def __init__(self, currentProcessingTimeInMs: int = -1, currentWatermarkInMs: int = -1):
        self._pt, self._wm = currentProcessingTimeInMs, currentWatermarkInMs

    def getCurrentProcessingTimeInMs(self) -> int:
        return self._pt

    def getCurrentWatermarkInMs(self) -> int:
        return self._wm

    def __repr__(self) -> str:
        return f"TimerValues(processing={self._pt}, watermark={self._wm})"


class ExpiredTimerInfo:
    """What PySpark's `ExpiredTimerInfo` tells `handleExpiredTimer`."""

    def __init__(self, expiryTimeInMs: int = -1):
        self._expiry = expiryTimeInMs

    def getExpiryTimeInMs(self) -> int:
        return self._expiry

    def __repr__(self) -> str:
        return f"ExpiredTimerInfo({self._expiry})"


_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})


def plain(x: Any) -> Any:
    """A key or value as Python values (numpy scalars and Rows arrive from PySpark). Called
    on every state call's key, arguments and answer: the common cases come first."""
    t = type(x)
    if t in _SCALARS:
        return x
    if t is tuple and set(map(type, x)) <= _SCALARS:   # (no call per item: a key, most answers)
        return x
    if isinstance(x, tuple):   # a Row is a tuple
        return tuple([v if type(v) in _SCALARS else plain(v) for v in x])
    if isinstance(x, list):
        return [v if type(v) in _SCALARS else plain(v) for v in x]
    if t.__module__ == "numpy":
        item = getattr(x, "item", None)
        if callable(item):
            return item()
    return x


def shown(x: Any) -> Any:
    """A one-column key or value is shown as its column: `'Bob'`, not `('Bob',)`."""
    return _one(plain(x))


def _one(x: Any) -> Any:
    """`shown` of what is plain already."""
    return x[0] if type(x) is tuple and len(x) == 1 else x


class StoreView:
    """The processor's state store as its calls have shown it, per variable and key.

    What the calls showed may be a key's whole value, or a part of it: the elements appended
    to a list, some entries of a map. The view notes which (`whole`, and the entries of a map
    known absent, `removed`), so that a streaming task's view can be laid over what earlier
    micro-batches showed of the same partition (replay/partition_store.py)."""

    #: the calls that answer for a key's whole value (and `exists()` false: it has none)
    WHOLE = {"value": frozenset({"get", "update", "clear"}), "list": frozenset({"get", "put", "clear"}),
             "map": frozenset({"iterator", "clear"})}

    def __init__(self):
        self.kinds: dict[str, str] = {}          # variable -> value | list | map
        self.vars: dict[str, dict] = {}          # variable -> {key: value, list or map}
        self.timers: dict[Any, list[int]] = {}   # key -> registered expiry times, sorted
        self.whole: set[tuple[str, Any]] = set()           # (variable, key) whose whole value the calls showed
        self.removed: dict[tuple[str, Any], set] = {}      # ... of a map known in part: entries known absent
        self.dropped: set[str] = set()                     # variables deleted (`deleteIfExists`) for every key
        self.timers_whole: set = set()                     # keys whose timers `listTimers` listed
        self.timers_gone: dict[Any, set[int]] = {}         # ... of the others: timers deleted (or fired)

    def __setstate__(self, state: dict) -> None:
        self.__init__()   # (a view pickled by a tt that noted less: what it noted, the rest empty)
        self.__dict__.update(state)

    def declare(self, name: str, kind: str) -> None:
        self.kinds[name] = kind
        self.vars.setdefault(name, {})

    def drop(self, name: str) -> None:
        self.kinds.pop(name, None)
        self.vars.pop(name, None)
        self.dropped.add(name)
        self.whole = {w for w in self.whole if w[0] != name}
        self.removed = {w: r for w, r in self.removed.items() if w[0] != name}

    def saw(self, name: str, method: str, k: Any, args: tuple, answer: Any) -> None:
        """Fold one call and its answer into the view: `k` is the key as shown, `args` and
        `answer` are plain (`plain`)."""
        if name == "timers":
            self._timer(method, k, args, answer)
            return
        kind, per_key = self.kinds.get(name), self.vars.get(name)
        if per_key is None:
            per_key = self.vars[name] = {}
        if method in self.WHOLE.get(kind, ()) or (method == "exists" and answer is False):
            self.whole.add((name, k))
            if kind == "map":
                self.removed.pop((name, k), None)
        if method == "clear" or (method == "exists" and answer is False):
            per_key.pop(k, None)
        elif kind == "value":
            if method == "update":
                per_key[k] = _one(args[0])
            elif method == "get":
                if answer is None:
                    per_key.pop(k, None)
                else:
                    per_key[k] = _one(answer)
        elif kind == "list":
            if method in ("get", "put"):
                items = [_one(v) for v in (answer if method == "get" else args[0])]
                if items:
                    per_key[k] = items
                else:
                    per_key.pop(k, None)
            elif method in ("appendValue", "appendList"):
                new = [args[0]] if method == "appendValue" else list(args[0])
                per_key.setdefault(k, []).extend(_one(v) for v in new)
        elif kind == "map":
            m = per_key.get(k, {})
            if method == "updateValue":
                m[_one(args[0])] = _one(args[1])
                if (name, k) in self.removed:
                    self.removed[(name, k)].discard(_one(args[0]))
            elif method == "getValue" and answer is not None:
                m[_one(args[0])] = _one(answer)
            elif method in ("getValue", "containsKey", "removeKey") and not answer:   # absent: None, False
                m.pop(_one(args[0]), None)
                if (name, k) not in self.whole:
                    self.removed.setdefault((name, k), set()).add(_one(args[0]))
            elif method == "iterator":
                m = {_one(uk): _one(v) for uk, v in answer}
            if m:
                per_key[k] = m
            else:
                per_key.pop(k, None)

    def fired(self, key: Any, expiry: int) -> None:
        """PySpark deletes a timer itself once `handleExpiredTimer` has run for it."""
        self._timer("deleteTimer", shown(key), (expiry,), None)

    def _timer(self, method: str, k: Any, args: tuple, answer: Any) -> None:
        have = self.timers.get(k, [])
        if method == "registerTimer":
            have = sorted(set(have) | {int(args[0])})
            if k in self.timers_gone:
                self.timers_gone[k].discard(int(args[0]))
        elif method == "deleteTimer":
            have = [t for t in have if t != int(args[0])]
            if k not in self.timers_whole:
                self.timers_gone.setdefault(k, set()).add(int(args[0]))
        elif method == "listTimers":
            have = sorted(int(t) for t in answer)
            self.timers_whole.add(k)
            self.timers_gone.pop(k, None)
        if have:
            self.timers[k] = have
        else:
            self.timers.pop(k, None)

    def state(self) -> dict:
        """`{variable: {key: value}}`, and `timers` when any is set."""
        out = {name: dict(per_key) for name, per_key in self.vars.items()}
        if self.timers:
            out["timers"] = {k: list(v) for k, v in self.timers.items()}
        return out


class _Call:
    """A state call in replay, as `log_result` names it (`blacklist.updateValue`): the log
    answers it; called, it has no Spark to ask."""

    __module__ = None   # type: ignore[assignment]  callable_name then gives just the qualname

    def __init__(self, qualname: str):
        self.__qualname__ = qualname

    def __call__(self) -> Any:
        return _no_spark()


#: How a state call touches its variable's value under the current key, for row lineage
#: (replay/state_access.py): "read" it, "write" it anew, "change" it (write what it read:
#: an append, one map entry), or "delete" it. Calls not listed touch no key's value.
ACCESS = {"get": "read", "exists": "read", "getValue": "read", "containsKey": "read", "iterator": "read",
          "keys": "read", "values": "read", "listTimers": "read",
          "update": "write", "put": "write",
          "appendValue": "change", "appendList": "change", "updateValue": "change", "removeKey": "change",
          "registerTimer": "change", "deleteTimer": "change",
          "clear": "delete"}


class Handle:
    """What the processor's `init` gets: Spark's handle while recording (`backend`), nothing
    in replay. `key` is the grouping key the operator is running the processor under.
    `observer`: told `(ACCESS kind, variable, key as shown)` after every call that touches a
    key's value (lineage's tracked replay sets it)."""

    observer: Any = None
    _key_frozen = False   # whether nothing can change the plain key (a handle saved before it was kept)

    def __init__(self, view: StoreView, backend: Any = None):
        self.view = view
        self.backend = backend
        self.key = None

    @property
    def key(self) -> Any:
        return self._key

    @key.setter
    def key(self, key: Any) -> None:
        """The key the processor runs under from now on (plain, shown and known immutable or
        not once, not per call)."""
        self._key, self._plain_key = key, plain(key)
        self._shown_key = _one(self._plain_key)
        self._key_frozen = immutable(self._plain_key)

    @property
    def shown_key(self) -> Any:
        """The key as the state view shows it (`shown`): how lineage names its slots."""
        return self._shown_key

    def call(self, var: str, method: str, real: Any, args: tuple, as_list: bool = False) -> Any:
        """Run, log (or, in replay, take from the log) and check one call."""
        key, plain_args = self._plain_key, plain(args) if args else args   # (a get takes no argument)
        runner = CONTEXT.runner
        if self.backend is not None:   # Spark answers; logged as `log_result` would, without its round
            answer = real(*args)
            if as_list and answer is not None:
                answer = list(answer)   # an iterator over Spark's socket
            if type(answer) not in _SCALARS:   # (None: a key's first get)
                answer = plain(answer)
            if runner is not None:   # logged as it is where nothing can change it (no copy to check for)
                runner.log_value(f"{var}.{method}", (key, plain_args, answer),
                                 self._key_frozen and (not plain_args or immutable(plain_args))
                                 and (type(answer) in _SCALARS or immutable(answer)))
        else:
            logged_key, logged_args, answer = log_result(_Call(f"{var}.{method}"))
            if runner is not None and not same((logged_key, logged_args), (key, plain_args)):
                raise ReplayDivergence(
                    f"{runner.label} input #{runner.count}: {var}.{method}{_args(args)} under key {shown(key)!r} "
                    f"in replay, but {var}.{method}{_args(logged_args)} under key {shown(logged_key)!r} when "
                    f"recorded", op=runner.name, instance=runner.instance, position=runner.count)
        self.view.saw(var, method, self._shown_key, plain_args, answer)
        if self.observer is not None and method in ACCESS:
            self.observer(ACCESS[method], var, self._shown_key)
        return iter(answer) if as_list and answer is not None else answer

    def _variable(self, cls: type, kind: str, make: str, name: str, *schema: Any) -> Any:
        real = getattr(self.backend, make) if self.backend is not None else None
        var_backend = real(name, *schema) if real is not None else None
        logged = (name, *[_schema_text(s) for s in schema[:-1]], schema[-1])
        self.call(name, make, _nothing, logged)   # logged for the check in replay; Spark was asked above
        self.view.declare(name, kind)
        return cls(self, name, var_backend)

    # --- StatefulProcessorHandle's methods ----------------------------------------------------

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> "ValueState":
        return self._variable(ValueState, "value", "getValueState", stateName, schema, ttlDurationMs)

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None) -> "ListState":
        return self._variable(ListState, "list", "getListState", stateName, schema, ttlDurationMs)

    def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any,
                    ttlDurationMs: int | None = None) -> "MapState":
        return self._variable(MapState, "map", "getMapState", stateName, userKeySchema, valueSchema, ttlDurationMs)

    def registerTimer(self, expiryTimestampMs: int) -> None:
        self.call("timers", "registerTimer", getattr(self.backend, "registerTimer", None), (expiryTimestampMs,))

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        self.call("timers", "deleteTimer", getattr(self.backend, "deleteTimer", None), (expiryTimestampMs,))

    def listTimers(self):
        return self.call("timers", "listTimers", getattr(self.backend, "listTimers", None), (), as_list=True)

    def deleteIfExists(self, stateName: str) -> None:
        self.call(stateName, "deleteIfExists", getattr(self.backend, "deleteIfExists", None), (stateName,))
        self.view.drop(stateName)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "backend": None, "observer": None}   # Spark's handle stays in its task

    def __setstate__(self, state: dict) -> None:
        old_key = state.pop("key", None)   # (saved by a tt that kept the key as it came)
        self.__dict__.update(state)
        if "_key" not in state:
            self.key = old_key


class _Variable:
    """A state variable handed to the processor: every method is one logged call."""

    def __init__(self, handle: Handle, name: str, backend: Any):
        self._handle, self._name, self._backend = handle, name, backend

    def _call(self, method: str, *args: Any, as_list: bool = False) -> Any:
        real = getattr(self._backend, method) if self._backend is not None else None
        return self._handle.call(self._name, method, real, args, as_list)

    def exists(self) -> bool:
        return self._call("exists")

    def clear(self) -> None:
        self._call("clear")

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_backend": None}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name}>"


class ValueState(_Variable):
    def get(self):
        return self._call("get")

    def update(self, newValue):
        self._call("update", newValue)


class ListState(_Variable):
    def get(self):
        return self._call("get", as_list=True)

    def put(self, newState):
        self._call("put", list(newState))

    def appendValue(self, newState):
        self._call("appendValue", newState)

    def appendList(self, newState):
        self._call("appendList", list(newState))


class MapState(_Variable):
    def getValue(self, key):
        return self._call("getValue", key)

    def containsKey(self, key) -> bool:
        return self._call("containsKey", key)

    def updateValue(self, key, value):
        self._call("updateValue", key, value)

    def iterator(self):
        return self._call("iterator", as_list=True)

    def keys(self):
        return self._call("keys", as_list=True)

    def values(self):
        return self._call("values", as_list=True)

    def removeKey(self, key):
        self._call("removeKey", key)


STATE_VARIABLES = (_Variable, Handle)


def _nothing(*args: Any) -> None:
    return None


def _no_spark(*args: Any) -> Any:
    raise RuntimeError("a state call outside a recording or a replay has no Spark handle to go to")


def _schema_text(schema: Any) -> Any:
    """A schema as logged: a DDL string as given, a StructType as its JSON (no JVM needed)."""
    to_json = getattr(schema, "json", None)
    return to_json() if callable(to_json) else schema


def same(a: Any, b: Any) -> bool:
    """Equal, or equal as printed (NaN, numpy arrays)."""
    try:
        if a == b:
            return True
    except Exception:  # noqa: BLE001  (numpy arrays and the like refuse ==)
        pass
    return repr(a) == repr(b)


def _args(args: tuple) -> str:
    return "(" + ", ".join(repr(shown(a)) for a in args) + ")"


__all__ = ["ACCESS", "Handle", "StoreView", "TimerValues", "ExpiredTimerInfo", "ValueState", "ListState", "MapState",
           "STATE_VARIABLES", "plain", "same", "shown"]

"""A transformWithState `StatefulProcessor` as an operator of the one runtime.

`tt record` hands Spark a stand-in for the processor a job passes to
`transformWithStateInPandas` or `transformWithState` (recorder/hooked_calls.py). Each call
Spark makes on the stand-in becomes one or more *units*, each one step of this operator:

| unit | what the processor is asked to do |
|---|---|
| `("init",)` | `init(handle)`: once per task, before its first key |
| `("one_row", key, (processing, watermark), element)` | `handleInputRows(key, rows, timerValues)` for a key whose rows are one element, run whole |
| `("rows", key, (processing, watermark))` | start `handleInputRows(key, rows, timerValues)` for a key of more elements |
| `("row", element)` | hand it the key's next element: a `Row`, or a pandas chunk of rows |
| `("rows_end",)` | the key's rows ran out: run it to its end |
| `("timer", key, (processing, watermark), expiry)` | `handleExpiredTimer` for one fired timer |
| `("initial", key, (processing, watermark), frame)` | `handleInitialState` |
| `("close",)` | `close()`: the task's end |

`handleInputRows` pulls its rows and yields as it likes, so it runs in a `Pulled` (as an
iterator function does): the outputs it yields after pulling an element are that element's.
A key whose rows are one element (a pandas chunk holds up to 10,000 rows, so most keys of
`transformWithStateInPandas`) is one step: one unit, run without a greenlet. With three
units a key, tt's own frames took 7-9 % of the keyed bench's Python workers' GIL samples;
with one, 5.8 %.
The handle its `init` gets is tt's (core/state_handle.py): every state call is logged while
recording and answered from the log in replay, so a replay needs neither Spark nor its
store. The state shown is the processor's own attributes and its state variables per key,
as its calls showed them.
"""

from __future__ import annotations

from typing import Any

from . import values
from .hooked import HookedOperator, outputs
from .pulled import Pulled
from .state_handle import STATE_VARIABLES, ExpiredTimerInfo, Handle, StoreView, TimerValues, shown
from .written_globals import shared_class_attributes

#: For row lineage, how each step of a key's `handleInputRows` of several units touches its
#: `locals` (the generator's variables, which carry what earlier elements gave to later outputs):
#: the first step starts them, each element adds to them, the last reads them.
_CALL_STEPS = {"rows": "write", "row": "change", "rows_end": "read"}


class ProcessorOperator(HookedOperator):
    """A StatefulProcessor, one unit per step (the table above)."""

    empty_fields = frozenset({"timers"})

    def __init__(self, processor: Any, kind: str = "transformWithState", site: str = ""):
        super().__init__(processor, kind, site)
        self._store = StoreView()
        self._handle = Handle(self._store)
        self._group: Pulled | None = None   # the key whose rows are being handed over
        self._initialized = False

    def attach(self, spark_handle: Any) -> None:
        """Recording: the state calls go to Spark's handle for this task."""
        self._handle.backend = spark_handle

    def process(self, unit: tuple, port: int = 0) -> list:
        what, p = unit[0], self._fn
        observer = self._handle.observer
        if observer is not None and what in _CALL_STEPS:
            observer(_CALL_STEPS[what], "locals", shown(unit[1]) if what == "rows" else self._handle.shown_key)
        if what == "one_row":   # (most keys of a batch query: one DataFrame each; `_keyed`'s lines)
            self._handle.key = key = unit[1]
            return outputs(p.handleInputRows(key, iter(unit[3:4]), TimerValues(*unit[2])))
        if what == "row":
            group = self._group
            return [] if group.finished else group.feed(unit[1])   # it may stop pulling early
        if what == "rows":
            key, tv = self._keyed(unit)
            self._group = Pulled(lambda rows: p.handleInputRows(key, rows, tv))
            return self._group.start()
        if what == "rows_end":
            group, self._group = self._group, None
            return group.end()
        if what == "timer":
            (key, tv), expiry = self._keyed(unit), unit[3]
            if observer is not None:   # the call is made because of the key's timers: it read them
                observer("read", "timers", self._handle.shown_key)
            out = outputs(p.handleExpiredTimer(key=key, timerValues=tv, expiredTimerInfo=ExpiredTimerInfo(expiry)))
            self._store.fired(key, expiry)
            if observer is not None:
                observer("change", "timers", self._handle.shown_key)
            return out
        if what == "initial":
            key, tv = self._keyed(unit)
            p.handleInitialState(key, unit[3], tv)
            return []
        if what == "init":
            self._handle.key = None
            self._initialized = True
            p.init(self._handle)
            return []
        if what == "close":
            self._handle.key = None
            p.close()
            return []
        raise ValueError(f"not a processor unit: {what!r}")

    def _keyed(self, unit: tuple) -> tuple[Any, TimerValues]:
        """A unit `(what, key, (processing, watermark), ...)`: its key, now the handle's, and its times."""
        self._handle.key = unit[1]
        return unit[1], TimerValues(*unit[2])

    @property
    def view(self) -> StoreView:
        """The state store as this task's calls showed it (what `state()` shows per variable)."""
        return self._store

    @property
    def fields_known(self) -> bool:
        """Its state variables are named in `init`: before it, any field may still come."""
        return self._initialized

    @property
    def failed(self) -> bool:
        """`handleInputRows` raised: the key's generator can take nothing more."""
        return self._group is not None and self._group.failed

    def state(self) -> dict:
        out = self._with_globals(self.own_fields(), self._fn)
        for name, per_key in self._store.state().items():
            out[name if name not in out else f"{name} (state)"] = per_key
        return out

    def own_fields(self) -> dict:
        """The processor object's public attributes but its state variables: the state kept in
        Python, beside what the handle keeps per key."""
        attrs = getattr(self._fn, "__dict__", None)
        out = {k: v for k, v in values.public_attrs(attrs).items()
               if not isinstance(v, STATE_VARIABLES)} if isinstance(attrs, dict) else {}
        if self.state_version >= 3:   # (its class's attributes that its methods write into: core/hooked.py)
            out.update(shared_class_attributes(self._fn))
        return out

    def watch_state_calls(self, observer: Any) -> None:
        """Row lineage's tracked replay (replay/state_access.py): `observer(kind, variable, key)`
        hears which key's value each state call read or wrote (`state_handle.ACCESS`), and each
        fired timer; None stops it."""
        self._handle.observer = observer

    def __getstate__(self) -> dict:
        if self._group is not None:
            raise TypeError(f"{self._tt_name or self._kind}: handleInputRows is running and cannot be "
                            f"saved; tt restores it by replaying its inputs")
        return self.__dict__


__all__ = ["ProcessorOperator"]

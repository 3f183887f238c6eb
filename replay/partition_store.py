"""The state store of one partition of a streaming StatefulProcessor (or `applyInPandasWithState`
function), over its micro-batches.

In a Structured Streaming query each micro-batch's task is an instance of its own
(docs/PROCESSORS.md), and its state view (`StoreView`) holds what that task's calls showed:
the keys of this micro-batch. Spark's store for the partition holds every key its earlier
micro-batches left there too. `partition_store` lays each task's view over the ones before it
in the same partition, oldest first, so the debugger can show the partition's store as the
calls of every micro-batch so far showed it: a key's value from the last micro-batch that
showed it whole, with what later ones appended to a list or wrote into some entries of a map,
and no key that a call cleared or found empty. An `applyInPandasWithState` call leaves its key's
whole GroupState, so there each task's calls replace what the tasks before left of their keys
(`group_state_store`).

It reads what replay shows and changes nothing: the recorded and replayed states stay each
task's own view, which `tt verify` compares. Where a micro-batch only showed part of a value
that no earlier one showed whole (an append to a list never read), the part is what is
shown. A TTL'd variable may have expired in Spark between two micro-batches without a call
seeing it (docs/PROCESSORS.md: TTL is not shown as such).
"""

from __future__ import annotations

from typing import Any, Iterable

from ..core.state_handle import StoreView
from .state_paths import MISSING

FIELD = "(partition store)"   # the field the debugger shows it under (no state variable or attribute is so named)


def partition_store(views: Iterable[StoreView]) -> dict:
    """`{variable: {key: value}}`, and `timers` when any is set, of the views laid one over the
    other, oldest first."""
    store: dict[str, dict] = {}
    timers: dict[Any, set[int]] = {}
    for view in views:
        whole, removed = view.whole, view.removed
        for name in view.dropped:
            store[name] = {}
        for name, per_key in view.vars.items():
            have, kind = store.setdefault(name, {}), view.kinds.get(name)
            for k in {*per_key, *(k for n, k in whole if n == name), *(k for n, k in removed if n == name)}:
                if (name, k) in whole:
                    if k in per_key:
                        have[k] = per_key[k]
                    else:
                        have.pop(k, None)
                elif kind == "list":
                    have[k] = [*have.get(k, []), *per_key.get(k, [])]
                elif kind == "map":
                    entries = {**have.get(k, {}), **per_key.get(k, {})}
                    for gone in removed.get((name, k), ()):
                        entries.pop(gone, None)
                    if entries:
                        have[k] = entries
                    else:
                        have.pop(k, None)
                elif k in per_key:
                    have[k] = per_key[k]
        _lay_timers(view, timers)
    shown = {k: sorted(t) for k, t in timers.items() if t}
    return {**store, "timers": shown} if shown else store


def group_state_store(layers: Iterable[tuple[dict, dict, set]]) -> dict:
    """`{"state": {key: value}}`, and `timeouts` when any is set, of an `applyInPandasWithState`
    function's tasks laid one over the other, oldest first: each task's `store_layer()`, the
    keys it called replaced by what their calls left."""
    store: dict = {}
    timeouts: dict = {}
    for values, timed, called in layers:
        for k in called:
            store.pop(k, None)
            timeouts.pop(k, None)
        store.update(values)
        timeouts.update(timed)
    return {"state": store, "timeouts": timeouts} if timeouts else {"state": store}


def store_changes(changed: dict, before: dict, after: dict) -> dict:
    """A streaming task's step changes (`{field path: [old, new]}`, encoded), its store's fields
    told by the partition's store before and after the step (`{field: {key: encoded value}}`) rather than by the
    task's own view, which starts empty each micro-batch: a call starts from the value its key
    held in the store (`state.u9: (absent) → …` read as if the state had been lost), and a key
    a call removed that the task's view never held was no change at all (a timed-out session).
    A field's changed keys are listed, with the old and new value of each."""
    fields = {*before, *after}
    out = {path: change for path, change in changed.items() if path.partition(".")[0] not in fields}
    for name in fields:
        was, now = before.get(name, {}), after.get(name, {})
        for k in [*was, *(k for k in now if k not in was)]:
            old, new = was.get(k, MISSING), now.get(k, MISSING)
            if old != new:
                out[f"{name}.{k}"] = [old, new]
    return out


def _lay_timers(view: StoreView, timers: dict[Any, set[int]]) -> None:
    listed, gone = view.timers_whole, view.timers_gone
    for k in {*view.timers, *listed, *gone}:
        if k in listed:
            timers[k] = set(view.timers.get(k, ()))
        else:
            timers[k] = (timers.get(k, set()) - gone.get(k, set())) | set(view.timers.get(k, ()))


__all__ = ["FIELD", "partition_store", "group_state_store", "store_changes"]

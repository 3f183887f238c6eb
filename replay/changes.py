"""What an action changed in the operators' states, changed keys only.

A step over one tuple may touch one key of a state with millions; encoding the
whole state after every step would cost more than the step. So before an action
each instance it will move remembers its state's fields (cheaply: immutable
values are kept by reference), and after it `state_deltas.delta` lists what
changed, shown as {field path: [old, new]}. A dict field that changed as a whole (one
whose values are not scalars, such as a generator's `locals`, which holds its batch) is
shown by the keys that changed too: `locals.total: 1202.0 → 2501.0`.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..core import state_deltas, values
from .engine import Engine, Key
from .state_paths import MISSING

LISTED_PER_FIELD = 50   # changed keys of one dict field listed; the rest are counted


class ChangeTracker:
    """Per instance, the fields of its state at a position, to diff the next action against."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._memos: dict[Key, tuple[int, dict]] = {}   # key -> (position, remembered fields)

    def remember(self, key: Key) -> None:
        """`key` is about to move: remember its state here, unless already remembered here."""
        inst = self.engine.instances[key]
        memo = self._memos.get(key)
        if memo is None or memo[0] != inst.count:
            state = inst.runner.op.state()
            self._memos[key] = (inst.count, state_deltas.remember(state) if type(state) is dict else {})

    def changed(self, before: dict[Key, int], label, diff: bool = True) -> dict[str, dict]:
        """{instance label: {field path: [old, new]}} for every instance that moved since
        `before`; `diff=False` only forgets the moved instances' memos (a jump lists nothing)."""
        out: dict[str, dict] = {}
        for key, count in self.engine.position.items():
            if before.get(key) == count:
                continue
            memo = self._memos.pop(key, None)
            if not diff:
                continue
            state = self.engine.instances[key].runner.op.state()
            if memo is not None and memo[0] == before[key] and type(state) is dict:
                change, _, fields = state_deltas.delta(memo[1], state)
                self._memos[key] = (count, fields)
                shown = _display(memo[1], change) if change else {}
            else:
                shown = {"…": ["(state changed; open it to see it)", None]}
            if shown:
                out[label(key)] = shown
        return out

    def clear(self) -> None:
        self._memos.clear()


def _display(prev: dict, change: dict) -> dict:
    """A `state_deltas.delta` as {field path: [old, new]} (JSON-encoded), changed keys only."""
    out: dict = {}

    def old_field(name: str) -> Any:
        v = prev.get(name, MISSING)
        if v is MISSING:
            return MISSING
        return orjson.loads(v) if isinstance(v, bytes) else v

    for name, new in change["set"].items():
        old = old_field(name)
        keys = _changed_keys(old, new)
        if keys is None:
            out[name] = [old, new]
            continue
        for x in keys[:LISTED_PER_FIELD]:   # (a generator's locals: `total`, not the whole frame cut short)
            out[f"{name}.{x}"] = [old.get(x, MISSING), new.get(x, MISSING)]
        if len(keys) > LISTED_PER_FIELD:
            out[f"{name}.…"] = [f"{len(keys) - LISTED_PER_FIELD} more keys changed", None]
    for name, (changed, deleted) in change["dict"].items():
        before = prev.get(name) or {}
        keys = list(changed) + list(deleted)
        for x in keys[:LISTED_PER_FIELD]:
            out[f"{name}.{x}"] = [values.encode(before[x]) if x in before else MISSING,
                                  values.encode(changed[x]) if x in changed else MISSING]
        if len(keys) > LISTED_PER_FIELD:
            out[f"{name}.…"] = [f"{len(keys) - LISTED_PER_FIELD} more keys changed", None]
    for name in change["del"]:
        out[name] = [old_field(name), MISSING]
    return out


def _changed_keys(old: Any, new: Any) -> list | None:
    """The keys whose values differ where a field stored whole (a dict with other than scalar
    values: a generator's `locals`, holding its batch) is a plain dict before and after; None
    where it is not (a field that appears is shown whole: `blacklist: (absent) → {Bob: …}`), or
    where no key differs (its order changed)."""
    def plain(v: Any) -> bool:   # (an encoded dict of str keys; "$"-keys mark tt's own encodings)
        return type(v) is dict and not any(k[:1] == "$" for k in v)

    if not (plain(old) and plain(new)):
        return None
    keys = [k for k in {**old, **new} if old.get(k, MISSING) != new.get(k, MISSING)]
    return keys or None

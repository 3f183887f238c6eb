"""Interaction states, stored as deltas against the previous snapshot of the same instance.

Every interaction stores the state of every instance in G(θ). A big state (a map
over every customer) mostly stays the same between two interactions, so after a
full snapshot an instance's next snapshots carry only what changed: for a dict
field with str keys and immutable values, the changed and deleted keys; other
fields whole when they changed. The stored JSON of a delta is
`{"$delta": {"base": <hash>, "set": {...}, "dict": {field: [changed, deleted]}, "del": [...]}}`
(a user value with a single `$`-key is always escaped by `values.encode`, so a delta
cannot be mistaken for a state). `apply` rebuilds the JSON state from its base.
"""

from __future__ import annotations

import hashlib
import math
import operator
from itertools import compress, islice
from typing import Any

import orjson

from . import values

_IMMUTABLE = frozenset({int, float, str, bool, type(None)})
_INT64 = 2**63


_NUMBERS = frozenset({int, float, bool})


def _diffable(v: Any, whole: bool = True) -> bool:
    """A dict that is its own JSON, so key-level changes apply to the stored JSON as they are:
    str keys, scalar values, finite floats, 64-bit ints (all checked at C speed). With
    `whole=False`, `v` is only some entries of such a dict (its size does not matter)."""
    if type(v) is not dict:
        return False
    if not v:
        return True  # empty now; its keys will be str or it will stop being diffable
    if set(map(type, v)) != {str}:
        return False
    if whole and len(v) == 1 and next(iter(v))[:1] == "$":
        return False  # a one-key dict like {"$x": 1} is stored escaped
    types = set(map(type, v.values()))
    if not types <= _IMMUTABLE:
        return False
    numbers = types & {int, float}
    if numbers:
        if not types <= _NUMBERS:
            return False  # numbers mixed with strings: not worth checking value by value
        vals = v.values()
        if float in types and not math.isfinite(sum(vals)):
            return False
        if int in types and not (-_INT64 <= min(vals) and max(vals) < _INT64):
            return False
    return True


class StateEncoder:
    """Encodes successive states of each instance: full, then deltas, then full again."""

    def __init__(self, full_every: int = 32):
        self.full_every = full_every
        self.memo: dict[Any, dict] = {}

    def encode(self, key: Any, state: dict) -> tuple[str, bytes, int]:
        """(hash, JSON bytes to store, size of the full state as JSON) for instance `key`.

        Bytes are empty when nothing changed since the instance's last snapshot."""
        memo = self.memo.get(key)
        if memo is not None and memo["chain"] < self.full_every and type(state) is dict:
            change, size, fields = delta(memo["fields"], state)
            if change is None:
                return memo["hash"], b"", memo["size"]
            if size < memo["size"] // 2:
                change["base"] = memo["hash"]
                # parts are encoded already; the wrapper must not be (encode would escape it)
                data = orjson.dumps({"$delta": change}, option=orjson.OPT_SORT_KEYS)
                h = hashlib.blake2b(memo["hash"].encode() + data, digest_size=16).hexdigest()
                memo.update(hash=h, chain=memo["chain"] + 1, size=memo["size"] + len(data), fields=fields)
                return h, data, memo["size"]
        data = values.dumps(state)
        h = hashlib.blake2b(data, digest_size=16).hexdigest()
        fields = remember(state) if type(state) is dict else {}
        self.memo[key] = {"hash": h, "chain": 0, "size": len(data), "fields": fields}
        return h, data, len(data)


def remember(state: dict) -> dict:
    """What a later `delta` compares against: a copy of each diffable dict, the JSON of the rest."""
    return {k: (dict(v) if _diffable(v) else values.dumps(v)) for k, v in state.items()}


def delta(prev: dict, state: dict) -> tuple[dict | None, int, dict]:
    """What changed since `prev`, its size, and what to remember for the next time.

    `prev` holds, per field, a copy of a diffable dict (str keys, immutable JSON
    values: compared key by key, checked only where they changed) or the field's
    serialized JSON (anything else: it may change in place).
    """
    out_set, out_dict, size, fields = {}, {}, 0, {}
    for k, v in state.items():
        old = prev.get(k, _MISSING)
        if type(old) is dict and type(v) is dict:
            changed, deleted = changed_entries(old, v)
            if (not changed or _diffable(changed, whole=False)) and not (len(v) == 1 and next(iter(v))[:1] == "$"):
                if changed or deleted:
                    out_dict[k] = [changed, deleted]
                    size += 24 * (len(changed) + len(deleted))
                fields[k] = dict(v)
                continue
        data = values.dumps(v)
        if data != old:
            out_set[k] = orjson.loads(data)
            size += len(data)
        fields[k] = dict(v) if _diffable(v) else data
    gone = [k for k in prev if k not in state]
    if not (out_set or out_dict or gone):
        return None, 0, prev
    return {"set": out_set, "dict": out_dict, "del": gone}, size, fields


_MISSING = object()


def changed_entries(old: dict, new: dict) -> tuple[dict, list]:
    """The entries of `new` that are not in `old` or differ from it, and `old`'s keys gone from `new`.

    A step changes a few entries of a big map; walking it entry by entry in Python
    would cost more than the step. When `new` still starts with `old`'s keys in
    their order (updates keep a key's place; new keys come last), the comparison
    runs at C speed: key identity, then value identity, then `!=` only where a
    value object was replaced."""
    n = len(old)
    if len(new) >= n and all(map(operator.is_, old, new)):
        maybe = compress(old, map(operator.is_not, old.values(), new.values()))
        changed = {x: new[x] for x in maybe if old[x] != new[x]}
        changed.update((x, new[x]) for x in islice(new, n, None))
        return changed, []
    changed = {x: y for x, y in new.items() if x not in old or old[x] is not y and old[x] != y}
    added = sum(1 for x in changed if x not in old)
    deleted = [x for x in old if x not in new] if len(new) != n + added else []
    return changed, deleted


def is_delta(stored: Any) -> bool:
    return type(stored) is dict and len(stored) == 1 and "$delta" in stored


def apply(base: dict, stored: dict) -> dict:
    """The JSON state a stored delta describes, given its base's JSON state."""
    d = stored["$delta"]
    out = dict(base)
    for k in d["del"]:
        out.pop(k, None)
    out.update(d["set"])
    for k, (changed, deleted) in d["dict"].items():
        field = dict(out.get(k) or {})
        for x in deleted:
            field.pop(x, None)
        field.update(changed)
        out[k] = field
    return out

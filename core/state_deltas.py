"""Interaction states, stored as deltas against the previous snapshot of the same instance.

Every interaction stores the state of every instance in G(θ). A big state (a map
over every customer) mostly stays the same between two interactions, so after a
full snapshot an instance's next snapshots carry only what changed: for a dict
field with str keys and immutable values, the changed and deleted keys; other
fields whole when they changed. The stored JSON of a delta is
`{"$delta": {"base": <hash>, "set": {...}, "dict": {field: [changed, deleted]}, "del": [...],
"keys": {field: [[key, value], ...]}}}` (a user value with a single `$`-key is always
escaped by `values.encode`, so a delta cannot be mistaken for a state). `apply_chain`
rebuilds the JSON state from its base.

Comparing a big field costs as much as storing it whole. An operator that knows what it
changed (`Operator.changed_keys`: the built-in Aggregate and HashJoin, whose dicts only
grow) has its fields diffed from that list instead: the "keys" part holds the encoded
key and value of every changed and every new key (new keys are the dict's last ones, in
order), whatever the keys' and values' types. Such a state's chain of deltas runs on
while the deltas add up to less than the state (`StateEncoder.long_chain_bytes`), so
recording costs what changes, not what is there.
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


_NUMBERS = frozenset({int, float, bool})
MAX_CHAIN = 1024   # the longest chain of deltas of a big state (`StateEncoder.long_chain_bytes`)


class Tracked:
    """What `remember` keeps of a field its operator lists changes for: the key count, not a copy."""

    __slots__ = ("size", "str_keys")

    def __init__(self, size: int, str_keys: bool):
        self.size = size
        self.str_keys = str_keys   # every key a str at the last full snapshot: stored as a JSON object

    @classmethod
    def of(cls, v: dict) -> "Tracked":
        return cls(len(v), set(map(type, v)) <= {str})


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
        if int in types and not (-values.INT64 <= min(vals) and max(vals) < values.INT64):
            return False
    return True


class StateEncoder:
    """Encodes successive states of each instance: full, then deltas, then full again."""

    def __init__(self, full_every: int = 32, long_chain_bytes: int = 1 << 20):
        self.full_every = full_every
        self.long_chain_bytes = long_chain_bytes   # a state this big chains deltas until they add up to it
        self.memo: dict[Any, dict] = {}

    def encode(self, key: Any, state: dict, changed: dict | None = None) -> tuple[str, bytes, int]:
        """(hash, JSON bytes to store, size of the full state as JSON) for instance `key`.

        `changed`: the operator's `changed_keys()` since the previous call, if it keeps them.
        Bytes are empty when nothing changed since the instance's last snapshot."""
        memo, fields = self.memo.get(key), None
        if memo is not None and type(state) is dict and self._may_chain(memo):
            with values.gc_paused():   # encoding many changed values: see values.dumps
                change, size, fields = delta(memo["fields"], state, changed)
            if change is None:
                return memo["hash"], b"", memo["size"]
            if change is _WHOLE:
                fields = None   # (the last ones, unchanged)
            elif size < memo["size"] // 2:
                change["base"] = memo["hash"]
                # parts are encoded already; the wrapper must not be (encode would escape it)
                data = orjson.dumps({"$delta": change}, option=orjson.OPT_SORT_KEYS)
                h = hashlib.blake2b(memo["hash"].encode() + data, digest_size=16).hexdigest()
                memo.update(hash=h, chain=memo["chain"] + 1, size=memo["size"] + len(data), fields=fields,
                            chained=memo["chained"] + len(data))
                return h, data, memo["size"]
        h, data, size = whole(state)
        if fields is None:   # (else what `delta` found to remember of this state: a big field's JSON made once)
            fields = remember(state, changed) if type(state) is dict else {}
        self.memo[key] = {"hash": h, "chain": 0, "size": size, "fields": fields, "full": size, "chained": 0}
        return h, data, size

    def _may_chain(self, memo: dict) -> bool:
        if memo["chain"] < self.full_every:
            return True
        return memo["full"] >= self.long_chain_bytes and memo["chain"] < MAX_CHAIN and memo["chained"] < memo["full"]


def whole(state: Any) -> tuple[str, bytes, int]:
    """(hash, JSON bytes, their size) of a whole state: what `encode` stores for an instance's
    first snapshot, and the recorder for one it takes before any input (recorder/task.py)."""
    data = values.dumps(state)
    return hashlib.blake2b(data, digest_size=16).hexdigest(), data, len(data)


def remember(state: dict, changed: dict | None = None) -> dict:
    """What a later `delta` compares against: for a field the operator lists changes for,
    its size; a copy of each diffable dict; the JSON of the rest."""
    return {k: (Tracked.of(v) if changed is not None and k in changed and type(v) is dict
                else dict(v) if _diffable(v) else values.dumps(v)) for k, v in state.items()}


def delta(prev: dict, state: dict, listed: dict | None = None) -> tuple[Any, int, dict]:
    """What changed since `prev`, its size, and what to remember for the next time;
    `_WHOLE` when only a full snapshot can say it.

    `prev` holds, per field, a `Tracked` (the operator lists the changed keys in `listed`:
    they and the new keys are taken), a copy of a diffable dict (str keys, immutable JSON values:
    compared key by key, checked only where they changed) or the field's serialized JSON
    (anything else: it may change in place).
    """
    out_set, out_dict, out_keys, size, fields = {}, {}, {}, 0, {}
    for k, v in state.items():
        old = prev.get(k, _MISSING)
        if type(old) is Tracked:
            part = _listed_changes(old, v, (listed or {}).get(k))
            if part is _WHOLE:
                return _WHOLE, 0, prev
            if part:
                out_keys[k] = part
                size += len(orjson.dumps(part))
            fields[k] = Tracked(len(v), old.str_keys)
            continue
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
    if not (out_set or out_dict or out_keys or gone):
        return None, 0, prev
    change = {"set": out_set, "dict": out_dict, "del": gone}
    if out_keys:
        change["keys"] = out_keys
    return change, size, fields


_MISSING = object()
_WHOLE = object()


def _listed_changes(old: Tracked, v: Any, listed: Any) -> Any:
    """[[key, value], ...] for a field whose operator listed its changed keys: the
    listed keys, then the new ones (the dict's last keys, in their order); `_WHOLE` when
    the field is not a dict that only grew, or its JSON form would change."""
    if type(v) is not dict or listed is None or len(v) < old.size:
        return _WHOLE
    new = list(islice(reversed(v), len(v) - old.size))[::-1] if len(v) > old.size else []
    newset = set(new)
    keys = [x for x in listed if x not in newset]
    if not all(x in v for x in keys):
        return _WHOLE   # a listed key is gone: a delete
    keys += new
    if old.str_keys and not all(type(x) is str for x in keys):
        return _WHOLE   # an object gains a non-str key: it becomes a $dict list
    if not keys:
        return []
    return _pairs(values.encode(dict(zip(keys, map(v.__getitem__, keys)))))


def _pairs(encoded: Any) -> list:
    """[[key, value], ...] of an encoded dict: `values.encode` writes one with keys and values
    that are their own JSON as itself (a plain container), one with int keys and plain values as
    pairs made in C (`{"$dict": ...}`: TPC-H W2's REV, an accumulator list per customer), and any
    other as its keys and values encoded. A map of customers changed at 10 interactions a second
    was encoded key by key and value by value: 1.44 of the 5.24 s W2's snapshots took in a profile
    of its workers (thread CPU), a quarter; 600 changed keys of 9,500 customers, 2.1 → 0.73 ms."""
    if len(encoded) == 1 and "$dict" in encoded:
        return encoded["$dict"]
    return list(map(list, encoded.items()))


def changed_entries(old: dict, new: dict) -> tuple[dict, list]:
    """The entries of `new` that are not in `old` or differ from it, and `old`'s keys gone from `new`.

    A step changes a few entries of a big map; walking it entry by entry in Python
    would cost more than the step. When `new` still starts with `old`'s keys in
    their order (updates keep a key's place; new keys come last), the comparison
    runs at C speed: key identity, then value identity, then `!=` only where a
    value object was replaced, and then exactly (`values.identical`: `True` replacing `1` is a
    change)."""
    n = len(old)
    same = values.identical
    if len(new) >= n and all(map(operator.is_, old, new)):
        maybe = compress(old, map(operator.is_not, old.values(), new.values()))
        changed = {x: new[x] for x in maybe if not same(old[x], new[x])}
        changed.update((x, new[x]) for x in islice(new, n, None))
        return changed, []
    changed = {x: y for x, y in new.items() if x not in old or old[x] is not y and not same(old[x], y)}
    added = sum(1 for x in changed if x not in old)
    deleted = [x for x in old if x not in new] if len(new) != n + added else []
    return changed, deleted


def is_delta(stored: Any) -> bool:
    return type(stored) is dict and len(stored) == 1 and "$delta" in stored


def apply(base: dict, stored: dict) -> dict:
    """The JSON state a stored delta describes, given its base's JSON state."""
    return apply_chain(base, [stored])


def apply_chain(base: dict, chain: list[dict]) -> dict:
    """The JSON state at the end of `chain` (stored deltas, oldest first) from its base's.

    A "keys" field is unpacked once for the whole chain (a long chain of small deltas
    over a big dict costs the dict once, not once per delta); nothing of `base` is changed."""
    out = dict(base)
    keyed: dict[str, dict] = {}   # field -> {key's JSON: [key, value]}, while the chain is applied
    for stored in chain:
        d = stored["$delta"]
        for k in d["del"]:
            out.pop(k, None)
            keyed.pop(k, None)
        for k, v in d["set"].items():
            out[k] = v
            keyed.pop(k, None)
        for k, (changed, deleted) in d["dict"].items():
            if k in keyed:
                out[k] = _packed(keyed.pop(k))
            field = dict(out.get(k) or {})
            for x in deleted:
                field.pop(x, None)
            field.update(changed)
            out[k] = field
        for k, pairs in d.get("keys", {}).items():
            items = keyed.get(k)
            if items is None:
                items = keyed[k] = _unpacked(out.get(k))
            for x, y in pairs:
                items[orjson.dumps(x, option=orjson.OPT_SORT_KEYS)] = [x, y]   # an old key keeps its place
    for k, items in keyed.items():
        out[k] = _packed(items)
    return out


def _unpacked(field: Any) -> dict:
    if type(field) is not dict:
        return {}
    pairs = field["$dict"] if len(field) == 1 and "$dict" in field else field.items()
    return {orjson.dumps(x, option=orjson.OPT_SORT_KEYS): [x, y] for x, y in pairs}


def _packed(items: dict) -> Any:
    """A dict's JSON as `values.encode` makes it: an object when every key is a str (and
    it is not one `$` key), else a $dict list of [key, value] in the dict's order."""
    pairs = list(items.values())
    if all(type(x) is str for x, _ in pairs) and not (len(pairs) == 1 and pairs[0][0][:1] == "$"):
        return {x: y for x, y in pairs}
    return {"$dict": pairs}

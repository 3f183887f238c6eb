"""State fields that keep an operator's inputs as they came, stored at interactions as a digest.

A join keeps every row it consumed, under its key (`HashJoin.left`, `.right`). Those rows
are already in the run file, as the instance's logged inputs, or as positions in the source
files they were read from (docs/SOURCES.md): copying them again into every interaction's
snapshot made a TPC-H Q10 run file 7.5 % of its input, 16 of its 23 MB the first join's rows.
So the recorder stores such a field (`Operator.kept_inputs`) as a `Kept` summary: its keys,
rows, JSON bytes and a 64-bit digest of its contents. A replay still rebuilds the rows; `tt
verify` digests the replayed field the same way and compares (`like_recorded`), so a join
whose rows differ in replay is still found, down to the input (replay/verify.py).

The digest is a sum, modulo 2**64, of one hash per key over its encoded key and value, so the
recorder updates it from the keys the operator lists as changed (`changed_keys`), remembering
each key's hash, instead of hashing the whole field at every interaction (`KeptDigests`).
"""

from __future__ import annotations

import hashlib
import itertools
from decimal import Decimal
from typing import Any

import orjson

from . import values

TAG = "$kept"
_MASK = (1 << 64) - 1
_LOW = (1 << 48) - 1


class Kept:
    """What an interaction stores of a kept-inputs field; encodes as `{"$kept": {...}}`."""

    __slots__ = ("keys", "rows", "bytes", "digest")

    def __init__(self, keys: int, rows: int, nbytes: int, digest: int):
        self.keys, self.rows, self.bytes, self.digest = keys, rows, nbytes, digest

    def __tt_json__(self) -> dict:
        return {TAG: {"keys": self.keys, "rows": self.rows, "bytes": self.bytes, "digest": f"{self.digest:016x}"}}


def _entry(key: Any, value: Any) -> int:
    """One key's entry, packed in one int (what `KeptDigests` remembers per key): its hash in
    the high bits, then its rows (a list's items; 1 for any other value) in 48 bits, its JSON
    bytes in the low 48. A field's summary is read from the sum of its entries, so an
    interaction costs the keys that changed, not the field (counting a join's rows at every
    snapshot was the first cost of 10 interactions a second on TPC-H W2: 14 ms a snapshot in a
    profile of its tasks; summing 400,000 four-row lists takes 7.6 ms timed alone).

    The JSON is orjson's own where it can write the value (values' tags only for what it cannot,
    a Decimal say): a join's final snapshot hashes every row it holds, and this is 1.6 times
    faster than `values.encode` first (370,000 lineitem-like rows: 0.71 s, not 1.15 s). It does
    not tell a tuple from a list, or NaN from None."""
    try:
        data = orjson.dumps((key, value), default=_json_default, option=orjson.OPT_SORT_KEYS)
    except TypeError:   # a dict with keys that are not str, an int beyond 64 bits: values' encoding
        data = orjson.dumps([values.encode(key), values.encode(value)], option=orjson.OPT_SORT_KEYS)
    rows = len(value) if type(value) is list else 1
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") << 96 | rows << 48 | len(data)


def _json_default(value: Any) -> Any:
    """What orjson cannot write, as `values.encode` writes it, a Decimal first: a TPC-H join
    holds two in every lineitem row, and `values.encode` tries a dozen types before it (the same
    bytes; the digest of a join of 370,000 such rows ×0.82–0.90)."""
    if type(value) is Decimal:
        return {"$decimal": str(value)}
    return values.encode(value)


def _kept(field: dict, packed_sum: int) -> Kept:
    """The summary of `field` from the sum of its entries' packed ints."""
    return Kept(len(field), (packed_sum >> 48) & _LOW, packed_sum & _LOW, (packed_sum >> 96) & _MASK)


def summary(field: Any) -> Any:
    """The `Kept` summary of a whole field, hashed from scratch (replay; a first snapshot)."""
    if type(field) is not dict:
        return field   # not what a kept-inputs field is: stored as it is
    with values.gc_paused():
        return _kept(field, sum(map(_entry, field, field.values())))


def is_kept(encoded: Any) -> bool:
    """Whether a stored (JSON) field is a `Kept` summary."""
    return type(encoded) is dict and len(encoded) == 1 and TAG in encoded


def like_recorded(recorded: Any, state: Any) -> Any:
    """An operator's live `state` with its fields summarized where the stored JSON state
    `recorded` has a `Kept` summary, so that the two compare once encoded (`tt verify`)."""
    if type(recorded) is not dict or type(state) is not dict:
        return state
    kept = [f for f, v in recorded.items() if is_kept(v) and f in state]
    return {**state, **{f: summary(state[f]) for f in kept}} if kept else state


class _FieldDigest:
    """One field's running sum of packed entries, and each key's packed entry."""

    __slots__ = ("total", "entries")

    def __init__(self, field: dict):
        self.entries = dict(zip(field, map(_entry, field, field.values())))
        self.total = sum(self.entries.values())

    def update(self, field: dict, keys: list) -> None:
        """Hash `keys` (distinct) again: those listed as changed, and the keys added since."""
        entries = self.entries
        was = sum(map(entries.get, keys, itertools.repeat(0)))
        fresh = list(map(_entry, keys, map(field.__getitem__, keys)))
        entries.update(zip(keys, fresh))
        self.total += sum(fresh) - was

    def kept(self, field: dict) -> Kept:
        return _kept(field, self.total)


class KeptDigests:
    """The recorder's side: per instance, each kept-inputs field's running digest."""

    def __init__(self):
        self.fields: dict[tuple[Any, str], _FieldDigest] = {}

    def summarize(self, instance: Any, op: Any, state: dict, changed: dict | None) -> tuple[dict, dict | None, int]:
        """`state` with `op.kept_inputs` fields replaced by their `Kept` summaries, `changed`
        without those fields, and the JSON bytes the summaries stand for (what a checkpoint of
        them would cost: the planner's figure)."""
        names = getattr(op, "kept_inputs", ())
        if not names or type(state) is not dict:
            return state, changed, 0
        state, extra = dict(state), 0
        changed = dict(changed) if changed is not None else None
        with values.gc_paused():
            for name in names:
                field = state.get(name)
                listed = changed.pop(name, None) if changed is not None else None
                if type(field) is not dict:
                    continue
                digest = self.fields.get((instance, name))
                if digest is None or listed is None or len(field) < len(digest.entries):
                    digest = self.fields[(instance, name)] = _FieldDigest(field)   # from scratch
                else:
                    known = digest.entries
                    new = list(itertools.islice(reversed(field), len(field) - len(known)))[::-1]  # a dict gains keys last
                    digest.update(field, [k for k in listed if k in known] + new)
                state[name] = kept = digest.kept(field)
                extra += kept.bytes
        return state, changed, extra

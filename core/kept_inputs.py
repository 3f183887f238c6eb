"""State fields that keep an operator's inputs as they came, stored at interactions as a digest.

A join keeps every row it consumed, under its key (`HashJoin.left`, `.right`). Those rows
are already in the run file, as the instance's logged inputs, or as positions in the source
files they were read from (docs/SOURCES.md): copying them again into every interaction's
snapshot made a TPC-H Q10 run file 7.5 % of its input, 16 of its 23 MB the first join's rows.
So the recorder stores such a field (`Operator.kept_inputs`) as a `Kept` summary: its keys,
rows, JSON bytes and a 64-bit digest of its contents. A replay still rebuilds the rows; `tt
verify` digests the replayed field the same way and compares (`like_recorded`), so a join
whose rows differ in replay is still found, down to the input (replay/verify.py).

The digest is a sum, modulo 2**64, of one hash per key over its encoded key and value (xxh3-64
of its JSON, a Decimal written as its text: a summary says so, `"hash": "xxh3 text"`; run files
before it hold `"xxh3"`, a Decimal written as values' tagged `{"$decimal": ...}`, or nothing,
that JSON hashed by blake2b, and replay hashes each as its summary says: `HASHES`), so the
recorder updates it from the keys the operator lists as changed (`changed_keys`), remembering
each key's hash, instead of hashing the whole field at every interaction (`KeptDigests`). A
long list the operator lists as only `APPENDED` to keeps its hash open (`_Stream`): its new rows
are hashed alone, and the digest is the same. The join lists a key so only when no `merge` was
handed that side's rows of it, since a `merge` might change a stored row.

Hashing every row's values was most of what recording TPC-H W2 cost (2.5 s of the tasks' CPU at
1 interaction/10 s: CPU ×1.17 over recording off, ×1.05 without the digest). A field whose port
takes its tuples through a shuffle from outside G(θ) needs less. Those tuples are in the run
file, logged, or read back by reference and checked against the recording task's digest of their
values (store/row_digest.py), so replay cannot feed the join other rows without an error; and
they arrive unpickled, so no code outside the operator holds them. Such a field is digested by
its keys and each key's row count, what the key function and the order of the inputs decide,
and by the values of one key in 64 (chosen by that hash): a stored row that the join's `merge`
or code after it changes differently in replay (a random number written into it) is still
found when it happens to more than a few keys (`of: counts`). A field fed by an operator
inside G(θ), whose tuples replay recomputes, or through a narrow edge, whose rows other
branches hold too, keeps the digest of all its values (the default, and what run files before
`counts` hold).

An operator that counts the rows it appends under each key (`Operator.appended_rows`: the
built-in HashJoin) has such a field digested from those counts instead (`of: key rows`, a sum
over its keys of their rows and hashes, `_KeyRowsDigest`): a snapshot then reads no list but a
sampled key's, so 10 interactions a second cost the keys that changed, not their lists again.
Replay digests a field as its recorded summary says (`like_recorded`), older run files too.

An operator whose every input on port i is appended, as it came, to its key's list in the i-th
kept field (`Operator.appends_each_input`: the built-in HashJoin) has those fields stored at an
interaction by their keys and rows alone (`of: rows`), and digested at its task's end only, as
above. Such a field only grows, one row an input, in the order the run file fixes; so its
content at an interaction is a prefix of its content at the end, and a row stored differently
in replay stays in the field and is found by the end's digest (a merge that changed a stored
row and changed it back is the one case this misses). `tt verify` then names the task's end,
and looks for the input from the last interaction whose digest matched (replay/verify.py).
Digesting at every interaction made the join count the rows it stored under each key for every
input, and cost TPC-H W2 at 10 interactions a second 3 points of recording's wall time (×1.083
against ×1.053 so, 10 repetitions, `benches/results/2026-12-05-rows-at-interactions.md`).
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import sys
from array import array
from decimal import Decimal
from typing import Any

import orjson
import xxhash

from . import values

TAG = "$kept"
_MASK = (1 << 64) - 1
_LOW = (1 << 48) - 1
_UNSAMPLED = 58   # a `counts` digest hashes the values of the keys whose hash is below 2**58: one in 64
_TOP_BYTE = 7 if sys.byteorder == "little" else 0   # of a 64-bit int in an array's bytes
_SAMPLED_TOP = bytes(int(b >> (_UNSAMPLED - 56) == 0) for b in range(256))   # top byte -> 1 where the top 6 bits are 0


COUNTS = "counts"   # a field digested by its keys' row counts and one key in 64's values (the run file proves the rest)
KEY_ROWS = "key rows"   # the same facts, summed over its rows' keys: kept up by the appends the operator counts
ROWS = "rows"           # a field stored at an interaction by its keys and rows alone (digested at its task's end)
APPENDED = "appended"   # a `changed_keys()` value: the key's list only gained rows at its end since
XXH3_TEXT = "xxh3 text"  # a summary's `hash`: xxh3-64 of the JSON with a Decimal written as its text (`_entry`)
XXH3 = "xxh3"           # ... in run files before it: xxh3-64 of the JSON with values' tagged Decimals; before that none, blake2b-64
_STREAMED = 64          # rows from which a list appended to is hashed as a stream (`_Stream`)


class Kept:
    """What an interaction stores of a kept-inputs field; encodes as `{"$kept": {...}}`. `bytes`
    is the JSON the field stands for (the planner's figure). `of`: None for a digest of all its
    values; `COUNTS` or `KEY_ROWS` for one by its keys' rows, which stores no such figure, its
    `bytes` an estimate from a sample of rows; `ROWS` for keys and rows alone, no digest.
    `hash`: what hashed its bytes (`HASHES`)."""

    __slots__ = ("keys", "rows", "bytes", "digest", "of", "hash")

    def __init__(self, keys: int, rows: int, nbytes: int, digest: int, of: str | None = None,
                 hashed: str | None = XXH3_TEXT):
        self.keys, self.rows, self.bytes, self.digest, self.of, self.hash = keys, rows, nbytes, digest, of, hashed

    def __tt_json__(self) -> dict:
        if self.of == ROWS:
            return {TAG: {"keys": self.keys, "rows": self.rows, "of": ROWS}}
        if self.of is not None:
            summary = {"keys": self.keys, "rows": self.rows, "of": self.of, "digest": f"{self.digest:016x}"}
        else:
            summary = {"keys": self.keys, "rows": self.rows, "bytes": self.bytes, "digest": f"{self.digest:016x}"}
        if self.hash is not None:
            summary["hash"] = self.hash
        return {TAG: summary}


def _blake2b(data: bytes) -> int:
    """A summary's hash of bytes in run files before `XXH3`: blake2b-64, unsigned."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


#: a summary's `hash` -> (its hash of bytes, unsigned 64 bits; whether a Decimal is written as
#: values' tagged `{"$decimal": "1.5"}`, not as its text `"1.5"`). xxh3 hashes a W2 task's end
#: snapshot, the JSON of every row J2 and J3 hold, at a fraction of blake2b's reference C:
#: blake2b took 36 M of the 0.64 G instructions recording W2 at scale 0.1 added
HASHES = {XXH3_TEXT: (xxhash.xxh3_64_intdigest, False), XXH3: (xxhash.xxh3_64_intdigest, True), None: (_blake2b, True)}
_NEWEST = HASHES[XXH3_TEXT]
_SORTED = orjson.OPT_SORT_KEYS
_DECIMAL_TEXT = Decimal.__str__   # orjson's `default` for a new summary: C, no Python call per Decimal


def _entry(key: Any, value: Any, hashing: tuple = _NEWEST) -> int:
    """One key's entry, packed in one int (what `KeptDigests` remembers per key): its hash in
    the high bits, then its rows (a list's items; 1 for any other value) in 48 bits, its JSON
    bytes in the low 48. A field's summary is read from the sum of its entries, so an
    interaction costs the keys that changed, not the field (counting a join's rows at every
    snapshot was the first cost of 10 interactions a second on TPC-H W2: 14 ms a snapshot in a
    profile of its tasks; summing 400,000 four-row lists takes 7.6 ms timed alone).

    The JSON is orjson's own where it can write the value, and a Decimal its text, written by
    `Decimal.__str__` as orjson's `default`: a join's final snapshot hashes every row it holds,
    two Decimals in each of TPC-H's, and a Python call for each made it twice as slow (120,000
    lineitem-like rows: 86 ms with values' `{"$decimal": ...}`, 43 ms so). Values' encoding for
    any other value orjson cannot write (`_text_json`). It does not tell a tuple from a list, NaN
    from None, or a Decimal from its text. `hashing`: the summary's (`HASHES`)."""
    h, tagged = hashing
    try:
        data = orjson.dumps((key, value), default=_json_default if tagged else _DECIMAL_TEXT, option=_SORTED)
    except TypeError:   # (a set, a dict with keys that are not str, an int beyond 64 bits)
        data = None if tagged else _text_json_again((key, value))
        if data is None:   # values' encoding of it all
            data = orjson.dumps([values.encode(key), values.encode(value)], option=_SORTED)
    return h(data) << 96 | (len(value) if type(value) is list else 1) << 48 | len(data)   # (`_packed`, inline)


def _text_json(value: Any) -> bytes | None:
    """The JSON a new summary hashes of `value` (`_entry`): orjson's, a Decimal its text, and
    values' encoding of what else orjson cannot write; None where orjson refuses even that (a
    dict with keys that are not str, an int beyond 64 bits)."""
    try:
        return orjson.dumps(value, default=_DECIMAL_TEXT, option=_SORTED)
    except TypeError:
        return _text_json_again(value)


def _text_json_again(value: Any) -> bytes | None:
    """`_text_json` where `Decimal.__str__`, orjson's `default` first, refused a value that is no
    Decimal (a set, a numpy number): the same bytes, that value written by values' encoding."""
    try:
        return orjson.dumps(value, default=_text_default, option=_SORTED)
    except TypeError:
        return None


def _text_default(value: Any) -> Any:
    """`_text_json`'s `default` where a value is neither orjson's nor a Decimal."""
    if isinstance(value, Decimal):
        return _DECIMAL_TEXT(value)
    return values.encode(value)


def _packed(digest: int, rows: int, size: int) -> int:
    """An entry's hash, rows and JSON bytes in one int (`_entry`)."""
    return digest << 96 | rows << 48 | size


def _count_hash(key: Any, rows: int) -> int:
    """The hash of a key and its row count in a `counts` digest (unsigned 64 bits). An int key (a
    join's usual) by Python's tuple hash, the same in every process (ints' hashes are not salted)
    and computed in C for a whole field (`_count_hashes`); any other key encoded and hashed."""
    if type(key) is int:
        return hash((key, rows)) & _MASK
    return _json_hash((key, rows), lambda: [values.encode(key), rows])


def _json_hash(value: Any, encoded: Any) -> int:
    """The blake2b (64 bits, unsigned) of `value`'s JSON as orjson writes it, or, where orjson
    cannot, of `encoded()`'s (values' encoding)."""
    try:
        data = orjson.dumps(value, default=_json_default, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        data = orjson.dumps(encoded(), option=orjson.OPT_SORT_KEYS)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _rows(value: Any) -> int:
    """A `counts` digest's rows of one key: a list's items (a subclass's too), 1 for any other value."""
    return len(value) if isinstance(value, list) else 1


def _rows_of(lists: Any) -> list[int]:
    """`_rows` of each value (a list, or a dict's values: read twice where one is not a list),
    in C and in one pass where all are lists (`list.__len__` refuses any other value). Most of
    a pass over 321,000 lists is reading each from memory: checking their types first, as this
    did before, made it 54 ms where one pass takes 46."""
    try:
        return list(map(list.__len__, lists))
    except TypeError:
        return list(map(_rows, lists))


def _count_hashes(keys: list, rows: list[int]) -> list[int]:
    """`_count_hash` of each key and its row count; for int keys Python's tuple hash, in C by
    `map` (its sum, not each one masked: the digest is taken modulo 2**64)."""
    if set(map(type, keys)) <= {int}:
        return list(map(hash, zip(keys, rows)))
    return list(map(_count_hash, keys, rows))


def _chosen(keys: list, hashes: list[int]) -> Any:
    """The keys whose hash `h` is sampled (`not h >> 58`), chosen in C: the hashes as 64-bit ints in
    an array, whose bytes' every eighth is a hash's top byte, its top 6 bits 0 or not by a table
    (320,000 keys of a J1-like join: 25 ms, where a `map` of `>>` and one of `not` took 64)."""
    try:
        packed = array("q", hashes)   # Python's hashes: signed
    except OverflowError:
        try:
            packed = array("Q", hashes)   # blake2b's (`_count_hash` of any other key): unsigned
        except OverflowError:
            return itertools.compress(keys, map(operator.not_, map(operator.rshift, hashes,
                                                                   itertools.repeat(_UNSAMPLED))))
    return itertools.compress(keys, packed.tobytes()[_TOP_BYTE::8].translate(_SAMPLED_TOP))


def _json_default(value: Any) -> Any:
    """What orjson cannot write, as `values.encode` writes it, a Decimal first (summaries hashed
    `XXH3` or by blake2b, and `_json_hash`): a TPC-H join holds two in every lineitem row, and
    `values.encode` tries a dozen types before it (the same bytes; ×0.82–0.90)."""
    if type(value) is Decimal:
        return {"$decimal": str(value)}
    return values.encode(value)


def _kept(field: dict, packed_sum: int, hashed: str | None = XXH3_TEXT) -> Kept:
    """The summary of `field` from the sum of its entries' packed ints."""
    return Kept(len(field), (packed_sum >> 48) & _LOW, packed_sum & _LOW, (packed_sum >> 96) & _MASK,
                hashed=hashed)


def summary(field: Any, of: str | None = None, hashed: str | None = XXH3_TEXT) -> Any:
    """The `Kept` summary of a whole field, hashed from scratch (replay; a first snapshot): of its
    values (`of` None), or by its keys' rows as `COUNTS` or `KEY_ROWS` digests them; its values'
    JSON hashed as `hashed` says (`HASHES`: a run file's summary says which)."""
    if type(field) is not dict:
        return field   # not what a kept-inputs field is: stored as it is
    if of == ROWS:
        return Kept(len(field), sum(_rows_of(field.values())), 0, 0, ROWS, None)
    if of not in (None, COUNTS, KEY_ROWS):
        raise ValueError(f"a kept-inputs summary of {of!r}, which this tt does not know: a newer tt recorded it")
    with values.gc_paused():
        if of is None:
            return _kept(field, sum(map(_entry, field, field.values(), itertools.repeat(HASHES[hashed]))), hashed)
        if of == KEY_ROWS:
            return _KeyRowsDigest(field, hashed=hashed).kept(field)
        return _CountDigest(field, hashed).kept(field)


def is_kept(encoded: Any) -> bool:
    """Whether a stored (JSON) field is a `Kept` summary."""
    return type(encoded) is dict and len(encoded) == 1 and TAG in encoded


def like_recorded(recorded: Any, state: Any) -> Any:
    """An operator's live `state` with its fields summarized where the stored JSON state
    `recorded` has a `Kept` summary, so that the two compare once encoded (`tt verify`)."""
    if type(recorded) is not dict or type(state) is not dict:
        return state
    kept = [f for f, v in recorded.items() if is_kept(v) and f in state]
    return {**state, **{f: summary(state[f], recorded[f][TAG].get("of"), _hash_of(recorded[f][TAG]))
                        for f in kept}} if kept else state


def rows_only(recorded: Any) -> bool:
    """Whether a stored (JSON) state holds a field stored by its keys and rows alone (`ROWS`)."""
    return type(recorded) is dict and any(is_kept(v) and v[TAG].get("of") == ROWS for v in recorded.values())


def _hash_of(recorded: dict) -> str | None:
    """A stored summary's `hash` (`HASHES`; None: blake2b, a run file from before `XXH3`); one
    this tt does not know is an error, not a digest compared with another hash's."""
    hashed = recorded.get("hash")
    if hashed not in HASHES:
        raise ValueError(f"a kept-inputs summary hashed by {hashed!r}, which this tt does not know: "
                         f"a newer tt recorded it")
    return hashed


class _Stream:
    """A long list's entry kept open: the xxh3 state of its JSON up to its last row
    (`[key,[r0,...,rn`), so that rows added at its end are hashed alone. orjson writes no
    spaces, so the JSON of `(key, list)` is the same bytes written whole or row by row: the
    entry is `_entry`'s. At 10 interactions a second, TPC-H W2's J3 keeps its 25 nation keys'
    rows in lists that grow all run. A join shaped like one of its tasks (14,000 rows in 25
    lists, 90 snapshots) took 0.344 s hashing each listed list whole, 0.032 s with streams."""

    __slots__ = ("rows", "count", "last", "hasher", "size")

    @classmethod
    def start(cls, key: Any, value: list) -> "tuple[_Stream | None, int]":
        """A stream of `value` and its entry (no stream where orjson cannot write it)."""
        data = _text_json((key, value))
        if data is None:
            return None, _entry(key, value)
        stream = cls()
        stream.rows, stream.count, stream.last = value, len(value), value[-1]
        stream.hasher, stream.size = xxhash.xxh3_64(memoryview(data)[:-2]), len(data) - 2
        return stream, stream.entry()

    def entry(self) -> int:
        done = self.hasher.copy()
        done.update(b"]]")
        return _packed(done.intdigest(), self.count, self.size + 2)

    def extended(self, value: list) -> int | None:
        """The entry of `value`, this stream's list with rows added at its end since (the rows
        before it are the same objects: its last one is); None where it is not that."""
        n = self.count
        if value is not self.rows or len(value) < n or value[n - 1] is not self.last:
            return None
        if len(value) > n:
            piece = _text_json(value[n:])
            if piece is None:
                return None
            self.hasher.update(b",")
            self.hasher.update(memoryview(piece)[1:-1])   # `[a,b]` as `,a,b`
            self.size += len(piece) - 1
            self.count, self.last = len(value), value[-1]
        return self.entry()


class _FieldDigest:
    """One field's running sum of packed entries, each key's packed entry, and the `_Stream`s
    of its long lists."""

    __slots__ = ("total", "known", "streams")

    def __init__(self, field: dict):
        self.known = dict(zip(field, map(_entry, field, field.values())))
        self.total = sum(self.known.values())
        self.streams: dict[Any, _Stream] = {}

    @property
    def size(self) -> int:
        return len(self.known)

    def update(self, field: dict, keys: list, listed: Any = None, added: list = ()) -> None:
        """Hash `keys` (distinct) again: those listed as changed, and the keys `added` since. A long
        list that `listed` (the operator's `changed_keys()` of this field) says was only
        `APPENDED` to has its new rows hashed alone; any other is hashed whole, by `_entry` called
        from `map` where no key of the field has a long list (TPC-H W2's J2, a few rows a
        customer: one call a key, not three)."""
        keys = [*keys, *added]
        entries = self.known
        was = sum(map(entries.get, keys, itertools.repeat(0)))
        lists = list(map(field.__getitem__, keys))
        try:   # (a value with no length, or a long one: through `_entry_of`, which knows)
            short = not self.streams and max(map(len, lists), default=0) < _STREAMED
        except TypeError:
            short = False
        if short:
            fresh = list(map(_entry, keys, lists))
        else:
            appended = listed if type(listed) is dict else {}
            fresh = list(map(self._entry_of, keys, lists, map(appended.get, keys)))
        entries.update(zip(keys, fresh))
        self.total += sum(fresh) - was

    def _entry_of(self, key: Any, value: Any, how: Any) -> int:
        """`_entry` of one key, through its `_Stream` where its list is long (`how`: as listed)."""
        if type(value) is not list or len(value) < _STREAMED:
            if self.streams:
                self.streams.pop(key, None)
            return _entry(key, value)
        if how == APPENDED:
            stream = self.streams.get(key)
            entry = stream.extended(value) if stream is not None else None
            if entry is not None:
                return entry
        stream, entry = _Stream.start(key, value)
        if stream is None:
            self.streams.pop(key, None)
        else:
            self.streams[key] = stream
        return entry

    def kept(self, field: dict) -> Kept:
        return _kept(field, self.total)


def _per_row(field: dict) -> float:
    """The JSON bytes of a row, from the first few keys' rows: the planner's figure, estimated
    (a digest by keys' rows stores none)."""
    sample = list(itertools.islice(field.items(), 8))
    rows = sum(_rows(v) for _, v in sample)
    return sum(_entry(k, v) & _LOW for k, v in sample) / rows if rows else 0.0


class _CountDigest:
    """One field's `counts` digest: the sum of its keys' `_count_hash`, its rows, and the values'
    hashes of the sampled keys (one in 64: `_count_hash` below 2**58), each key's row count.
    What replay checks a run file's `counts` summaries with, and what the recorder keeps up for
    an operator that lists its changed keys but counts no rows (the built-in HashJoin counts
    them: `_KeyRowsDigest`).

    Made of lists and sums built by `map` in C where the keys are ints, each key's rows read in
    one pass over the lists. A first snapshot of a field shaped like one W2 task's lineitem side
    (321,110 int keys, 824,757 rows with two Decimals each) takes 137 ms, 168 ms with a second
    pass over the lists (best of 5, no other load). Digesting its values instead took 1.8 s for
    the whole lineitem side, twice this field."""

    __slots__ = ("size", "_known", "_pending", "hashes", "rows", "sampled", "per_row", "hashed")

    def __init__(self, field: dict, hashed: str | None = XXH3_TEXT):
        self.size = self.hashes = self.rows = 0
        self._known, self._pending, self.sampled = {}, [], {}
        self.hashed = hashed   # the sampled values' hash (`HASHES`)
        self._add(field, list(field), field.values())
        self.per_row = _per_row(field)

    def _sampled(self, keys: list, hashes: list[int], field: dict) -> dict:
        """The values' hash of each sampled key (one in 64, by its `_count_hash`: below 2**58 as
        unsigned is, for Python's signed hash too, a shift by 58 that leaves 0)."""
        h = HASHES[self.hashed]
        return {k: _entry(k, field[k], h) >> 96 for k in _chosen(keys, hashes)}

    @property
    def known(self) -> dict:
        """Each key's row count, made when a later snapshot first asks (a run's last snapshot,
        often its only one at 1 interaction/10 s, never does) from the keys counted since."""
        if self._pending:
            for keys, rows in self._pending:
                self._known.update(zip(keys, rows))
            self._pending = []
        return self._known

    def update(self, field: dict, keys: list, listed: Any = None, added: list = ()) -> None:
        """Count and hash `keys` (distinct, each one it has) again: those listed as changed; and
        count `added`, the field's last keys, added since. In bulk, as `__init__`: at 10 interactions a second a
        join lists most of its keys again and again.

        Where inputs come in key order (TPC-H's lineitem by l_orderkey), most keys of a
        snapshot are added ones. They are counted as `__init__` counts: their lists read from the
        field's last values, not looked up by key, and their counts remembered when the next
        snapshot asks. Measured when HashJoin had this digest (a21ed67), 321,000 J1-like keys
        added to an empty field, through `summarize`: 0.258 s
        looked up and remembered at once, 0.170 s so, 0.133 s from scratch; a J1-like task of
        380,000 rows in key order, a snapshot every 10,000 rows: 0.073 → 0.063 s in all."""
        known, sampled = self.known, self.sampled
        was = list(map(known.__getitem__, keys))
        rows = _rows_of(list(map(field.__getitem__, keys)))
        fresh, old = _count_hashes(keys, rows), _count_hashes(keys, was)
        self.hashes += sum(fresh) - sum(old)
        self.rows += sum(rows) - sum(was)
        known.update(zip(keys, rows))
        for k in _chosen(keys, old):   # the keys sampled before (by the hashes they had)
            sampled.pop(k, None)
        sampled.update(self._sampled(keys, fresh, field))
        if added:
            self._add(field, added, list(itertools.islice(reversed(field.values()), len(added)))[::-1])
        if not self.per_row:
            self.per_row = _per_row(field)

    def _add(self, field: dict, keys: list, lists: Any) -> None:
        """Count keys it did not have, whose values are `lists` (a first snapshot's every key)."""
        rows = _rows_of(lists)
        hashes = _count_hashes(keys, rows)
        self.hashes += sum(hashes)
        self.rows += sum(rows)
        self.size += len(keys)
        self._pending.append((keys, rows))
        self.sampled.update(self._sampled(keys, hashes, field))

    def kept(self, field: dict) -> Kept:
        return Kept(len(field), self.rows, round(self.rows * self.per_row),
                    (self.hashes + sum(self.sampled.values())) & _MASK, COUNTS, self.hashed)


def _key_hashes(keys: list) -> list[int]:
    """A `KEY_ROWS` digest's hash of each key: of an int key Python's hash of `(key,)`, the same
    in every process (an int's and a tuple's hashes are not salted), in C by `map`; of any other
    its JSON's blake2b."""
    if set(map(type, keys)) <= {int}:
        return list(map(hash, zip(keys)))
    return list(map(_key_hash, keys))


def _key_hash(key: Any) -> int:
    """`_key_hashes` of one key."""
    if type(key) is int:
        return hash((key,))
    return _json_hash(key, lambda: values.encode(key))


def key_sums(keys: list, weights: Any, plus: int = 0) -> tuple[int, list]:
    """The sum of (weight + `plus`) × `_key_hashes` over `keys` (weights: ints ≥ 0, None for 0
    each), modulo 2**64, and the keys among them whose values a `KEY_ROWS` digest samples
    (`_chosen`). What replay digests with; the recorder hands `KeptDigests` one that computes the
    same in numpy (recorder/key_sums.py), which the core may not import."""
    hashes = _key_hashes(keys)
    total = plus * sum(hashes) + (sum(map(operator.mul, weights, hashes)) if weights is not None else 0)
    return total & _MASK, list(_chosen(keys, hashes))


class _KeyRowsDigest:
    """One field's `KEY_ROWS` digest: the sum over its keys of (rows + 1) × the key's hash
    (`_key_hashes`), its rows, and the values' hashes of the keys it samples (one in 64: the key's
    hash below 2**58). The same facts as a `COUNTS` digest: which keys, each key's row count (a
    row moved to another key changes the sum), one key in 64's values.

    It is kept up from what the operator counts as it appends (`appended_rows()`: the rows added
    under each key since the previous snapshot), so a later snapshot costs the keys that changed
    and reads no key's list but a sampled one's, where a `COUNTS` digest reads every changed
    key's list and looks up the count it had. A J1-like task (1,023,506 rows in key order, both
    sides), a snapshot every 4,000 rows (256 snapshots), Spark-free, best of 3 in each run: 336
    and 355 ms of digests as `COUNTS` (two runs), 209, 215 and 240 ms so (three runs), about
    what one snapshot at the end costs from scratch either way (207 and 223 ms before, 221 to
    245 ms so)."""

    __slots__ = ("size", "hashes", "rows", "sampled", "sampled_sum", "per_row", "sums", "hashed")

    def __init__(self, field: dict, sums: Any = key_sums, lists: bool = False, hashed: str | None = XXH3_TEXT):
        """`lists`: the operator vouches that every value is a list (`HashJoin.kept_lists`), so
        their lengths are read without a type check: 161,000 J1 keys, 17 ms where `_rows_of` takes 35.
        `hashed`: the sampled values' hash (`HASHES`)."""
        self.hashed = hashed
        keys = list(field)
        rows = list(map(len, field.values())) if lists else _rows_of(field.values())
        self.sums = sums   # `key_sums`, or the recorder's with the same values
        self.size, self.rows = len(keys), sum(rows)
        self.hashes, chosen = sums(keys, rows, 1)
        self.sampled, self.sampled_sum = {}, 0
        self._sample(field, chosen)
        self.per_row = _per_row(field)

    def update(self, field: dict, appended: dict, listed: Any, added: list) -> None:
        """`appended`: the rows added under each key since the last snapshot, every key whose rows
        changed in number among them; `listed`: every key that changed in any way (the operator's
        `changed_keys()` of this field); `added`: the keys added since, the field's last ones."""
        counts = list(appended.values())
        total, chosen = self.sums(list(appended), counts)
        self.hashes += total + self.sums(added, None, 1)[0]
        self.rows += sum(counts)
        self.size = len(field)
        self._sample(field, chosen)
        others = list(set(listed).difference(appended)) if listed else []   # changed, but no row added
        if others:
            self._sample(field, self.sums(others, None)[1])
        if not self.per_row:
            self.per_row = _per_row(field)

    def _sample(self, field: dict, chosen: list) -> None:
        """Hash the values of the keys `chosen` to be sampled (by their `key_sums`)."""
        sampled, h = self.sampled, HASHES[self.hashed]
        for k in chosen:
            entry = _entry(k, field[k], h) >> 96
            self.sampled_sum += entry - sampled.get(k, 0)
            sampled[k] = entry

    def kept(self, field: dict) -> Kept:
        return Kept(len(field), self.rows, round(self.rows * self.per_row),
                    (self.hashes + self.sampled_sum) & _MASK, KEY_ROWS, self.hashed)


class KeptDigests:
    """The recorder's side: per instance, each kept-inputs field's running digest."""

    def __init__(self, sums: Any = key_sums):
        self.fields: dict[tuple[Any, str], _FieldDigest | _CountDigest | _KeyRowsDigest] = {}
        self.sums = sums   # a `KEY_ROWS` digest's `key_sums` (the recorder's: in numpy)
        self.per_row: dict[tuple[Any, str], float] = {}   # a `ROWS` field's JSON bytes a row, once estimated

    def rows(self, instance: Any, op: Any, state: dict, inputs: dict[int, int]) -> tuple[dict, int]:
        """`state` with the kept-inputs fields of `op`, an operator that `appends_each_input`,
        replaced by `ROWS` summaries, and the JSON bytes they stand for (estimated: the planner's
        figure). `inputs`: the inputs each port took so far, which are the rows of its field."""
        state, extra = dict(state), 0
        for port, name in enumerate(op.kept_inputs):
            field = state.get(name)
            if type(field) is not dict:
                continue
            rows = inputs.get(port, 0)
            per_row = self.per_row.get((instance, name)) or _per_row(field)
            self.per_row[(instance, name)] = per_row
            state[name] = kept = Kept(len(field), rows, round(rows * per_row), 0, ROWS, None)
            extra += kept.bytes
        return state, extra

    def summarize(self, instance: Any, op: Any, state: dict, changed: dict | None,
                  counted: frozenset = frozenset(), appended: dict | None = None) -> tuple[dict, dict | None, int]:
        """`state` with `op.kept_inputs` fields replaced by their `Kept` summaries (by keys and
        row counts for the fields named in `counted`, whose rows the run file proves), `changed`
        without those fields, and the JSON bytes the summaries stand for (what a checkpoint of
        them would cost: the planner's figure). `appended`: the operator's `appended_rows()`
        since the last snapshot, where it counts them: its counted fields are `KEY_ROWS` digests
        (made from scratch at a snapshot without them)."""
        names = getattr(op, "kept_inputs", ())
        if not names or type(state) is not dict:
            return state, changed, 0
        state, extra = dict(state), 0
        changed = dict(changed) if changed is not None else None
        by_rows = getattr(op, "appended_rows", None) is not None
        with values.gc_paused():
            for name in names:
                field = state.get(name)
                listed = changed.pop(name, None) if changed is not None else None
                if type(field) is not dict:
                    continue
                digest = self.fields.get((instance, name))
                rows_added = appended.get(name) if appended is not None else None
                kind = (_KeyRowsDigest if by_rows else _CountDigest) if name in counted else _FieldDigest
                if (digest is None or listed is None or len(field) < digest.size
                        or (kind is _KeyRowsDigest and rows_added is None)):   # from scratch
                    digest = self.fields[(instance, name)] = (
                        kind(field, self.sums, getattr(op, "kept_lists", False)) if kind is _KeyRowsDigest
                        else kind(field))
                else:
                    new = list(itertools.islice(reversed(field), len(field) - digest.size))[::-1]  # a dict gains keys last
                    if type(digest) is _KeyRowsDigest:
                        digest.update(field, rows_added, listed, new)
                    else:
                        digest.update(field, list(filter(digest.known.__contains__, listed)), listed, new)
                state[name] = kept = digest.kept(field)
                extra += kept.bytes
        return state, changed, extra

"""A join's `key rows` digest of int keys, summed in numpy, with the core's values.

Every recorded task ends with a snapshot of G(θ), and a join's first snapshot digests its
kept inputs from scratch: each key's hash, `hash((key,))`, times its rows plus one, summed
(core/kept_inputs.py, `key_sums`). On TPC-H W2 at 1 interaction/10 s that end snapshot is the
only one, and J1's left side holds 321,000 int keys a task. `key_sums` here computes the same
hashes the way CPython does (Objects/longobject.c: the int modulo 2**61 − 1, signed, −1 as −2;
Objects/tupleobject.c: the 64-bit hash of a 1-tuple) over a numpy array, and their weighted sum
in uint64, whose wrap-around is the modulo the digest takes. Replay keeps the core's `map`:
the core imports no numpy, and `tests/test_units.py` holds the two equal at the edges of an
int's hash.

Spark-free, random int keys with their row counts: 321,000 keys (J1-like), 160.6 ms by the
core's sums, 67.3 ms so (best of 5); 4,000 keys, 719 and 248 µs; 256 keys, 44 and 37 µs (best of
200). J1's end snapshot in W2's tasks at 10 s took a mean of 0.098 s a task by
`map` and 0.065 s so (timed inside the tasks, 1 + 4 recorded runs each).
"""

from __future__ import annotations

from typing import Any

from ..core import kept_inputs

_XXPRIME_1, _XXPRIME_2, _XXPRIME_5 = 11400714785074694791, 14029467366897019727, 2870177450012600261
_XXLEN_1 = 1 ^ (_XXPRIME_5 ^ 3527539)   # what a tuple's hash adds for its length, 1
_INT_MODULUS = (1 << 61) - 1
_ALL_ONES = (1 << 64) - 1                 # -1 as uint64
_IN_NUMPY = 256   # keys from which numpy's fixed costs pay


def int_key_hashes(keys: list) -> Any:
    """`hash((key,))` of each key as a uint64 array, where every key is an int within int64
    (not a bool); None for any other keys."""
    import numpy as np   # here: a task with no big join does not load it

    if not set(map(type, keys)) <= {int}:
        return None
    try:
        k = np.fromiter(keys, np.int64, len(keys))
    except OverflowError:
        return None
    u, negative, one = k.view(np.uint64), k < 0, np.uint64(1)
    magnitude = np.where(negative, ~u + one, u) % np.uint64(_INT_MODULUS)
    lane = np.where(negative, ~magnitude + one, magnitude)
    lane[lane == np.uint64(_ALL_ONES)] = np.uint64(_ALL_ONES - 1)   # hash(-1) is -2
    acc = np.uint64(_XXPRIME_5) + lane * np.uint64(_XXPRIME_2)
    acc = ((acc << np.uint64(31)) | (acc >> np.uint64(33))) * np.uint64(_XXPRIME_1) + np.uint64(_XXLEN_1)
    acc[acc == np.uint64(_ALL_ONES)] = np.uint64(1546275796)   # a tuple's hash is never -1
    return acc


def key_sums(keys: list, weights: Any, plus: int = 0) -> tuple[int, list]:
    """`kept_inputs.key_sums`, the same values: in numpy for many int64 keys, else the core's."""
    hashes = int_key_hashes(keys) if len(keys) >= _IN_NUMPY else None
    if hashes is None:
        return kept_inputs.key_sums(keys, weights, plus)
    import numpy as np

    w = np.full(len(keys), plus, np.uint64) if weights is None else np.asarray(weights, np.uint64) + np.uint64(plus)
    with np.errstate(over="ignore"):
        total = int((w * hashes).sum(dtype=np.uint64))
    sampled = np.flatnonzero(hashes >> np.uint64(kept_inputs._UNSAMPLED) == 0).tolist()
    return total, [keys[i] for i in sampled]

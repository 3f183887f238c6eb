"""What a join's outputs were made from, worked out from its inputs' keys with numpy.

`tt record --lineage` logs, for a join outside G(θ), each input's key alone
(core/runtime.py `JoinLineageRunner`); `logs.made_from_keys` says in plain Python what
follows from the keys: output j of an input was made from the j-th input stored under
its key on the other port. A lineage query reads that for every join instance it walks
through, and the Python loop over TPC-H W2's first join (1.5M inputs) took most of a
query's time; this is the same array, from sorts and gathers.
"""

from __future__ import annotations

from array import array

from ..core import logs


def made_from_keys(runs: list[tuple[int, int, int]], keys: array, counts: array) -> array:
    """`logs.made_from_keys`, vectorized; that one where an output has no stored row to come
    from (the key log and the counts disagree: never for the built-in join)."""
    import numpy as np

    n_keys = len(keys)
    if not n_keys:
        return array("I")
    port_of = np.repeat(np.array([r[0] for r in runs], np.int64), np.array([r[2] for r in runs], np.int64))
    position = np.flatnonzero(port_of >= 0)[:n_keys]          # the inputs that logged a key, in order
    if len(position) < n_keys:
        return logs.made_from_keys(runs, keys, counts)
    count_all = np.frombuffer(counts, np.uint32) if len(counts) else np.zeros(0, np.uint32)
    count = np.zeros(n_keys, np.int64)
    inside = position < len(count_all)
    count[inside] = count_all[position[inside]]
    port = port_of[position]
    key = np.frombuffer(keys, np.int64)

    order = np.lexsort((position, key))                        # by key, then by arrival
    k, p = key[order], port[order]
    group = np.cumsum(np.concatenate(([True], k[1:] != k[:-1]))) - 1
    starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
    stored, first, before = [], [], []
    offset = 0
    for q in (0, 1):
        is_q = p == q
        seen = np.cumsum(is_q) - is_q                          # port-q inputs before each, in this order
        stored.append(position[order][is_q])                   # port q's inputs, by key then arrival
        first.append(seen[starts][group] + offset)             # where its group's port-q inputs start
        before.append(seen - seen[starts][group])              # port-q inputs of its group before it
        offset += int(is_q.sum())
    other = 1 - p
    available = np.where(other == 0, before[0], before[1])
    start = np.where(other == 0, first[0], first[1])
    c = count[order]
    if bool((c > available).any()):
        return logs.made_from_keys(runs, keys, counts)
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    c, start = c[back], start[back]                            # in arrival order again
    total = int(c.sum())
    if not total:
        return array("I")
    ends = np.cumsum(c)
    gather = np.repeat(start, c) + (np.arange(total) - np.repeat(ends - c, c))
    made = np.ones(2 * total, np.uint32)
    made[1::2] = np.concatenate(stored)[gather]
    out = array("I")
    out.frombytes(made.tobytes())
    return out

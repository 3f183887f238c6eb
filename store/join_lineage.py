"""What a join's outputs were made from, worked out from its inputs' keys with numpy.

`tt record --lineage` logs, for a join outside G(θ), each input's key alone
(core/runtime.py `JoinLineageRunner`). What follows from the keys: output j of an input
was made from the j-th input stored under its key on the other port, as `HashJoin.process`
emits them. This gives the `made` log of `runtime.LineageRunner` (per output n, then n input
positions), for a whole instance from sorts and gathers: 0.13 s for an instance shaped like
TPC-H W2's first join (384,000 inputs), where a loop in Python took 0.35 s.
"""

from __future__ import annotations

from array import array


def made_from_keys(runs: list[tuple[int, int, int]], keys: array, counts: array) -> array:
    """The `made` log of a join instance from what `JoinLineageRunner` logged: each input's port
    (its Input log `runs`), key and output count. The end step and a failing input logged no
    key; an output with no stored row to come from (never, for the built-in join) is made from
    nothing (n = 0)."""
    import numpy as np

    port_of = np.repeat(np.array([r[0] for r in runs], np.int64), np.array([r[2] for r in runs], np.int64))
    position = np.flatnonzero(port_of >= 0)[:len(keys)]        # the inputs that logged a key, in order
    if not len(position):
        return array("I")
    count_all = np.frombuffer(counts, np.uint32) if len(counts) else np.zeros(0, np.uint32)
    count = np.zeros(len(position), np.int64)
    inside = position < len(count_all)
    count[inside] = count_all[position[inside]]
    port = port_of[position]
    key = np.frombuffer(keys, np.int64)[:len(position)]

    order = np.lexsort((position, key))                        # by key, then by arrival
    k, p = key[order], port[order]
    new_group = np.concatenate(([True], k[1:] != k[:-1]))
    group, starts = np.cumsum(new_group) - 1, np.flatnonzero(new_group)
    stored, first, before = [], [], []
    offset = 0
    for q in (0, 1):
        is_q = p == q
        seen = np.cumsum(is_q) - is_q                          # port-q inputs before each, in this order
        stored.append(position[order][is_q])                   # port q's inputs, by key then arrival
        first.append(seen[starts][group] + offset)             # where its group's port-q inputs start
        before.append(seen - seen[starts][group])              # port-q inputs of its group before it
        offset += int(is_q.sum())
    back = np.empty_like(order)
    back[order] = np.arange(len(order))                        # to arrival order again
    available = np.where(p == 1, before[0], before[1])[back]
    start = np.where(p == 1, first[0], first[1])[back]
    found = np.minimum(count, available)
    block = 2 * found + (count - found)                        # (1, position) per output found, (0) per other
    if not int(block.sum()):
        return array("I")
    made = np.zeros(int(block.sum()), np.uint32)
    n = int(found.sum())
    j = np.arange(n) - np.repeat(np.cumsum(found) - found, found)   # an output's index among its input's
    slot = np.repeat(np.cumsum(block) - block, found) + 2 * j
    made[slot] = 1
    made[slot + 1] = np.concatenate(stored)[np.repeat(start, found) + j]
    out = array("I")
    out.frombytes(made.tobytes())
    return out

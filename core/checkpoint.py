"""Checkpoints of operator instances, stored incrementally where that is exact.

A checkpoint restores an operator object exactly (it is a pickle, not the JSON
shown to users). The first checkpoint of an instance is *full*; later ones may
be *deltas* against the previous one: for a dict attribute whose values are
immutable (a map of customer -> amount, of group -> count) only the changed and
deleted keys; for a list of immutable items that only grew, the new items;
immutable scalars only when they changed. Anything else (mutable values that
could change in place without the container noticing) is stored whole in every
delta, so a delta is never wrong, only sometimes not small.

`CheckpointWriter` keeps, per instance, what it needs to compute the next delta;
`restore` applies a chain [full, delta, delta, ...] to get the object back. A
restore reads the whole chain, so once the deltas since the last full checkpoint
would add up to more than that full one, the writer takes a full one instead: a
restore never reads more than about twice the state.
"""

from __future__ import annotations

import operator
import pickle
from typing import Any

import cloudpickle

from . import code_pickle
from .state_deltas import changed_entries
from .values import identical, immutable, immutable_items

FULL, DELTA = "full", "delta"


class _Memo:
    """What the previous checkpoint of an instance held, to diff against."""

    __slots__ = ("dicts", "lists", "scalars", "chain", "full_bytes", "delta_bytes")

    def __init__(self, full_bytes: int = 0):
        self.dicts: dict[str, dict] = {}
        self.lists: dict[str, list] = {}
        self.scalars: dict[str, Any] = {}
        self.chain = 0  # deltas since the last full checkpoint
        self.full_bytes = full_bytes  # size of that full checkpoint
        self.delta_bytes = 0  # and of the deltas since


class CheckpointWriter:
    """Produces full or delta checkpoints of operator objects, per instance."""

    def __init__(self, full_every: int = 16):
        self.full_every = full_every
        self.memos: dict[Any, _Memo] = {}

    def take(self, key: Any, op: Any) -> tuple[str, bytes]:
        """(kind, bytes) of a checkpoint of `op`, the instance known as `key`."""
        memo = self.memos.get(key)
        if memo is None or memo.chain >= self.full_every:
            return self._full(key, op)
        delta: dict[str, tuple] = {}
        attrs = vars(op)
        for name in set(memo.dicts) | set(memo.lists) | set(memo.scalars) | set(attrs):
            if name not in attrs:
                delta[name] = ("del",)
                continue
            value = attrs[name]
            if name in memo.dicts and type(value) is dict and immutable_items(value.values()):
                prev = memo.dicts[name]
                changed, deleted = changed_entries(prev, value)
                if not _same_order(prev, value, len(prev) - len(deleted)):
                    delta[name] = ("set", value)  # a key was re-inserted: its position moved
                elif changed or deleted:
                    delta[name] = ("dict", changed, deleted)
            elif name in memo.lists and type(value) is list and immutable_items(value):
                prev = memo.lists[name]
                if len(value) >= len(prev) and _kept_prefix(prev, value):
                    if len(value) > len(prev):
                        delta[name] = ("append", value[len(prev):])
                else:
                    delta[name] = ("set", value)
            elif name in memo.scalars and immutable(value):
                if not identical(memo.scalars[name], value):
                    delta[name] = ("set", value)
            else:
                delta[name] = ("set", value)
        try:
            data = pickle.dumps(delta, protocol=5)
        except (pickle.PicklingError, TypeError, AttributeError):
            data = code_pickle.dumps(delta)
        if memo.delta_bytes + len(data) > memo.full_bytes:
            return self._full(key, op)  # the chain would cost more to restore than a full one
        memo.chain += 1
        memo.delta_bytes += len(data)
        self._remember(op, memo)
        return DELTA, data

    def _full(self, key: Any, op: Any) -> tuple[str, bytes]:
        data = code_pickle.dumps(op)
        self.memos[key] = self._remember(op, _Memo(len(data)))
        return FULL, data

    @staticmethod
    def _remember(op: Any, memo: _Memo) -> _Memo:
        memo.dicts.clear()
        memo.lists.clear()
        memo.scalars.clear()
        for name, value in vars(op).items():
            if type(value) is dict and immutable_items(value.values()):
                memo.dicts[name] = dict(value)
            elif type(value) is list and immutable_items(value):
                memo.lists[name] = list(value)
            elif immutable(value):
                memo.scalars[name] = value
        return memo


def restore(chain: list[tuple[str, bytes]]) -> Any:
    """The operator object from a full checkpoint followed by its deltas."""
    if not chain or chain[0][0] != FULL:
        raise ValueError("a checkpoint chain starts with a full checkpoint")
    op = cloudpickle.loads(chain[0][1])
    for kind, data in chain[1:]:
        delta = pickle.loads(data)
        attrs = vars(op)
        for name, change in delta.items():
            how = change[0]
            if how == "del":
                attrs.pop(name, None)
            elif how == "set":
                attrs[name] = change[1]
            elif how == "append":
                attrs[name].extend(change[1])
            elif how == "dict":
                d = attrs[name]
                for k in change[2]:
                    d.pop(k, None)
                d.update(change[1])  # existing keys keep their place, new ones come last
    return op


def _kept_prefix(prev: list, value: list) -> bool:
    """Whether `value` starts with `prev`'s items, unchanged: the same objects (C speed), or
    else items that nothing tells apart (`True` where `1` was is a change)."""
    head = value[:len(prev)]
    return all(map(operator.is_, prev, head)) or all(map(identical, prev, head))


def _same_order(prev: dict, value: dict, survivors: int) -> bool:
    """Whether `value` is prev's surviving keys, in their order, then only new keys."""
    import itertools

    if survivors == len(prev):
        return list(itertools.islice(value, survivors)) == list(prev)
    return list(itertools.islice(value, survivors)) == [k for k in prev if k in value]

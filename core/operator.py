"""The operator API: a stateful Python class that consumes one tuple per step.

An operator's public attributes are its state. `process(row, port)` consumes one
tuple and returns (or yields) the tuples it emits; `finish()` runs once after the
last input and may emit more (an aggregate emits its groups there). Every output
goes to every downstream edge of the operator.

The built-in operators below are ordinary operators: they have state, they are
recorded, and they can be stepped into like user code.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Callable, Iterable

from . import values
from .kept_inputs import APPENDED

_IMMUTABLE = (int, float, str, bytes, bool, tuple, frozenset, type(None))


class Operator:
    """Base class for user operators. Subclass it and implement `process`."""

    #: Set by the dataflow builder (a private attribute, so it is not state).
    _tt_name: str = ""

    def process(self, row: Any, port: int = 0) -> Iterable[Any] | None:
        """Consume one input tuple from input `port`; return or yield outputs."""
        raise NotImplementedError(f"{type(self).__name__}.process is not implemented")

    def finish(self) -> Iterable[Any] | None:
        """Called once after the last input; may emit tuples. Default: nothing."""
        return None

    def state(self) -> dict:
        """The state shown by the debugger and checked by `tt verify`."""
        return values.public_attrs(vars(self))

    def is_stateful(self) -> bool:
        return bool(self.state())

    #: Optional, for operators whose state is a big dict that grows: `changed_keys()`
    #: returns {field: keys whose value changed since the previous call}. Such a field
    #: must only gain keys or change values; the recorder then stores each interaction's
    #: state as the changed and the new keys instead of comparing the whole dict
    #: (core/state_deltas.py). The built-in Aggregate and HashJoin keep it. A dict of keys
    #: may say how each changed: `kept_inputs.APPENDED`, rows only added at the end of its
    #: list (the list and the rows before are the same objects, unchanged), which a
    #: kept-inputs field's digest then hashes alone; any other value, changed in any way.
    changed_keys: Callable[[], dict[str, Iterable]] | None = None

    #: Optional, with `changed_keys`, for an operator whose kept-inputs fields only gain rows:
    #: `appended_rows()` returns {field: {key: rows added at the end of its list}} between the
    #: last two `changed_keys()` calls, every key whose rows changed in number among them. A
    #: field whose rows the run file proves is then digested from those counts (`KEY_ROWS`,
    #: core/kept_inputs.py), not from its lists. The built-in HashJoin keeps it.
    appended_rows: Callable[[], dict[str, dict]] | None = None

    #: True when every value of its kept-inputs fields is a list (the built-in HashJoin's rows
    #: under each key): a `KEY_ROWS` digest then reads their lengths without checking their type.
    kept_lists: bool = False

    #: True when each input on port i is appended, as it came, to its key's list in the i-th
    #: kept-inputs field, and nothing else adds rows to those fields or takes any away (the
    #: built-in HashJoin): a field's rows at an interaction are then the inputs its port took,
    #: in the order the run file fixes, so interactions store its keys and rows, and only its
    #: task's end the digest of its values (core/kept_inputs.py `ROWS`).
    appends_each_input: bool = False

    #: Optional, for row lineage (replay/lineage.py, docs/LINEAGE.md), never called while
    #: recording: `emitted_from(row, port, n)` says, for each of the n tuples just emitted for
    #: `row` (None, port -1: by `finish()`), which state it was made from, as a list of paths
    #: `(field, key)` or `(field, key, i)` (item i of a list stored under key). Without it, an
    #: output is made from every state its call read before emitting it.
    emitted_from: Callable[[Any, int, int], list[list[tuple]]] | None = None

    #: True when the operator changes the lists it stores only by appending to them (the built-in
    #: join): row lineage then tells what a call did to a list by its length alone, instead of
    #: comparing the whole list before and after every call (replay/state_access.py).
    appends_only: bool = False

    #: Optional, for whole-job lineage (`tt record --lineage`), called right after `process(row,
    #: port)`: `kept_in(row, port)` gives `(kept, matched)`, the state path `(field, key)` where
    #: the call kept what it took from `row` (a join's stored row, an aggregate's group) and the
    #: path whose item j the call's output j was made from (a join: the stored rows of the other
    #: side), each or None. With `emitted_from` for `finish()`'s outputs, it lets an operator
    #: outside G(θ), whose state is never replayed, log which earlier inputs each output was made
    #: from (core/runtime.py `LineageRunner`): the built-in join and aggregate declare both.
    kept_in: Callable[[Any, int], tuple] | None = None

    #: True when the state paths `emitted_from` names hold the input rows themselves, unchanged
    #: (the built-in join's stored rows): `--lineage` then finds their positions by identity
    #: instead of calling `kept_in` for every input (core/runtime.py `StoredLineageRunner`).
    stores_inputs: bool = False

    #: Optional, for a symmetric hash join (the built-in one): the key the last call stored its
    #: input under, whose outputs were made, the j-th, from the j-th row stored under that key on
    #: the other port. `--lineage` then logs an input's key alone, as LOG.io logs ids, and the
    #: reader works out what each output was made from (store/join_lineage.py).
    join_key: Callable[[], Any] | None = None

    #: The state fields that hold the operator's inputs as they came, by key, the i-th those of
    #: port i (the built-in join's `left` and `right`): the run file has those rows already, as
    #: logged inputs or source positions, so interactions store a digest of such a field, not a
    #: copy, and `tt verify` digests the replayed field to compare (core/kept_inputs.py).
    kept_inputs: tuple[str, ...] = ()

    def log_result(self, fn: Callable, *args, **kwargs):
        """Call non-deterministic `fn` while recording; replay returns the logged value."""
        return log_result(fn, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._tt_name or '?'}>"


def call_adapter(op: Operator) -> Callable[[Any, int], Any]:
    """`op.process` as a two-argument callable, whether or not it takes `port`."""
    fn = op.process
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return fn
    if len(params) >= 2:
        return fn
    return lambda row, port: fn(row)


# --- non-determinism -------------------------------------------------------

class _Context:
    """The runner currently executing operator code in this process."""

    runner = None


CONTEXT = _Context()


def log_result(fn: Callable, *args, **kwargs):
    """Wrap a non-deterministic call (random draw, clock, external service).

    While recording, `fn(*args, **kwargs)` runs and its result is logged; in a
    replay the logged result is returned and `fn` is not called. Outside tt the
    call simply runs.
    """
    runner = CONTEXT.runner
    if runner is None:
        return fn(*args, **kwargs)
    return runner.log_result(fn, args, kwargs)


# --- built-in operators ----------------------------------------------------

class Source(Operator):
    """Emits the rows of a Spark DataFrame or RDD partition, unchanged."""

    def process(self, row, port=0):
        return (row,)


class Map(Operator):
    def __init__(self, fn: Callable[[Any], Any]):
        self._fn = fn

    def process(self, row, port=0):
        return (self._fn(row),)


class Filter(Operator):
    def __init__(self, predicate: Callable[[Any], bool]):
        self._predicate = predicate

    def process(self, row, port=0):
        return (row,) if self._predicate(row) else ()


class FlatMap(Operator):
    def __init__(self, fn: Callable[[Any], Iterable[Any]]):
        self._fn = fn

    def process(self, row, port=0):
        return list(self._fn(row))


class Union(Operator):
    """Merges its inputs; the order it consumed them in is logged."""

    def process(self, row, port=0):
        return (row,)


class Aggregate(Operator):
    """Group-by aggregate: folds each row into its key's accumulator; emits at the end."""

    def __init__(self, key: Callable[[Any], Any], zero: Any, fold: Callable[[Any, Any], Any],
                 emit: Callable[[Any, Any], Any] | None = None):
        self._key = key
        self._zero = zero
        self._fold = fold
        self._emit = emit or (lambda k, acc: {"key": k, "value": acc})
        self.groups: dict = {}
        self._changed: dict | None = None   # keys changed since the last changed_keys(), once asked

    def process(self, row, port=0):
        k = self._key(row)
        acc = self.groups.get(k, _MISSING)
        if acc is _MISSING:
            acc = self._zero if isinstance(self._zero, _IMMUTABLE) else copy.deepcopy(self._zero)
        self.groups[k] = self._fold(acc, row)
        if self._changed is not None:
            self._changed[k] = None
        return None

    def changed_keys(self) -> dict:
        changed, self._changed = self._changed or {}, {}
        return {"groups": changed}

    def finish(self):
        return [self._emit(k, acc) for k, acc in self.groups.items()]

    def emitted_from(self, row, port, n):
        """The j-th row `finish()` emits is made from the j-th group alone."""
        return [[("groups", k)] for k in self.groups] if port == -1 else [[]] * n

    def kept_in(self, row, port):
        return ("groups", self._key(row)), None


class HashJoin(Operator):
    """Symmetric hash join of port 0 (left) and port 1 (right) on their keys."""

    appends_only = True
    stores_inputs = True
    kept_inputs = ("left", "right")

    def __init__(self, left_key: Callable, right_key: Callable,
                 merge: Callable[[Any, Any], Any] | None = None):
        self._keys = (left_key, right_key)
        self._merge = merge or _merge_rows
        self.left: dict = {}
        self.right: dict = {}
        self._added: tuple[dict, dict] | None = None     # per port, rows added per key, once changed_keys() was asked
        self._touched: tuple[dict, dict] | None = None   # per port, keys whose rows a merge was handed
        self._appended: dict = {}                        # `_added` as the last changed_keys() took it
        self._key: Any = None                            # the last call's key (`join_key`)

    def process(self, row, port=0):
        self._key = k = self._keys[port](row)
        mine, other = (self.left, self.right) if port == 0 else (self.right, self.left)
        mine.setdefault(k, []).append(row)
        matches = other.get(k)
        if self._added is not None:
            added = self._added[port]
            added[k] = added.get(k, 0) + 1   # a row added at the end of k's list
            if matches:   # `merge` gets the stored rows too, and might change them
                self._touched[1 - port][k] = None
        if not matches:
            return None
        if port == 0:
            return [self._merge(row, r) for r in matches]
        return [self._merge(l, row) for l in matches]

    def changed_keys(self) -> dict:
        """Each side's keys that gained rows (`APPENDED`) or whose rows a merge was handed (None)."""
        added, self._added = self._added or ({}, {}), ({}, {})
        touched, self._touched = self._touched or ({}, {}), ({}, {})
        self._appended = {"left": added[0], "right": added[1]}
        listed = []
        for appended, handed in zip(added, touched):
            how = dict.fromkeys(appended, APPENDED)
            how.update(handed)
            listed.append(how)
        return {"left": listed[0], "right": listed[1]}

    def appended_rows(self) -> dict:
        """Per side, the rows added under each key between the last two `changed_keys()`."""
        return self._appended

    @property
    def kept_lists(self) -> bool:
        """Whether every value of `left` and `right` is a list, as `process` stores rows: a
        digest then reads their lengths unchecked (core/kept_inputs.py `_KeyRowsDigest`)."""
        return self.appends_each_input

    @property
    def appends_each_input(self) -> bool:
        """Whether `process` is this one, which appends each input to its key's list: its
        interactions store its sides' keys and rows (core/kept_inputs.py `ROWS`)."""
        return type(self).process is HashJoin.process

    def __setstate__(self, state: dict) -> None:
        """A restored join (a checkpoint in replay, one saved by a tt that kept `_changed` too)
        counts nothing until asked, as a new one: only the recorder asks."""
        state = {k: v for k, v in state.items() if k != "_changed"}
        state.update(_added=None, _touched=None, _appended={})
        self.__dict__.update(state)

    def join_key(self) -> Any:
        return self._key

    def keys_logged_to(self, log: Callable[[Any], Any]) -> Callable[[Any, int], Any] | None:
        """`process`, handing each input's key to `log` once its outputs are made, so an input
        whose `merge` raised logs none (`tt record --lineage`: core/runtime.py
        `JoinLineageRunner`), or None where a subclass processes otherwise. `process`'s lines
        again rather than a call of it: a join outside G(θ) takes most of a job's tuples (W2's
        J1: 1.5M), and asking `join_key()` after each, then checking what it gave, was most of
        what `--lineage` cost on TPC-H W2."""
        if type(self).process is not HashJoin.process:
            return None
        keys = self._keys

        def process(row, port=0):
            self._key = k = keys[port](row)
            mine, other = (self.left, self.right) if port == 0 else (self.right, self.left)
            mine.setdefault(k, []).append(row)
            matches = other.get(k)
            if self._added is not None:
                added = self._added[port]
                added[k] = added.get(k, 0) + 1
                if matches:
                    self._touched[1 - port][k] = None
            outs = (None if not matches else [self._merge(row, r) for r in matches] if port == 0
                    else [self._merge(l, row) for l in matches])
            log(k)
            return outs

        return process

    def emitted_from(self, row, port, n):
        """Output j of a probing row is made from the j-th stored row of its key on the other side
        (and from the probing row itself, which lineage knows)."""
        if port == -1:
            return []
        return [[("right" if port == 0 else "left", self._keys[port](row), j)] for j in range(n)]

    def kept_in(self, row, port):
        k = self._keys[port](row)
        return ("left", k) if port == 0 else ("right", k), ("right", k) if port == 0 else ("left", k)


class Sink(Operator):
    """The end of a dataflow: passes rows to Spark (a DataFrame, files, the driver)."""

    def __init__(self):
        self.rows = 0

    def process(self, row, port=0):
        self.rows += 1
        return (row,)

    def emitted_from(self, row, port, n):
        """A sink passes its row on: the count of rows is no part of it."""
        return [[]] * n


def _merge_rows(left, right):
    if isinstance(left, dict) and isinstance(right, dict):
        return {**left, **right}
    return (left, right)


class _Missing:
    pass


_MISSING = _Missing()

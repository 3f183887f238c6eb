"""Which state each call of an operator read and wrote, and what each output was made from.

Row lineage (replay/lineage.py) needs it; it is computed while lineage replays a run,
never while recording. Each public dict field of the operator is replaced by a
`TrackedDict`, which reports reads and writes of its keys; every other public field
(or, for an operator with its own `state()`, a hooked function, each field of that state: its
attributes, closure, globals, locals; a key of one is traced as the whole field) is one slot
that every call reads and that a call writes when its value changed. A StatefulProcessor's state
variables and an applyInPandasWithState function's GroupStates are reported per key by
their operator instead (`watch_state_calls`, `state_call`). A *slot* is `(field, key)` or
`(field,)`. The rules (docs/LINEAGE.md):

* reads: `d[k]`, `get`, `in`, `setdefault`, `pop`; iterating reads each key as it
  comes; `len`, comparing and copying read every key;
* writes: `d[k] = v`, `setdefault` creating a key, `update`, and any key read in the
  call whose value changed during it (`d.get(k).append(x)`); `pop`, `del`, `clear`
  delete;
* a write in a call that read the slot before adds the call to the slot's writers; a
  write without a read, or a deletion, replaces them: the value no longer depends on
  the earlier writers; so does a call that the operator says makes its state anew
  (`replaces_state`: a UDTF's `init`, which makes the next key's handler);
* an item appended to a list value is written by the call that appended it alone;
* output j of a call is made from the writers of the slots the call read before
  emitting it (for a generator: since its previous output) and of every non-dict
  field but the counters (fields the class's code only updates with `+=` and the like,
  `counters`), unless the operator's `emitted_from` names the paths it was made from.

Writers are chains `(position, earlier writers)`, newest first, shared between slots
and calls, so a counter that every call bumps costs one pair per call.
"""

from __future__ import annotations

import dis
import pickle
import types
from typing import Any, Callable, Iterator

from ..core import values
from ..core.operator import Operator

Slot = tuple        # (field, key) or (field,)
Writers = tuple     # (position of the call, earlier Writers or None)
Made = tuple        # ((path, Writers), ...): the state one output was made from

_MISSING = object()
_SCALARS = frozenset({int, str, bool, bytes, type(None)})


def positions(writers: Writers | None) -> Iterator[int]:
    """The calls of a chain of writers, newest first."""
    while writers is not None:
        yield writers[0]
        writers = writers[1]


def includes(writers: Writers | None, position: int) -> bool:
    """Whether call `position` is one of the writers (a chain is newest first)."""
    while writers is not None and writers[0] > position:
        writers = writers[1]
    return writers is not None and writers[0] == position


def _within(tail: Writers, chain: Writers | None) -> bool:
    """Whether `tail` is part of `chain` (a slot read again after the call added itself)."""
    while chain is not None and chain[0] > tail[0]:
        chain = chain[1]
    return chain is tail


def path_text(path: tuple) -> str:
    """('seen', 'c2') -> "seen['c2']"; ('right', 3, 0) -> 'right[3][0]'."""
    return path[0] + "".join(f"[{k!r}]" for k in path[1:])


def counters(cls: type) -> frozenset[str]:
    """The fields that the operator's own code only ever updates by augmented assignment
    (`self.scored += 1`): a counter's value goes into itself alone, so no output is made from
    it. Read from the bytecode of every function of the class (not `tt.Operator`'s); a class
    that reaches its fields by name (`getattr`, `vars`, `__dict__`) has none."""
    codes: list[types.CodeType] = []
    for klass in cls.__mro__:
        if klass is Operator or klass is object:
            continue
        for v in vars(klass).values():
            if isinstance(v, (staticmethod, classmethod)):
                v = v.__func__
            if isinstance(v, property):
                codes += [f.__code__ for f in (v.fget, v.fset, v.fdel) if f is not None]
            elif isinstance(v, types.FunctionType):
                codes.append(v.__code__)
    augmented: set[str] = set()
    read: set[str] = set()
    while codes:
        code = codes.pop()
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        if {"getattr", "vars", "__dict__", "__getattribute__"} & set(code.co_names):
            return frozenset()
        ins = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG")]
        for n, i in enumerate(ins):
            if i.opname != "LOAD_ATTR":
                continue
            name = i.argval
            store = next((k for k in range(n + 1, len(ins)) if ins[k].opname == "STORE_ATTR"
                          and ins[k].argval == name), None)
            if (n >= 1 and ins[n - 1].opname == "COPY" and ins[n - 1].arg == 1 and store is not None
                    and ins[store - 1].opname == "SWAP" and ins[store - 2].opname == "BINARY_OP"
                    and ins[store - 2].argrepr.endswith("=") and ins[store - 2].argrepr != "=="):
                augmented.add(name)
            else:
                read.add(name)
    return frozenset(augmented - read)


def fingerprint(value: Any) -> Any:
    """Equal for equal values of a field or key, cheap for scalars: tells whether a call changed it.

    A pickle (9x faster than the JSON encoding `tt verify` compares, which this replay paid on
    every key a call touched); where two equal values pickle apart (an object shared in one, copied
    in the other), the call counts as a writer: more links, never fewer. What pickle refuses is
    encoded as `tt verify` does."""
    t = type(value)
    if t in _SCALARS:
        return t, value
    if t is float:
        return t, repr(value)   # NaN equals itself here
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:  # noqa: BLE001  (pickle raises TypeError, PicklingError, AttributeError, ...)
        return values.dumps(value)


class TrackedDict(dict):
    """A dict field of an operator that reports each key read and written to its `StateAccess`."""

    __slots__ = ("_access", "_field")

    def __getitem__(self, key):
        self._access.read(self, key)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self._access.read(self, key)
        return dict.get(self, key, default)

    def __contains__(self, key):
        self._access.read(self, key)
        return dict.__contains__(self, key)

    def setdefault(self, key, default=None):
        self._access.read(self, key)
        if not dict.__contains__(self, key):
            self._access.write(self, key)
        return dict.setdefault(self, key, default)

    def __setitem__(self, key, value):
        self._access.write(self, key)
        dict.__setitem__(self, key, value)

    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other):
        self.update(other)
        return self

    def __delitem__(self, key):
        self._access.delete(self, key)
        dict.__delitem__(self, key)

    def pop(self, key, *default):
        self._access.read(self, key)
        if dict.__contains__(self, key):
            self._access.delete(self, key)
        return dict.pop(self, key, *default)

    def popitem(self):
        if dict.__len__(self):
            key = next(reversed(dict.keys(self)))
            self._access.read(self, key)
            self._access.delete(self, key)
        return dict.popitem(self)

    def clear(self):
        for key in list(dict.keys(self)):
            self._access.delete(self, key)
        dict.clear(self)

    def __iter__(self):
        for key in dict.keys(self):
            self._access.read(self, key)
            yield key

    def keys(self):
        return _View(self, 0)

    def values(self):
        return _View(self, 1)

    def items(self):
        return _View(self, 2)

    def __reversed__(self):
        for key in reversed(dict.keys(self)):
            self._access.read(self, key)
            yield key

    def _read_all(self) -> dict:
        """Every key read: the dict as a plain one."""
        for key in dict.keys(self):
            self._access.read(self, key)
        return dict(dict.items(self))

    def __len__(self):
        return len(self._read_all())

    def __eq__(self, other):
        return self._read_all() == other

    def __ne__(self, other):
        return self._read_all() != other

    __hash__ = None

    def copy(self):
        return self._read_all()

    def __or__(self, other):
        return self._read_all() | other

    def __reduce__(self):
        return dict, (dict(dict.items(self)),)


class _View:
    """`keys()`, `values()` or `items()` of a TrackedDict: each key is read as iteration reaches it."""

    __slots__ = ("_d", "_kind")

    def __init__(self, d: TrackedDict, kind: int):
        self._d, self._kind = d, kind

    def __iter__(self):
        d, kind = self._d, self._kind
        for key, value in dict.items(d):
            d._access.read(d, key)
            yield key if kind == 0 else value if kind == 1 else (key, value)

    def _whole(self):
        whole = self._d._read_all()
        return (whole.keys(), whole.values(), whole.items())[self._kind]

    def __len__(self):
        return len(self._whole())

    def __contains__(self, x):
        return self._d.__contains__(x) if self._kind == 0 else x in self._whole()

    def __reversed__(self):
        return reversed(list(self))

    def __eq__(self, other):
        return self._whole() == other

    def __and__(self, other):
        return self._whole() & other

    def __or__(self, other):
        return self._whole() | other

    def __sub__(self, other):
        return self._whole() - other

    def __xor__(self, other):
        return self._whole() ^ other

    def __repr__(self):
        return repr(self._whole())


class StateAccess:
    """The state accesses of one operator instance, call by call: `begin(position)`, the
    call through `traced`, then `end(row, port)`. `made[position]` holds, per output of
    that call, the state it was made from (for calls that emitted something made from state)."""

    def __init__(self, op: Operator):
        self.op = op
        self.writers: dict[Slot, Writers] = {}
        self.items: dict[Slot, list] = {}          # per list value: the writers of each item
        self.made: dict[int, list[Made]] = {}
        self.outputs: list | tuple = ()           # what the current call emitted
        # a StatefulProcessor's keyed state lives behind its handle, an applyInPandasWithState
        # function's in its GroupStates: the operator reports each call's key (`watch_state_calls`),
        # and the user's object's own attributes are plain slots
        self._by_calls = getattr(op, "watch_state_calls", None) is not None
        self._own_state = type(op).state is not Operator.state and not self._by_calls
        owner = op.fields_owner() if self._by_calls else op   # whose code writes the plain fields
        self._counters = (frozenset() if self._own_state or isinstance(owner, types.FunctionType)
                          else counters(type(owner)))
        # an operator that lists the keys it changed (the built-in join and aggregate) changes a stored
        # list item only by replacing it, as the recorder's state deltas assume: its lists are compared
        # by their items' identities, not encoded (a join's list of a thousand rows, on every call)
        self._items_kept = getattr(op, "changed_keys", None) is not None
        self._appends_only = getattr(op, "appends_only", False)
        self._dicts: dict[str, TrackedDict] = {}
        self._plain: dict[str, Any] = {}           # field -> fingerprint after the last call
        self._paused = False
        self.begin(-1)
        for name, value in self._slot_fields().items():
            if type(value) is dict and not self._own_state and not self._by_calls:
                self._track(name, value)
            else:
                self._plain[name] = fingerprint(value)
        if self._by_calls:
            op.watch_state_calls(self.state_call)

    # --- one call ---------------------------------------------------------------------

    def begin(self, position: int) -> None:
        self.position = position
        self._before: dict[Slot, tuple] = {}      # slot -> (fingerprint, list length, writers) at first touch
        self._read: set[Slot] = set()
        self._wrote: set[Slot] = set()
        self._since: dict[Slot, list] = {}         # slot -> the writers read since the previous output
        self._per_output: list[Made] = []
        self.outputs = ()

    def traced(self, fn: Callable) -> Callable:
        """`fn` (a `process` or `finish`), with each output's reads taken as it is emitted."""
        def call(*args):
            outs = fn(*args)
            if outs is None or type(outs) is list or type(outs) is tuple:
                made = self._take()
                self._per_output, self.outputs = [made] * len(outs or ()), outs or ()
                return outs
            if type(outs) is dict:   # the runtime refuses it, as it did when recording
                return outs
            emitted, per = [], []
            for o in outs:
                emitted.append(o)
                per.append(self._take())
            self._per_output, self.outputs = per, emitted
            return emitted
        return call

    def end(self, row: Any, port: int) -> None:
        """After the call: what its outputs were made from, then the writes it made in place."""
        if self.outputs:
            made = self._made(row, port, len(self.outputs))
            if any(made):
                self.made[self.position] = made
        replaces = getattr(self.op, "replaces_state", None)
        self._settle(fresh=replaces is not None and replaces(row))

    # --- reports from TrackedDict -----------------------------------------------------------

    def read(self, d: TrackedDict, key: Any) -> None:
        if self._paused:
            return
        slot = (d._field, key)
        self._touch(slot, d, key)
        self._read_slot(slot)

    def write(self, d: TrackedDict, key: Any) -> None:
        if self._paused:
            return
        slot = (d._field, key)
        self._touch(slot, d, key)
        self._write_slot(slot)

    def delete(self, d: TrackedDict, key: Any) -> None:
        if self._paused:
            return
        slot = (d._field, key)
        self._touch(slot, d, key)
        self.writers[slot] = (self.position, None)
        self._wrote.add(slot)

    def state_call(self, kind: str, variable: str, key: Any) -> None:
        """A call's access to `variable` under `key`, as its operator reports it (a processor's
        state calls: core/state_handle.py `ACCESS`): the value lives in Spark's store or a
        GroupState, changed only by such calls, so nothing is compared after the call. A
        "change" (an append, one map entry) keeps what earlier writers wrote."""
        if self._paused:
            return
        slot = (variable, key)
        if kind == "read" or kind == "change":
            self._read_slot(slot)
        if kind == "delete":
            self.writers[slot] = (self.position, None)
            self._wrote.add(slot)
        elif kind != "read":
            self._write_slot(slot)

    def _read_slot(self, slot: Slot) -> None:
        self._read.add(slot)
        w = self.writers.get(slot)
        if w is not None:
            seen = self._since.setdefault(slot, [])
            if not any(_within(w, x) for x in seen):
                seen[:] = [x for x in seen if not _within(x, w)] + [w]

    def _write_slot(self, slot: Slot) -> None:
        if slot in self._read:
            self._add_writer(slot)
        else:
            self.writers[slot] = (self.position, None)
        self._wrote.add(slot)

    # --- inside --------------------------------------------------------------------------

    def fields(self) -> dict[str, Any]:
        """The fields as tracked (the whole `state()`, for an operator that has its own; for
        one that reports its keyed state, its `state()` with those keys among it)."""
        if self._by_calls or self._own_state:   # (a hooked function's: its attributes, closure, globals, locals)
            return self.op.state()
        return values.public_attrs(vars(self.op))

    def _slot_fields(self) -> dict[str, Any]:
        """The fields whose changes are found by comparing them after each call: all of them but
        the keyed state an operator reports itself (`state_call`)."""
        return self.op.own_fields() if self._by_calls else self.fields()

    def _track(self, name: str, value: dict) -> None:
        tracked = TrackedDict(value)
        tracked._access, tracked._field = self, name
        setattr(self.op, name, tracked)
        self._dicts[name] = tracked

    def _touch(self, slot: Slot, d: TrackedDict, key: Any) -> None:
        if slot not in self._before:
            v = dict.get(d, key, _MISSING)
            length = len(v) if type(v) is list else 0 if v is _MISSING else None
            self._before[slot] = (self._fp(v) if v is not _MISSING else _MISSING, length, self.writers.get(slot))

    def _fp(self, value: Any) -> Any:
        if type(value) is list:
            if self._appends_only:
                return "length", len(value)
            if self._items_kept:
                return "items", tuple(map(id, value))
        return fingerprint(value)

    def _add_writer(self, slot: Slot) -> None:
        """The call wrote a slot it had read: its value depends on the earlier writers too."""
        prev = self.writers.get(slot)
        if prev is None or prev[0] != self.position:
            self.writers[slot] = (self.position, prev)

    def _take(self) -> Made:
        made = tuple((slot, w) for slot, ws in self._since.items() for w in ws)
        self._since = {}
        return made

    def _made(self, row: Any, port: int, n: int) -> list[Made]:
        hook = self.op.emitted_from
        if hook is not None:
            self._paused = True
            try:
                paths = hook(row, port, n)
            finally:
                self._paused = False
            if paths is not None:
                return [tuple((p, w) for p in ps if (w := self.writers_of(p)) is not None) for ps in paths]
        plain = tuple(((s,), w) for s in self._plain
                      if s not in self._counters and (w := self.writers.get((s,))) is not None)
        return [m + plain for m in self._per_output]

    def traced_whole(self, path: tuple) -> tuple | None:
        """The field `path` lies in, where that field is traced whole (a hooked function's: a
        call that changed any of its keys wrote it); None where the path is traced itself."""
        return path[:1] if len(path) > 1 and path[0] in self._plain else None

    def writers_of(self, path: tuple) -> Writers | None:
        """The calls that wrote `path` ((field,), (field, key) or (field, key, item)), newest first."""
        slot = path[:2]
        if len(path) == 3:
            items = self.items.get(slot)
            if items is not None and path[2] < len(items):
                return items[path[2]]
        if self.traced_whole(path) is not None:   # a key of a field traced whole (a hooked function's)
            return self.writers.get(path[:1])
        return self.writers.get(slot)

    def _settle(self, fresh: bool = False) -> None:
        """The writes a call made in place (a key's value changed without `d[k] = v`), and
        fields it changed, replaced, added or removed. `fresh`: the call made the operator's
        state anew (a UDTF's `init`, a new handler: `replaces_state`), reading none of it, so
        the fields it changed depend on it alone."""
        fields = self._slot_fields()
        for slot, (before, length, writers) in self._before.items():
            d = self._dicts.get(slot[0])
            if d is None or fields.get(slot[0]) is not d:
                continue
            now = dict.get(d, slot[1], _MISSING)
            if (self._fp(now) if now is not _MISSING else _MISSING) == before:
                continue
            if slot not in self._wrote:
                self._add_writer(slot)   # changed in place: read first, or it could not be reached
            self._settle_items(slot, now, length, before, writers)
        for name, value in fields.items():
            if self._dicts.get(name, _MISSING) is value:   # (a field set to None is no tracked dict)
                continue
            if type(value) is dict and not self._own_state and not self._by_calls:
                self._replaced(name, value)
                continue
            self._dicts.pop(name, None)
            fp = fingerprint(value)
            if self._plain.get(name, _MISSING) != fp:
                if fresh:
                    self.writers[(name,)] = (self.position, None)
                else:
                    self._add_writer((name,))   # every call reads a plain field
                self._plain[name] = fp
        for name in [n for n in (*self._dicts, *self._plain) if n not in fields]:
            self.writers[(name,)] = (self.position, None)
            self._dicts.pop(name, None)
            self._plain.pop(name, None)

    def _settle_items(self, slot: Slot, now: Any, length: int | None, before: Any, writers: Writers | None) -> None:
        """Items appended to a list value are the appending call's alone; any other change
        makes every item the key's writers'."""
        if type(now) is not list:
            self.items.pop(slot, None)
            return
        if length is not None and len(now) >= length and (length == 0 or self._fp(now[:length]) == before):
            old = self.items.get(slot)
            if old is None or len(old) != length:
                old = [writers] * length
            self.items[slot] = old + [(self.position, None)] * (len(now) - length)
        else:
            self.items[slot] = [self.writers.get(slot)] * len(now)

    def _replaced(self, name: str, value: dict) -> None:
        """A dict field assigned anew (or added): its keys are written by this call."""
        old = self._dicts.get(name)
        for key in (dict.keys(old) - value.keys()) if old is not None else ():
            self.writers[(name, key)] = (self.position, None)
        for key in value:
            slot = (name, key)
            if slot in self._read:
                self._add_writer(slot)
            else:
                self.writers[slot] = (self.position, None)
            self.items.pop(slot, None)
        self._plain.pop(name, None)
        self._track(name, value)

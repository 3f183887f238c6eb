"""Operator states and tuples as JSON, without losing what tells values apart.

States are stored as JSON so that `sqlite3`, `tt inspect --json` and the TUI can
read them without unpickling anything. `tt verify` compares these encodings, so
the encoding must keep apart values that behave differently: a tuple is not a
list, `1` is not `"1"` as a dict key, a Decimal is not a float. JSON-native
values pass through unchanged; everything else becomes a one-key object whose
key starts with `$` (`{"$tuple": [...]}`, `{"$set": [...]}`, ...). An object is its class
and public attributes (`{"$object": ..., "attrs": ...}`); what holds its values elsewhere
(an array, a Series, an enum member) is encoded by them (`_whole`), so that two that differ
never encode alike; what belongs to the process (a module, a logger) by its name; anything
else by its repr, without a memory address.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import decimal
import enum
import gc
import logging
import math
import operator
import random
import re
import types
from itertools import chain, compress, repeat
from typing import Any, Iterator

import orjson

from .shared_variables import RecordedAccumulator, RecordedBroadcast, is_spark_accumulator_class, is_spark_broadcast_class

INT64 = 2**63   # ints in [-INT64, INT64) are int64s
_IMMUTABLE = frozenset({int, float, str, bytes, bool, type(None), complex, frozenset})
IMMUTABLE_TYPES = _IMMUTABLE   # (for a caller that passes over such a value without calling `immutable`)


# numpy's scalars (PySpark hands a grouping key's values as these), by name: core does not
# import numpy. Not `void` (a structured scalar is a view that can be written) nor `object_`.
_NUMPY_SCALARS = frozenset({"bool", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                            "longlong", "ulonglong", "float16", "float32", "float64", "longdouble", "complex64",
                            "complex128", "clongdouble", "str_", "bytes_", "datetime64", "timedelta64"})


def immutable(value: Any) -> bool:
    """Whether nothing can change `value` in place: a scalar, or a tuple of such. (Asked of
    every logged result and hooked unit: a tuple's plain scalars are passed over without a call.)"""
    t = type(value)
    if t in _IMMUTABLE:
        return True
    if t is tuple:
        for v in value:
            if type(v) not in _IMMUTABLE and not immutable(v):
                return False
        return True
    return t.__module__ == "numpy" and t.__name__ in _NUMPY_SCALARS


def identical(a: Any, b: Any) -> bool:
    """Whether nothing tells `a` from `b`, for immutable values: `==` alone takes `1` for
    `True`, `0.0` for `-0.0` and `Decimal('1.0')` for `Decimal('1.00')`, and a state delta
    or a checkpoint delta that trusted it would lose such a change."""
    if a is b:
        return True
    t = type(a)
    if t is not type(b):
        return False
    if t is int or t is str or t is bytes or t is bool:
        return a == b
    if t is float:
        if a != a:
            return b != b   # NaN, whatever its payload
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if t is tuple:
        return len(a) == len(b) and all(map(identical, a, b))
    try:
        return bool(a == b) and repr(a) == repr(b)
    except Exception:  # noqa: BLE001  (a value whose == refuses: not known to be the same)
        return False


def immutable_items(items) -> bool:
    """Whether every item is `immutable` (checked by type at C speed first)."""
    if set(map(type, items)) <= _IMMUTABLE:
        return True
    return all(immutable(v) for v in items)

# Attributes that tt itself puts on operators; never part of the user's state.
_HIDDEN_PREFIX = "_"


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _plain_container(value: Any) -> bool:
    """A dict with str keys or a list whose items are all JSON scalars (`_plain_scalars`).

    Such containers (most operator states: counters, maps of customer -> amount)
    are already their own encoding; walking them in Python would cost ten times
    more than serializing them.
    """
    if type(value) is dict:
        if len(value) == 1 or set(map(type, value)) - {str}:
            return False  # a single key may look like a tag; non-str keys need tagging
        return _plain_scalars(value.values())
    return _plain_scalars(value)


def _plain_scalars(items: Any) -> bool:
    """Whether every item is a JSON scalar that is its own encoding (a finite float, an int64),
    strings and numbers mixed, checked at C speed: the floats' sum is finite only where each one
    is (an overflowing sum sends the items the slow way, which says the same)."""
    kinds = list(map(type, items))
    types = set(kinds)
    if not types <= _PLAIN:
        return False
    if float in types and not math.isfinite(sum(compress(items, map(operator.is_, kinds, repeat(float))))):
        return False
    if int in types:
        ints = list(compress(items, map(operator.is_, kinds, repeat(int))))
        if not (-INT64 <= min(ints) and max(ints) < INT64):
            return False
    return True


def _plain_rows(rows: Any, kind: type = list) -> bool:
    """Whether every one of `rows` is a list (or a `kind`) of `_plain_scalars`. A list of them is
    its own encoding, however short: an Aggregate's accumulators (TPC-H Q10's: `[custkey,
    revenue, name, balance, nation]` under each customer) are such lists, too short for
    `_plain_container`; walked item by item the state of a W2 task's last snapshot (9,500
    customers) took 27 ms to store, 9 ms so. Tuples of them are a StatefulProcessor's value
    state of several columns, as a task's view holds it per key (the keyed bench's `(sum, n)`)."""
    return operator.countOf(map(type, rows), kind) == len(rows) and _plain_scalars(list(chain.from_iterable(rows)))


def _int_keyed_pairs(value: dict) -> list | None:
    """The encoding of a dict whose keys are int64s, as its `{"$dict": [[key, value], ...]}`
    pairs, where its values are all `_plain_scalars` (an Aggregate's running sums per customer)
    or all `_plain_rows` (made in C), or all such rows as tuples (`{"$tuple": [...]}` each, in one
    comprehension: a view of 2,500 keys' `(sum, n)` took 2.6 ms walked value by value); None
    for any other."""
    if set(map(type, value)) != {int} or not _plain_scalars(value):   # (its keys: int64s)
        return None
    values = list(value.values())
    if _plain_scalars(values) or _plain_rows(values):
        return list(map(list, value.items()))
    if _plain_rows(values, tuple):
        return [[k, {"$tuple": list(v)}] for k, v in value.items()]
    return None


def encode(value: Any) -> Any:
    """Return a JSON-native structure that round-trips through `decode`.

    A value that leads back to itself (an object whose attributes do: a tree with parent
    links) is encoded with each return shown as `<cycle: T>` where it closes the loop, and
    one nested deeper than JSON is written (`_DEEPEST` levels) as `<too deep: T>` there
    (`_acyclic`): recorded and replayed alike, since only the value's shape decides. The
    walk that finds them costs only such values: the first try is the plain one."""
    try:
        return _encode(value)
    except RecursionError:
        return _encode(_acyclic(value, set(), 0))


def _encode(value: Any) -> Any:
    t = type(value)
    if (t is dict or t is list) and len(value) > 8:
        if _plain_container(value):
            return value
        pairs = _int_keyed_pairs(value) if t is dict else None
        if pairs is not None:
            return {"$dict": pairs}
    if t is str or t is bool or value is None:
        return value
    if t is int:
        return value if -INT64 <= value < INT64 else {"$int": str(value)}
    if t is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if t is dict:
        if all(type(k) is str for k in value):
            out = {k: _encode(v) for k, v in value.items()}
            if len(out) == 1 and next(iter(out)).startswith("$"):
                return {"$dict": [[k, v] for k, v in out.items()]}
            return out
        return {"$dict": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if t is list:
        return [_encode(v) for v in value]
    if t is tuple:
        return {"$tuple": [_encode(v) for v in value]}
    if t is set or t is frozenset:
        items = sorted((_encode(v) for v in value), key=_sort_key)
        return {"$set" if t is set else "$frozenset": items}
    if t is bytes or t is bytearray:
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, _dt.datetime):   # (pandas' NaT is one, unequal to itself, and no isoformat reads it back)
        return {"$datetime": value.isoformat()} if value == value or _encoding < 2 else {"$repr": "NaT"}
    if isinstance(value, _dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, _dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, _dt.timedelta):
        return {"$timedelta": value.total_seconds()}
    if isinstance(value, bool):  # bool subclasses such as numpy.bool_ land here
        return bool(value)
    if isinstance(value, int):
        return _encode(int(value))
    if isinstance(value, float):
        return _encode(float(value))
    if isinstance(value, dict):
        return _encode(dict(value))
    if isinstance(value, (list, tuple)):
        return _encode(list(value)) if isinstance(value, list) else _encode(tuple(value))
    if t.__module__ == "numpy" and getattr(value, "shape", None) == ():  # numpy.int64, numpy.bool_
        return _encode(value.item())
    as_json = getattr(t, "__tt_json__", None)
    if as_json is not None:   # a summary the recorder stores in place of a value (core/kept_inputs.py)
        return as_json(value)
    table = _table_summary(value)
    if table is not None:   # (since encoding 4 with a digest of its values: `tt verify` compares them)
        return {"$repr": table if _encoding < 4 else _with_digest(table, value)}
    whole = _whole(value, t)
    if whole is not None:
        return whole
    attrs = _attributes(value)
    if attrs is not None:
        return {"$object": f"{t.__module__}.{t.__qualname__}", "attrs": _encode(attrs)}
    return {"$repr": _ADDRESS.sub("", repr(value))}


#: ` at 0x7f3a…` in a default repr (`<unlocked _thread.lock object at 0x…>`): where the object
#: lies in this process's memory, which a replay's copy never shares, so it is left out.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_LOGGING = (logging.Logger, logging.Handler, logging.Manager, logging.PlaceHolder)
_PANDAS_ARRAYS = ("pandas.core.indexes.", "pandas.core.arrays.")

#: An array of up to this many items is encoded item by item; a bigger one by its first
#: `_FIRST` items and a digest of all its bytes (xxh3-128), which `tt verify` compares.
SHOWN_ITEMS = 1000
_FIRST = 10


#: This tt's encoding of states, stored in a run's meta (`state_encoding`): 2 encodes what
#: `_kind` names by its values; 3 a random generator by its state and an accumulator by its
#: value too; 4 a DataFrame or an Arrow batch or table by a digest of its values beside its
#: shape (3 and earlier: its shape alone, whatever its values). A run is replayed with the encoding it stored (`use_encoding`; 1 where it stored
#: none), so that what it stored compares with what its replay encodes. 1: an enum member, a
#: pandas Series, Index or array by its public attributes (none), a numpy array by its repr,
#: NaT as a `$datetime`; 1 and 2: a random generator and an accumulator by their attributes or
#: repr.
ENCODING = 4
_encoding = ENCODING
_SINCE_2 = frozenset({"ndarray", "arrow", "repr", "broadcast", "series", "pandas"})
_SINCE_3 = frozenset({"rng", "accumulator"})


def use_encoding(version: int) -> None:
    """Encode as encoding `version` did, from now on in this process (the replay engine, for the
    run it replays; the recorder, `ENCODING`)."""
    global _encoding
    _encoding = version


def _whole(value: Any, t: type) -> dict | None:
    """The encoding of what is not walked attribute by attribute (`_kind`), or None."""
    kind = (_CLASSES.get(t) or _class(t))[0]
    if not kind:
        return None
    if _encoding < 3 and kind in _SINCE_3:
        return None   # (walked as any object, as encodings 1 and 2 did)
    if kind == "rng":
        return _generator(value, t)
    if kind == "accumulator":   # (its `value` refuses to be read in a task: `_value` is this task's sum)
        return {"$object": "pyspark.Accumulator", "attrs": {"id": value.aid, "value": _encode(value._value)}}
    if _encoding < 2 and kind in _SINCE_2:   # (a run recorded by an earlier tt, replayed)
        if kind in ("ndarray", "arrow"):
            return {"$repr": _ADDRESS.sub("", repr(value))}
        return {"$object": f"{t.__module__}.{t.__qualname__}", "attrs": _encode(_attributes(value) or {})}
    if kind == "module":
        return {"$repr": f"<module {value.__name__!r}>"}
    if kind == "logging":
        name = getattr(value, "name", None)
        return {"$repr": f"<{t.__name__}{' ' + name if isinstance(name, str) else ''}>"}
    if kind == "repr":
        return {"$repr": _ADDRESS.sub("", repr(value))}
    if kind == "broadcast":
        return {"$repr": "<Broadcast>"}
    name = f"{t.__module__}.{t.__qualname__}"
    if kind == "ndarray":
        return _array(value, name, {})
    if kind == "arrow":
        return _array(value.to_numpy(zero_copy_only=False), name, {"type": str(value.type)})
    # (an extension dtype's values as Python objects: `to_numpy()` makes [1, <NA>] of Int64 floats)
    items = value.to_numpy() if type(value.dtype).__module__ == "numpy" else value.to_numpy(dtype=object)
    if kind == "series":
        return _array(items, name, {"name": _encode(value.name), "dtype": str(value.dtype),
                                    "index": _encode(value.index)})
    return _array(items, name, {"dtype": str(value.dtype), **(   # a pandas Index or array
        {"name": _encode(value.name)} if getattr(value, "name", None) is not None else {})})


def _generator(value: Any, t: type) -> dict | None:
    """A random generator (`random.Random`, numpy's `Generator`, `RandomState` or bit generator)
    as `<T state DIGEST>`, the xxh3-64 of its internal state: two that would draw alike encode
    alike, and one that drew once more does not (its attributes are none of that: every
    `Random()` showed as `{gauss_next: None}`, every numpy `Generator(PCG64)` alike). None for one
    without a state to read (`SystemRandom`): its attributes or repr, as before."""
    import xxhash

    try:
        if isinstance(value, random.Random):
            data = repr(value.getstate()).encode()
        else:
            state = (value.bit_generator.state if hasattr(value, "bit_generator") else
                     value.get_state(legacy=False) if hasattr(value, "get_state") else value.state)
            data = orjson.dumps(_encode(state), option=orjson.OPT_SORT_KEYS)
    except (NotImplementedError, AttributeError, TypeError):
        return None
    return {"$repr": f"<{t.__name__} state {xxhash.xxh3_64_hexdigest(data)}>"}


def _kind(t: type) -> str:
    """What `_whole` does with an object of class `t`; "" for nothing (its attributes are walked):

    - a module or a logging object, shown by its name: what it holds (a module's globals, a
      logger's manager of every logger in the process) is the process's, not the operator's
      state, and differs between the recording's worker and a replay;
    - a PySpark broadcast variable, as `<Broadcast>`, recorded or replayed (core/shared_variables.py):
      the job's input, whose value replay holds as the driver did;
    - an enum member, by its repr (`<Color.RED: 1>`): its name and value are not attributes;
      pandas' RangeIndex and NA by theirs (`RangeIndex(start=0, stop=3, step=1)`, `<NA>`);
    - a numpy array, a pandas Series, Index or array, an Arrow array, by dtype, shape and items
      (`_array`): their values are not attributes either (a Series showed as `{}`), and their
      reprs leave out items and digits;
    - a random generator, by a digest of its internal state (`_generator`);
    - a DataFrame or an Arrow batch or table, by its shape and a digest of its values
      (`_table_digest`, since encoding 4; encoded in `_encode`, not here);
    - a PySpark accumulator, by its id and what this task (or its replay) added to it: its
      attributes are its id and its parameter, and `value` cannot be read in a task."""
    if issubclass(t, types.ModuleType):
        return "module"
    if issubclass(t, _LOGGING):
        return "logging"
    if issubclass(t, enum.Enum):
        return "repr"
    if issubclass(t, RecordedBroadcast) or any(map(is_spark_broadcast_class, t.__mro__)):
        return "broadcast"
    if issubclass(t, random.Random):
        return "rng"
    if issubclass(t, RecordedAccumulator) or is_spark_accumulator_class(t):
        return "accumulator"
    for cls in t.__mro__:   # (by name, a subclass too: the core imports neither numpy, pandas nor pyarrow)
        module, name = cls.__module__, cls.__name__
        if module == "numpy" and name == "ndarray":
            return "ndarray"
        if module.startswith("numpy.random") and name in ("Generator", "RandomState", "BitGenerator"):
            return "rng"
        if module == "pyarrow.lib" and name.endswith("Array") and callable(getattr(t, "to_numpy", None)):
            return "arrow"
        if module.startswith("pandas") and name in ("Series", "RangeIndex", "NAType"):
            return "series" if name == "Series" else "repr"   # (a RangeIndex's repr is all of it; NA's is `<NA>`)
        if module.startswith(_PANDAS_ARRAYS) and callable(getattr(t, "to_numpy", None)):
            return "pandas"
    return ""


def _array(a: Any, name: str, attrs: dict) -> dict:
    """A numpy array (or what a pandas or Arrow one gives as one) as an object of its dtype,
    shape and items: all of them up to `SHOWN_ITEMS`, else the first `_FIRST` and the
    xxh3-128 of its bytes in C order (of its items' encoding, where they are Python objects)."""
    attrs = {"dtype": str(a.dtype), **attrs, "shape": list(a.shape)}
    if a.size <= SHOWN_ITEMS:
        attrs["items"] = _encode(a.tolist())
        return {"$object": name, "attrs": attrs}
    import xxhash

    attrs["first"] = _encode(a.ravel()[:_FIRST].tolist())
    attrs["xxh3"] = xxhash.xxh3_128_hexdigest(_digested(a))
    return {"$object": name, "attrs": attrs}


def _attributes(value: Any) -> dict | None:
    """An object's public attributes, from its `__dict__`, and from its classes' `__slots__`
    where it has no repr of its own (such an object showed as `<Point object>`, every one
    alike; one with its own repr, a UUID, shows its values there); None for an object with
    neither."""
    attrs = getattr(value, "__dict__", None)
    out = public_attrs(attrs) if isinstance(attrs, dict) else None
    t = type(value)
    for slot in (_CLASSES.get(t) or _class(t))[1]:
        try:
            item = getattr(value, slot)
        except AttributeError:   # a slot not set
            continue
        out = {} if out is None else out
        out.setdefault(slot, item)
    return out


_CLASSES: dict[type, tuple[str, tuple[str, ...]]] = {}   # class -> (`_kind`, the slots `_attributes` reads)


def _class(t: type) -> tuple[str, tuple[str, ...]]:
    """`_kind(t)`, and the public slots of class `t` and its bases where it has no repr of its
    own: worked out once per class."""
    names: list[str] = []
    if t.__repr__ is object.__repr__:
        for cls in t.__mro__:
            slots = cls.__dict__.get("__slots__") if cls.__module__ != "builtins" else None
            for slot in (slots,) if isinstance(slots, str) else slots or ():
                if not slot.startswith(_HIDDEN_PREFIX) and slot not in ("__dict__", "__weakref__", *names):
                    names.append(slot)
    if len(_CLASSES) > 4096:   # (classes a long-lived worker unpickled task after task)
        _CLASSES.clear()
    _CLASSES[t] = out = (_kind(t), tuple(names))
    return out


#: Levels of nesting `_acyclic` keeps: each may be three in JSON (`{"$dict": [[k, v]]}`), and
#: orjson writes at most 255.
_DEEPEST = 64


class _Encoded:
    """A part of a value `_acyclic` encoded already: a cut (`<cycle: T>`, `<too deep: T>`), an
    object from its cut attributes, or what `_whole` encodes."""

    __slots__ = ("encoded",)

    def __init__(self, encoded: Any):
        self.encoded = encoded

    def __tt_json__(self) -> Any:
        return self.encoded


_ATOMS = frozenset({str, bool, type(None), int, float, bytes, bytearray, complex})
_LEAVES = (decimal.Decimal, _dt.date, _dt.time, _dt.timedelta, int, float)   # (bool is an int, datetime a date)


def _acyclic(value: Any, path: set[int], depth: int) -> Any:
    """`value` as `_encode` walks it, with the walk cut where it would come back to a value it
    is inside (`path`: their ids) or go deeper than `_DEEPEST`: the containers it walks are
    copied (a dict, list or tuple subclass as `_encode` takes it, as the plain one), the objects
    encoded from their cut attributes; whatever `_encode` does not walk is kept as it is."""
    t = type(value)
    if t in _ATOMS or isinstance(value, _LEAVES):
        return value
    container = t is set or t is frozenset or isinstance(value, (dict, list, tuple))
    attrs = None
    if not container:
        if ((t.__module__ == "numpy" and getattr(value, "shape", None) == ())
                or getattr(t, "__tt_json__", None) is not None or is_table(t)):
            return value
        whole = _whole(value, t)
        if whole is not None:
            return _Encoded(whole)
        attrs = _attributes(value)
        if attrs is None:
            return value
    if id(value) in path:
        return _Encoded({"$repr": f"<cycle: {t.__qualname__}>"})
    if depth >= _DEEPEST:
        return _Encoded({"$repr": f"<too deep: {t.__qualname__}>"})
    path.add(id(value))
    try:
        inner = depth + 1
        if attrs is not None:
            walked = _encode(_acyclic(attrs, path, inner))
            return _Encoded({"$object": f"{t.__module__}.{t.__qualname__}", "attrs": walked})
        if t is set or t is frozenset:
            return t(_acyclic(v, path, inner) for v in value)
        if isinstance(value, dict):
            return {_acyclic(k, path, inner): _acyclic(v, path, inner) for k, v in value.items()}
        if isinstance(value, list):
            return [_acyclic(v, path, inner) for v in value]
        return tuple(_acyclic(v, path, inner) for v in value)
    finally:
        path.discard(id(value))


def is_table(t: type) -> bool:
    """A pandas DataFrame or an Arrow batch or table (by module: the core imports neither)."""
    module = t.__module__.split(".")[0]
    return (module == "pandas" and t.__name__ == "DataFrame") or (module == "pyarrow" and t.__name__ in
                                                                  ("RecordBatch", "Table"))


def _table_summary(value: Any) -> str | None:
    """A DataFrame or Arrow batch as its shape (`encode` adds a digest of its values)."""
    if not is_table(type(value)):
        return None
    if type(value).__module__.startswith("pandas"):
        rows, names = len(value), [str(c) for c in value.columns]
    else:
        rows, names = value.num_rows, list(value.schema.names)
    shown = ", ".join(names[:6]) + (", …" if len(names) > 6 else "")
    return f"<{type(value).__name__}: {rows} rows × {len(names)} columns ({shown})>"


def _with_digest(summary: str, value: Any) -> str:
    """A table's `_table_summary` with the digest of its values: `<DataFrame: …, xxh3 5f0c…>`."""
    return f"{summary[:-1]}, xxh3 {_table_digest(value)}>"


def _table_digest(value: Any) -> str:
    """The xxh3-64 of a DataFrame's or Arrow batch's or table's values, column by column (its
    name, dtype and values: a fixed-width column's bytes, any other's items as JSON), and of a
    DataFrame's index: two tables that hold the same values digest alike. A DataFrame in an
    operator's state (`self.history = pd.concat(...)`) was shown by its shape alone, so a replay
    that changed its values passed `tt verify`.

    A DataFrame's columns are read as pandas holds them (`_get_column_array`, where this pandas
    has it), not as Series: `frame.iloc[:, i]` took 70 % of a one-row frame's digest (cProfile),
    which a recorded processor takes of every 16th frame it emits (core/output_digest.py). The bytes are
    the same either way (tests/test_units.py), so digests of runs recorded before still agree."""
    import xxhash

    h = xxhash.xxh3_64()
    if type(value).__module__.startswith("pandas"):
        held = getattr(value, "_get_column_array", None)
        columns = [(name, held(i) if held is not None else value.iloc[:, i]) for i, name in enumerate(value.columns)]
        columns.append(("$index", value.index))
        arrays = ((name, c.dtype, c if type(c).__name__ == "ndarray" else c.to_numpy()
                   if type(c.dtype).__module__.startswith("numpy") else c.to_numpy(dtype=object))   # (numpy.dtypes)
                  for name, c in columns)
    else:
        arrays = ((name, c.type, c.to_numpy() if hasattr(c, "chunks") else c.to_numpy(zero_copy_only=False))
                  for name, c in zip(value.schema.names, value.columns))   # (a Table's columns are chunked)
    for name, dtype, a in arrays:
        h.update(_column_head(name, dtype))
        h.update(_digested(a))
    return h.hexdigest()


_HEADS: dict[tuple, bytes] = {}   # (types of name and dtype, name, dtype) -> what `_column_head` gave


def _column_head(name: Any, dtype: Any) -> bytes:
    """What a table's digest reads of a column before its values: its name and dtype, as JSON
    (kept per name and dtype, as a processor emits frames of one shape: `str` of a numpy dtype
    runs numpy's Python code)."""
    key = (type(name), type(dtype), name, dtype)   # (types too: 1 == 1.0 == True, and a dtype may equal another library's)
    try:
        return _HEADS[key]
    except (KeyError, TypeError):   # (TypeError: a name or dtype that cannot be a key)
        pass
    head = orjson.dumps([_encode(name), str(dtype)])
    try:
        if len(_HEADS) > 1024:
            _HEADS.clear()
        _HEADS[key] = head
    except TypeError:
        pass
    return head


def _digested(a: Any) -> bytes:
    """What a digest of a numpy array reads: a fixed-width array's bytes in C order, any other's
    items encoded as JSON (strings and None as they are, at C speed: `_encode` gives them back
    unchanged, so the bytes are the same either way)."""
    if not a.dtype.hasobject:
        return a.tobytes()
    items = a.tolist()
    plain = set(map(type, items)) <= _STR_OR_NONE
    return orjson.dumps(items if plain else _encode(items), option=orjson.OPT_SORT_KEYS)


_STR_OR_NONE = frozenset({str, type(None)})


#: A DataFrame or Arrow batch is shown as its rows up to this many (`readable`; a bigger one, as its shape).
SHOWN_ROWS = 5


def field_names(row: Any) -> list[str] | None:
    """The names of a row's fields where it is a tuple that has them: a PySpark `Row` made
    with names (`Row(customer='Bob', ...)`, what a transformWithState processor emits) or a
    namedtuple. Tested by shape: the core does not import PySpark."""
    if type(row) is tuple or not isinstance(row, tuple):
        return None
    names = getattr(type(row), "_fields", None)   # a namedtuple
    if names is None:
        try:
            names = row.__fields__   # a Row's own; a Row made without names has none (AttributeError)
        except AttributeError:
            return None
    if isinstance(names, (list, tuple)) and len(names) == len(row) and all(type(n) is str for n in names):
        return list(names)
    return None


def table_rows(value: Any, most: int | None = None) -> list[dict] | None:
    """The rows of a DataFrame or an Arrow batch (what a pandas or Arrow hooked function emits, a
    transformWithStateInPandas processor's `yield pd.DataFrame(...)`), each a dict of its columns;
    None for any other value, and for one of more than `most` rows."""
    if not is_table(type(value)):
        return None
    if type(value).__module__.startswith("pandas"):
        if most is not None and len(value) > most:
            return None
        return _frame_records(value)
    if most is not None and value.num_rows > most:
        return None
    return value.to_pylist()


def _frame_records(frame: Any) -> list[dict]:
    """`frame.to_dict("records")`, several times faster on the small frames a hooked function's
    units are (`tt lineage --where` reads every row of every group): a column of a plain numpy
    type is boxed by `tolist` (Python scalars, Timestamps) as pandas boxes it, and so is an object
    column of plain Python values; any other goes through pandas' own `to_dict`."""
    if not frame.columns.is_unique or len(frame.columns) == 0:
        return frame.to_dict("records")   # (pandas' own rules for a repeated label, for no column)
    names = frame.columns.tolist()
    columns = []
    for i, (name, column) in enumerate(frame.items()):
        dtype = column.dtype
        plain = type(dtype).__module__.startswith("numpy")
        items = column.tolist() if plain else None
        if not plain or (dtype.kind == "O" and not all(type(v) in _UNBOXED for v in items)):
            items = [row[name] for row in frame.iloc[:, [i]].to_dict("records")]
        columns.append(items)
    return [dict(zip(names, row)) for row in zip(*columns)]


_UNBOXED = frozenset({str, int, float, bool, bytes, type(None)})   # what pandas leaves as it is in a record


def readable(value: Any) -> Any:
    """A tuple as a person reads it: every named row in it (`field_names`) as the dict of its
    fields, and a DataFrame or Arrow batch of a few rows (`SHOWN_ROWS`) as its rows, a hooked
    operator's unit too (`('row', Row(...))`); a bigger table as its shape (`_Shape`). For display only (the debugger, `tt inspect`, `tt lineage`): state and digests
    encode the value itself."""
    names = field_names(value)
    if names is not None:
        return {k: readable(v) for k, v in zip(names, value)}
    if type(value) is tuple or type(value) is list:
        return type(value)(map(readable, value)) if any(isinstance(v, (tuple, list)) or is_table(type(v))
                                                        for v in value) else value
    rows = table_rows(value, SHOWN_ROWS)
    if rows is not None:
        return rows
    shape = _table_summary(value)
    return _Shape(shape) if shape is not None else value


class _Shape:
    """A bigger table as `readable` shows it: its shape, without the digest of its values that
    a state's encoding computes (`tt verify` compares states, not how a tuple is shown)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __tt_json__(self) -> dict:
        return {"$repr": self.text}


def encode_readable(value: Any) -> Any:
    """`encode` of `readable(value)`: how a tuple is shown."""
    return encode(readable(value))


def _sort_key(v: Any) -> bytes:
    return orjson.dumps(v, option=orjson.OPT_SORT_KEYS)


_SCALAR_TAGS = {
    "$int": int,
    "$float": float,
    "$decimal": decimal.Decimal,
    "$datetime": _dt.datetime.fromisoformat,
    "$date": _dt.date.fromisoformat,
    "$time": _dt.time.fromisoformat,
    "$timedelta": lambda s: _dt.timedelta(seconds=s),
    "$bytes": base64.b64decode,
}


def decode(value: Any) -> Any:
    """Inverse of `encode` for the tagged types; objects stay as their attrs dict."""
    if type(value) is list:
        return [decode(v) for v in value]
    if type(value) is not dict:
        return value
    if len(value) == 1:
        (tag, inner), = value.items()
        if tag in _SCALAR_TAGS:
            return _SCALAR_TAGS[tag](inner)
        if tag == "$tuple":
            return tuple(decode(v) for v in inner)
        if tag == "$set":
            return {_hashable(decode(v)) for v in inner}
        if tag == "$frozenset":
            return frozenset(_hashable(decode(v)) for v in inner)
        if tag == "$dict":
            return {_hashable(decode(k)): decode(v) for k, v in inner}
        if tag == "$repr":
            return inner
    if "$object" in value and len(value) == 2:
        return decode(value["attrs"])
    return {k: decode(v) for k, v in value.items()}


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def dumps(value: Any) -> bytes:
    """Encode and serialize; keys sorted so equal states give equal bytes.

    A value nested deeper than orjson writes is cut as one that holds itself (`encode`).
    The cyclic garbage collector is paused meanwhile: encoding a big state makes
    millions of containers, none of them in a cycle, and the collector's passes over
    them took more time than the encoding itself (a join's 500k rows: 2-3 s, 1 s without)."""
    with gc_paused():
        encoded = encode(value)
        try:
            return orjson.dumps(encoded, option=orjson.OPT_SORT_KEYS)
        except TypeError as e:   # nested deeper than orjson writes, though not deeper than Python's stack
            if "Recursion" not in str(e):
                raise
            return orjson.dumps(_encode(_acyclic(value, set(), 0)), option=orjson.OPT_SORT_KEYS)


def table_dumps(value: Any) -> bytes:
    """`dumps(value)` of a DataFrame or an Arrow batch or table (`is_table`), without the walk
    through `_encode`'s cases to it: what an output digest reads of each batch it takes."""
    table = _table_summary(value) if _encoding >= 4 else None
    if table is None:   # (another class of that name; an older encoding)
        return dumps(value)
    return orjson.dumps({"$repr": _with_digest(table, value)})


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: for encoding big values (see `dumps`)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


@contextlib.contextmanager
def gc_resumed() -> Iterator[None]:
    """Cyclic garbage collection on inside a `gc_paused` block: for a replay of user code, whose
    garbage may hold cycles (a lineage query pauses collection, and replays only where it must)."""
    paused = not gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if paused:
            gc.disable()


def loads(data: bytes) -> Any:
    """The JSON structure (still tagged); use `decode` for Python values."""
    return orjson.loads(data)


def exact_json(value: Any) -> bytes | None:
    """`value` as plain JSON when JSON gives back exactly the same value (same types,
    down to every item: str, bool, None, 64-bit ints, finite floats, lists, dicts
    with str keys), else None. Stored values that replay reads back this way can be
    read without unpickling anything."""
    if not _json_exact(value, 0):
        return None
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return None


def json_exact(value: Any, depth: int = 0) -> bool:
    """Whether `exact_json` would give `value` back exactly, as an item `depth` levels down a
    value it writes."""
    return _json_exact(value, depth)


def _json_exact(v: Any, depth: int) -> bool:
    t = type(v)
    if t is str or t is bool or v is None:
        return True
    if t is int:
        return -INT64 <= v < INT64
    if t is float:
        return math.isfinite(v)
    if depth > 200:  # orjson's own limit is 255 levels
        return False
    if t is list:
        return all(_json_exact(x, depth + 1) for x in v)
    if t is dict:
        return all(type(k) is str and _json_exact(x, depth + 1) for k, x in v.items())
    return False


def public_attrs(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if not k.startswith(_HIDDEN_PREFIX)}


def render(value: Any, limit: int | None = 80) -> str:
    """A short human-readable rendering of an encoded value (for one-line views; whole
    with `limit=None`)."""
    text = _render(value)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def render_apart(a: Any, b: Any, limit: int = 60) -> tuple[str, str]:
    """`render` of two values that differ, each cut to `limit`; where the cuts would read the
    same (two DataFrames whose digests differ, at the end of `<DataFrame: 1000 rows × 7 columns
    (…), xxh3 …>`), each from a little before where their texts first differ, '…' first."""
    cut_a, cut_b = render(a, limit), render(b, limit)
    if cut_a != cut_b:
        return cut_a, cut_b
    whole_a, whole_b = render(a, None), render(b, None)
    if whole_a == whole_b:
        return cut_a, cut_b
    at = next((i for i, (x, y) in enumerate(zip(whole_a, whole_b)) if x != y), min(len(whole_a), len(whole_b)))
    start = max(0, at - 12)

    def cut(text: str) -> str:
        text = "…" + text[start:]
        return text if len(text) <= limit else text[: limit - 1] + "…"
    return cut(whole_a), cut(whole_b)


def _render(v: Any) -> str:
    if isinstance(v, dict):
        if len(v) == 1:
            (tag, inner), = v.items()
            if tag in ("$int", "$float", "$decimal", "$datetime", "$date", "$time"):
                return str(inner)
            if tag == "$tuple":
                return "(" + ", ".join(_render(x) for x in inner) + ("," if len(inner) == 1 else "") + ")"
            if tag in ("$set", "$frozenset"):   # (stored in the order of their JSON; numbers shown as numbers sort)
                if inner and all(type(x) in (int, float) for x in inner):
                    inner = sorted(inner)
                return "{" + ", ".join(_render(x) for x in inner) + "}" if inner else "set()"
            if tag == "$dict":
                return "{" + ", ".join(f"{_render(k)}: {_render(x)}" for k, x in inner) + "}"
            if tag == "$repr":
                return inner
            if tag == "$bytes":
                return f"b64'{inner}'"
            if tag == "$kept" and isinstance(inner, dict):
                digest = ("digest at its task's end" if inner.get("of") == "rows"
                          else f"digest {str(inner.get('digest', ''))[:8]}")
                return f"‹{inner.get('rows', 0):,} rows under {inner.get('keys', 0):,} keys, kept as inputs ({digest})›"
        if "$object" in v and len(v) == 2:
            array = render_array(v)
            return array if array is not None else v["$object"].rsplit(".", 1)[-1] + _render(v["attrs"])
        return "{" + ", ".join(f"{k}: {_render(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_render(x) for x in v) + "]"
    if isinstance(v, str):
        return repr(v)
    if v is None:
        return "None"
    return str(v)


def render_array(v: dict) -> str | None:
    """An encoded array (`_array`) as numpy shows one: `ndarray([1.5, 2.0], float64)`, a Series
    with its name (`Series 'amount'([...], float64)`), a long one by its first items, its shape
    and its digest's start; None for any other encoded object."""
    attrs = v.get("attrs")
    if not (isinstance(attrs, dict) and {"dtype", "shape"} <= attrs.keys()
            and ("items" in attrs or {"first", "xxh3"} <= attrs.keys())):
        return None
    label = str(v.get("$object")).rsplit(".", 1)[-1]
    if attrs.get("name") is not None:
        label += f" {_render(attrs['name'])}"
    if "items" in attrs:
        return f"{label}({_render(attrs['items'])}, {attrs['dtype']})"
    first, shape = ", ".join(_render(x) for x in attrs["first"]), "×".join(map(str, attrs["shape"]))
    return f"{label}([{first}, …] {shape} {attrs['dtype']}, xxh3 {str(attrs['xxh3'])[:8]})"


def same_encoded(a: Any, b: Any) -> bool:
    """Whether two encoded values (states as stored: JSON-native) are the same. `==` alone
    takes `1` for `True` and `0.0` for `-0.0`, which their JSON tells apart."""
    if a is b:
        return True
    return a == b and orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first place where two encoded values differ: (path, a_part, b_part)."""
    if type(a) is not type(b):
        return path or "<root>", a, b
    if isinstance(a, dict) and "$kept" in a and len(a) == 1:   # a summary compares whole
        return None if a == b else (path or "<root>", a, b)
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return _join(path, k), a.get(k, "<missing>"), b.get(k, "<missing>")
            d = first_difference(a[k], b[k], _join(path, k))
            if d:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        if len(a) != len(b):
            return f"{path}[{min(len(a), len(b))}]", (a[len(b):] or "<missing>"), (b[len(a):] or "<missing>")
        return None
    return None if identical(a, b) else (path or "<root>", a, b)   # (-0.0 is not 0.0)


def _join(path: str, key: str) -> str:
    if key.startswith("$"):
        return path  # tags are an encoding detail; do not show them in paths
    return f"{path}.{key}" if path else key

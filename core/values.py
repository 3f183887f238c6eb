"""Operator states and tuples as JSON, without losing what tells values apart.

States are stored as JSON so that `sqlite3`, `tt inspect --json` and the TUI can
read them without unpickling anything. `tt verify` compares these encodings, so
the encoding must keep apart values that behave differently: a tuple is not a
list, `1` is not `"1"` as a dict key, a Decimal is not a float. JSON-native
values pass through unchanged; everything else becomes a one-key object whose
key starts with `$` (`{"$tuple": [...]}`, `{"$set": [...]}`, ...).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import decimal
import gc
import logging
import math
import operator
import re
import types
from itertools import chain, compress, repeat
from typing import Any, Iterator

import orjson

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


def _plain_rows(rows: Any) -> bool:
    """Whether every one of `rows` is a list of `_plain_scalars`: each its own encoding, however
    short. An Aggregate's accumulators (TPC-H Q10's: `[custkey, revenue, name, balance, nation]`
    under each customer) are such lists, too short for `_plain_container`; walked item by item
    the state of a W2 task's last snapshot (9,500 customers) took 27 ms to store, 9 ms so."""
    return operator.countOf(map(type, rows), list) == len(rows) and _plain_scalars(list(chain.from_iterable(rows)))


def _int_keyed_plain(value: dict) -> bool:
    """A dict whose keys are int64s and whose values are all `_plain_scalars` (an Aggregate's
    running sums per customer) or all `_plain_rows`: its encoding is its items as pairs
    (`{"$dict": [[key, value], ...]}`), made in C."""
    if set(map(type, value)) != {int} or not _plain_scalars(value):   # (its keys: int64s)
        return False
    values = list(value.values())
    return _plain_scalars(values) or _plain_rows(values)


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
        if t is dict and _int_keyed_plain(value):
            return {"$dict": list(map(list, value.items()))}
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
    if isinstance(value, _dt.datetime):
        return {"$datetime": value.isoformat()}
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
    if table is not None:
        return {"$repr": table}
    shown = _machinery(value)
    if shown is not None:
        return {"$repr": shown}
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        return {"$object": f"{t.__module__}.{t.__qualname__}", "attrs": _encode(public_attrs(attrs))}
    return {"$repr": _ADDRESS.sub("", repr(value))}


#: ` at 0x7f3a…` in a default repr (`<unlocked _thread.lock object at 0x…>`): where the object
#: lies in this process's memory, which a replay's copy never shares, so it is left out.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_LOGGING = (logging.Logger, logging.Handler, logging.Manager, logging.PlaceHolder)


def _machinery(value: Any) -> str | None:
    """A module or a logging object, shown by its name: what it holds (a module's globals, a
    logger's manager of every logger in the process) is the process's, not the operator's
    state, and differs between the recording's worker and a replay."""
    if isinstance(value, types.ModuleType):
        return f"<module {value.__name__!r}>"
    if isinstance(value, _LOGGING):
        name = getattr(value, "name", None)
        return f"<{type(value).__name__}{' ' + name if isinstance(name, str) else ''}>"
    return None


#: Levels of nesting `_acyclic` keeps: each may be three in JSON (`{"$dict": [[k, v]]}`), and
#: orjson writes at most 255.
_DEEPEST = 64


class _Cut:
    """Where `_acyclic` cut a value: shown as `<cycle: T>` or `<too deep: T>`."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __tt_json__(self) -> dict:
        return {"$repr": self.text}


class _Walked:
    """An object `_acyclic` walked: encoded as `_encode` encodes an object, from its cut attributes."""

    __slots__ = ("name", "attrs")

    def __init__(self, name: str, attrs: dict):
        self.name, self.attrs = name, attrs

    def __tt_json__(self) -> dict:
        return {"$object": self.name, "attrs": _encode(self.attrs)}


_ATOMS = frozenset({str, bool, type(None), int, float, bytes, bytearray, complex})
_LEAVES = (decimal.Decimal, _dt.date, _dt.time, _dt.timedelta, int, float)   # (bool is an int, datetime a date)


def _acyclic(value: Any, path: set[int], depth: int) -> Any:
    """`value` as `_encode` walks it, with the walk cut where it would come back to a value it
    is inside (`path`: their ids) or go deeper than `_DEEPEST`: the containers and objects it
    walks are copied (a dict, list or tuple subclass as `_encode` takes it, as the plain one);
    whatever `_encode` does not walk is kept as it is."""
    t = type(value)
    if t in _ATOMS or isinstance(value, _LEAVES):
        return value
    walks = (t is set or t is frozenset or isinstance(value, (dict, list, tuple))
             or (not (t.__module__ == "numpy" and getattr(value, "shape", None) == ())
                 and getattr(t, "__tt_json__", None) is None and not is_table(t) and _machinery(value) is None
                 and isinstance(getattr(value, "__dict__", None), dict)))
    if not walks:
        return value
    if id(value) in path:
        return _Cut(f"<cycle: {t.__qualname__}>")
    if depth >= _DEEPEST:
        return _Cut(f"<too deep: {t.__qualname__}>")
    path.add(id(value))
    try:
        inner = depth + 1
        if t is set or t is frozenset:
            return t(_acyclic(v, path, inner) for v in value)
        if isinstance(value, dict):
            return {_acyclic(k, path, inner): _acyclic(v, path, inner) for k, v in value.items()}
        if isinstance(value, list):
            return [_acyclic(v, path, inner) for v in value]
        if isinstance(value, tuple):
            return tuple(_acyclic(v, path, inner) for v in value)
        return _Walked(f"{t.__module__}.{t.__qualname__}", _acyclic(public_attrs(vars(value)), path, inner))
    finally:
        path.discard(id(value))


def is_table(t: type) -> bool:
    """A pandas DataFrame or an Arrow batch or table (by module: the core imports neither)."""
    module = t.__module__.split(".")[0]
    return (module == "pandas" and t.__name__ == "DataFrame") or (module == "pyarrow" and t.__name__ in
                                                                  ("RecordBatch", "Table"))


def _table_summary(value: Any) -> str | None:
    """A DataFrame or Arrow batch as its shape: the unit a hooked function holds, not state."""
    if not is_table(type(value)):
        return None
    if type(value).__module__.startswith("pandas"):
        rows, names = len(value), [str(c) for c in value.columns]
    else:
        rows, names = value.num_rows, list(value.schema.names)
    shown = ", ".join(names[:6]) + (", …" if len(names) > 6 else "")
    return f"<{type(value).__name__}: {rows} rows × {len(names)} columns ({shown})>"


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
    operator's unit too (`('row', Row(...))`); a bigger table stays one `encode` shows as its
    shape. For display only (the debugger, `tt inspect`, `tt lineage`): state and digests
    encode the value itself."""
    names = field_names(value)
    if names is not None:
        return {k: readable(v) for k, v in zip(names, value)}
    if type(value) is tuple or type(value) is list:
        return type(value)(map(readable, value)) if any(isinstance(v, (tuple, list)) or is_table(type(v))
                                                        for v in value) else value
    rows = table_rows(value, SHOWN_ROWS)
    return rows if rows is not None else value


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


def _render(v: Any) -> str:
    if isinstance(v, dict):
        if len(v) == 1:
            (tag, inner), = v.items()
            if tag in ("$int", "$float", "$decimal", "$datetime", "$date", "$time"):
                return str(inner)
            if tag == "$tuple":
                return "(" + ", ".join(_render(x) for x in inner) + ("," if len(inner) == 1 else "") + ")"
            if tag in ("$set", "$frozenset"):
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
            return v["$object"].rsplit(".", 1)[-1] + _render(v["attrs"])
        return "{" + ", ".join(f"{k}: {_render(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_render(x) for x in v) + "]"
    if isinstance(v, str):
        return repr(v)
    if v is None:
        return "None"
    return str(v)


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

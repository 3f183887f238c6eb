"""A pandas DataFrame logged as its columns' values, taken when it was logged.

A hooked pandas function (a StatefulProcessor's `handleInputRows`, say) is handed a fresh
DataFrame per key, and its unit is logged before the function may write into it
(`logs.kept_apart`). Pickling a fresh DataFrame builds pandas' lazy caches first, and
pickling a numpy array costs about 5 µs however small it is. `freeze` takes a fixed-width
column's bytes instead (a copy, at C speed), and an object column's items as a list when
they are all immutable scalars; the log's pickle, later, packs bytes and lists. Freezing
then packing a fresh 100-row frame of an int and a float column (one key of the keyed
transformWithStateInPandas bench) took 10.9 µs, against 21.8 µs when each frame's column
arrays were pickled as it was logged (best of 5 × 10,000 frames, this machine).

Only a plain frame is frozen this way: a `DataFrame` itself (no subclass), a default
`RangeIndex`, unique `str` column names, every column a numpy array (no extension dtype),
no `attrs`. Any other frame, and any other value, is pickled whole as before. Rebuilt, the
frame has the same columns, dtypes, values and index (tests/test_units.py compares it with
the frame pickle gives back).
"""

from __future__ import annotations

import pickle
from typing import Any


class FrozenFrame:
    """A plain DataFrame as (its class, its index's class, numpy's array class, its rows, its
    column names, its columns), taken when logged. It pickles as a call that rebuilds the frame, so a log
    holding it unpickles to the DataFrame itself, as a `logs.Frozen` unpickles to its value."""

    __slots__ = ("parts",)

    def __init__(self, parts: tuple):
        self.parts = parts

    def __reduce__(self):
        return thaw_columns, self.parts


_NAIVE_TIMES = ("DatetimeArray", "TimedeltaArray")   # pandas' own arrays over numpy's datetime64, timedelta64
_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})
_STR = frozenset({str})


def is_frame(value: Any) -> bool:
    """A pandas DataFrame (tested by type name: core does not import pandas)."""
    t = type(value)
    return t.__name__ == "DataFrame" and t.__module__ == "pandas.core.frame"


def freeze(frame: Any) -> FrozenFrame | None:
    """`frame` frozen as its columns' values if it is a plain frame (above), else None."""
    if not is_frame(frame) or frame.attrs or not frame.flags.allows_duplicate_labels:
        return None
    index, columns = frame.index, frame.columns
    if type(index).__name__ != "RangeIndex" or type(columns).__name__ != "Index":
        return None
    rows = getattr(index, "_range", None)   # (a RangeIndex's own range: one attribute, not three properties)
    if type(rows) is not range:
        rows = range(index.start, index.stop, index.step)
    if rows.start != 0 or rows.step != 1 or index.name is not None or columns.name is not None:
        return None
    names = columns.tolist()
    if not set(map(type, names)) <= _STR or len(set(names)) != len(names):
        return None
    arrays = _column_arrays(frame, len(names))
    if arrays is None:
        return None
    frozen, array_class = [], None
    for a in arrays:
        if type(a).__name__ in _NAIVE_TIMES and type(a.dtype).__module__.startswith("numpy"):
            a = a.to_numpy()   # datetime64 or timedelta64, no time zone
        if not (type(a).__name__ == "ndarray" and type(a).__module__ == "numpy"):
            return None   # an extension array (nullable ints, categories, strings, zoned times)
        frozen.append(_column(a))
        array_class = type(a)
    # (the classes by reference, as in any pickle of a frame: core itself imports neither pandas nor numpy)
    return FrozenFrame((type(frame), type(index), array_class, len(rows), names, frozen))


def _column_arrays(frame: Any, n: int) -> list | None:
    """The frame's columns, in order, as its blocks hold them (no Series made per column)."""
    try:
        mgr = frame._mgr
        out: list = [None] * n
        filled = 0
        for block in mgr.blocks:
            values = block.values
            if getattr(values, "ndim", 1) != 2:   # a one-column extension block: ask the frame
                return [frame._get_column_array(i) for i in range(n)]
            for row, at in enumerate(block.mgr_locs.as_array.tolist()):
                filled += out[at] is None
                out[at] = values[row]
    except (AttributeError, IndexError, TypeError):   # another pandas: pickle the frame whole
        return None
    return out if filled == n else None


def _column(a: Any) -> tuple:
    """One column as logged: a fixed-width one as its dtype and bytes; an object one as
    its items if they are all immutable scalars; any other as its pickle."""
    if not a.dtype.hasobject:
        return ("bytes", a.dtype.str, a.tobytes())
    items = a.tolist()
    if set(map(type, items)) <= _SCALARS:
        return ("items", items)
    return ("pickle", pickle.dumps(a, protocol=5))   # mutable items: copied now, as they were


def thaw_columns(frame_class: type, range_index: type, array_class: type | None, n: int, names: list,
                 columns: list) -> Any:
    """The frame `freeze` took."""
    arrays = []
    for column in columns:
        if column[0] == "bytes":   # over a bytearray: writable, as pickle's arrays are
            arrays.append(array_class((n,), dtype=column[1], buffer=bytearray(column[2])))
        elif column[0] == "items":
            a = array_class((n,), dtype=object)
            a[:] = column[1]
            arrays.append(a)
        else:
            arrays.append(pickle.loads(column[1]))
    return _frame(frame_class, range_index, n, names, arrays)


def thaw(data: bytes) -> Any:
    """A frame frozen by an earlier tt as one pickle of its column arrays (run files written
    before `thaw_columns`)."""
    return _frame(*pickle.loads(data))


def _frame(frame_class: type, range_index: type, n: int, names: list, arrays: list) -> Any:
    return frame_class(dict(zip(names, arrays)), index=range_index(n), columns=names, copy=False)


__all__ = ["FrozenFrame", "freeze", "is_frame", "thaw", "thaw_columns"]

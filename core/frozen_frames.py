"""A pandas DataFrame logged as its column arrays, taken when it was logged.

A hooked pandas function (a StatefulProcessor's `handleInputRows`, say) is handed a fresh
DataFrame per key, and its unit is logged before the function may write into it
(`logs.kept_apart`). Pickling a fresh DataFrame builds pandas' lazy caches first: 30.4–32.2 µs
for a 100-row, two-column frame, where `freeze` takes 20.1–21.1 µs (this machine, fresh frames,
best of 5 × 3,000, three runs). On the keyed transformWithStateInPandas bench, one frame per
key, that pickle was the largest single cost tt added in the Python workers (a py-spy profile).

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
    """A plain DataFrame as (its rows, its column names, its column arrays), pickled when
    logged. It pickles as a call that rebuilds the frame, so a log holding it unpickles to
    the DataFrame itself, as a `logs.Frozen` unpickles to its value."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    def __reduce__(self):
        return thaw, (self.data,)


_NAIVE_TIMES = ("DatetimeArray", "TimedeltaArray")   # pandas' own arrays over numpy's datetime64, timedelta64


def is_frame(value: Any) -> bool:
    """A pandas DataFrame (tested by type name: core does not import pandas)."""
    t = type(value)
    return t.__name__ == "DataFrame" and t.__module__ == "pandas.core.frame"


def freeze(frame: Any) -> FrozenFrame | None:
    """`frame` frozen as its column arrays if it is a plain frame (above), else None."""
    if not is_frame(frame) or frame.attrs or not frame.flags.allows_duplicate_labels:
        return None
    index, columns = frame.index, frame.columns
    if (type(index).__name__ != "RangeIndex" or index.start != 0 or index.step != 1 or index.name is not None
            or type(columns).__name__ != "Index" or columns.name is not None):
        return None
    names = list(columns)
    if not all(type(n) is str for n in names) or len(set(names)) != len(names):
        return None
    arrays = []
    for i in range(len(names)):
        try:
            a = frame._get_column_array(i)   # (no Series made per column)
        except AttributeError:   # a pandas without it: pickle the frame whole
            return None
        if type(a).__name__ in _NAIVE_TIMES and type(a.dtype).__module__.startswith("numpy"):
            a = a.to_numpy()   # datetime64 or timedelta64, no time zone
        if not (type(a).__name__ == "ndarray" and type(a).__module__ == "numpy"):
            return None   # an extension array (nullable ints, categories, strings, zoned times)
        arrays.append(a)
    # (the classes by reference, as in any pickle of a frame: core itself does not import pandas)
    return FrozenFrame(pickle.dumps((type(frame), type(index), len(frame), names, arrays), protocol=5))



def thaw(data: bytes) -> Any:
    """The frame `freeze` took."""
    frame_class, range_index, n, names, arrays = pickle.loads(data)
    return frame_class(dict(zip(names, arrays)), index=range_index(n), columns=names, copy=False)


__all__ = ["FrozenFrame", "freeze", "is_frame", "thaw"]

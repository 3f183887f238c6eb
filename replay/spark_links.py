"""Lineage across what Spark does between two hooked operators: rows matched by their values.

In a hooked job (docs/HOOKS.md) Spark's own operators sit between two hooked functions: a
shuffle by the grouping keys before an `applyInPandas`, say. The run records what each hooked
function was handed and what it emitted, not what Spark did in between (the DAG's opaque edge,
`plan["spark_edges"]`). Where Spark moved rows (a shuffle, a filter, a sort, a union), every row
a downstream unit holds is a row an upstream call emitted, with the same values in the columns
the downstream unit has. So a downstream unit links back to the upstream outputs that hold rows
equal to its rows, and an upstream output forward to the units that hold rows equal to its own:
the *through Spark* links of `replay/lineage.py`, which say that they were matched by value.

A row is compared by its values in the downstream unit's columns, which must all be columns of
the upstream output (`row_keys`: numpy scalars as Python's, NaN and NaT as None, arrays as
tuples). Where Spark made new values (an aggregate, a join's other side, a computed column)
the columns or the values differ and no link is made: a missing link, never one between rows
whose values differ. A row that several upstream outputs hold (equal rows) links to each.

One aggregate between the two, by columns the upstream function emitted and nothing else that
drops or changes rows before it (recorder/spark_edges.py `aggregate_keys`), makes each
downstream row one group: it links to every upstream row with its key (`KeyRows`), the links
saying they were matched by key.
"""

from __future__ import annotations

import collections
import math
from typing import Any


def frame_of(value: Any) -> Any:
    """The rows a unit or an output holds: a DataFrame or an Arrow batch or table inside it (a
    grouped unit is `(key, frame)`, a processor's `("one_row", key, times, frame)`), a named row
    (a PySpark Row, a dict), or None."""
    if _is_frame(value) or _is_named_row(value):
        return value
    if type(value) is tuple:
        inner = [v for v in value if _is_frame(v)]
        if len(inner) == 1:
            return inner[0]
        if len(value) >= 2 and _is_named_row(value[-1]):
            return value[-1]   # a row-based processor's ("one_row", key, times, row), ("row", row)
    return None


def columns_of(frame: Any) -> list[str]:
    """The column names of what `frame_of` gave: a frame's, a dict's keys, a Row's fields."""
    if hasattr(frame, "columns") and not isinstance(frame, dict):
        return [str(c) for c in (frame.column_names if hasattr(frame, "column_names") else frame.columns)]
    if isinstance(frame, dict):
        return [str(k) for k in frame]
    return list(frame.__fields__)


def row_keys(frame: Any, columns: list[str]) -> list[tuple] | None:
    """Each row of `frame` as a comparable tuple of its values in `columns` (None when the frame
    lacks one of them; no columns: an empty tuple a row)."""
    if not set(columns) <= set(columns_of(frame)):
        return None
    if not columns:
        return [()] * _rows_in(frame)
    try:
        if hasattr(frame, "column_names"):   # Arrow
            cols = [frame.column(c).to_pylist() for c in columns]
        elif hasattr(frame, "columns") and not isinstance(frame, dict):   # pandas
            cols = [frame[c].tolist() for c in columns]
        else:   # one named row
            get = frame.__getitem__ if isinstance(frame, dict) else frame.asDict().__getitem__
            cols = [[get(c)] for c in columns]
    except (KeyError, TypeError, ValueError, AttributeError):   # a name twice, a label not a str: no match
        return None
    return [tuple(map(_comparable, row)) for row in zip(*cols)]


def _rows_in(frame: Any) -> int:
    """How many rows what `frame_of` gave holds."""
    if hasattr(frame, "num_rows"):
        return frame.num_rows
    if hasattr(frame, "columns") and not isinstance(frame, dict):
        return len(frame)
    return 1


def _comparable(v: Any) -> Any:
    if v is None:
        return None
    t = type(v)
    if t in (int, str, bool, bytes):
        return v
    if t is float:
        return None if math.isnan(v) else v
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0 and t.__module__ == "numpy":   # a numpy scalar
        return _comparable(v.item())
    if t.__name__ in ("NaTType", "NAType"):
        return None
    if isinstance(v, (list, tuple)) or (t.__name__ == "ndarray" and t.__module__ == "numpy"):
        return tuple(map(_comparable, v))
    if isinstance(v, dict):
        return tuple(sorted((str(k), _comparable(x)) for k, x in v.items()))
    if isinstance(v, bytearray):
        return bytes(v)
    try:
        hash(v)
    except TypeError:
        return repr(v)
    return v


def _is_frame(value: Any) -> bool:
    t = type(value)
    return (t.__name__ == "DataFrame" and t.__module__.startswith("pandas")) or \
        (t.__name__ in ("RecordBatch", "Table") and t.__module__.startswith("pyarrow"))


def _is_named_row(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, tuple) and hasattr(value, "__fields__")
                                       and hasattr(value, "asDict"))


_FILTERED = 2_000   # a pandas frame of more rows is filtered by `isin` first (a smaller one costs more so)


def row_counts(frame: Any, columns: list[str]) -> collections.Counter:
    """How often `frame` holds each row (`row_keys`) on `columns`."""
    return collections.Counter(row_keys(frame, columns) or ())


class Rows:
    """The rows of one unit or output, on given columns, to count how many of them another
    frame holds (`held_by`): one pass over that frame, its rows built only where its first
    column holds one of these rows' values (pandas' `isin`, in C)."""

    def __init__(self, frame: Any, columns: list[str]):
        self.columns = columns
        self.counts = row_counts(frame, columns)
        firsts = {k[0] for k in self.counts}
        self._firsts = list(firsts) if None not in firsts else None   # (NaN is not `isin` None)

    def held_by(self, frame: Any) -> int:
        """How many of these rows `frame` holds (a row held twice here and once there: once)."""
        if not self.counts or not set(self.columns) <= set(columns_of(frame)):
            return 0
        if self._firsts is not None and hasattr(frame, "iloc") and len(frame) > _FILTERED:   # its candidate rows alone
            try:
                frame = frame[frame[self.columns[0]].isin(self._firsts)]
            except (TypeError, ValueError):
                pass
        found = collections.Counter(k for k in row_keys(frame, self.columns) or () if k in self.counts)
        return sum(min(n, self.counts[k]) for k, n in found.items())


class KeyRows:
    """The groups of one unit that an aggregate made (recorder/spark_edges.py `aggregate_keys`),
    by its values in the grouping columns: every row an upstream output holds with one of those
    keys went into it (`held_by` counts them). No keys: an aggregate of all rows, one group."""

    def __init__(self, frame: Any, keys: list[str]):
        self.keys = keys
        self.groups = set(row_keys(frame, keys) or ())

    def held_by(self, frame: Any) -> int:
        """How many of `frame`'s rows went into these groups."""
        if not self.groups:
            return 0
        return sum(1 for k in row_keys(frame, self.keys) or () if k in self.groups)


class UnitRows:
    """Every unit a hooked operator got over one edge, by the rows it holds: which units hold a
    row and how often, on each unit's own columns. A forward query from an output that Spark
    took on asks which units hold its rows; a walk asks it for every output it reaches (a batch,
    and the later batches its state reached), so the units are read once, here, not once an
    output."""

    def __init__(self, keys: list[str] | None = None) -> None:
        self.keys = keys   # an aggregate's grouping columns (`KeyRows`): units by their groups
        self.units: list[Any] = []   # what `add` was given with each unit, in order
        self._holders: dict[tuple, dict[tuple, list[tuple[int, int]]]] = {}   # columns -> row -> [(unit, count)]

    def add(self, frame: Any, unit: Any) -> None:
        columns = tuple(columns_of(frame) if self.keys is None else self.keys)
        i, by_row = len(self.units), self._holders.setdefault(columns, {})
        self.units.append(unit)
        for row, n in row_counts(frame, list(columns)).items():
            by_row.setdefault(row, []).append((i, n))

    def holding(self, frame: Any) -> list[tuple[Any, int]]:
        """The units holding rows of `frame`, each with how many (as `Rows.held_by` counts them;
        by keys, as `KeyRows.held_by`: every row of `frame` in one of the unit's groups), in the
        order they were added."""
        found: collections.Counter = collections.Counter()
        for columns, by_row in self._holders.items():
            for row, n in row_counts(frame, list(columns)).items():
                for i, have in by_row.get(row, ()):
                    found[i] += n if self.keys is not None else min(n, have)
        return [(self.units[i], found[i]) for i in sorted(found)]


__all__ = ["frame_of", "columns_of", "row_keys", "row_counts", "Rows", "KeyRows", "UnitRows"]

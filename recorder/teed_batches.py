"""The Arrow batches a transformWithStateInPandas task reads, kept so that each key's rows are
logged as their place in them.

PySpark's Python worker reads a task's input as Arrow batches, converts each to pandas, and
hands the processor each key's rows as a DataFrame it builds row by row (pyspark/worker.py,
`SQL_TRANSFORM_WITH_STATE_PANDAS_UDF`). Logging that DataFrame cost about 20 µs a key, frozen
column by column (core/frozen_frames.py), on the keyed bench's 100-row keys. The batches are
Arrow already. So a hooked processor's worker keeps the batches PySpark reads (`Tee`: armed
as the processor is unpickled, before PySpark opens its input), and each DataFrame the
processor is handed is logged as `TeedRows`: its first row and its length in the task's stream
of rows. The log chunk holding such rows carries the batches they lie in (`Window`), and
replay rebuilds each DataFrame from them with PySpark's own conversion (recorder/frames.py
`tws_frame`).

The first DataFrame of each task is checked against the batches (`Tee.check`): where PySpark's
conversion, run on them, does not give it back (another PySpark that builds them otherwise),
the task logs its DataFrames frozen, as before. A worker rebuilds the first frame of each
shape (conversion settings, batch schema, the frame's columns and dtypes) once: a rebuild
converts the frame's whole batch, 1.1 ms on a quiet machine and 1.5 ms of CPU in the tasks of
the keyed job (benches/tws_overhead.py's processor) on a busy one, in every task: 200 a query at
Spark's default shuffle partitions. A later
task's first frame of a shape already rebuilt is compared with its rows' place in the batches
(`_aligned`: its numeric columns, no conversion; 0.12 ms and 0.55 ms), so a task whose frames
would be placed wrong is still found; a frame without such a column is rebuilt as the first was.
"""

from __future__ import annotations

from typing import Any, Iterator

from . import frames

_armed: Tee | None = None   # the Tee that PySpark's next `load_stream` in this worker fills
_patched = False
_rebuilt: dict[tuple, list] = {}   # a shape this worker rebuilt a first frame of exactly (`_shape`) -> its offsets


class Tee:
    """One task's input batches, from the oldest a log still needs, with each one's first row in
    the task's stream of rows."""

    def __init__(self, settings: dict):
        self.settings = {**settings, "versions": frames.versions()}   # (the worker's, which build the frames)
        self.batches: list[tuple[int, Any]] = []   # (first row, RecordBatch)
        self.read = 0                              # rows PySpark read so far
        self.handed = 0                            # rows handed to the processor so far
        self.offsets: list | None = None           # the frame's columns among the batch's (`check`)
        self.usable: bool | None = None            # None until the task's first DataFrame is checked
        self.window: Window | None = None

    def take(self, batches: Iterator) -> Iterator:
        for batch in batches:
            if self.usable is not False:
                self.batches.append((self.read, batch))
            self.read += batch.num_rows
            yield batch

    def logged(self, frame: Any) -> Any:
        """What the log keeps of `frame`, the next DataFrame PySpark hands the processor: its
        rows' place (`TeedRows`), or the frame itself where this task's are not rebuilt the same."""
        n = len(frame.index)   # (`len(frame)`, one call less)
        start, self.handed = self.handed, self.handed + n
        if self.usable is None:
            self.usable = self.check(frame, start)
        if not self.usable:
            self.stop()
            return frame
        window = self.window
        if window is None or window.sealed:
            window = self.window = Window(self, start)
        window.hi = start + n
        return TeedRows(window, start, n)

    def stop(self) -> None:
        """Keep no more batches: this task's DataFrames are logged as they are."""
        self.usable = False
        self.batches.clear()

    def check(self, frame: Any, start: int) -> bool:
        """Whether PySpark's conversion, run on the kept batches, gives `frame` back exactly: the
        frame rebuilt, or, for a shape this worker rebuilt before, its rows compared (`_aligned`)."""
        try:
            overlapping = self._overlapping(start, start + len(frame))
            shape = _shape(self.settings, overlapping, frame)
            offsets = _rebuilt.get(shape)
            if offsets is not None and _aligned(frame, overlapping, start, offsets):
                self.offsets = offsets
                return True
            rows = frames.tws_rows(overlapping, start, len(frame), self.settings, None)
            self.offsets = frames.tws_offsets(rows[0], list(frame.columns))
            if self.offsets is None:
                return False
            rebuilt = frames.tws_frame(rows, self.offsets)
            same = (list(rebuilt.columns) == list(frame.columns) and list(rebuilt.dtypes) == list(frame.dtypes)
                    and rebuilt.index.equals(frame.index) and rebuilt.equals(frame))
            if same and all(len(rows[0]) == b.num_columns for _, b in overlapping):   # (`_aligned` reads columns by field)
                _rebuilt[shape] = self.offsets
            return same
        except Exception:  # noqa: BLE001  (whatever this PySpark does otherwise: log the frames themselves)
            return False

    def _overlapping(self, lo: int, hi: int) -> list[tuple[int, Any]]:
        return [(first, b) for first, b in self.batches if first < hi and first + b.num_rows > lo]

    def seal(self, window: Window) -> list[tuple[int, Any]]:
        """The batches `window`'s rows lie in, as it is packed into a log chunk; the batches
        before its end are not needed again (the rows handed later come after it)."""
        window.sealed = True
        out = self._overlapping(window.lo, window.hi)
        self.batches = [(first, b) for first, b in self.batches if first + b.num_rows > window.hi]
        return out


def _shape(settings: dict, batches: list, frame: Any) -> tuple:
    """What PySpark's conversion of a frame depends on but its values: the settings and
    libraries, its batches' schema (one, or several where a frame spans batches of another),
    the frame's columns, their dtypes (a null in a batch makes a long float64) and index."""
    return (repr(sorted(settings.items())), tuple(sorted({b.schema.to_string() for _, b in batches})),
            tuple(frame.columns), tuple(map(str, frame.dtypes)), type(frame.index))


def _aligned(frame: Any, batches: list, start: int, offsets: list) -> bool:
    """Whether `frame`'s numeric columns hold the values of its rows' place in `batches`
    (`(first row, RecordBatch)`, whose columns are the rows' fields: `offsets` index both):
    the rows were read where the Tee places them. Every such column, as a key's column holds
    one value in all its rows. False where none can tell so without PySpark's conversion (the
    frame is then rebuilt)."""
    import numpy as np
    import pyarrow as pa

    n, compared, dtypes = len(frame.index), 0, list(frame.dtypes)   # (`frame.dtypes` builds a Series each time)
    for j, field in enumerate(offsets):
        types = [b.schema.types[field] for _, b in batches]
        if dtypes[j].kind not in "iuf" or not all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types):
            continue
        try:
            held = np.concatenate([b.column(field).slice(max(start - first, 0), min(start + n - first, b.num_rows)
                                                         - max(start - first, 0)).to_numpy(zero_copy_only=False)
                                   for first, b in batches])
            if held.shape != (n,) or not np.array_equal(frame.iloc[:, j].to_numpy(), held, equal_nan=True):
                return False
        except (TypeError, ValueError):   # (a nullable extension dtype's NA)
            return False
        compared += 1
    return compared > 0


class Window:
    """The rows of one log chunk's `TeedRows`: it pickles (once per chunk, pickle's memo) as
    the batches they lie in, and unpickles to what rebuilds their DataFrames. Once pickled it
    takes no more rows, and pickles the same again (a `TeedRows` made just before a flush and
    logged just after it is pickled with the next chunk)."""

    __slots__ = ("tee", "lo", "hi", "sealed", "packed")

    def __init__(self, tee: Tee, lo: int):
        self.tee, self.lo, self.hi, self.sealed, self.packed = tee, lo, lo, False, None

    def __reduce__(self):
        tee = self.tee
        if self.packed is None:
            self.packed = frames.pack_batches(tee.seal(self))
        return frames.TwsBatches, (self.packed, tee.settings, tee.offsets)


class TeedRows:
    """A DataFrame the processor was handed, as its rows' place in its task's batches."""

    __slots__ = ("window", "start", "n")

    def __init__(self, window: Window, start: int, n: int):
        self.window, self.start, self.n = window, start, n

    def __reduce__(self):
        return frames.tws_chunk, (self.window, self.start, self.n)


def arm(settings: dict) -> Tee:
    """The Tee that keeps the batches PySpark reads next in this worker (a task's input)."""
    global _patched, _armed
    if not _patched:
        from pyspark.sql.pandas.serializers import ArrowStreamSerializer

        original = ArrowStreamSerializer.load_stream

        def load_stream(self, stream):
            global _armed
            tee, _armed = _armed, None
            batches = original(self, stream)
            return batches if tee is None else tee.take(batches)

        load_stream.__wrapped__ = original
        ArrowStreamSerializer.load_stream = load_stream
        _patched = True
    tee = _armed = Tee(settings)
    return tee


__all__ = ["Tee", "Window", "TeedRows", "arm"]

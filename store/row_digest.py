"""A digest of an Arrow batch's values: what proves a chunk read back by reference is the one the task saw.

A source read by reference is checked by its files' identity (size, modification time, footer
hash), which misses a value rewritten in place (docs/SOURCES.md §8). So the recording task digests
each chunk's values as Spark handed them, and replay digests the rows it reads back: a chunk that
differs is an error, not a wrong tuple shown as recorded (store/sources.py).

The digest is of the values, not of the buffers: the task's batch and the read-back table lay the
same values out differently (offsets, slices, chunks, what sits under a null). Per column, where
the nulls are, then the valid values as fixed-width bytes, or as lengths and bytes for strings and
binaries; any other type as its values' JSON. Hashed with xxh3-128, which keeps up with Arrow:
6M TPC-H lineitem rows (six columns) in 0.04 s where blake2b takes 0.55 s.

Runs in Spark's Python workers and in replay; pyarrow, numpy and xxhash are imported when called.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..core import values

SIZE = 16   # bytes of a digest


def digest(data: Any) -> bytes:
    """The digest of a `pyarrow.RecordBatch` or `Table`'s values (its column names and types
    are not in it: the run file stores the schema once per source)."""
    import xxhash

    h = xxhash.xxh3_128()
    h.update(b"%d:%d;" % (data.num_rows, data.num_columns))
    for column in data.columns:
        for part in _column_parts(column):
            h.update(part)
    return h.digest()


_SAMPLED = 16   # a frame's object column is digested by every 16th value


def frame_digest(frame: Any) -> bytes:
    """The digest of a pandas DataFrame as a hooked `mapInPandas` function was handed it: its
    column names, dtypes, index and values. A unit read by reference is rebuilt from its rows in
    the files by PySpark's conversion, whose dtypes a PySpark version or a setting may change:
    replay compares this digest, so a frame built otherwise stops replay, not shows other data.
    Numpy and extension columns are digested whole, by their bytes or pandas' row hashes. An
    object column (strings, decimals, dates) by the `repr` of every 16th value, the first
    included: hashing every value cost more than the job's own work on it (TPC-H Q1's four
    decimal columns: 1.1 µs a value with pandas' hashes, 0.25 µs by `repr`, 0.04 µs just to
    find the nulls), while what a conversion changes it changes in every row, and the files'
    identity is checked apart (size, time, footer): a value rewritten in place in an object
    column is found only when it is sampled."""
    import numpy as np
    import pandas as pd
    import xxhash

    h = xxhash.xxh3_128()
    h.update(orjson.dumps([[str(c) for c in frame.columns], [str(t) for t in frame.dtypes], len(frame)]))
    index = frame.index
    if isinstance(index, pd.RangeIndex):
        h.update(b"range %d:%d:%d;" % (index.start, index.stop, index.step))
    else:
        h.update(pd.util.hash_pandas_object(index).to_numpy().tobytes())
    for i in range(frame.shape[1]):
        column = frame.iloc[:, i]
        dtype = column.dtype
        if isinstance(dtype, np.dtype) and dtype.kind in "biufcmM":
            h.update(np.ascontiguousarray(column.to_numpy()).view(np.uint8))
        elif isinstance(dtype, np.dtype) and dtype.kind == "O":
            h.update(repr(column.to_numpy()[::_SAMPLED].tolist()).encode())
        else:
            h.update(pd.util.hash_pandas_object(column, index=False).to_numpy().tobytes())
    return h.digest()


def _column_parts(column: Any) -> list:
    """One column's values as buffers that two layouts of the same values share."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return _array_parts(column)


def _array_parts(a: Any) -> list:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    t = a.type
    if pa.types.is_dictionary(t):
        a = a.dictionary_decode()
    elif pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        a = a.cast(pa.string() if pa.types.is_string_view(t) else pa.binary())
    t = a.type
    parts: list = [str(t).encode(), b";"]
    if a.null_count:
        parts += [b"N", _fixed(pc.is_null(a).cast(pa.uint8()))]
        a = a.filter(pc.is_valid(a))
    if pa.types.is_boolean(t):
        parts.append(_fixed(a.cast(pa.uint8())))
    elif pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        buffers = a.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32, count=len(a) + 1,
                                offset=a.offset * (8 if wide else 4)) if len(a) else np.zeros(1, np.int64)
        parts.append(np.diff(offsets).astype(np.int64).tobytes())
        if len(a) and buffers[2] is not None:
            parts.append(memoryview(buffers[2])[int(offsets[0]):int(offsets[-1])])
    elif _fixed_width(t):
        parts.append(_fixed(a))
    else:   # nested and rarer types: their values, as tt encodes values
        parts.append(orjson.dumps(a.to_pylist(), default=values.encode))
    return parts


def _fixed_width(t: Any) -> bool:
    import pyarrow as pa

    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_date(t)
            or pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_duration(t)
            or pa.types.is_fixed_size_binary(t))


def _fixed(a: Any) -> memoryview:
    """The bytes of a fixed-width array without nulls, from its offset."""
    width = a.type.byte_width
    if not len(a):
        return memoryview(b"")
    return memoryview(a.buffers()[1])[a.offset * width:(a.offset + len(a)) * width]

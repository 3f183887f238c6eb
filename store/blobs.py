"""Compressed blobs: log chunks, states, and recorded tuples.

Executors compress before sending (the coordinator only writes bytes), so this
module is imported inside Spark workers: keep it free of sqlite and Spark.

Recorded tuples (those entering G(θ) from outside it) use one of these codecs:
`arrow` keeps a source DataFrame's Arrow batch as it arrived (cheap to write, and
`to_pylist()` gives the exact rows the operator saw), `pickle` stores the Python
rows themselves, the unit codecs keep a hooked function's DataFrame or batch, and
`ref` stores only where the rows are in a source's Parquet files (`ref-batch`, `ref-pandas`:
where a hooked `mapInArrow` or `mapInPandas` unit's rows are).
"""

from __future__ import annotations

import pickle
import struct

import zstandard

_LEVEL = 1  # faster than 3 and, on JSON states, no bigger
_cctx = None
_dctx = None


def compress(data: bytes) -> bytes:
    global _cctx
    if _cctx is None:
        _cctx = zstandard.ZstdCompressor(level=_LEVEL)
    return _cctx.compress(data)


def decompress(data: bytes) -> bytes:
    global _dctx
    if _dctx is None:
        _dctx = zstandard.ZstdDecompressor()
    return _dctx.decompress(data)


# --- recorded tuples -------------------------------------------------------

PICKLE = "pickle"
ARROW = "arrow"      # an Arrow batch of rows, one row per recorded tuple
PANDAS = "pandas"    # one pandas DataFrame (a hooked mapInPandas unit), as an Arrow stream
ARROW_BATCH = "arrow-batch"  # one Arrow RecordBatch (a hooked mapInArrow unit), kept whole
PANDAS_GROUP = "pandas-group"  # (key, DataFrame, ...): a hooked applyInPandas unit, Arrow streams
ARROW_GROUP = "arrow-group"    # (key, Table, ...): a hooked applyInArrow unit
REF = "ref"          # row positions in a source's files, compressed (store/positions.py, store/sources.py)
REF_BATCH = "ref-batch"  # a hooked mapInArrow unit as `ref` positions: read back as one RecordBatch
REF_PANDAS = "ref-pandas"  # a hooked mapInPandas unit as `ref` positions: rebuilt as PySpark built its DataFrame
#: Codecs whose data cannot run code when read: stored unsealed (store/trust.py).
INERT = frozenset({ARROW, PANDAS, ARROW_BATCH, PANDAS_GROUP, ARROW_GROUP, REF, REF_BATCH, REF_PANDAS})
#: Codecs whose data are positions in source files, read with a SourceReader.
BY_REFERENCE = frozenset({REF, REF_BATCH, REF_PANDAS})


def pack_rows(rows: list) -> bytes:
    return compress(pickle.dumps(rows, protocol=5))


def pack_arrow(data) -> bytes:
    """One Arrow RecordBatch (or Table) as an IPC stream (compressed by Arrow itself)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, data.schema, options=options) as writer:
        writer.write(data)
    return sink.getvalue().to_pybytes()


def pack_pandas(frame) -> bytes:
    """One DataFrame as an Arrow IPC stream; its pandas metadata brings index and dtypes back."""
    import pyarrow as pa

    return pack_arrow(pa.Table.from_pandas(frame))


def pack_unit(codec: str, unit) -> tuple[str, bytes]:
    """One unit of a hooked function (a DataFrame, a RecordBatch, a group): `(codec, data)`, in
    its codec, or pickled (`pickle`, a list of the one unit) where Arrow would not give a pandas
    unit back as the function got it (`nested`) or cannot take it."""
    if codec in (PANDAS, PANDAS_GROUP):
        frames, key = ((unit,), ()) if codec == PANDAS else (unit[1:], unit[0])
        if any(map(nested, frames)) or any(map(_container, key)):   # (a key: grouped by an array or a struct)
            return PICKLE, pack_rows([unit])
        try:
            return codec, pack_pandas(unit) if codec == PANDAS else _pack_group(codec, unit)
        except Exception:   # what Arrow cannot take as it is (a null timestamp key, pd.NaT)
            return PICKLE, pack_rows([unit])
    return codec, _pack_group(codec, unit) if codec == ARROW_GROUP else pack_arrow(unit)


def nested(frame) -> bool:
    """Whether a column of `frame` holds arrays, maps or structs. PySpark hands them as numpy
    arrays and dicts, which Arrow, told nothing, does not give back as they were: an array
    of longs with a null came back floats (`[0., nan]` for `[0, None]`), a map a struct with
    every row's keys (`{'a': 0, 'b': None}` for `{'a': 0}`), and a map with long keys failed."""
    return any(col.dtype == object and _nested(col.array) for _, col in frame.items())


_NULLS = frozenset({"NAType", "NaTType"})   # pandas' pd.NA and pd.NaT


def _nested(values) -> bool:
    """Whether a column's first value that is not null is a container (a Spark column holds
    one type: strings, bytes, decimals, dates, booleans, or arrays, maps, structs)."""
    for v in values:
        if v is None or (isinstance(v, float) and v != v) or type(v).__name__ in _NULLS:
            continue
        return _container(v)
    return False


def _container(v) -> bool:
    return isinstance(v, (dict, list, tuple)) or getattr(v, "ndim", 0) > 0


def round_trips(frame) -> bool:
    """Whether `frame`, packed by `pack_pandas`, comes back the same: its dtypes, and each
    column's values as Python prints them (numpy arrays with their dtype, dicts in order)."""
    import pyarrow as pa

    try:
        back = pa.ipc.open_stream(pack_pandas(frame)).read_all().to_pandas(date_as_object=True)
    except Exception:   # Arrow cannot take it
        return False
    return (list(back.columns) == list(frame.columns) and list(back.dtypes) == list(frame.dtypes)
            and all(repr(back[c].tolist()) == repr(frame[c].tolist()) for c in frame.columns))


def _pack_group(codec: str, unit: tuple) -> bytes:
    """`(key, *frames)` as Arrow streams, each after its length: the key as a one-row table
    (one column per key column, of the type of the value Spark gave: an Arrow scalar's, a
    numpy scalar's), then every frame of the group."""
    import pyarrow as pa

    key, *frames = unit
    parts = [pack_arrow(pa.table({f"k{i}": _key_column(k) for i, k in enumerate(key)}))]
    parts += [pack_pandas(f) if codec == PANDAS_GROUP else pack_arrow(f) for f in frames]
    return b"".join(struct.pack("<Q", len(p)) + p for p in parts)


def _key_column(value):
    import pyarrow as pa

    if isinstance(value, pa.Scalar):
        return pa.array([value.as_py()], type=value.type)
    try:
        return pa.array([value])   # a numpy scalar keeps its type: int32 stays int32
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([value.item() if hasattr(value, "item") else value])


def _unpack_group(codec: str, data: bytes) -> tuple:
    """As PySpark hands a group to the function: the key's values as each key column's first
    value in pandas (numpy scalars of the column's type, str, ...: `series.iloc[0]`) or as
    Arrow scalars (Arrow), then the DataFrames or Tables."""
    import pyarrow as pa

    parts, at = [], 0
    while at < len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        parts.append(pa.ipc.open_stream(data[at + 8: at + 8 + n]).read_all())
        at += 8 + n
    key_table, *frames = parts
    if codec == ARROW_GROUP:
        return (tuple(c[0] for c in key_table.columns), *frames)
    key = tuple(_pandas_first(c) for c in key_table.columns)
    return (key, *(f.to_pandas(date_as_object=True) for f in frames))


def _pandas_first(column):
    """`column.to_pandas().iloc[0]` as PySpark converts it: timestamps and durations in
    nanoseconds (the key column holds what Arrow inferred from the value, microseconds for a
    `pd.Timestamp`). Without pandas where numpy gives the same (a number, a boolean, a string
    without nulls): converting the one-row key table to pandas was half of what decoding a
    group cost a replay."""
    import pyarrow as pa

    t = column.type
    if column.null_count == 0 and (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                                   or pa.types.is_string(t) or pa.types.is_large_string(t)):
        return column.to_numpy()[0]
    return column.to_pandas(coerce_temporal_nanoseconds=True).iloc[0]


def unpack_tuples(codec: str, data: bytes) -> list:
    if codec == PICKLE:
        return pickle.loads(decompress(data))
    if codec == ARROW:
        import pyarrow as pa

        return pa.ipc.open_stream(data).read_all().to_pylist()
    if codec == PANDAS:
        import pyarrow as pa

        # as PySpark builds the DataFrames it hands to mapInPandas: dates stay datetime.date
        return [pa.ipc.open_stream(data).read_all().to_pandas(date_as_object=True)]
    if codec in (PANDAS_GROUP, ARROW_GROUP):
        return [_unpack_group(codec, data)]
    if codec == ARROW_BATCH:
        import pyarrow as pa

        return [pa.ipc.open_stream(data).read_next_batch()]  # pack_arrow wrote exactly one
    if codec in BY_REFERENCE:
        raise ValueError("rows stored by reference are read with a SourceReader (RunReader.entry_tuples)")
    raise ValueError(f"unknown tuple codec {codec!r}")

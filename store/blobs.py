"""Compressed blobs: log chunks, states, and recorded tuples.

Executors compress before sending (the coordinator only writes bytes), so this
module is imported inside Spark workers: keep it free of sqlite and Spark.

Recorded tuples (those entering G(θ) from outside it) use one of two codecs:
`arrow` keeps a source DataFrame's Arrow batch as it arrived (cheap to write, and
`to_pylist()` gives the exact rows the operator saw), `pickle` stores the Python
rows themselves.
"""

from __future__ import annotations

import pickle

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
#: Codecs whose data cannot run code when read: stored unsealed (store/trust.py).
INERT = frozenset({ARROW, PANDAS, ARROW_BATCH})


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


def pack_unit(codec: str, unit) -> bytes:
    """One unit of a hooked function (a DataFrame or a RecordBatch) in its codec."""
    return pack_pandas(unit) if codec == PANDAS else pack_arrow(unit)


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
    if codec == ARROW_BATCH:
        import pyarrow as pa

        return [pa.ipc.open_stream(data).read_next_batch()]  # pack_arrow wrote exactly one
    raise ValueError(f"unknown tuple codec {codec!r}")

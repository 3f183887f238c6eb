"""How PySpark builds the DataFrames a `mapInPandas` function or a StatefulProcessor is handed,
for units logged as rows to rebuild them from.

A hooked `mapInPandas` unit over a plain Parquet scan is stored as its rows' positions in the
files (`blobs.REF_PANDAS`). Replay reads those rows back as Arrow and must hand the function
the very DataFrame PySpark built: dtypes and all (nullable ints, timestamps in the session's
zone, dates and decimals as objects), which a plain `Table.to_pandas` does not give
(docs/SOURCES.md §4.1). So it uses PySpark's own conversion, with the settings the recording
ran with (`conversion`); this module is where it lives, because only recorder/ imports
pyspark, and `tt/__init__.py` hands it to the store (`store.sources.frame_builder`).
pyspark is imported when a unit is rebuilt, not before: the debugger's modules load without
it. The recording task also keeps each unit's `row_digest.frame_digest`, and replay compares:
another PySpark, or a setting that changed, stops replay with one line instead of showing a
different DataFrame.

A transformWithStateInPandas key's DataFrame is logged as its rows' place in the Arrow batches
its task read (recorder/teed_batches.py); `tws_frame` rebuilds it from them with the worker's
own steps, and `TwsBatches` refuses another PySpark, pandas or pyarrow than the worker's.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import RunFileError


def available() -> str | None:
    """Why this PySpark's mapInPandas units cannot be read by reference, or None when they can."""
    try:
        from pyspark.sql.conversion import ArrowBatchTransformer  # noqa: F401  (PySpark 4.3's conversion)
    except ImportError:
        import pyspark

        return f"PySpark {pyspark.__version__} has no ArrowBatchTransformer to rebuild its DataFrames (4.3 has)"
    return None


def version() -> str:
    import pyspark

    return pyspark.__version__


def conversion(spark: Any) -> dict:
    """The settings PySpark's Python worker converts a mapInPandas batch with, and its version."""
    import pyspark

    conf = spark.conf
    return {
        "pyspark": pyspark.__version__,
        "timezone": conf.get("spark.sql.session.timeZone"),
        "prefer_int_ext_dtype": conf.get("spark.sql.execution.pythonUDF.pandas.preferIntExtensionDtype",
                                         "false") == "true",
        "large_var_types": conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true",
    }


def arrow_schema(df: Any, settings: dict) -> bytes:
    """The Arrow schema of the batches Spark sends the worker for `df`, serialized (the store
    casts the rows it reads back to it)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema, timezone=settings["timezone"], prefers_large_types=settings["large_var_types"])
    return schema.serialize().to_pybytes()


def build(table: Any, settings: dict) -> Any:
    """The DataFrame PySpark's worker builds from `table`'s rows: its batches hold one struct
    column, which `to_pandas(df_for_struct=True)` turns into the frame (worker.py, mapInPandas)."""
    import pyarrow as pa
    from pyspark.sql.conversion import ArrowBatchTransformer

    columns = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in table.columns]
    struct = pa.StructArray.from_arrays(columns, fields=list(table.schema)) if columns else \
        pa.array([{}] * table.num_rows, pa.struct([]))
    batch = pa.RecordBatch.from_arrays([struct], names=["_0"])
    return ArrowBatchTransformer.to_pandas(batch, timezone=settings["timezone"],
                                           prefer_int_ext_dtype=settings["prefer_int_ext_dtype"],
                                           df_for_struct=True)[0]


# --- transformWithStateInPandas: a key's DataFrame from the task's batches (recorder/teed_batches.py)

def tws_frame(rows: list, offsets: list) -> Any:
    """The DataFrame PySpark's worker hands a StatefulProcessor, built from its rows as
    namedtuples (`tws_rows`) and its value columns picked (pyspark/worker.py,
    `SQL_TRANSFORM_WITH_STATE_PANDAS_UDF`, step for step)."""
    import pandas as pd

    return pd.DataFrame(rows).iloc[:, offsets]


def tws_rows(batches: list, start: int, n: int, settings: dict, converted: dict | None) -> list:
    """Rows `start`…`start + n` of a task's stream of rows as PySpark's worker takes them,
    `batches` being `(first row, RecordBatch)` that hold them: each batch converted whole, its
    rows as namedtuples. `converted` keeps each batch's rows by its first row, for the next
    frames; None: one frame's rows alone (the worker's check)."""
    rows: list = []
    for first, batch in batches:
        a, b = max(start - first, 0), min(start + n - first, batch.num_rows)
        if a >= b:
            continue
        if converted is None:
            rows.extend(_tws_rows(batch, settings).iloc[a:b].itertuples(index=False))
            continue
        whole = converted.get(first)
        if whole is None:
            whole = converted[first] = list(_tws_rows(batch, settings).itertuples(index=False))
        rows.extend(whole[a:b])
    return rows


def _tws_rows(batch: Any, settings: dict) -> Any:
    import pandas as pd
    from pyspark.sql.conversion import ArrowBatchTransformer

    return pd.concat(ArrowBatchTransformer.to_pandas(batch, timezone=settings["timezone"],
                                                     prefer_int_ext_dtype=settings["prefer_int_ext_dtype"]), axis=1)


def tws_offsets(row: Any, columns: list) -> list | None:
    """Where a handed DataFrame's `columns` are among a row's fields (its namedtuple's, unique:
    the columns PySpark builds its rows with), or None where one is not there."""
    fields = list(getattr(type(row), "_fields", range(len(row))))
    try:
        return [fields.index(c) for c in columns]
    except ValueError:
        return None


def pack_batches(batches: list) -> list[tuple[int, bytes]]:
    """`(first row, RecordBatch)` as `(first row, Arrow IPC stream)`, uncompressed: the log
    chunk holding them is compressed whole."""
    import pyarrow as pa

    out = []
    for first, batch in batches:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        out.append((first, sink.getvalue().to_pybytes()))
    return out


def versions() -> dict:
    """The libraries whose code builds a StatefulProcessor's DataFrames: PySpark's conversion,
    pandas' inference from rows, pyarrow's `to_pandas`."""
    import pandas
    import pyarrow
    import pyspark

    return {"pyspark": pyspark.__version__, "pandas": pandas.__version__, "pyarrow": pyarrow.__version__}


class TwsBatches:
    """A log chunk's batches, read back: what its `tws_chunk` calls rebuild DataFrames from,
    each batch converted once. Another PySpark, pandas or pyarrow than the recording worker's
    could build other frames from them, so a replay refuses where they differ."""

    def __init__(self, packed: list, settings: dict, offsets: list):
        import pyarrow as pa

        recorded, here = settings.get("versions"), versions()
        if recorded is not None and recorded != here:
            differ = ", ".join(f"{name} {recorded.get(name)} (here {v})" for name, v in here.items()
                               if recorded.get(name) != v)
            raise RunFileError(f"this run's StatefulProcessor DataFrames were built by {differ}, which may build "
                               f"them otherwise: replay it where those versions are installed")

        self.batches = [(first, pa.ipc.open_stream(data).read_next_batch()) for first, data in packed]
        self.settings, self.offsets = settings, offsets
        self.converted: dict = {}


def tws_chunk(window: TwsBatches, start: int, n: int) -> Any:
    """One logged DataFrame of a StatefulProcessor (`teed_batches.TeedRows`), rebuilt."""
    return tws_frame(tws_rows(window.batches, start, n, window.settings, window.converted), window.offsets)

"""A plain PySpark job, without tt: a stateful `mapInArrow` over a Parquet scan.

    python hooked_parquet.py OUT.json DATA_DIR [filter=SQL] [api=pandas] [coalesce=N] [union=1] [SPARK_SETTING=VALUE ...]

`RunningTotals` is a callable class given to `DataFrame.mapInArrow` (`api=pandas`:
`PandasRunningTotals`, to `mapInPandas`): it keeps a running total of `v` per group `g`
(an int, read from the files or, partitioned by directory, from their directories' names)
over every batch of its partition, and yields each row with its group's total so far.
Its input is a plain scan (a filter, columns out of order, timestamps, decimals and
strings), which `tt record` stores as file positions, not rows (recorder/sources.py,
`blobs.REF_BATCH`, `REF_PANDAS`); `filter=` puts another condition in place of
`id % 5 != 0` (one pyarrow evaluates exactly makes the units counted: no position
column). With `union=1` the output is the union of two hooked calls: the one above, and
another `RunningTotals` over the rows the filter left out. The tests compare what replay hands
the function with the units of a run recorded with --copy-sources
(tests/test_hooked_by_reference.py).
"""

import json
import sys

import pyarrow as pa
from pyspark.sql import SparkSession

from job_settings import spark_settings


def running(totals: dict, groups: list, amounts: list) -> list:
    """Add each amount to its group's total in `totals`; each row's total so far."""
    out = []
    for g, v in zip(groups, amounts):
        totals[g] = totals.get(g, 0) + v
        out.append(totals[g])
    return out


class RunningTotals:
    def __init__(self):
        self.totals = {}
        self.batches = 0

    def __call__(self, batches):
        for batch in batches:
            self.batches += 1
            totals = running(self.totals, batch.column("g").to_pylist(), batch.column("v").to_pylist())
            yield pa.RecordBatch.from_pydict({
                "id": batch.column("id"), "g": batch.column("g").cast(pa.int64()), "total": pa.array(totals, pa.int64()),
                "ts": batch.column("ts").cast(pa.string()), "d": batch.column("d").cast(pa.string()),
                "s": batch.column("s")})


class PandasRunningTotals:
    """The same for `mapInPandas`: its units are the DataFrames PySpark builds from the batches."""

    def __init__(self, zone: str):
        self.zone = zone   # the session's, in which PySpark hands it (zone-less) timestamps
        self.totals = {}
        self.batches = 0

    def __call__(self, frames):
        import pandas as pd

        for frame in frames:
            self.batches += 1
            totals = running(self.totals, frame["g"].tolist(), frame["v"].tolist())
            yield pd.DataFrame({"id": frame["id"], "g": frame["g"], "total": totals,
                                "ts": frame["ts"].dt.tz_localize(self.zone).dt.tz_convert("UTC").astype(str),
                                "d": frame["d"].astype(str), "s": frame["s"]})


SCHEMA = "id long, g long, total long, ts string, d string, s string"


def main(out: str, data: str, *args: str) -> None:
    settings = dict(a.split("=", 1) for a in args)   # how Spark splits the files into tasks
    condition = settings.pop("filter", "id % 5 != 0")
    coalesce = settings.pop("coalesce", None)   # partitions of the function's output (Spark then runs several inputs in a task)
    pandas = settings.pop("api", "arrow") == "pandas"
    union = settings.pop("union", None)
    spark = SparkSession.builder.getOrCreate()
    with spark_settings(spark, {"spark.sql.execution.arrow.maxRecordsPerBatch": "2500", **settings}):
        df = spark.read.parquet(data)
        if condition:
            df = df.filter(condition)
        scan = df.select("s", "id", "g", "v", "ts", "d")
        totals = scan.mapInPandas(PandasRunningTotals(spark.conf.get("spark.sql.session.timeZone")), SCHEMA) if pandas else scan.mapInArrow(RunningTotals(), SCHEMA)
        if union:   # a second call: the rows the filter left out
            rest = spark.read.parquet(data).filter(f"NOT ({condition})").select("s", "id", "g", "v", "ts", "d")
            totals = totals.union(rest.mapInArrow(RunningTotals(), SCHEMA))
        rows = (totals.coalesce(int(coalesce)) if coalesce else totals).collect()
    with open(out, "w") as f:
        json.dump(sorted((r.asDict() for r in rows), key=lambda r: r["id"]), f)


if __name__ == "__main__":
    main(*sys.argv[1:])

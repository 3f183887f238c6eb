"""A plain PySpark job, without tt: grouped functions whose state notes the key they were handed.

PySpark hands `applyInPandas` (and cogroup) a key of numpy scalars of each column's type
(`np.int32` for an int column, `np.int64` for a long, `np.float64`, `np.bool_`, `str`) and
`applyInArrow` one of Arrow scalars of each column's type. Each function here keeps, per
group, the types of the key's values and the key as text, and emits that text: the
recorded states hold what PySpark gave, and a replay that hands the function anything else
(a Python int, a float for an int: `1.0`, not `1`) differs from them. `temporal_keys` groups
by a timestamp, a timestamp without time zone, a date, a decimal and a day-time interval:
PySpark hands pandas Timestamps and a Timedelta in nanoseconds, a `datetime.date`, a `Decimal`.
`null_keys` groups by nullable columns: a null long comes as NaN, a null string or boolean as
None, a null timestamp as `pd.NaT` (which Arrow cannot take as a value).
Usage: python hooked_key_types.py OUT.json
"""

import json
import sys

import pandas as pd
import pyarrow as pa
from pyspark.sql import SparkSession

KEYS = ["k_int", "k_long", "k_double", "k_bool", "k_str"]
TEMPORAL_KEYS = ["k_ts", "k_ntz", "k_date", "k_dec", "k_dti"]
NULL_KEYS = ["n_long", "n_str", "n_ts", "n_bool"]


def make_pandas_keys():
    seen = {}

    def pandas_keys(key, pdf):
        seen[repr(key)] = [f"{type(v).__module__}.{type(v).__name__}" for v in key]
        return pd.DataFrame({"key": [f"{key}"], "n": [len(pdf)]})
    return pandas_keys


def make_temporal_keys():
    seen = {}

    def temporal_keys(key, pdf):
        seen[repr(key)] = [f"{type(v).__module__}.{type(v).__name__}:{getattr(v, 'unit', '')}" for v in key]
        return pd.DataFrame({"key": [f"{key}"], "n": [len(pdf)]})
    return temporal_keys


def make_null_keys():
    seen = {}

    def null_keys(key, pdf):
        seen[repr(key)] = [f"{type(v).__module__}.{type(v).__name__}" for v in key]
        return pd.DataFrame({"key": [f"{key}"], "n": [len(pdf)]})
    return null_keys


def make_cogrouped_keys():
    seen = {}

    def cogrouped_keys(key, left, right):
        seen[repr(key)] = [f"{type(v).__module__}.{type(v).__name__}" for v in key]
        return pd.DataFrame({"key": [f"{key}"], "n": [len(left) + len(right)]})
    return cogrouped_keys


def make_arrow_keys():
    seen = {}

    def arrow_keys(key, table):
        seen[repr([v.as_py() for v in key])] = [str(v.type) for v in key]
        return pa.table({"key": [str([v.as_py() for v in key])], "n": [table.num_rows]})
    return arrow_keys


def main(out: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-key-types").getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        rows = spark.range(0, 40, numPartitions=2).selectExpr(
            "CAST(id % 3 AS INT) AS k_int", "id % 2 AS k_long", "CAST(id % 2 AS DOUBLE) + 0.5 AS k_double",
            "id % 4 = 0 AS k_bool", "concat('s', id % 2) AS k_str", "CAST(id AS DOUBLE) AS v",
            "timestamp_seconds(id % 3 * 1000 + 1700000000) AS k_ts",
            "CAST(timestamp_seconds(id % 2 + 1700000000) AS TIMESTAMP_NTZ) AS k_ntz",
            "date_add(DATE'2024-01-01', CAST(id % 2 AS INT)) AS k_date",
            "CAST(id % 2 AS DECIMAL(10,2)) + 0.25 AS k_dec", "make_dt_interval(0, 0, 0, id % 2 + 0.5) AS k_dti",
            *(f"CASE WHEN id % 2 = 0 THEN NULL ELSE {e} END AS {n}" for e, n in (
                ("id % 3", "n_long"), ("concat('s', id % 3)", "n_str"), ("timestamp_seconds(id % 3)", "n_ts"),
                ("id % 3 = 1", "n_bool"))))
        grouped = rows.groupBy(*KEYS)
        schema = "key string, n long"
        result = {
            "pandas": sorted(tuple(r) for r in grouped.applyInPandas(make_pandas_keys(), schema).collect()),
            "cogrouped": sorted(tuple(r) for r in grouped.cogroup(rows.groupBy(*KEYS)).applyInPandas(
                make_cogrouped_keys(), schema).collect()),
            "arrow": sorted(tuple(r) for r in grouped.applyInArrow(make_arrow_keys(), schema).collect()),
            "temporal": sorted(tuple(r) for r in rows.groupBy(*TEMPORAL_KEYS).applyInPandas(
                make_temporal_keys(), schema).collect()),
            "null": sorted(tuple(r) for r in rows.groupBy(*NULL_KEYS).applyInPandas(
                make_null_keys(), schema).collect()),
        }
    finally:
        spark.conf.unset("spark.sql.shuffle.partitions")
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])

"""A plain PySpark job, without tt: pandas functions handed map, struct and array-of-map columns.

PySpark hands a map column, and a struct column, to a pandas function as dicts: a map's rows
have their own keys (`{'a': 0}`, `{'b': 2, 'c': 1}`), and its keys need not be strings; an
array of longs with a null as an object array (`array([0, None], dtype=object)`). Each
function here keeps, per call, each column's values as text with their types, and emits a
count: the recorded states hold what PySpark gave, and a replay that hands the function
anything else (a map as a struct with every row's keys, `{'a': 0, 'b': None, 'c': None}`)
differs from them.
With a folder, the rows are written there as Parquet and read back, and only mapInPandas
runs: its frames are then recorded by reference (their rows' positions in the files).
Usage: python hooked_nested_frames.py OUT.json [PARQUET_FOLDER]
"""

import json
import sys

import pandas as pd
from pyspark.sql import SparkSession

COLUMNS = [
    "id % 2 AS k",
    "CASE WHEN id % 3 = 0 THEN map('a', id) ELSE map('b', id, 'c', 1) END AS m",
    "map(id, concat('v', id)) AS m_long",
    "array(map('k', id), map('j', id + 1, 'i', 2)) AS arr_m",
    "named_struct('x', id, 'y', concat('s', id)) AS st",
    "named_struct('z', map('q', id)) AS st_m",
    "array(id, id + 1) AS arr",
    "CASE WHEN id % 3 = 0 THEN array(id, NULL) ELSE array(id) END AS arr_null",
]


def shown(pdf: pd.DataFrame) -> dict:
    return {c: [f"{type(v).__name__}:{v!r}" for v in pdf[c].tolist()] for c in pdf.columns}


def make_grouped():
    seen = {}

    def grouped_nested(key, pdf):
        seen[repr(key)] = shown(pdf)
        return pd.DataFrame({"n": [len(pdf)]})
    return grouped_nested


def make_arrays_only():
    seen = {}

    def arrays_only(key, pdf):
        seen[repr(key)] = shown(pdf)
        return pd.DataFrame({"n": [len(pdf)]})
    return arrays_only


def make_cogrouped():
    seen = {}

    def cogrouped_nested(key, left, right):
        seen[repr(key)] = [shown(left), shown(right)]
        return pd.DataFrame({"n": [len(left) + len(right)]})
    return cogrouped_nested


def make_mapped():
    seen = {}

    def mapped_nested(frames):
        for pdf in frames:
            seen[len(seen)] = shown(pdf)
            yield pd.DataFrame({"n": [len(pdf)]})
    return mapped_nested


def main(out: str, parquet: str | None = None) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-nested-frames").getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        rows = spark.range(0, 12, numPartitions=2).selectExpr(*COLUMNS)
        if parquet is not None:
            rows.write.mode("overwrite").parquet(parquet)
            rows = spark.read.parquet(parquet)
        result = {"mapped": sorted(r.n for r in rows.mapInPandas(make_mapped(), "n long").collect())}
        if parquet is None:
            result["grouped"] = sorted(r.n for r in rows.groupBy("k").applyInPandas(make_grouped(), "n long").collect())
            result["arrays"] = sorted(r.n for r in rows.select("k", "arr", "arr_null").groupBy("k").applyInPandas(
                make_arrays_only(), "n long").collect())
            result["cogrouped"] = sorted(r.n for r in rows.groupBy("k").cogroup(rows.groupBy("k")).applyInPandas(
                make_cogrouped(), "n long").collect())
    finally:
        spark.conf.unset("spark.sql.shuffle.partitions")
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])

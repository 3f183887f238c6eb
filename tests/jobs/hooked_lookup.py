"""A plain PySpark job, without tt, whose generator reads lookup tables with pyarrow.

`mapped` (RDD `mapPartitions`) reads LOOKUP with `pyarrow.parquet.read_table` and with
`pyarrow.parquet.ParquetFile`, LOOKUP.csv with `pyarrow.csv.read_csv` and `open_csv`, and
LOOKUP.feather with `pyarrow.feather.read_table`, whose C++ code opens each file itself, and
yields a running total of each number times its rate plus its bonus, its extra (CSV), its step
(streamed CSV) and times its scale (Feather). The job writes the files first if LOOKUP is missing.
Usage: python hooked_lookup.py OUT.json LOOKUP
"""

import json
import os
import sys

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

LOOKUP = None   # named in main


def mapped(rows):
    table = pq.read_table(LOOKUP, columns=["k", "rate"])
    rates = dict(zip(table["k"].to_pylist(), table["rate"].to_pylist()))
    bonus = pq.ParquetFile(LOOKUP).read(columns=["bonus"])["bonus"].to_pylist()
    extra = pacsv.read_csv(LOOKUP + ".csv")["extra"].to_pylist()
    step = pacsv.open_csv(LOOKUP + ".csv").read_all()["step"].to_pylist()
    scale = feather.read_table(LOOKUP + ".feather")["scale"].to_pylist()
    total = 0.0
    for x in rows:
        total += (x * rates[x % 3] + bonus[x % 3] + extra[x % 3] + step[x % 3]) * scale[x % 3]
        yield [x, total]


def main(out: str, lookup: str) -> None:
    global LOOKUP
    LOOKUP = lookup
    if not os.path.exists(lookup):
        pq.write_table(pa.table({"k": [0, 1, 2], "rate": [1.0, 2.0, 3.0], "bonus": [0.5, 0.25, 0.125]}), lookup)
        pacsv.write_csv(pa.table({"extra": [1.0, 2.0, 4.0], "step": [8.0, 16.0, 32.0]}), lookup + ".csv")
        feather.write_feather(pa.table({"scale": [1.0, 0.5, 2.0]}), lookup + ".feather")
    spark = SparkSession.builder.master("local[2]").appName("hooked-lookup").getOrCreate()
    rows = spark.sparkContext.parallelize(range(20), 2).mapPartitions(mapped).collect()
    with open(out, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main(*sys.argv[1:])

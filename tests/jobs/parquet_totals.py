"""A tt.Dataflow job whose source is a plain Parquet scan, read by reference when recorded.

    python parquet_totals.py OUT.json DATA_DIR [filter=SQL] [SPARK_SETTING=VALUE ...]

θ (`Totals`) keeps a running total per group right after the source, so the source's
rows are what θ's Input log records. The scan filters (`id % 5 != 0`, evaluated by
Spark after the file read) and picks columns out of order, with timestamps, decimals
and strings: the read-back must give the very rows Spark gave, types and all. `filter=`
puts another condition in its place (`filter=` alone: none): one pyarrow can evaluate
makes the source's chunks counted (recorder/sources.py).
"""

import json
import sys

from pyspark.sql import SparkSession

import tt
from job_settings import spark_settings


class Totals(tt.Operator):
    def __init__(self):
        self.total = {}

    def process(self, row, port=0):
        k = row["g"]
        self.total[k] = self.total.get(k, 0) + row["v"]
        yield {"id": row["id"], "g": k, "total": self.total[k], "ts": row["ts"].isoformat(), "d": str(row["d"]),
               "s": row["s"]}


def build(spark, data: str, condition: str = "id % 5 != 0") -> tt.Dataflow:
    df = spark.read.parquet(data)
    if condition:
        df = df.filter(condition)
    df = df.select("s", "id", "g", "v", "ts", "d")
    flow = tt.Dataflow("parquet_totals")
    flow.source("U", df).process(Totals(), name="T").collect("out")
    return flow


if __name__ == "__main__":
    out, data = sys.argv[1], sys.argv[2]
    settings = dict(a.split("=", 1) for a in sys.argv[3:])   # how Spark splits the files into tasks
    condition = settings.pop("filter", "id % 5 != 0")
    spark = SparkSession.builder.getOrCreate()
    with spark_settings(spark, settings):
        rows = build(spark, data, condition).run()["out"]
    with open(out, "w") as f:
        json.dump(sorted(rows, key=lambda r: r["id"]), f)

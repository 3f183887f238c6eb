"""A plain PySpark job, without tt: two more forms of UDTF (tests/test_hooked_udtf.py).

- `Totals`, an Arrow UDTF (`@arrow_udtf`) whose `eval` takes the Arrow batches of its table
  argument, keeps a running sum per key and counts its batches; each `eval` yields the sums
  so far as an Arrow table, and `terminate` a row (-1, batches). With two partitions of 500
  ids and 100 rows an Arrow batch, each handler sees five batches.
- `Repeat`, a UDTF whose columns its static `analyze()` gives and whose `__init__` takes that
  result (PySpark passes it), emits each id `times` times with how many rows it emitted so far.

Usage: python hooked_udtf_forms.py OUT.json
"""

import json
import sys

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.functions import arrow_udtf, udtf
from pyspark.sql.types import LongType, StructType
from pyspark.sql.udtf import AnalyzeArgument, AnalyzeResult

ROWS, BATCH = 1000, 100


@arrow_udtf(returnType="k long, total long")
class Totals:
    def __init__(self):
        self.sums = {}
        self.batches = 0

    def eval(self, batch: pa.RecordBatch):
        self.batches += 1
        for k, v in zip(batch.column("k").to_pylist(), batch.column("v").to_pylist()):
            self.sums[k] = self.sums.get(k, 0) + v
        yield pa.table({"k": pa.array(list(self.sums), pa.int64()),
                        "total": pa.array(list(self.sums.values()), pa.int64())})

    def terminate(self):
        yield pa.table({"k": pa.array([-1], pa.int64()), "total": pa.array([self.batches], pa.int64())})


@udtf
class Repeat:
    @staticmethod
    def analyze(x: AnalyzeArgument, times: AnalyzeArgument) -> AnalyzeResult:
        return AnalyzeResult(StructType().add("x", LongType()).add("seen", LongType()))

    def __init__(self, analyze_result):
        self.columns = [f.name for f in analyze_result.schema.fields]
        self.seen = 0

    def eval(self, x, times):
        for _ in range(times):
            self.seen += 1
            yield x, self.seen


def main(out: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-arrow-udtf").getOrCreate()
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH))
    try:
        df = spark.range(0, ROWS, numPartitions=2).selectExpr("id % 5 AS k", "id AS v")
        rows = Totals(df.asTable()).collect()
        spark.udtf.register("repeat_rows", Repeat)
        repeated = spark.sql("SELECT r.* FROM range(0, 40, 1, 2) t, LATERAL repeat_rows(t.id, 3) r").collect()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    with open(out, "w") as f:
        json.dump({"totals": sorted(tuple(r) for r in rows), "repeated": sorted(tuple(r) for r in repeated)}, f)


if __name__ == "__main__":
    main(sys.argv[1])

"""A plain PySpark job, without tt: iterator UDFs that keep a running figure per task.

PySpark calls an iterator UDF once per task with the task's Arrow batches, and what its
generator keeps between batches is its state. `running_total` (`@pandas_udf` over
`Iterator[pd.Series]`) gives each row the sum of the amounts its task has seen up to it;
`big_so_far` (`@arrow_udf` over `Iterator[Tuple[pa.Array, pa.Array]]`, registered and called
from SQL) gives each row how many of its task's rows up to it had an amount of at least 50.
A second query uses `running_total` again, over the amounts doubled.

Payment i (0 <= i < ROWS) is in partition i // (ROWS // 2), amount (i * 37) % 101; batches
of BATCH rows: the tests compute every output and state with pandas.
With `stream`, `running_total` runs over a Structured Streaming query instead: FILES CSV files
of PER_FILE payments (payment i in file i // PER_FILE), one file a micro-batch, into a
memory sink; each micro-batch's task starts its total again.
Usage: python hooked_iter_udf.py OUT.json [ROWS] [BATCH]
       python hooked_iter_udf.py OUT.json stream IN_DIR CKPT FILES PER_FILE
"""

import json
import sys
from typing import Iterator, Tuple

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.functions import arrow_udf, pandas_udf
from pyspark.sql.types import DoubleType, LongType

from job_settings import spark_settings, write_payment_files   # tests/jobs/job_settings.py


@pandas_udf(DoubleType())   # (a type, not a DDL string: no session yet)
def running_total(amounts: Iterator[pd.Series]) -> Iterator[pd.Series]:
    total = 0.0
    for batch in amounts:
        out = batch.cumsum() + total
        total = float(out.iloc[-1])
        yield out


@arrow_udf(LongType())
def big_so_far(batches: Iterator[Tuple[pa.Array, pa.Array]]) -> Iterator[pa.Array]:
    big = 0
    for ids, amounts in batches:
        counted = pc.add(pc.cumulative_sum(pc.cast(pc.greater_equal(amounts, 50.0), pa.int64())), big)
        big = counted[-1].as_py()
        yield counted


def main(out: str, rows: int = 200, batch: int = 25) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-iter-udf").getOrCreate()
    with spark_settings(spark, {"spark.sql.execution.arrow.maxRecordsPerBatch": str(batch)}):
        payments = spark.range(0, rows, numPartitions=2).selectExpr("id", "CAST((id * 37) % 101 AS DOUBLE) AS amount")
        payments.select("id", "amount", running_total("amount").alias("total")).createOrReplaceTempView("totals")
        spark.udf.register("big_so_far", big_so_far)
        got = spark.sql("SELECT id, total, big_so_far(id, amount) AS big FROM totals").collect()
        doubled = payments.selectExpr("id", "amount * 2 AS amount")
        again = doubled.select("id", running_total("amount").alias("total")).collect()
    with open(out, "w") as f:
        json.dump({"rows": sorted([r["id"], r["total"], r["big"]] for r in got),
                   "doubled": sorted([r["id"], r["total"]] for r in again)}, f)


def stream_main(out: str, in_dir: str, ckpt: str, files: int, per_file: int) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-iter-udf-stream").getOrCreate()
    write_payment_files(in_dir, files, per_file)
    stream = (spark.readStream.schema("id long, amount double").option("header", "true")
              .option("maxFilesPerTrigger", 1).csv(in_dir))
    name = "totals_" + str(abs(hash(out)))
    query = (stream.select("id", running_total("amount").alias("total")).writeStream.format("memory")
             .queryName(name).option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    query.awaitTermination()
    with open(out, "w") as f:
        json.dump(sorted([r["id"], r["total"]] for r in spark.sql(f"SELECT * FROM {name}").collect()), f)


if __name__ == "__main__":
    if sys.argv[2:3] == ["stream"]:
        stream_main(sys.argv[1], sys.argv[3], sys.argv[4], *map(int, sys.argv[5:7]))
    else:
        main(sys.argv[1], *map(int, sys.argv[2:4]))

"""A plain PySpark job, without tt, whose rows say where they came from (tests/test_lineage_through_spark.py).

- `Tag` (mapInPandas, a callable class counting its batches) passes each payment on with
  `first_id`, the id of its batch's first row: with `spark.range` over two partitions and
  BATCH rows an Arrow batch, that names the partition and the batch by arithmetic alone;
- `tally` (applyInPandas, after Spark's shuffle by customer) emits, per customer, how many
  of its rows came from each batch, as plain data;
- `keep` (applyInPandas, after Spark's aggregate of the tagged rows) gets rows Spark made: a
  `total` no batch holds;
- `scale` (rdd.mapPartitions over `tallied.rdd`, a DataFrame turned RDD of Rows) emits each of
  tally's rows with its count times ten.

Usage: python hooked_spark_lineage.py OUT.json
"""

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

ROWS, BATCH = 2000, 300   # two partitions of 1,000 ids: batches of 300, 300, 300 and 100 rows each


class Tag:
    def __init__(self):
        self.batches = 0

    def __call__(self, frames):
        for pdf in frames:
            self.batches += 1
            yield pdf.assign(first_id=int(pdf["id"].iloc[0]))


def tally(key, pdf):
    counts = pdf.groupby("first_id", as_index=False).size().rename(columns={"size": "n"})
    return counts.assign(customer=key[0])[["customer", "first_id", "n"]]


def keep(pdf):
    return pdf


def scale(rows):
    for r in rows:
        yield r.customer, r.first_id, r.n * 10


def main(out: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-spark-lineage").getOrCreate()
    settings = {"spark.sql.shuffle.partitions": "3", "spark.sql.adaptive.enabled": "false",
                "spark.sql.execution.arrow.maxRecordsPerBatch": str(BATCH)}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        payments = spark.range(0, ROWS, numPartitions=2).selectExpr(
            "id", "concat('c', id % 7) AS customer", "CAST((id * 37) % 101 AS DOUBLE) AS amount")
        tagged = payments.mapInPandas(Tag(), "id long, customer string, amount double, first_id long")
        tallied = tagged.groupBy("customer").applyInPandas(tally, "customer string, first_id long, n long")
        totals = tagged.groupBy("customer").agg(F.sum("amount").alias("total")).groupBy("customer") \
            .applyInPandas(keep, "customer string, total double")
        result = {"tallied": sorted(tuple(r) for r in tallied.collect()),
                  "totals": sorted(tuple(r) for r in totals.collect()),
                  "scaled": sorted(tallied.rdd.mapPartitions(scale).collect())}
    finally:
        for k in settings:
            spark.conf.unset(k)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])

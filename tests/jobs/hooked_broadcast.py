"""A plain PySpark job, without tt, whose functions read a broadcast variable, as jobs send a
lookup table to every executor: `RATES` (customer -> rate) is a module global read by an RDD
`mapPartitions` generator, a closure cell of a `mapInPandas` function, and an attribute of a
StatefulProcessor (`transformWithStateInPandas`), each of which adds up amount × rate.

The data is a pure function of the row id (tests/test_hooked_broadcast.py computes the answers
with pandas). Usage: python hooked_broadcast.py OUT.json
"""

import json
import sys

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StatefulProcessor

from job_settings import spark_settings   # tests/jobs/job_settings.py

ROWS = 90
RATES = None   # the broadcast, made in main()


def rated(rows):
    total = 0.0
    for row in rows:
        total += row.amount * RATES.value[row.customer]
        yield (row.id, total)


class Rated(StatefulProcessor):
    def __init__(self, rates):
        self.rates = rates

    def init(self, handle):
        self.total = handle.getValueState("total", "amount double")

    def handleInputRows(self, key, rows, timerValues):
        total = (self.total.get() or (0.0,))[0]
        for pdf in rows:
            total += float((pdf["amount"] * self.rates.value[key[0]]).sum())
        self.total.update((total,))
        yield pd.DataFrame({"customer": [key[0]], "total": [total]})

    def close(self):
        pass


def main(out: str) -> None:
    global RATES
    spark = SparkSession.builder.master("local[2]").appName("hooked-broadcast").getOrCreate()
    RATES = spark.sparkContext.broadcast({f"c{i}": 1.0 + i / 4 for i in range(3)})
    rates = RATES

    def converted(batches):
        for pdf in batches:
            yield pd.DataFrame({"id": pdf["id"], "value": pdf["amount"] * pdf["customer"].map(rates.value)})

    settings = {"spark.sql.execution.arrow.maxRecordsPerBatch": "10", "spark.sql.shuffle.partitions": "2",
                "spark.sql.adaptive.enabled": "false"}
    with spark_settings(spark, settings):   # the session may be a test suite's
        payments = spark.range(0, ROWS, numPartitions=2).selectExpr(
            "id", "concat('c', id % 3) AS customer", "CAST((id * 13) % 29 AS DOUBLE) AS amount")
        result = {
            "rdd": sorted(list(r) for r in payments.rdd.mapPartitions(rated).collect()),
            "pandas": sorted(list(r) for r in payments.mapInPandas(converted, "id long, value double").collect()),
            "processor": sorted(list(r) for r in payments.groupBy("customer").transformWithStateInPandas(
                statefulProcessor=Rated(RATES), outputStructType="customer string, total double",
                outputMode="Update", timeMode="None").collect()),
        }
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])

"""A plain PySpark job whose function writes into the rows it is given (tests/test_mutated_inputs.py).

`Stamp`, a callable class given to `RDD.map`, counts on each row how often it was processed
and keeps the counts it saw: every row is processed once, so every count is 1. With `pandas`,
`StampFrames` does the same to the DataFrames `mapInPandas` hands it, in place.
Usage: python hooked_mutating.py OUT.json [pandas]
"""

import json
import sys

from pyspark.sql import SparkSession


class Stamp:
    def __init__(self):
        self.visits = []

    def __call__(self, row):
        row["visits"] = row.get("visits", 0) + 1
        self.visits.append(row["visits"])
        return row


class StampFrames:
    def __init__(self):
        self.visits = []

    def __call__(self, frames):
        for pdf in frames:
            pdf["visits"] += 1   # writes into the DataFrame Spark handed over
            self.visits.extend(pdf["visits"].tolist())
            yield pdf


def main(out: str, mode: str = "rdd") -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-mutating").getOrCreate()
    if mode == "pandas":
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "25")
        try:
            rows = spark.range(0, 200, numPartitions=2).selectExpr("id", "0L AS visits") \
                .mapInPandas(StampFrames(), "id long, visits long").collect()
        finally:
            spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    else:
        rows = spark.sparkContext.parallelize([{"id": i} for i in range(400)], 2).map(Stamp()).collect()
    with open(out, "w") as f:
        json.dump(sorted(r["visits"] for r in rows), f)


if __name__ == "__main__":
    main(*sys.argv[1:])

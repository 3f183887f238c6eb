"""A plain PySpark job whose function writes into the rows it is given (tests/test_mutated_inputs.py).

`Stamp`, a callable class given to `RDD.map`, counts on each row how often it was processed
and keeps the counts it saw: every row is processed once, so every count is 1.
Usage: python hooked_mutating.py OUT.json
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


def main(out: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-mutating").getOrCreate()
    rows = spark.sparkContext.parallelize([{"id": i} for i in range(400)], 2).map(Stamp()).collect()
    with open(out, "w") as f:
        json.dump(sorted(r["visits"] for r in rows), f)


if __name__ == "__main__":
    main(sys.argv[1])

"""A plain PySpark job, without tt, whose functions keep state where jobs keep it besides
attributes and closures: `score` (`mapInPandas`) loads a model once (`global MODEL`, the lazy
load jobs do once per worker) and counts its batches (`global BATCHES`); `RATES`, which it only
reads, is its input. `Tally.run` is handed to `mapInPandas` through `functools.partial` (a
parameter bound), and counts its rows in an attribute of its instance.

The data is a pure function of the row id (tests/test_hooked_globals.py computes the answers).
Usage: python hooked_globals.py OUT.json
"""

import functools
import json
import sys

import pandas as pd
from pyspark.sql import SparkSession

from job_settings import spark_settings   # tests/jobs/job_settings.py

ROWS = 80
RATES = {"c0": 1.0, "c1": 1.5}
MODEL = None
BATCHES = 0


class Model:
    def __init__(self, rates):
        self.weights = dict(rates)
        self.loaded = 1


def score(batches):
    global MODEL, BATCHES
    for pdf in batches:
        if MODEL is None:
            MODEL = Model(RATES)
        BATCHES += 1
        yield pd.DataFrame({"id": pdf["id"], "score": pdf["amount"] * pdf["customer"].map(MODEL.weights),
                            "batch": BATCHES})


class Tally:
    def __init__(self):
        self.rows = 0

    def run(self, batches, scale):
        for pdf in batches:
            self.rows += len(pdf)
            yield pd.DataFrame({"rows": [self.rows * scale]})


def main(out: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-globals").getOrCreate()
    with spark_settings(spark, {"spark.sql.execution.arrow.maxRecordsPerBatch": "9"}):   # the session may be a test suite's
        payments = spark.range(0, ROWS, numPartitions=2).selectExpr(
            "id", "concat('c', id % 2) AS customer", "CAST((id * 7) % 11 AS DOUBLE) AS amount")
        rows = sorted(list(r) for r in payments.mapInPandas(score, "id long, score double, batch long").collect())
        tallies = sorted(r[0] for r in payments.mapInPandas(functools.partial(Tally().run, scale=10), "rows long").collect())
    with open(out, "w") as f:
        json.dump({"scores": rows, "tallies": tallies}, f)


if __name__ == "__main__":
    main(sys.argv[1])

"""A plain PySpark job, without tt, whose functions keep state where jobs keep it besides
attributes and closures: `score` (`mapInPandas`) loads a model once (`global MODEL`, the lazy
load jobs do once per worker) and counts its batches (`global BATCHES`); `RATES`, which it only
reads, is its input. `Tally.run` is handed to `mapInPandas` through `functools.partial` (a
parameter bound), and counts its rows in an attribute of its instance. `Largest`, a
StatefulProcessor, keeps the largest amount it has seen in a global (`global LARGEST`).
`first_sightings` (`rdd.mapPartitions`) writes into two globals without assigning them: the
amounts it has passed on (`SEEN.add`) and its rows per customer (`COUNTS[c] = ...`). `running`
(`mapInPandas`, through `functools.partial`) keeps its running totals in a dict the partial binds
(`totals={}`) and counts its batches in an attribute of its own (`running.batches += 1`).

The data is a pure function of the row id (tests/test_hooked_globals.py computes the answers).
Usage: python hooked_globals.py OUT.json
"""

import functools
import json
import sys

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StatefulProcessor

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


LARGEST = 0.0


class Largest(StatefulProcessor):
    def init(self, handle):
        pass

    def handleInputRows(self, key, rows, timerValues):
        global LARGEST
        for pdf in rows:
            LARGEST = max(LARGEST, float(pdf["amount"].max()))
        yield pd.DataFrame({"customer": [key[0]], "largest": [LARGEST]})

    def close(self):
        pass


SEEN = set()
COUNTS = {}


def first_sightings(rows):
    for r in rows:
        COUNTS[r.customer] = COUNTS.get(r.customer, 0) + 1
        if r.amount not in SEEN:
            SEEN.add(r.amount)
            yield (r.id, r.customer, COUNTS[r.customer])


def running(batches, totals):
    for pdf in batches:
        for customer, amount in zip(pdf["customer"], pdf["amount"]):
            totals[customer] = totals.get(customer, 0.0) + float(amount)
        running.batches += 1
        yield pd.DataFrame({"customer": list(totals), "total": list(totals.values()), "batch": running.batches})


running.batches = 0


def main(out: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-globals").getOrCreate()
    settings = {"spark.sql.execution.arrow.maxRecordsPerBatch": "9", "spark.sql.shuffle.partitions": "1"}
    with spark_settings(spark, settings):   # the session may be a test suite's
        payments = spark.range(0, ROWS, numPartitions=2).selectExpr(
            "id", "concat('c', id % 2) AS customer", "CAST((id * 7) % 11 AS DOUBLE) AS amount")
        rows = sorted(list(r) for r in payments.mapInPandas(score, "id long, score double, batch long").collect())
        tallies = sorted(r[0] for r in payments.mapInPandas(functools.partial(Tally().run, scale=10), "rows long").collect())
        largest = sorted(list(r) for r in payments.groupBy("customer").transformWithStateInPandas(
            statefulProcessor=Largest(), outputStructType="customer string, largest double",
            outputMode="Update", timeMode="None").collect())
        sightings = sorted(list(r) for r in payments.rdd.mapPartitions(first_sightings).collect())
        totals = sorted(list(r) for r in payments.mapInPandas(functools.partial(running, totals={}),
                                                              "customer string, total double, batch long").collect())
    with open(out, "w") as f:
        json.dump({"scores": rows, "tallies": tallies, "largest": largest, "sightings": sightings, "totals": totals}, f)


if __name__ == "__main__":
    main(sys.argv[1])

"""A plain PySpark job, without tt, that loses its executors between two actions. It runs on
`local-cluster[2,1,1024]` (two executor JVMs on this machine, as a standalone cluster's), sums
a running total per key through a shuffle, then kills both executors and has them replaced
(`killAndReplaceExecutor`): the shuffle's map outputs are lost with them, and the second
`collect()` makes Spark compute every map task again, each a run of `running` that tt had
recorded already. Waits for Spark's own state (the executors gone, new ones registered),
never for a time. With `random`, each row's total adds a random draw: a map task computed again
gives other sums than the first time (tt logs the draws of the runs it records, not those of a
run Spark makes again), Spark's own hazard with a function that is not deterministic.

Usage: python hooked_lost_executors.py OUT.json [random]
"""

import json
import random
import sys
import time

from pyspark.sql import SparkSession

ROWS, PARTITIONS, KEYS = 4000, 4, 4


def running(rows):
    total = 0
    for x in rows:
        total += x
        yield (x % KEYS, total)


def noisy(rows):
    total = 0.0
    for x in rows:
        total += x + random.random()
        yield (x % KEYS, total)


def _executors(sc) -> set:
    seq = sc._jsc.sc().getExecutorIds()
    return {seq.apply(i) for i in range(seq.size())}


def _until(condition, what: str, limit: float = 120.0) -> None:
    end = time.monotonic() + limit
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError(f"Spark never {what}")
        time.sleep(0.1)   # (polling Spark's state: how soon it holds is Spark's)


def main(out: str, mode: str = "same") -> None:
    spark = SparkSession.builder.master("local-cluster[2,1,1024]").appName("hooked-lost-executors") \
        .config("spark.executor.memory", "1g").getOrCreate()
    sc = spark.sparkContext
    _until(lambda: len(_executors(sc)) == 2, "registered two executors")
    sums = sc.parallelize(range(ROWS), PARTITIONS).mapPartitions(noisy if mode == "random" else running).reduceByKey(lambda a, b: a + b)
    first = sorted(sums.collect())
    lost = _executors(sc)
    for executor in lost:
        sc._jsc.sc().killAndReplaceExecutor(executor)
    _until(lambda: not (_executors(sc) & lost) and _executors(sc), "replaced the executors it killed")
    second = sorted(sums.collect())
    with open(out, "w") as f:
        json.dump({"first": first, "second": second}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])

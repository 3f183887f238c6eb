"""A plain PySpark job, without tt, with a barrier stage (`rdd.barrier().mapPartitions`) beside
a plain `mapPartitions`, which tt records. The barrier stage's tasks wait for each other
(`BarrierTaskContext.barrier()`); tt does not hook it, and says so.

Usage: python hooked_barrier.py OUT.json
"""

import json
import sys

from pyspark import BarrierTaskContext
from pyspark.sql import SparkSession


def summed(rows):
    yield sum(rows)


def gathered(rows):
    context = BarrierTaskContext.get()
    total = sum(rows)
    context.barrier()   # (every task of the stage reaches it before any goes on)
    yield [context.partitionId(), total]


def main(out: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-barrier").getOrCreate()
    sc = spark.sparkContext
    sums = sc.parallelize(range(10), 2).mapPartitions(summed).collect()
    together = sc.parallelize(range(10), 2).barrier().mapPartitions(gathered).collect()
    with open(out, "w") as f:
        json.dump({"sums": sums, "together": sorted(together)}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])

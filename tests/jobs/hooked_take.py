"""A plain PySpark job, without tt, that looks at the first rows of hooked RDD functions:
`take(5)` of `numbered` (`rdd.mapPartitions`, a generator numbering its partition's elements,
which counts in an accumulator that it was closed), and `first()` of `tripled` (`rdd.map`).
PySpark pulls a partition's outputs through a generator of its own that stops at n, and closes
the rest: the functions never see the end of their input.

Usage: python hooked_take.py OUT.json
"""

import json
import sys

from pyspark.sql import SparkSession

CLOSED = None   # an accumulator, made in main


def numbered(rows):
    n = 0
    try:
        for r in rows:
            n += 1
            yield (r, n)
    finally:
        CLOSED.add(1)


def tripled(x):
    return x * 3


def main(out: str) -> None:
    global CLOSED
    spark = SparkSession.builder.master("local[2]").appName("hooked-take").getOrCreate()
    sc = spark.sparkContext
    CLOSED = sc.accumulator(0)
    elements = sc.parallelize(range(100), 2)
    taken = elements.mapPartitions(numbered).take(5)
    first = elements.map(tripled).first()
    with open(out, "w") as f:
        json.dump({"taken": taken, "first": first, "closed": CLOSED.value}, f)


if __name__ == "__main__":
    main(sys.argv[1])

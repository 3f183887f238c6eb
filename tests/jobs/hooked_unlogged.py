"""A plain PySpark job whose generator emits, beside each element, what no log gives back when
asked to: the address of an object it makes (`id()`), which a replay's process does not share.
Its state, a count, replays alike either way: only what it emitted tells
(tests/test_hooked_outputs.py).

Usage: python hooked_unlogged.py OUT.json plain|unlogged
"""

import json
import sys

from pyspark.sql import SparkSession


def numbered(rows):
    n = 0
    for r in rows:
        n += 1
        yield (r, n, 7 * n)


def addressed(rows):
    n = 0
    for r in rows:
        n += 1
        yield (r, n, id(object()))


def main(out: str, which: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-unlogged").getOrCreate()
    elements = spark.sparkContext.parallelize(range(40), 2)
    rows = elements.mapPartitions(numbered if which == "plain" else addressed).collect()
    with open(out, "w") as f:
        json.dump(len(rows), f)


if __name__ == "__main__":
    main(*sys.argv[1:])

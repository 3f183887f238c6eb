"""A plain PySpark job, without tt, that runs a hooked generator (`running`, a running total of
a text file's numbers in each partition) for two actions: Spark runs it again over each
partition for the second. How that second run differs from the first, by MODE:

same     it does not: count(), then collect()
changed  the file is rewritten with doubled numbers between count() and collect()
take     take(3), then collect(): the first run of partition 0 stopped after 3 rows
random   count(), then collect(), of a total that adds a random draw to each number (tt logs
         the draws of the run it records, not those of a run made again)
raise    the file is rewritten with "thirty" for 30 between count() and collect(): the second
         run of partition 0 raises ValueError, and the job fails

Usage: python hooked_rerun.py OUT.json MODE FOLDER
"""

import json
import random
import sys
from pathlib import Path

from pyspark.sql import SparkSession

NUMBERS = range(100)


def running(rows):
    total = 0
    for x in rows:
        total += int(x)
        yield (int(x), total)


def noisy(rows):
    total = 0.0
    for x in rows:
        total += int(x) + random.random()
        yield (int(x), total)


def write(path: Path, factor: int, thirty: bool = False) -> None:
    path.write_text("\n".join("thirty" if thirty and x == 30 else str(x * factor) for x in NUMBERS))


def main(out: str, mode: str, folder: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-rerun").getOrCreate()
    path = Path(folder) / "numbers.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path, 1)
    totals = spark.sparkContext.textFile(str(path), 2).mapPartitions(noisy if mode == "random" else running)
    first = totals.take(3) if mode == "take" else totals.count()
    if mode in ("changed", "raise"):
        write(path, 2 if mode == "changed" else 1, thirty=mode == "raise")
    rows = totals.collect()
    with open(out, "w") as f:
        json.dump({"first": first, "rows": rows}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])

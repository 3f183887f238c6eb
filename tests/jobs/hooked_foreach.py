"""A plain PySpark job, without tt, whose sinks keep state: `write_batches`
(`df.foreachPartition`) writes its partition's amounts in batches of four, a line a batch into
the file OUT.json.sink, a plain function (not a generator) keeping the open batch and the
batches it has flushed in its locals; `tally`
(`rdd.foreach`) counts rows per customer in a global dict it writes into (`SEEN[c] = ...`).
What they write goes to accumulators, which the driver reads afterwards.

The data is a pure function of the row id (tests/test_hooked_foreach.py computes the answers).
Usage: python hooked_foreach.py OUT.json
"""

import json
import sys
import time

from pyspark.sql import SparkSession

ROWS, BATCH = 30, 4
SEEN = {}
WRITTEN = None   # accumulators, made in main
FLUSHES = None
TALLIED = None
SINK = None      # the file write_batches appends to, named in main


def write_batches(rows):
    batch, flushed, started = [], 0, time.time()   # (a clock read: logged, as any hooked function's)
    for r in rows:
        batch.append(r.amount)
        if len(batch) == BATCH:
            flush(batch)
            flushed += 1
            batch = []
    if batch:
        flush(batch)
        flushed += 1
    FLUSHES.add(flushed)


def flush(batch):
    WRITTEN.add(sum(batch))
    with open(SINK, "a") as f:
        f.write(f"{sum(batch)}\n")


def tally(row):
    SEEN[row.customer] = SEEN.get(row.customer, 0) + 1
    TALLIED.add(SEEN[row.customer])


def main(out: str) -> None:
    global WRITTEN, FLUSHES, TALLIED, SINK
    SINK = out + ".sink"
    spark = SparkSession.builder.master("local[2]").appName("hooked-foreach").getOrCreate()
    sc = spark.sparkContext
    WRITTEN, FLUSHES, TALLIED = sc.accumulator(0.0), sc.accumulator(0), sc.accumulator(0)
    payments = spark.range(0, ROWS, numPartitions=2).selectExpr(
        "id", "concat('c', id % 3) AS customer", "CAST((id * 7) % 11 AS DOUBLE) AS amount")
    payments.foreachPartition(write_batches)
    payments.rdd.foreach(tally)
    with open(out, "w") as f:
        json.dump({"written": WRITTEN.value, "flushes": FLUSHES.value, "tallied": TALLIED.value}, f)


if __name__ == "__main__":
    main(sys.argv[1])

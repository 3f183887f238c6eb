"""A plain PySpark job, without tt, whose operators keep the process's machinery beside their
state, as real jobs do: a logger, a lock, a module, and objects that lead back to themselves.

- `Ledger` (`transformWithStateInPandas`) keeps a ValueState `total` per customer, and as plain
  attributes `self.log = logging.getLogger(__name__)`, a `threading.Lock`, the `json` module it
  encodes with, and a `Book` whose `Entry`s (one per customer it saw) point back at it.
- `tally` (`mapInPandas`) is a generator with a logger and a `Node` chain whose nodes point at
  their parent, in its locals.

The data is a pure function of the row id (tests/test_hooked_machinery.py computes the answer
with pandas). Usage: python hooked_machinery.py OUT.json [ROWS]
"""

import json
import logging
import sys
import threading

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StatefulProcessor

from job_settings import spark_settings   # tests/jobs/job_settings.py


class Book:
    def __init__(self):
        self.entries = []


class Entry:
    def __init__(self, book, customer, amount):
        self.book, self.customer, self.amount = book, customer, amount


class Ledger(StatefulProcessor):
    def init(self, handle):
        self.log = logging.getLogger(__name__)
        self.lock = threading.Lock()
        self.codec = json
        self.book = Book()
        self.total = handle.getValueState("total", "amount double")

    def handleInputRows(self, key, rows, timerValues):
        amount = (self.total.get() or (0.0,))[0]
        for pdf in rows:
            amount += float(pdf["amount"].sum())
        with self.lock:
            self.book.entries.append(Entry(self.book, key[0], amount))
        self.log.debug("%s", self.codec.dumps([key[0], amount]))
        self.total.update((amount,))
        yield pd.DataFrame({"customer": [key[0]], "amount": [amount]})

    def close(self):
        pass


class Node:
    def __init__(self, parent, rows):
        self.parent, self.rows, self.children = parent, rows, []
        if parent is not None:
            parent.children.append(self)


def tally(batches):
    log = logging.getLogger("tally")
    root = node = Node(None, 0)   # (the chain from its root: each node holds its children, each child its parent)
    for pdf in batches:
        node = Node(node, len(pdf))
        log.debug("batch of %d under %d", len(pdf), root.rows)
        yield pd.DataFrame({"rows": [len(pdf)], "depth": [sum(1 for _ in _up(node)) - 1]})


def _up(node):
    while node is not None:
        yield node
        node = node.parent


def main(out: str, rows: int = 60) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-machinery").getOrCreate()
    settings = {"spark.sql.execution.arrow.maxRecordsPerBatch": "7", "spark.sql.shuffle.partitions": "2",
                "spark.sql.adaptive.enabled": "false"}
    with spark_settings(spark, settings):   # the session may be a test suite's
        payments = spark.range(0, rows, numPartitions=2).selectExpr(
            "id", "concat('c', id % 4) AS customer", "CAST((id * 37) % 101 AS DOUBLE) AS amount")
        totals = payments.groupBy("customer").transformWithStateInPandas(
            statefulProcessor=Ledger(), outputStructType="customer string, amount double",
            outputMode="Update", timeMode="None")
        batches = payments.mapInPandas(tally, "rows long, depth long")
        result = {"totals": sorted([list(r) for r in totals.collect()]),
                  "batches": sorted([list(r) for r in batches.collect()])}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))

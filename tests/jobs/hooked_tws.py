"""A plain PySpark job, without tt: StatefulProcessors over a batch DataFrame.

- `Totals` (`transformWithStateInPandas`) keeps, per customer, a ValueState
  `total` (amount sum, payment count), a ListState `recent` of the last three
  payment ids and a MapState `by_kind` (kind -> count); it emits one row per
  customer with the running total after each pandas chunk, plus one at the end of
  the key's rows. It raises on customer FAIL_KEY.
- `Flags` (`transformWithState`, Row-based) flags a payment when the customer's
  previous payment was larger: a ValueState `last`; it counts the rows it saw in a
  plain attribute, and registers a processing-time timer in the past for customer
  c0, which fires in the same task (`handleExpiredTimer` emits a marker row). It
  leaves customer c4's rows unread.

The data is a pure function of the row id, so the tests compute every customer's
state with pandas alone (tests/test_hooked_tws.py). Two rows per Arrow batch make
the pandas processor see several chunks per key, but for customer c5, who made one
payment (id 2): each processor sees that key's rows as one element.
Usage: python hooked_tws.py OUT.json [ROWS] [FAIL_KEY]
"""

import json
import sys

import pandas as pd
from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming import StatefulProcessor

from job_settings import spark_settings   # tests/jobs/job_settings.py


class Totals(StatefulProcessor):
    def __init__(self, fail_key: str = "-"):
        self.fail_key = fail_key
        self.chunks = 0

    def init(self, handle):
        self.total = handle.getValueState("total", "amount double, n long")
        self.recent = handle.getListState("recent", "id long")
        self.by_kind = handle.getMapState("by_kind", "kind string", "n long")

    def handleInputRows(self, key, rows, timerValues):
        if key[0] == self.fail_key:
            raise ValueError(f"bad customer {self.fail_key}")
        amount, n = self.total.get() if self.total.exists() else (0.0, 0)
        for pdf in rows:
            self.chunks += 1
            amount += float(pdf["amount"].sum())
            n += len(pdf)
            self.total.update((amount, n))
            for pid, kind in zip(pdf["id"], pdf["kind"]):
                self.recent.appendValue((int(pid),))
                seen = self.by_kind.getValue((kind,))
                self.by_kind.updateValue((kind,), ((seen[0] if seen else 0) + 1,))
            keep = sorted(self.recent.get())[-3:]
            self.recent.put(keep)
        yield pd.DataFrame({"customer": [key[0]], "amount": [amount], "n": [-1]})

    def close(self):
        pass


class Flags(StatefulProcessor):
    def init(self, handle):
        self.handle = handle
        self.high = handle.getValueState("high", "n long")
        self.rows = 0

    def handleInputRows(self, key, rows, timerValues):
        if key[0] == "c4":   # leaves its rows unread: PySpark skips them
            yield Row(id=-2, customer="c4", note="skipped")
            return
        for row in rows:
            self.rows += 1
            if row.amount > 50:
                seen = self.high.get()
                self.high.update(((seen[0] if seen else 0) + 1,))
                yield Row(id=row.id, customer=row.customer, note="high")
        if key[0] == "c0":
            self.handle.registerTimer(max(timerValues.getCurrentProcessingTimeInMs() - 1000, 1))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield Row(id=-1, customer=key[0], note="timer")

    def close(self):
        pass


def main(out: str, rows: int = 120, fail_key: str = "-") -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-tws").getOrCreate()
    settings = {"spark.sql.execution.arrow.maxRecordsPerBatch": "2",   # several chunks per key
                "spark.sql.shuffle.partitions": "3", "spark.sql.adaptive.enabled": "false"}
    with spark_settings(spark, settings):   # the session may be a test suite's
        payments = spark.range(0, rows, numPartitions=2).selectExpr(
            "id", "IF(id = 2, 'c5', concat('c', id % 5)) AS customer", "CAST((id * 37) % 101 AS DOUBLE) AS amount",
            "IF(id % 3 = 0, 'card', 'cash') AS kind")
        totals = payments.groupBy("customer").transformWithStateInPandas(
            statefulProcessor=Totals(fail_key), outputStructType="customer string, amount double, n long",
            outputMode="Update", timeMode="None")
        flags = payments.groupBy("customer").transformWithState(
            Flags(), "id long, customer string, note string", "Update", "ProcessingTime")
        result = {
            "totals": sorted([list(r) for r in totals.collect()]),
            "flags": sorted([list(r) for r in flags.collect()]),
        }
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) if a.isdigit() else a for a in sys.argv[2:]))

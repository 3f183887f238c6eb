"""A plain PySpark job, without tt: StatefulProcessors with an initial state, over a batch DataFrame.

Each customer c0..c5 may start with a balance (the initial state: one row per customer
c1..c5, balance 100 * i), then pays ROWS payments (customer c{id % 5}, amount id % 7).
`Opening` (`transformWithStateInPandas`) and `RowOpening` (`transformWithState`) keep a
ValueState `balance` (amount, payments): `handleInitialState` sets it from the initial
state, `handleInputRows` adds the payments and emits the balance. c5 has an initial state
and no payments; c0 has payments and no initial state.
Usage: python hooked_tws_initial.py OUT.json [ROWS]
"""

import json
import sys

import pandas as pd
from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming import StatefulProcessor

from job_settings import spark_settings   # tests/jobs/job_settings.py


class Opening(StatefulProcessor):
    def init(self, handle):
        self.balance = handle.getValueState("balance", "amount double, n long")
        self.opened = 0

    def handleInitialState(self, key, initialState, timerValues):
        self.opened += 1
        self.balance.update((float(initialState["start"].sum()), 0))

    def handleInputRows(self, key, rows, timerValues):
        amount, n = self.balance.get() or (0.0, 0)
        for chunk in rows:
            amount += float(chunk["amount"].sum())
            n += len(chunk)
        self.balance.update((amount, n))
        yield pd.DataFrame({"customer": [key[0]], "amount": [amount], "n": [n]})

    def close(self):
        pass


class RowOpening(StatefulProcessor):
    def init(self, handle):
        self.balance = handle.getValueState("balance", "amount double, n long")
        self.opened = 0

    def handleInitialState(self, key, initialState, timerValues):
        self.opened += 1
        self.balance.update((float(initialState.start), 0))

    def handleInputRows(self, key, rows, timerValues):
        amount, n = self.balance.get() or (0.0, 0)
        for row in rows:
            amount += row.amount
            n += 1
        self.balance.update((amount, n))
        yield Row(customer=key[0], amount=amount, n=n)

    def close(self):
        pass


def main(out: str, rows: int = 60) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-tws-initial").getOrCreate()
    settings = {"spark.sql.shuffle.partitions": "2", "spark.sql.adaptive.enabled": "false"}
    with spark_settings(spark, settings):   # the session may be a test suite's
        payments = spark.range(0, rows, numPartitions=2).selectExpr(
            "id", "concat('c', id % 5) AS customer", "CAST(id % 7 AS DOUBLE) AS amount")
        starts = spark.createDataFrame([(f"c{i}", 100.0 * i) for i in range(1, 6)], "customer string, start double")
        schema = "customer string, amount double, n long"
        pandas_out = payments.groupBy("customer").transformWithStateInPandas(
            statefulProcessor=Opening(), outputStructType=schema, outputMode="Update", timeMode="None",
            initialState=starts.groupBy("customer"))
        row_out = payments.groupBy("customer").transformWithState(
            RowOpening(), schema, "Update", "None", initialState=starts.groupBy("customer"))
        result = {"pandas": sorted([list(r) for r in pandas_out.collect()]),
                  "row": sorted([list(r) for r in row_out.collect()])}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))

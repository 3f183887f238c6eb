"""A plain PySpark job, without tt: functions of whole groups.

- `summary` is given to `applyInPandas` and called with the key: its closure dict
  `stats` counts the groups and rows it saw and keeps the last key (PySpark counts
  `self` among a callable instance's arguments, so grouped functions are functions);
- `above_mean` is a plain function of one group (no key) given to `applyInPandas`;
- `merge` is a cogrouped `applyInPandas` function of (key, left, right);
- `sizes` is an `applyInArrow` function whose closure dict `seen` keeps each key's
  row count;
- `batches_of` asks, by its type hints, for PySpark's iterator form of
  `applyInPandas` (a group's batches as an iterator, without the key); `running` too, with
  the key, its closure dict `rows` counting each customer's rows batch by batch;
  `arrow_rows` is `running` for `applyInArrow`'s iterator form (Arrow batches, a key of
  Arrow scalars).
  Twenty rows an Arrow batch give each group of about 43 rows three batches.

Six shuffle partitions for seven keys leave some partitions without a group, where
Spark runs no Python at all. The data is a pure function of the row id, so the tests compute what every group
holds with pandas alone (tests/test_hooked_grouped.py).
Usage: python hooked_grouped.py OUT.json [ROWS] [FAIL_KEY] [FLAKY] [COALESCE]
(summary raises on customer FAIL_KEY; with FLAKY=1 on c3, in its task's first attempt only;
with COALESCE=N its output is coalesced to N partitions: Spark then calls it for several
shuffle partitions in one task)
"""

import json
import sys
from typing import Iterator

import pandas as pd
import pyarrow as pa
from pyspark.sql import SparkSession


def make_summary(fail_key: str = "-", flaky: bool = False):
    stats = {"groups": 0, "rows": 0, "last": None}

    def summary(key, pdf):
        if key[0] == fail_key:
            raise ValueError(f"bad customer {fail_key}")
        if flaky and key[0] == "c3":
            from pyspark import TaskContext

            tc = TaskContext.get()   # None in tt's replay, which has no Spark task
            if tc is not None and tc.attemptNumber() == 0:
                raise RuntimeError("a lost executor, say")
        stats["groups"] += 1
        stats["rows"] += len(pdf)
        stats["last"] = key[0]
        return pdf.groupby("customer", as_index=False)["amount"].sum()
    return summary


def above_mean(pdf):
    return pdf[pdf["amount"] > pdf["amount"].mean()][["id", "customer", "amount"]]


def merge(key, left, right):
    return pd.DataFrame({"customer": [key[0]], "payments": [len(left)], "refunds": [len(right)]})


def make_sizes():
    seen = {}

    def sizes(key, table):
        seen[key[0].as_py()] = table.num_rows
        return pa.table({"customer": [key[0].as_py()], "n": [table.num_rows]})
    return sizes


def batches_of(pdfs: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for pdf in pdfs:
        yield pd.DataFrame({"customer": pdf["customer"].iloc[:1], "n": [len(pdf)]})


def make_running():
    rows = {}

    def running(key: tuple, pdfs: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in pdfs:
            rows[key[0]] = rows.get(key[0], 0) + len(pdf)
            yield pd.DataFrame({"customer": [key[0]], "n": [rows[key[0]]]})
    return running


def make_arrow_rows():
    rows = {}

    def arrow_rows(key: tuple, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            customer = key[0].as_py()
            rows[customer] = rows.get(customer, 0) + batch.num_rows
            yield pa.RecordBatch.from_pydict({"customer": [customer], "n": [rows[customer]]})
    return arrow_rows


def main(out: str, rows: int = 300, fail_key: str = "-", flaky: int = 0, coalesce: int = 0) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-grouped").getOrCreate()
    # six shuffle partitions for seven customers, not coalesced: some partitions hold no group
    spark.conf.set("spark.sql.shuffle.partitions", "6")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        payments = spark.range(0, rows, numPartitions=2).selectExpr(
            "id", "concat('c', id % 7) AS customer", "CAST((id * 37) % 101 AS DOUBLE) AS amount")
        refunds = spark.range(0, rows // 3, numPartitions=2).selectExpr(
            "id", "concat('c', id % 5) AS customer")
        totals = payments.groupBy("customer").applyInPandas(make_summary(fail_key, bool(flaky)), "customer string, amount double")
        if coalesce:
            totals = totals.coalesce(coalesce)
        high = payments.groupBy("customer").applyInPandas(above_mean, "id long, customer string, amount double")
        merged = payments.groupBy("customer").cogroup(refunds.groupBy("customer")).applyInPandas(
            merge, "customer string, payments long, refunds long")
        sized = payments.groupBy("customer").applyInArrow(make_sizes(), "customer string, n long")
        batched = payments.groupBy("customer").applyInPandas(batches_of, "customer string, n long")
        running = payments.groupBy("customer").applyInPandas(make_running(), "customer string, n long")
        arrow_running = payments.groupBy("customer").applyInArrow(make_arrow_rows(), "customer string, n long")
        result = {
            "batched": sum(r["n"] for r in batched.collect()),
            "running": sorted(tuple(r) for r in running.collect()),
            "arrow_running": sorted(tuple(r) for r in arrow_running.collect()),
            "totals": sorted(tuple(r) for r in totals.collect()),
            "high": sorted(r["id"] for r in high.collect()),
            "merged": sorted(tuple(r) for r in merged.collect()),
            "sized": sorted(tuple(r) for r in sized.collect()),
        }
    finally:
        spark.conf.unset("spark.sql.shuffle.partitions")
        spark.conf.unset("spark.sql.adaptive.enabled")
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) if a.isdigit() else a for a in sys.argv[2:]))

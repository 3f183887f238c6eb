"""A plain PySpark job, without tt: a StatefulProcessor whose rows a grouped function takes
through Spark's shuffle (tests/test_lineage_through_spark.py).

- `Totals` (transformWithStateInPandas, batch) keeps each customer's total in a ValueState and
  emits one row per customer: its total and its tier (`high` from 2,500 on);
- `per_tier` (applyInPandas, after Spark's shuffle by tier) emits each tier's customers, sorted.

Spark's plan names a processor's node by PySpark's own wrapper (`transformWithStateUDF(...)`),
not by the processor: tt found no edge between the two, and lineage of a tier stopped at it.

Usage: python hooked_processor_chain.py OUT.json
"""

import json
import sys

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StatefulProcessor

ROWS, CUSTOMERS = 600, 12


class Totals(StatefulProcessor):
    def init(self, handle):
        self.total = handle.getValueState("total", "amount double")

    def handleInputRows(self, key, rows, timerValues):
        (total,) = self.total.get() or (0.0,)
        for chunk in rows:
            total += float(chunk["amount"].sum())
        self.total.update((total,))
        yield pd.DataFrame({"customer": [key[0]], "total": [total], "tier": ["high" if total >= 2500 else "low"]})

    def close(self):
        pass


def per_tier(key, pdf):
    return pd.DataFrame({"tier": [key[0]], "customers": [",".join(sorted(pdf["customer"]))]})


def amounts() -> dict:
    """Each customer's total, as the job computes it (the tests' oracle)."""
    out: dict = {}
    for i in range(ROWS):
        out[f"c{i % CUSTOMERS}"] = out.get(f"c{i % CUSTOMERS}", 0.0) + float((i * 37) % 101)
    return out


def main(out: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-processor-chain").getOrCreate()
    for k, v in {"spark.sql.shuffle.partitions": "2", "spark.sql.adaptive.enabled": "false"}.items():
        spark.conf.set(k, v)
    payments = spark.range(0, ROWS, numPartitions=2).selectExpr(
        f"concat('c', id % {CUSTOMERS}) AS customer", "CAST((id * 37) % 101 AS DOUBLE) AS amount")
    totals = payments.groupBy("customer").transformWithStateInPandas(
        Totals(), "customer string, total double, tier string", "Append", "None")
    tiers = totals.groupBy("tier").applyInPandas(per_tier, "tier string, customers string")
    with open(out, "w") as f:
        json.dump({"tiers": sorted([list(r) for r in tiers.collect()])}, f)


if __name__ == "__main__":
    main(*sys.argv[1:2])

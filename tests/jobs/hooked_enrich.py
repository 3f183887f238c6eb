"""A plain PySpark job, without tt: a stateful enrichment in `mapInPandas`.

`Enrich` keeps the highest amount per customer and flags a payment over twice the
customer's highest so far. The data is a pure function of the row id, so the
tests can compute the expected state with pandas alone (tests/test_hooked.py).
Usage: python hooked_enrich.py OUT.json [ROWS] [PARTITIONS] [FAIL_AT_ID] [FLAKY]

FAIL_AT_ID makes the enrichment raise on the batch holding that id (a failing run);
FLAKY=1 makes the first attempt of partition 1's task raise at its third batch, after
it has yielded two (Spark retries the task).
The job leaves the SparkSession running: the tests run it beside others in one JVM.
"""

import json
import sys

from pyspark.sql import SparkSession


class Enrich:
    def __init__(self, fail_at: int = -1, flaky: bool = False):
        self.highest = {}
        self.batches = 0
        self.fail_at = fail_at
        self.flaky = flaky

    def __call__(self, batches):
        for pdf in batches:
            if (pdf["id"] == self.fail_at).any():
                raise ValueError(f"bad payment {self.fail_at}")
            if self.flaky and self.batches == 2:
                from pyspark import TaskContext

                tc = TaskContext.get()
                if tc is not None and tc.partitionId() == 1 and tc.attemptNumber() == 0:
                    raise RuntimeError("a lost executor, say")
            self.batches += 1
            flags = []
            for customer, amount in zip(pdf["customer"], pdf["amount"]):
                prev = self.highest.get(customer, 0.0)
                flags.append(bool(prev > 0 and amount > 2 * prev))
                if amount > prev:
                    self.highest[customer] = float(amount)
            yield pdf.assign(suspicious=flags)


def main(out: str, rows: int = 600, partitions: int = 3, fail_at: int = -1, flaky: int = 0) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-enrich").getOrCreate()
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        payments = spark.range(0, rows, numPartitions=partitions).selectExpr(
            "id", "concat('c', id % 7) AS customer", "CAST((id * 37) % 101 AS DOUBLE) AS amount")
        enriched = payments.mapInPandas(Enrich(fail_at, bool(flaky)),
                                        "id long, customer string, amount double, suspicious boolean")
        flagged = sorted((r["id"], r["customer"], r["amount"]) for r in enriched.where("suspicious").collect())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    with open(out, "w") as f:
        json.dump(flagged, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))

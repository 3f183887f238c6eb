"""A plain PySpark job, without tt: two Python UDTF classes.

- `Words` splits each text into words, numbering them in `self.count` across the rows
  of its task, and `terminate` emits the total;
- `Totals` sums the amounts of one customer: called with `TABLE(...) PARTITION BY
  customer`, PySpark makes one handler per customer and calls `terminate` on each.

The data is a pure function of the row id, so the tests compute every expected value
with pandas alone (tests/test_hooked_udtf.py).
Usage: python hooked_udtf.py OUT.json [ROWS]
"""

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import udtf


@udtf(returnType="word string, n int")
class Words:
    def __init__(self):
        self.count = 0
        self.longest = ""

    def eval(self, text: str):
        for word in text.split():
            self.count += 1
            if len(word) > len(self.longest):
                self.longest = word
            yield word, self.count

    def terminate(self):
        yield "<total>", self.count


@udtf(returnType="customer string, total double")
class Totals:
    def __init__(self):
        self.customer = None
        self.total = 0.0

    def eval(self, row):
        self.customer = row["customer"]
        self.total += row["amount"]

    def terminate(self):
        yield self.customer, self.total


def main(out: str, rows: int = 120) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-udtf").getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        texts = spark.range(0, rows, numPartitions=2).selectExpr(
            "id", "concat_ws(' ', repeat('a', CAST(id % 5 + 1 AS INT)), 'b', CAST(id AS STRING)) AS text")
        texts.createOrReplaceTempView("texts")
        payments = spark.range(0, rows, numPartitions=2).selectExpr(
            "id", "concat('c', id % 7) AS customer", "CAST((id * 37) % 101 AS DOUBLE) AS amount")
        payments.createOrReplaceTempView("payments")
        spark.udtf.register("words", Words)
        spark.udtf.register("totals", Totals)
        words = spark.sql("SELECT w.word, w.n FROM texts, LATERAL words(text) w").collect()
        totals = spark.sql("SELECT * FROM totals(TABLE(payments) PARTITION BY customer)").collect()
        result = {"words": len(words), "ends": sorted(r["n"] for r in words if r["word"] == "<total>"),
                  "totals": sorted([r["customer"], r["total"]] for r in totals)}
    finally:
        spark.conf.unset("spark.sql.shuffle.partitions")
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))

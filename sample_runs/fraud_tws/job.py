"""Fraud detection as a PySpark StatefulProcessor: tt records it unchanged.

The same story as `sample_runs/fraud_pyspark/`, with the state in Spark's state store:

    payments → groupBy(customer).transformWithState(FraudDetector)   (one Row a step)
             → label = 'Approved' (Spark SQL)

`FraudDetector` keeps, per customer, a ValueState `highest` (the highest payment in
dollars so far) and a MapState `blacklist` (merchant -> the id of the payment that put
the customer on the blacklist there). A customer on any blacklist has every later
payment labelled Fraud.

The bug: `parse_amount` reads "¥5000" as 5000 dollars, so Bob, who paid about $33, is
blacklisted and his later payments are never approved. Record it and find it with:

    tt record sample_runs/fraud_tws/job.py -o tws.db
    tt replay tws.db --run-until "'Bob' in FraudDetector.blacklist"
    tt debug tws.db

Run it plainly (recording off) with `python sample_runs/fraud_tws/job.py`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming import StatefulProcessor

HERE = Path(__file__).resolve().parent
LIMIT = 2000.0   # a payment above this many dollars is fraud


def parse_amount(text: str) -> float:
    """'$20.00' -> 20.0. (The bug: any currency symbol is stripped and read as dollars.)"""
    return float(text.lstrip("$¥€£"))


class FraudDetector(StatefulProcessor):
    """One customer's payments, one at a time (Spark hands them over in no set order)."""

    def init(self, handle):
        self.highest = handle.getValueState("highest", "usd double")
        self.blacklist = handle.getMapState("blacklist", "merchant string", "payment long")

    def handleInputRows(self, key, rows, timerValues):
        for row in rows:
            usd = parse_amount(row.amount)
            top = self.highest.get()
            if top is None or usd > top[0]:
                self.highest.update((usd,))
            if usd > LIMIT:
                self.blacklist.updateValue((row.merchant,), (row.id,))
            label = "Fraud" if self.blacklist.exists() else "Approved"
            yield Row(id=row.id, customer=row.customer, amount=row.amount, usd=usd, label=label)

    def close(self):
        pass


LABELLED = "id long, customer string, amount string, usd double, label string"


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description="fraud detection as a PySpark StatefulProcessor (tt sample)")
    ap.add_argument("--rows", type=int, default=50_000, help="payments to generate if --data is missing")
    ap.add_argument("--data", default=str(HERE.parent / "fraud_pyspark" / "data" / "payments.parquet"))
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args(argv)
    if not Path(args.data).exists():
        sys.path.insert(0, str(HERE.parent / "fraud"))
        from generate import write

        write(args.rows, args.data)
    spark = SparkSession.builder.appName("fraud-tws").getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    payments = spark.read.parquet(args.data).coalesce(1)   # one reader: each customer's rows in id order
    labelled = payments.groupBy("customer").transformWithState(
        FraudDetector(), LABELLED, "Append", "None")
    approved = dict(labelled.where("label = 'Approved'").groupBy("customer").count().collect())
    print(f"approved {sum(approved.values())} payments; Bob has {approved.get('Bob', 0)} approved "
          f"(expected more: he is a regular)")


if __name__ == "__main__":
    main(sys.argv[1:])

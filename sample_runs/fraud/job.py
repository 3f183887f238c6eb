"""Fraud detection, IcedTea's running example, on Spark.

    Source U → Feature Enrichment FE → Fraud Detector FD (keyed by customer)
             → Fraud Filter FF → Sink S

FE adds each customer's highest payment so far; FD blacklists a customer whose
payment looks fraudulent and flags every later payment of a blacklisted
customer; FF drops flagged payments and counts them; S is what gets approved.

The bug: FE reads "¥5000" as 5000 dollars, so Bob, who paid about $33, is
blacklisted and his later payments never reach S. Find it with:

    tt record sample_runs/fraud/job.py --watch FE --every 1s -o fraud.db
    tt debug fraud.db

Run it plainly (recording off) with `python sample_runs/fraud/job.py`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tt

HERE = Path(__file__).resolve().parent


def parse_amount(text: str) -> float:
    """'$20.00' -> 20.0. (The bug: any currency symbol is stripped and read as dollars.)"""
    return float(text.lstrip("$¥€£"))


class FeatureEnrichment(tt.Operator):
    """Adds the amount in dollars and the customer's highest payment so far."""

    def __init__(self):
        self.highest = {}

    def process(self, row, port=0):
        usd = parse_amount(row["amount"])
        customer = row["customer"]
        highest = max(self.highest.get(customer, 0.0), usd)
        self.highest[customer] = highest
        yield {**row, "usd": usd, "highest": highest}


class FraudDetector(tt.Operator):
    """A tiny 'model': a payment far above anything normal is fraud; its customer is blacklisted."""

    LIMIT = 2000.0

    def __init__(self):
        self.blacklist = {}   # customer -> id of the payment that put them there
        self.scored = 0

    def process(self, row, port=0):
        self.scored += 1
        customer = row["customer"]
        if customer not in self.blacklist and row["usd"] > self.LIMIT:
            self.blacklist[customer] = row["id"]
        label = "Fraud" if customer in self.blacklist else "Approved"
        yield {**row, "label": label}


class FraudFilter(tt.Operator):
    """Drops fraudulent payments and counts them per customer."""

    def __init__(self):
        self.frauds = {}

    def process(self, row, port=0):
        if row["label"] == "Fraud":
            self.frauds[row["customer"]] = self.frauds.get(row["customer"], 0) + 1
            return
        yield row


SCHEMA = ("id long, customer string, amount string, merchant string, ts long, "
          "usd double, highest double, label string")


def build(spark, data: str, partitions: int) -> tt.Dataflow:
    payments = spark.read.parquet(data).repartition(partitions)
    flow = tt.Dataflow("fraud")
    fe = flow.source("U", payments).process(FeatureEnrichment(), name="FE")
    fd = fe.key_by(lambda r: r["customer"], partitions=partitions).process(FraudDetector(), name="FD")
    fd.process(FraudFilter(), name="FF").to_dataframe("S", schema=SCHEMA)
    return flow


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description="fraud detection on Spark (tt sample)")
    ap.add_argument("--rows", type=int, default=200_000, help="payments to generate if --data is missing")
    ap.add_argument("--data", default=str(HERE / "data" / "payments.parquet"))
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--show", action="store_true", help="print Bob's approved payments")
    args = ap.parse_args(argv)
    if not Path(args.data).exists():
        sys.path.insert(0, str(HERE))
        from generate import write

        write(args.rows, args.data)
    spark = tt.spark_session("fraud")
    result = build(spark, args.data, args.partitions).run()
    approved = result["S"]
    bob = approved.filter("customer = 'Bob'").count()
    print(f"approved {approved.count()} payments; Bob has {bob} approved (expected more: he is a regular)")
    if args.show:
        approved.filter("customer = 'Bob'").orderBy("id").show(5)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Fraud detection written in plain PySpark: tt records it unchanged.

The same story as `sample_runs/fraud/`, without `import tt`:

    payments → FeatureEnrichment (mapInPandas, a class keeping each customer's highest payment)
             → detect (applyInPandas grouped by customer, a closure keeping a blacklist)
             → label = 'Approved' (Spark SQL)

The bug: FeatureEnrichment reads "¥5000" as 5000 dollars, so Bob, who paid about $33,
is blacklisted and his later payments are never approved. Record it and find it with:

    tt record sample_runs/fraud_pyspark/job.py -o pyspark.db
    tt debug pyspark.db

Run it plainly (recording off) with `python sample_runs/fraud_pyspark/job.py`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyspark.sql import SparkSession

HERE = Path(__file__).resolve().parent
LIMIT = 2000.0   # a payment above this many dollars is fraud


def parse_amount(text: str) -> float:
    """'$20.00' -> 20.0. (The bug: any currency symbol is stripped and read as dollars.)"""
    return float(text.lstrip("$¥€£"))


class FeatureEnrichment:
    """Adds the amount in dollars and the customer's highest payment so far (per partition)."""

    def __init__(self):
        self.highest = {}

    def __call__(self, batches):
        for pdf in batches:
            usd, highest = [], []
            for customer, amount in zip(pdf["customer"], pdf["amount"]):
                dollars = parse_amount(amount)
                top = max(self.highest.get(customer, 0.0), dollars)
                self.highest[customer] = top
                usd.append(dollars)
                highest.append(top)
            yield pdf.assign(usd=usd, highest=highest)


def make_detector():
    """One customer's payments at a time; a customer with a payment over LIMIT is blacklisted."""
    blacklist = {}   # customer -> id of the payment that put them there

    def detect(key, pdf):
        pdf = pdf.sort_values("id")
        customer = key[0]
        labels = []
        for pid, usd in zip(pdf["id"], pdf["usd"]):
            if customer not in blacklist and usd > LIMIT:
                blacklist[customer] = int(pid)
            labels.append("Fraud" if customer in blacklist else "Approved")
        return pdf.assign(label=labels)
    return detect


ENRICHED = "id long, customer string, amount string, merchant string, ts long, usd double, highest double"


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description="fraud detection in plain PySpark (tt sample)")
    ap.add_argument("--rows", type=int, default=50_000, help="payments to generate if --data is missing")
    ap.add_argument("--data", default=str(HERE / "data" / "payments.parquet"))
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args(argv)
    if not Path(args.data).exists():
        sys.path.insert(0, str(HERE.parent / "fraud"))
        from generate import write

        write(args.rows, args.data)
    spark = SparkSession.builder.appName("fraud-pyspark").getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    payments = spark.read.parquet(args.data).repartition(args.partitions)
    enriched = payments.mapInPandas(FeatureEnrichment(), ENRICHED)
    labelled = enriched.groupBy("customer").applyInPandas(make_detector(), f"{ENRICHED}, label string")
    approved = labelled.where("label = 'Approved'")
    bob = approved.filter("customer = 'Bob'").count()
    print(f"approved {approved.count()} payments; Bob has {bob} approved (expected more: he is a regular)")


if __name__ == "__main__":
    main(sys.argv[1:])

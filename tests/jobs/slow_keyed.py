"""A job slow enough to be interrupted mid-run (used by the kill test)."""

import sys
import time

import tt


class Enrich(tt.Operator):
    def __init__(self):
        self.highest = {}

    def process(self, row, port=0):
        time.sleep(0.0004)
        c = row["customer"]
        self.highest[c] = max(self.highest.get(c, 0), row["amount"])
        yield {**row, "highest": self.highest[c]}


class Count(tt.Operator):
    def __init__(self):
        self.per_customer = {}

    def process(self, row, port=0):
        time.sleep(0.002)
        c = row["customer"]
        self.per_customer[c] = self.per_customer.get(c, 0) + 1
        yield row


rows = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
spark = tt.spark_session("slow")
data = [{"id": i, "customer": f"c{i % 17}", "amount": float(i % 997)} for i in range(rows)]
df = spark.createDataFrame(data, "id long, customer string, amount double").repartition(2, "id")
flow = tt.Dataflow("slow")
fe = flow.source("U", df).process(Enrich(), name="FE")
fe.key_by(lambda r: r["customer"], partitions=2).process(Count(), name="C").collect("S")
flow.run()

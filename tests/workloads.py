"""Dataflows the integration tests record: one per DAG shape tt must handle.

Each `build_*` takes a SparkSession and returns a `tt.Dataflow` whose sink is
`collect`ed as "S"; each `expect_*` computes the same sink rows in plain Python
(order-independent), so a test can check Spark ran the dataflow correctly
before checking what was recorded.
"""

from __future__ import annotations

import random
import time

import tt

PAYMENTS = 6000


def payments(n: int = PAYMENTS, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        customer = f"c{rng.randrange(40):02d}"
        amount = round(rng.lognormvariate(3.0, 1.0), 2)
        if i in (n // 4, n // 2):
            amount = 5000.0
        rows.append({"id": i, "customer": customer, "amount": amount})
    return rows


PAYMENT_SCHEMA = "id long, customer string, amount double"


def payments_df(spark, n: int = PAYMENTS, partitions: int = 4):
    return spark.createDataFrame(payments(n), PAYMENT_SCHEMA).repartition(partitions, "id")


class Enrich(tt.Operator):
    """θ in most workloads: highest amount per customer so far."""

    def __init__(self):
        self.highest = {}
        self.seen = 0

    def process(self, row, port=0):
        self.seen += 1
        c = row["customer"]
        h = max(self.highest.get(c, 0.0), row["amount"])
        self.highest[c] = h
        yield {**row, "highest": h}


class Detect(tt.Operator):
    """Order-sensitive: once a customer is blacklisted, all later payments are flagged."""

    def __init__(self):
        self.blacklist = {}
        self.scored = 0

    def process(self, row, port=0):
        self.scored += 1
        if row["amount"] > 1000 and row["customer"] not in self.blacklist:
            self.blacklist[row["customer"]] = row["id"]
        yield {**row, "fraud": row["customer"] in self.blacklist}


class Tally(tt.Operator):
    """Counts rows per port and keeps a running total."""

    def __init__(self):
        self.by_port = {}
        self.total = 0.0

    def process(self, row, port=0):
        self.by_port[port] = self.by_port.get(port, 0) + 1
        self.total = round(self.total + row.get("amount", 0.0), 2)
        yield row


class Bucket(tt.Operator):
    """Adds a size bucket and counts per bucket."""

    def __init__(self):
        self.buckets = {}

    def process(self, row, port=0):
        b = "big" if row["amount"] >= 50 else "small"
        self.buckets[b] = self.buckets.get(b, 0) + 1
        yield {**row, "bucket": b}


class Slow(tt.Operator):
    """Sleeps a little per tuple (so that a recording is still running when a test acts)."""

    def __init__(self, seconds: float):
        self._seconds = seconds
        self.done = 0

    def process(self, row, port=0):
        time.sleep(self._seconds)
        self.done += 1
        yield row


# --- chain: one stage, no shuffle ----------------------------------------------

def build_chain(spark):
    flow = tt.Dataflow("chain")
    s = flow.source("U", payments_df(spark))
    s.process(Enrich(), name="A").process(Bucket(), name="B").collect("S")
    return flow


def expect_chain():
    return sorted(r["id"] for r in payments())


# --- keyed: θ, then a shuffle by key (the fraud shape) --------------------------

def build_keyed(spark, fd_partitions: int = 3):
    flow = tt.Dataflow("keyed")
    fe = flow.source("U", payments_df(spark)).process(Enrich(), name="FE")
    fd = fe.key_by(lambda r: r["customer"], partitions=fd_partitions).process(Detect(), name="FD")
    fd.filter(lambda r: not r["fraud"], name="FF").process(Tally(), name="T").collect("S")
    return flow


# --- join of two sources -----------------------------------------------------------

def customers() -> list[dict]:
    return [{"cid": f"c{i:02d}", "region": ["north", "south", "east"][i % 3]} for i in range(40)]


def build_join(spark):
    flow = tt.Dataflow("join")
    pays = flow.source("P", payments_df(spark)).process(Enrich(), name="E")
    custs = flow.source("C", spark.createDataFrame(customers(), "cid string, region string").repartition(2))
    joined = pays.key_by(lambda r: r["customer"], partitions=3).join(custs.key_by(lambda r: r["cid"]), name="J")
    joined.process(Tally(), name="T").collect("S")
    return flow


def expect_join():
    region = {c["cid"]: c["region"] for c in customers()}
    return sorted((r["id"], region[r["customer"]]) for r in payments())


# --- union of two stages, then an aggregate ----------------------------------------------

def build_union(spark):
    flow = tt.Dataflow("union")
    a = flow.source("A", payments_df(spark, 3000, partitions=3)).process(Bucket(), name="BA")
    b = flow.source("B", spark.createDataFrame(
        [{"id": 100000 + r["id"], "customer": r["customer"], "amount": r["amount"]} for r in payments(2000, seed=9)],
        PAYMENT_SCHEMA).repartition(2, "id")).map(lambda r: {**r, "bucket": "b"}, name="MB")
    u = a.union(b, name="UN").process(Tally(), name="T")
    u.key_by(lambda r: r["bucket"], partitions=2).aggregate(
        0, lambda acc, r: acc + 1, emit=lambda k, acc: {"bucket": k, "n": acc}, name="AGG").collect("S")
    return flow


def expect_union():
    counts = {}
    for r in payments(3000):
        b = "big" if r["amount"] >= 50 else "small"
        counts[b] = counts.get(b, 0) + 1
    counts["b"] = 2000
    return sorted(counts.items())


# --- fan-out and fan-in inside one stage ---------------------------------------------------

def build_fanout(spark):
    flow = tt.Dataflow("fanout")
    s = flow.source("U", payments_df(spark)).process(Enrich(), name="SPLIT")
    small = s.filter(lambda r: r["amount"] < 30, name="SMALL").process(Bucket(), name="BS")
    big = s.filter(lambda r: r["amount"] >= 20, name="BIG").process(Bucket(), name="BB")
    small.union(big, name="MERGE").process(Tally(), name="T").collect("S")
    return flow


def expect_fanout():
    out = []
    for r in payments():
        if r["amount"] < 30:
            out.append(r["id"])
        if r["amount"] >= 20:
            out.append(r["id"])
    return sorted(out)


def register_by_value() -> None:
    """Executors and run files get this module's code by value, not by import."""
    import sys

    import cloudpickle
    from pyspark import cloudpickle as spark_cloudpickle

    mod = sys.modules[__name__]
    for cp in (cloudpickle, spark_cloudpickle):
        cp.register_pickle_by_value(mod)


# --- failures on the first attempt only (Spark retries the task) ----------------------------

def first_attempt(partition: int) -> bool:
    """True inside the first attempt of a Spark task on `partition` (never in a replay)."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    return tc is not None and tc.attemptNumber() == 0 and tc.partitionId() == partition


class EnrichFailingOnce(Enrich):
    def process(self, row, port=0):
        if self.seen == 2500 and first_attempt(0):
            raise RuntimeError("injected: FE fails on its first attempt")
        yield from super().process(row, port)


class DetectFailingOnce(Detect):
    def process(self, row, port=0):
        if self.scored == 900 and first_attempt(1):
            raise RuntimeError("injected: FD fails on its first attempt")
        yield from super().process(row, port)


def build_retry(spark, failing: bool):
    """θ in one partition, so that `--when` interactions fall at data-determined positions."""
    flow = tt.Dataflow("retry")
    fe = flow.source("U", payments_df(spark, partitions=1)).process(
        EnrichFailingOnce() if failing else Enrich(), name="FE")
    fd = fe.key_by(lambda r: r["customer"], partitions=3).process(
        DetectFailingOnce() if failing else Detect(), name="FD")
    fd.filter(lambda r: not r["fraud"], name="FF").process(Tally(), name="T").collect("S")
    return flow


def load_sample(name: str):
    """A sample job module (sample_runs/NAME/job.py) under a unique name, its code shipped by value."""
    import importlib.util
    import sys
    from pathlib import Path

    import cloudpickle
    from pyspark import cloudpickle as spark_cloudpickle

    modname = f"sample_{name}"
    if modname not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "sample_runs" / name / "job.py"
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
        for cp in (cloudpickle, spark_cloudpickle):
            cp.register_pickle_by_value(mod)
    return sys.modules[modname]

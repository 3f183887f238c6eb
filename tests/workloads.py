"""Dataflows the integration tests record: one per DAG shape tt must handle.

Each `build_*` takes a SparkSession and returns a `tt.Dataflow` whose sink is
`collect`ed as "S"; each `expect_*` computes the same sink rows in plain Python
(order-independent), so a test can check Spark ran the dataflow correctly
before checking what was recorded.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

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


class Flags(tt.Operator):
    """State whose values change to ones `==` takes for the old: a customer's flag goes from
    `1` to `True`, a sign from `0.0` to `-0.0`, a list item and a tuple item likewise."""

    def __init__(self):
        self.flag = {}        # customer -> 1 on the first payment, True from the second on
        self.sign = 0.0       # -0.0 after a payment with an odd cent count, 0.0 after an even one
        self.last = [0, 0.0]  # [1 or True, 0.0 or -0.0] as for the last row
        self.pair = (0, 0.0)

    def process(self, row, port=0):
        c = row["customer"]
        self.flag[c] = True if c in self.flag else 1
        odd = round(row["amount"] * 100) % 2 == 1
        self.sign = -0.0 if odd else 0.0
        self.last[0] = True if odd else 1
        self.last[1] = self.sign
        self.pair = (self.last[0], self.sign)
        yield row


def build_flags(spark):
    flow = tt.Dataflow("flags")
    flow.source("U", payments_df(spark)).process(Flags(), name="FL").collect("S")
    return flow


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


def build_join_one_partition(spark, unions: bool = False, asked: bool = False):
    """`build_join` with each side of the join in one partition: a stage of one instance and a
    source of one. Spark 4 unions parts that share a partitioning (here: one partition each)
    task by task, not one after the other, unless told otherwise (recorder/execute.py).
    `unions`: each source is itself the union of two such parts (two partitions), joined
    without a stage between; `asked`: the job asks those sources their partitions before
    the run, which plans them under its own setting (one partition each)."""
    flow = tt.Dataflow("join-one-partition")
    custs = spark.createDataFrame(customers(), "cid string, region string").repartition(1)
    if unions:
        rows = payments()
        halves = [spark.createDataFrame(part, PAYMENT_SCHEMA).repartition(1) for part in (rows[:3000], rows[3000:])]
        both = halves[0].union(halves[1])
        custs = custs.limit(20).union(spark.createDataFrame(customers()[20:], "cid string, region string")
                                      .repartition(1))
        if asked:
            zipped = spark.conf.get("spark.sql.unionOutputPartitioning") == "true"
            assert [both.rdd.getNumPartitions(), custs.rdd.getNumPartitions()] == ([1, 1] if zipped else [2, 2])
        pays = flow.source("P", both).process(Enrich(), name="E")
    else:
        pays = flow.source("P", payments_df(spark)).key_by(lambda r: r["customer"], partitions=1).process(
            Enrich(), name="E")
    joined = pays.key_by(lambda r: r["customer"], partitions=1).join(
        flow.source("C", custs).key_by(lambda r: r["cid"]), name="J")
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


def record_keywords(spark, out, rows: int, partitions: int = 2):
    """The keywords sample recorded with θ = Clean every 0.3 s: scopes that overlap (two paths
    from θ meet again at a union)."""
    from tt.recorder.session import RecordingSession

    keywords = load_sample("keywords")
    s = RecordingSession(out, Path(keywords.__file__), [], watch="Clean", every=0.3)
    with s:
        keywords.build(spark, rows, partitions).run()
    s.close()
    return out


def load_sample(name: str):
    """A sample job module (sample_runs/NAME/job.py) under a unique name, its code shipped by value."""
    import importlib.util
    import sys

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


# --- ledger: accounts joined with transactions (θ on either input of the join) ---------------

LEDGER_ACCOUNTS = 30
LEDGER_TRANSACTIONS = 3000


def ledger_accounts() -> list[dict]:
    return [{"n": i, "account": f"a{i:02d}", "branch": ["north", "south", "east"][i % 3]}
            for i in range(LEDGER_ACCOUNTS)]


def ledger_transactions(seed: int = 11) -> list[dict]:
    """Integer cents, so that sums do not depend on the order they are taken in;
    a few transactions name accounts that do not exist (the join drops them)."""
    rng = random.Random(seed)
    return [{"tx": i, "account": f"a{rng.randrange(LEDGER_ACCOUNTS + 4):02d}",
             "cents": rng.randrange(-50_000, 100_000)} for i in range(LEDGER_TRANSACTIONS)]


class Open(tt.Operator):
    """Over the accounts: how many were opened per branch."""

    def __init__(self):
        self.opened = {}

    def process(self, row, port=0):
        self.opened[row["branch"]] = self.opened.get(row["branch"], 0) + 1
        yield row


class Validate(tt.Operator):
    """Over the transactions: how many each account had, and their sum."""

    def __init__(self):
        self.per_account = {}
        self.cents = 0

    def process(self, row, port=0):
        self.per_account[row["account"]] = self.per_account.get(row["account"], 0) + 1
        self.cents += row["cents"]
        yield row


class Post(tt.Operator):
    """After the join: every account's balance."""

    def __init__(self):
        self.balances = {}
        self.posted = 0

    def process(self, row, port=0):
        self.balances[row["account"]] = self.balances.get(row["account"], 0) + row["cents"]
        self.posted += 1
        yield {"tx": row["tx"], "account": row["account"], "branch": row["branch"]}


def build_ledger(spark, partitions: int = 4):
    """`accounts.key_by(account).join(transactions.key_by(account))`, each a 4-partition DataFrame."""
    flow = tt.Dataflow("ledger")
    accounts = flow.source("ACCOUNTS", spark.createDataFrame(
        ledger_accounts(), "n long, account string, branch string").repartition(partitions, "n"))
    txs = flow.source("TXS", spark.createDataFrame(
        ledger_transactions(), "tx long, account string, cents long").repartition(partitions, "tx"))
    left = accounts.process(Open(), name="OPEN")
    right = txs.process(Validate(), name="VAL")
    joined = left.key_by(lambda r: r["account"], partitions=3).join(right.key_by(lambda r: r["account"]), name="J")
    joined.process(Post(), name="POST").collect("S")
    return flow


def build_ledger_self_join(spark, partitions: int = 4):
    """The same transactions DataFrame read by two sources, joined with itself on the transaction id."""
    flow = tt.Dataflow("ledger-self")
    df = spark.createDataFrame(ledger_transactions(), "tx long, account string, cents long").repartition(
        partitions, "tx")
    left = flow.source("T1", df).map(lambda r: {"tx": r["tx"], "branch": "self"}, name="TAG")
    right = flow.source("T2", df).process(Validate(), name="VAL")
    joined = left.key_by(lambda r: r["tx"], partitions=3).join(right.key_by(lambda r: r["tx"]), name="J")
    joined.process(Post(), name="POST").collect("S")
    return flow


def expect_ledger(self_join: bool = False) -> dict:
    """The ledger's end state, computed from the input data alone."""
    txs = ledger_transactions()
    known = ({r["account"] for r in txs} if self_join else {a["account"] for a in ledger_accounts()})
    per_account, balances = {}, {}
    for r in txs:
        per_account[r["account"]] = per_account.get(r["account"], 0) + 1
        if r["account"] in known:
            balances[r["account"]] = balances.get(r["account"], 0) + r["cents"]
    opened = {}
    for a in ledger_accounts():
        opened[a["branch"]] = opened.get(a["branch"], 0) + 1
    return {"per_account": per_account, "cents": sum(r["cents"] for r in txs), "balances": balances,
            "posted": sum(1 for r in txs if r["account"] in known), "opened": opened,
            "tx_ids": sorted(r["tx"] for r in txs if r["account"] in known)}


# --- an operator that raises on one row (post-mortem debugging) -------------------------------

FAILING_ROWS = 2000      # two source partitions of 1000 rows each, in order
FAILING_ID = 1999        # the last row of partition 1: FE:1 input #999


def failing_rows() -> list[dict]:
    return payments(FAILING_ROWS)


def failing_df(spark):
    """Two partitions, each a contiguous slice of `failing_rows()` in order."""
    return spark.createDataFrame(spark.sparkContext.parallelize(failing_rows(), 2), PAYMENT_SCHEMA)


class EnrichRaising(Enrich):
    """Enrich that divides by zero on one row, after it has updated its state for it."""

    def __init__(self, bad_id: int):
        super().__init__()
        self._bad_id = bad_id

    def process(self, row, port=0):
        self.seen += 1
        c = row["customer"]
        self.highest[c] = max(self.highest.get(c, 0.0), row["amount"])
        if row["id"] == self._bad_id:
            row = {**row, "share": 1 / 0}
        yield {**row, "highest": self.highest[c]}


def build_failing(spark, bad_id: int = FAILING_ID):
    flow = tt.Dataflow("failing")
    fe = flow.source("U", failing_df(spark)).process(EnrichRaising(bad_id), name="FE")
    fe.key_by(lambda r: r["customer"], partitions=2).process(Detect(), name="FD").collect("S")
    return flow


class DetectRaising(Detect):
    """Detect that raises KeyError on one row, after it has counted it."""

    def __init__(self, bad_id: int):
        super().__init__()
        self._bad_id = bad_id

    def process(self, row, port=0):
        if row["id"] == self._bad_id:
            self.scored += 1
            raise KeyError(f"no score for {row['id']}")
        yield from super().process(row, port)


def build_failing_downstream(spark, bad_id: int = 777):
    """The failure is in FD, the head of the stage after θ's shuffle."""
    flow = tt.Dataflow("failing-downstream")
    fe = flow.source("U", failing_df(spark)).process(Enrich(), name="FE")
    fe.key_by(lambda r: r["customer"], partitions=2).process(DetectRaising(bad_id), name="FD").collect("S")
    return flow


def build_ledger_keyed(spark, partitions: int = 4):
    """Both inputs of the join are keyed stages (2 and 3 instances), not sources."""
    flow = tt.Dataflow("ledger-keyed")
    accounts = flow.source("ACCOUNTS", spark.createDataFrame(
        ledger_accounts(), "n long, account string, branch string").repartition(partitions, "n"))
    txs = flow.source("TXS", spark.createDataFrame(
        ledger_transactions(), "tx long, account string, cents long").repartition(partitions, "tx"))
    left = accounts.key_by(lambda r: r["account"], partitions=2).process(Open(), name="OPEN")
    right = txs.key_by(lambda r: r["account"], partitions=3).process(Validate(), name="VAL")
    joined = left.key_by(lambda r: r["account"], partitions=3).join(right.key_by(lambda r: r["account"]), name="J")
    joined.process(Post(), name="POST").collect("S")
    return flow

"""IcedTea's TPC-H workloads W1 and W2 as tt.Dataflow jobs: Spark SQL, the Arrow floor, tt off and tt record, side by side.

W1 is Q1 as a chain: the Parquet scan of `lineitem` (filtered on l_shipdate, six columns)
feeds `Q1P`, a partial aggregate that keeps running sums per (l_returnflag, l_linestatus)
in its partition (θ, the first stateful operator), then a keyed aggregate `Q1F` adds the
partials up. W2 is Q10: `lineitem` (l_returnflag = 'R') ⋈ `orders` (one quarter of
o_orderdate) ⋈ `customer` ⋈ `nation`, then revenue per customer, top 20; θ is the first
join, `J1`. Data from `tpchgen-cli` as Parquet, generated once per scale factor.

Variants, interleaved in every repetition (their order rotates, backwards in every second
one), one SparkSession:
  sql    the query in Spark SQL
  floor  the same Python work as tt's operators in one `mapInArrow` per Spark stage, rows
         from `to_pylist` (the Arrow floor: what any per-row Python operator pays)
  off    the tt.Dataflow with recording off
  10s    tt record, one interaction every 10 s
  10/s   tt record, ten interactions a second
Every variant runs once at full size before the measured repetitions (unmeasured), and
every answer is checked against Spark SQL's. Prints median wall time and median CPU time
(this process and every process under it: the JVM and its Python workers), the ratios to the
floor and to `off`, the median of each repetition's own ratio to `off` with a 95 % bootstrap
interval (this machine's runs of one commit spread over ±5 % and more: benches/reporting.py)
and whether each goal is met, missed or beyond what the repetitions can tell, the Python
workers' CPU alone as a ratio to `off` (where tt's operators and logs run, without the JVM's
share), the run file as a share of the Parquet input, the rate it was written at (run file /
wall time) and the CPU time of this process alone, where tt's coordinator receives and writes
it (is the driver the bottleneck? issue 15 item 4); writes the same as markdown to
benches/results/, below the same day's earlier runs.

    python benches/tpch.py [--workloads W1 W2] [--reps 3] [--scale 1] [--partitions 4]

Goals (issue 15): off ≤ 1.1 × floor; 10s ≤ 1.02 × off and 10/s ≤ 1.05 × off; run file ≤ 1 % of the input.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reporting import bytecode_cached, interval_text, page_in, paired_interval, write_result   # noqa: E402  (benches/reporting.py)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("TT_KEY_FILE", str(Path(tempfile.gettempdir()) / "tt-bench-key"))

VARIANTS = [("sql", None), ("floor", None), ("off", None), ("10s", 10.0), ("10/s", 0.1)]
GOALS = {"10s": 1.02, "10/s": 1.05}   # recording's wall time × off (issue 15); off ≤ 1.1 × floor
TABLES = ("lineitem", "orders", "customer", "nation")


# --- the data -------------------------------------------------------------------------

def tpch_parquet(scale: float) -> Path:
    """The four tables at `scale` as Parquet files from tpchgen-cli, generated once per scale."""
    cache = Path(tempfile.gettempdir()) / f"tt-bench-tpch-sf{scale:g}"
    if all((cache / f"{t}.parquet").exists() for t in TABLES):
        return cache
    cli = Path(sys.executable).parent / "tpchgen-cli"
    cli = str(cli) if cli.exists() else shutil.which("tpchgen-cli")
    if cli is None:
        raise SystemExit("tpchgen-cli not found: pip install -e '.[bench]'")
    partial = Path(tempfile.mkdtemp(prefix=f"tt-bench-tpch-sf{scale:g}-"))
    print(f"generating TPC-H at scale {scale:g} with tpchgen-cli ...", flush=True)
    subprocess.run([cli, "parquet", "--scale-factor", f"{scale:g}", "--tables", ",".join(TABLES),
                    "--output-dir", str(partial), "--quiet"], check=True)
    cache.mkdir(parents=True, exist_ok=True)
    for t in TABLES:
        os.replace(partial / f"{t}.parquet", cache / f"{t}.parquet")
    shutil.rmtree(partial, ignore_errors=True)
    return cache


# --- W1: Q1 as a chain ------------------------------------------------------------------

Q1_SUMS = ("sum_qty", "sum_base_price", "sum_disc_price", "sum_charge", "count_order")
Q1_SQL = """
SELECT l_returnflag, l_linestatus, sum(l_quantity), sum(l_extendedprice),
       sum(l_extendedprice * (1 - l_discount)), sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)), count(*)
FROM lineitem WHERE l_shipdate <= date '1998-12-01' - interval '90' day
GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus
"""


def q1_add(groups: dict, row: dict) -> None:
    """Q1's per-row work, shared by tt's operator and the floor: add `row` to its group's sums."""
    price, disc = float(row["l_extendedprice"]), float(row["l_discount"])
    disc_price = price * (1 - disc)
    acc = groups.get(row["l_returnflag"] + row["l_linestatus"])
    if acc is None:
        acc = groups[row["l_returnflag"] + row["l_linestatus"]] = [0.0, 0.0, 0.0, 0.0, 0]
    acc[0] += float(row["l_quantity"])
    acc[1] += price
    acc[2] += disc_price
    acc[3] += disc_price * (1 + float(row["l_tax"]))
    acc[4] += 1


def q1_lineitem(spark, data: Path):
    from pyspark.sql import functions as F

    return (spark.read.parquet(str(data / "lineitem.parquet"))
            .where(F.col("l_shipdate") <= F.lit(datetime.date(1998, 9, 2)))
            .select("l_returnflag", "l_linestatus", "l_quantity", "l_extendedprice", "l_discount", "l_tax"))


def q1_flow(spark, data: Path, partitions: int):
    import tt

    class Q1P(tt.Operator):
        """θ: Q1's running sums per group over this partition, emitted at the end."""

        def __init__(self):
            self.groups = {}

        def process(self, row, port=0):
            q1_add(self.groups, row)

        def finish(self):
            return [{"group": k, "sums": v} for k, v in sorted(self.groups.items())]

    def fold(acc, row):
        return [a + b for a, b in zip(acc, row["sums"])]

    flow = tt.Dataflow("tpch_w1", partitions=partitions)
    (flow.source("L", q1_lineitem(spark, data)).process(Q1P(), name="Q1P")
     .key_by(lambda r: r["group"]).aggregate([0.0, 0.0, 0.0, 0.0, 0], fold,
                                            emit=lambda k, acc: {"group": k, "sums": acc}, name="Q1F")
     .collect("q1"))
    return flow


def q1_tt(result) -> list[tuple]:
    return sorted((r["group"][0], r["group"][1], *r["sums"]) for r in result["q1"])


def q1_floor(spark, data: Path, partitions: int) -> list[tuple]:
    import pyarrow as pa
    from pyspark.sql import functions as F

    def partial(batches):
        groups: dict = {}
        for batch in batches:
            for row in batch.to_pylist():
                q1_add(groups, row)
        yield pa.RecordBatch.from_pylist([{"group": k, **dict(zip(Q1_SUMS, v))} for k, v in groups.items()],
                                         schema=PARTIAL)

    PARTIAL = pa.schema([("group", pa.string()), *[(c, pa.float64()) for c in Q1_SUMS[:4]],
                         ("count_order", pa.int64())])
    ddl = "group string, " + ", ".join(f"{c} double" for c in Q1_SUMS[:4]) + ", count_order long"
    rows = (q1_lineitem(spark, data).mapInArrow(partial, ddl)
            .groupBy("group").agg(*[F.sum(c) for c in Q1_SUMS]).collect())
    return sorted((r[0][0], r[0][1], *r[1:]) for r in rows)


def q1_sql(spark) -> list[tuple]:
    return [tuple(r) for r in spark.sql(Q1_SQL).collect()]


# --- W2: Q10 ------------------------------------------------------------------------------

Q10_SQL = """
SELECT c_custkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, c_name, c_acctbal, n_name
FROM customer, orders, lineitem, nation
WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey
  AND o_orderdate >= date '1993-10-01' AND o_orderdate < date '1994-01-01'
  AND l_returnflag = 'R' AND c_nationkey = n_nationkey
GROUP BY c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment
ORDER BY revenue DESC, c_custkey LIMIT 20
"""


def q10_tables(spark, data: Path) -> dict:
    """The four scans of Q10, filtered and pruned as Spark SQL's plan has them."""
    from pyspark.sql import functions as F

    read = lambda t: spark.read.parquet(str(data / f"{t}.parquet"))  # noqa: E731
    return {
        "L": read("lineitem").where(F.col("l_returnflag") == "R")
                             .select("l_orderkey", "l_extendedprice", "l_discount"),
        "O": read("orders").where((F.col("o_orderdate") >= F.lit(datetime.date(1993, 10, 1)))
                                  & (F.col("o_orderdate") < F.lit(datetime.date(1994, 1, 1))))
                           .select("o_orderkey", "o_custkey"),
        "C": read("customer").select("c_custkey", "c_name", "c_acctbal", "c_nationkey"),
        "N": read("nation").select("n_nationkey", "n_name"),
    }


def revenue(row: dict) -> float:
    return float(row["l_extendedprice"]) * (1 - float(row["l_discount"]))


def q10_top(per_customer: dict) -> list[tuple]:
    """Top 20 customers by revenue, ties by key: (custkey, revenue, name, acctbal, nation)."""
    rows = sorted(per_customer.values(), key=lambda r: (-r[1], r[0]))
    return [tuple(r) for r in rows[:20]]


def q10_flow(spark, data: Path, partitions: int):
    import tt

    def add(acc, r):
        if acc is None:
            return [r["c_custkey"], r["revenue"], r["c_name"], float(r["c_acctbal"]), r["n_name"]]
        acc[1] += r["revenue"]
        return acc

    t = q10_tables(spark, data)
    flow = tt.Dataflow("tpch_w2", partitions=partitions)
    lineitem, orders = flow.source("L", t["L"]), flow.source("O", t["O"])
    customer, nation = flow.source("C", t["C"]), flow.source("N", t["N"])
    j1 = (lineitem.key_by(lambda r: r["l_orderkey"])
          .join(orders.key_by(lambda r: r["o_orderkey"]),
                merge=lambda l, o: {"custkey": o["o_custkey"], "revenue": revenue(l)}, name="J1"))
    j2 = (j1.key_by(lambda r: r["custkey"])
          .join(customer.key_by(lambda r: r["c_custkey"]), merge=lambda j, c: {**c, "revenue": j["revenue"]},
                name="J2"))
    j3 = (j2.key_by(lambda r: r["c_nationkey"])
          .join(nation.key_by(lambda r: r["n_nationkey"]), merge=lambda j, n: {**j, "n_name": n["n_name"]},
                name="J3"))
    j3.key_by(lambda r: r["c_custkey"]).aggregate(None, add, emit=lambda k, acc: acc, name="REV").collect("rev")
    return flow


def q10_tt(result) -> list[tuple]:
    return q10_top({r[0]: r for r in result["rev"]})


def q10_floor(spark, data: Path, partitions: int) -> list[tuple]:
    """Q10 as Python dicts in `mapInArrow`, over the shuffles tt makes: each input keyed and
    pickled (rows from `to_pylist`), shuffled by the key, joined per partition by a symmetric
    hash join like tt's, the revenue summed per customer the same way."""
    import pickle

    import pyarrow as pa

    t = q10_tables(spark, data)
    keyed_schema = pa.schema([("k", pa.int64()), ("side", pa.int8()), ("payload", pa.binary())])

    def keyed(df, key: str, side: int, pickled: bool):
        def fn(batches):
            for batch in batches:
                rows = batch.to_pylist()
                if pickled:
                    rows = [pickle.loads(r["payload"]) for r in rows]
                yield pa.RecordBatch.from_pydict({"k": [r[key] for r in rows], "side": [side] * len(rows),
                                                  "payload": [pickle.dumps(r) for r in rows]}, schema=keyed_schema)
        return df.mapInArrow(fn, "k long, side byte, payload binary")

    def join(left, right, merge):
        def fn(batches):
            sides: tuple[dict, dict] = ({}, {})
            for batch in batches:
                out = []
                for rec in batch.to_pylist():
                    side, row = rec["side"], pickle.loads(rec["payload"])
                    sides[side].setdefault(rec["k"], []).append(row)
                    for other in sides[1 - side].get(rec["k"], ()):
                        out.append(pickle.dumps(merge(row, other) if side == 0 else merge(other, row)))
                yield pa.RecordBatch.from_pydict({"payload": out}, schema=payload)
        payload = pa.schema([("payload", pa.binary())])
        return left.unionByName(right).repartition(partitions, "k").mapInArrow(fn, "payload binary")

    j1 = join(keyed(t["L"], "l_orderkey", 0, False), keyed(t["O"], "o_orderkey", 1, False),
              lambda l, o: {"custkey": o["o_custkey"], "revenue": revenue(l)})
    j2 = join(keyed(j1, "custkey", 0, True), keyed(t["C"], "c_custkey", 1, False),
              lambda j, c: {**c, "revenue": j["revenue"]})
    j3 = join(keyed(j2, "c_nationkey", 0, True), keyed(t["N"], "n_nationkey", 1, False),
              lambda j, n: {**j, "n_name": n["n_name"]})

    def per_customer(batches):
        acc: dict = {}
        for batch in batches:
            for rec in batch.to_pylist():
                r = pickle.loads(rec["payload"])
                a = acc.get(rec["k"])
                if a is None:
                    acc[rec["k"]] = [r["c_custkey"], r["revenue"], r["c_name"], float(r["c_acctbal"]), r["n_name"]]
                else:
                    a[1] += r["revenue"]
        yield pa.RecordBatch.from_pydict({"payload": [pickle.dumps(a) for a in acc.values()]},
                                         schema=pa.schema([("payload", pa.binary())]))

    rows = (keyed(j3, "c_custkey", 0, True).repartition(partitions, "k")
            .mapInArrow(per_customer, "payload binary").collect())
    return q10_top({a[0]: a for a in (pickle.loads(r["payload"]) for r in rows)})


def q10_sql(spark) -> list[tuple]:
    return [(r[0], float(r[1]), r[2], float(r[3]), r[4]) for r in spark.sql(Q10_SQL).collect()]


# --- the bench ----------------------------------------------------------------------------

@dataclass
class Workload:
    name: str
    what: str
    theta: str
    tables: tuple[str, ...]
    flow: Callable
    answer: Callable
    floor: Callable
    sql: Callable


WORKLOADS = {
    "W1": Workload("W1", "Q1 as a chain, θ = Q1P (partial aggregate)", "Q1P", ("lineitem",),
                   q1_flow, q1_tt, q1_floor, q1_sql),
    "W2": Workload("W2", "Q10, lineitem ⋈ orders ⋈ customer ⋈ nation, θ = J1 (first join)", "J1", TABLES,
                   q10_flow, q10_tt, q10_floor, q10_sql),
}


def spark_for(data: Path, partitions: int, app: str):
    """The benches' SparkSession: `local[2]`, lineitem's scan split into `partitions` and every
    shuffle into as many."""
    import tt

    split = -(-(data / "lineitem.parquet").stat().st_size // partitions)
    return tt.spark_session(app, master="local[2]", conf={"spark.sql.files.maxPartitionBytes": split,
                                                           "spark.sql.shuffle.partitions": partitions})


def check(rows: list[tuple], reference: list[tuple], what: str) -> None:
    """`rows` equal Spark SQL's answer (numbers within 1e-6 relative), or the bench stops."""
    if len(rows) != len(reference):
        raise SystemExit(f"{what}: {len(rows)} rows, Spark SQL has {len(reference)}")
    for got, want in zip(rows, reference):
        for g, w in zip(got, want):
            same = (abs(float(g) - float(w)) <= 1e-6 * abs(float(w)) if isinstance(w, (int, float, Decimal))
                    else g == w)
            if not same:
                raise SystemExit(f"{what}: {got} != Spark SQL's {want}")


WORKERS = b"pyspark.daemon"   # in the command line of PySpark's worker daemon and of the workers it forks


def cpu_seconds(only: bytes | None = None) -> float:
    """CPU time of this process and every process under it (the JVM, its Python workers), live and
    reaped; `only`: of those whose command line holds it (`WORKERS`: the Python workers, where
    tt's operators and logs run; a worker that ended is in its daemon's figure)."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()
        procs[int(entry)] = (int(f[1]), sum(int(x) for x in f[11:15]))  # ppid; utime stime cutime cstime
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        if only is None or only in _command_line(pid):
            total += procs.get(pid, (0, 0))[1]
        todo.extend(p for p, (ppid, _) in procs.items() if ppid == pid)
    return total / tick


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def run_variant(spark, w: Workload, variant: str, every: float | None, data: Path, partitions: int,
                out: Path, when: str | None = None) -> tuple[list[tuple], int | None]:
    """One run of one variant: its answer, and its run file's size when it records (`when`: a
    `--when` condition besides `every`)."""
    from tt.recorder.session import RecordingSession
    from tt.store.reader import RunReader

    if variant == "sql":
        return w.sql(spark), None
    if variant == "floor":
        return w.floor(spark, data, partitions), None
    flow = w.flow(spark, data, partitions)
    if every is None:
        return w.answer(flow.run()), None
    session = RecordingSession(out, Path(__file__), [], watch=w.theta, every=every, when=when)
    try:
        with session:
            result = flow.run()
    finally:
        session.close()
    reader = RunReader(out)
    size = reader.sizes()["file"]
    reader.close()
    return w.answer(result), size


def order(rep: int) -> list[tuple[str, float | None]]:
    """The variants in repetition `rep`: rotated by one each repetition, and backwards in every
    second one, so that no variant always follows the same one (whatever a run leaves behind,
    the JVM's garbage or the page cache, the next one pays)."""
    turned = VARIANTS[rep % len(VARIANTS):] + VARIANTS[:rep % len(VARIANTS)]
    return turned[::-1] if rep % 2 else turned


def bench(spark, w: Workload, data: Path, reps: int, partitions: int, work: Path) -> dict:
    for t in w.tables:
        spark.read.parquet(str(data / f"{t}.parquet")).createOrReplaceTempView(t)
    reference = w.sql(spark)
    check(w.answer(w.flow(spark, data, partitions).run()), reference, f"{w.name} warm-up")  # JVM and workers
    for variant, every in VARIANTS:   # each variant once at full size, unmeasured: a first run was up to 15 % slower
        out = work / f"{w.name}-warm-up.db"
        check(run_variant(spark, w, variant, every, data, partitions, out)[0], reference, f"{w.name} warm-up {variant}")
        for p in work.glob(out.name + "*"):
            p.unlink()
    wall: dict[str, list[float]] = {v: [] for v, _ in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v, _ in VARIANTS}
    workers: dict[str, list[float]] = {v: [] for v, _ in VARIANTS}   # the Python workers alone
    driver: dict[str, list[float]] = {v: [] for v, _ in VARIANTS}   # this process: tt's coordinator and writer
    sizes: dict[str, int] = {}
    for rep in range(reps):
        for variant, every in order(rep):
            out = work / f"{w.name}-{variant.replace('/', 'per')}.db"
            page_in(data / f"{table}.parquet" for table in w.tables)   # (untimed: reporting.page_in)
            c, c_workers, d, t = cpu_seconds(), cpu_seconds(WORKERS), sum(os.times()[:2]), time.perf_counter()
            rows, size = run_variant(spark, w, variant, every, data, partitions, out)
            wall[variant].append(time.perf_counter() - t)
            cpu[variant].append(cpu_seconds() - c)
            workers[variant].append(cpu_seconds(WORKERS) - c_workers)
            driver[variant].append(sum(os.times()[:2]) - d)
            check(rows, reference, f"{w.name} rep {rep + 1} {variant}")
            if size is not None:
                sizes[variant] = size
                for p in work.glob(out.name + "*"):
                    p.unlink()
            print(f"  {w.name} rep {rep + 1} {variant:5} {wall[variant][-1]:7.2f} s wall "
                  f"{cpu[variant][-1]:7.2f} s CPU", flush=True)
    return {"wall": wall, "cpu": cpu, "workers": workers, "driver": driver, "sizes": sizes,
            "input": sum((data / f"{t}.parquet").stat().st_size for t in w.tables)}


def report(w: Workload, r: dict) -> tuple[list[str], list[str]]:
    """Printed lines and markdown table rows for one workload."""
    med = {k: {v: statistics.median(r[k][v]) for v, _ in VARIANTS} for k in ("wall", "cpu", "workers", "driver")}
    lines = [f"{w.name}: {w.what}; input {r['input'] / 1e6:.1f} MB Parquet",
             f"  {'variant':7} {'wall s':>7} {'CPU s':>7} {'wall×floor':>10} {'wall×off':>8} {'per rep ×off':>20} "
             f"{'CPU×off':>7} {'workers×off':>11} {'run file':>9} {'/ input':>8} {'written':>10} {'driver CPU':>10}"]
    table = [f"| {w.name} variant | wall s | CPU s | wall × floor | wall × off | per repetition × off: median "
             "(95 % interval) | CPU × off | workers' CPU × off | run file | run file / input | written | driver CPU s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for v, _ in VARIANTS:
        mb = f"{r['sizes'][v] / 1e6:.1f} MB" if v in r["sizes"] else "–"
        share = f"{100 * r['sizes'][v] / r['input']:.2f} %" if v in r["sizes"] else "–"
        rate = f"{r['sizes'][v] / 1e6 / med['wall'][v]:.1f} MB/s" if v in r["sizes"] else "–"
        mid, low, high = paired_interval(_ratios(r, v, "off"))
        cells = (f"{med['wall'][v]:.2f}", f"{med['cpu'][v]:.2f}", f"{med['wall'][v] / med['wall']['floor']:.3f}",
                 f"{med['wall'][v] / med['wall']['off']:.3f}", f"{mid:.3f} ({low:.3f}–{high:.3f})",
                 f"{med['cpu'][v] / med['cpu']['off']:.3f}", f"{med['workers'][v] / med['workers']['off']:.3f}",
                 mb, share, rate, f"{med['driver'][v]:.2f}")
        lines.append(f"  {v:7} {cells[0]:>7} {cells[1]:>7} {cells[2]:>10} {cells[3]:>8} {cells[4]:>20} "
                     f"{cells[5]:>7} {cells[6]:>11} {cells[7]:>9} {cells[8]:>8} {cells[9]:>10} {cells[10]:>10}")
        table.append(f"| {v} | " + " | ".join(cells) + " |")
    goals = [f"off × floor, each repetition's own: {interval_text(_ratios(r, 'off', 'floor'), 1.1)}",
             *(f"{v} × off, each repetition's own: {interval_text(_ratios(r, v, 'off'), goal)}"
               for v, goal in GOALS.items())]
    lines += [f"  {g}" for g in goals]
    table += [""] + [f"- {w.name} {g}" for g in goals]
    return lines, table


def _ratios(r: dict, v: str, base: str) -> list[float]:
    """Each repetition's own ratio of `v`'s wall time to `base`'s (they ran minutes apart, not tens of minutes)."""
    return [a / b for a, b in zip(r["wall"][v], r["wall"][base])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (1 = 6M lineitem rows)")
    ap.add_argument("--partitions", type=int, default=4,
                    help="Spark partitions: of lineitem's scan and of every key_by shuffle")
    args = ap.parse_args()
    bytecode_cached()   # the workers read tt's modules compiled, as from an installed package

    data = tpch_parquet(args.scale)
    spark = spark_for(data, args.partitions, "tt-bench-tpch")
    work = Path(tempfile.mkdtemp(prefix="tt-bench-tpch-"))
    results = {name: bench(spark, WORKLOADS[name], data, args.reps, args.partitions, work)
               for name in args.workloads}
    spark_version = spark.version
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)

    head = (f"TPC-H scale {args.scale:g}, {args.partitions} partitions, median of {args.reps} interleaved "
            f"repetitions. Spark {spark_version} `local[2]`, Python {platform.python_version()}, "
            f"{os.cpu_count()} cores")
    print(f"\n{head}")
    tables = []
    for name, r in results.items():
        lines, table = report(WORKLOADS[name], r)
        print("\n".join(lines))
        tables.append(f"{lines[0]}.\n\n" + "\n".join(table))
    today = datetime.date.today().isoformat()
    per_rep = "\n".join(f"- {name} {v}: " + ", ".join(f"{t:.2f}/{c:.2f}/{p:.2f}" for t, c, p in
                                                      zip(r["wall"][v], r["cpu"][v], r["workers"][v]))
                        + " s (wall/CPU/workers' CPU)" for name, r in results.items() for v, _ in VARIANTS)
    out = write_result(
        f"tpch-{'-'.join(args.workloads).lower()}-sf{args.scale:g}", "TPC-H W1/W2: tt against Spark SQL and the Arrow floor",
        f"    python benches/tpch.py --workloads {' '.join(args.workloads)} --reps {args.reps} "
        f"--scale {args.scale:g} --partitions {args.partitions}\n\n{head}. CPU = this process and "
        f"every process under it; workers' CPU = the Python workers' alone. Every answer checked against Spark SQL's.\n\n"
        + "\n\n".join(tables) + f"\n\nPer repetition:\n\n{per_rep}\n", today)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

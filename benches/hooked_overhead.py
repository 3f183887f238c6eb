"""Recording overhead of an unmodified PySpark job (hooked `mapInPandas`), side by side.

The job keeps, in a callable class, the highest amount per customer (vectorised per
batch, as a pandas user would write it) and flags payments above twice it. Variants,
interleaved in every repetition (one SparkSession, one process):
  off      the job as `python job.py` runs it (nothing patched)
  10s      tt record --every 10s
  10/s     tt record --every 0.1s

Prints median wall times, ratios to `off`, and the run file against the input (the
same rows as Parquet). Goal (issue 13): 10s ≤ 1.05 × off. The function reads the
Parquet file as it is (a plain scan), so tt stores its units as row positions, not
copies (docs/HOOKS.md §5); TPC-H Q1 as `mapInPandas` is `benches/tpch_q1_hooked.py`.

    python benches/hooked_overhead.py [--reps 3] [--rows 2000000] [--partitions 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("TT_KEY_FILE", str(Path(tempfile.gettempdir()) / "tt-bench-key"))

VARIANTS = [("off", None), ("10s", 10.0), ("10/s", 0.1)]


class Highest:
    """The job's stateful function: highest amount per customer so far, in this partition."""

    def __init__(self):
        self.highest = {}

    def __call__(self, batches):
        for pdf in batches:
            prev = pdf["customer"].map(self.highest).fillna(0.0)
            flagged = pdf.assign(suspicious=(prev > 0) & (pdf["amount"] > 2 * prev))
            for customer, amount in pdf.groupby("customer")["amount"].max().items():
                if amount > self.highest.get(customer, 0.0):
                    self.highest[customer] = float(amount)
            yield flagged


def job(data: str) -> int:
    """The job itself: what `python job.py` would run."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    payments = spark.read.parquet(data)
    out = payments.mapInPandas(Highest(), "id long, customer string, amount double, suspicious boolean")
    return out.where("suspicious").count()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from reporting import bytecode_cached   # (benches/reporting.py; here, not in the job Spark runs)

    bytecode_cached()   # the workers read tt's modules compiled, as from an installed package

    import tt
    from tt.recorder.job import record_job
    from tt.store.reader import RunReader

    spark = tt.spark_session("tt-bench-hooked", master="local[2]")
    work = Path(tempfile.mkdtemp(prefix="tt-bench-hooked-"))
    data = work / "payments.parquet"
    (spark.range(0, args.rows, numPartitions=args.partitions)
     .selectExpr("id", "concat('c', id % 5000) AS customer", "CAST((id * 7919) % 100003 AS DOUBLE) / 100 AS amount")
     .write.parquet(str(data)))
    input_bytes = sum(f.stat().st_size for f in data.glob("*.parquet"))
    job_file = Path(__file__).resolve()
    times: dict[str, list[float]] = {name: [] for name, _ in VARIANTS}
    sizes: dict[str, int] = {}
    flagged = set()
    job(str(data))  # warm up the JVM and the workers once, outside the figures
    for rep in range(args.reps):
        for name, every in VARIANTS:
            t = time.perf_counter()
            if every is None:
                flagged.add(job(str(data)))
            else:
                out = work / f"run-{rep}-{name.replace('/', 'per')}.db"
                outcome = record_job(job_file, ["--job", str(data)], out, every=every, force=True)
                if outcome.status != "complete":
                    raise SystemExit(f"recording failed: {outcome.error}")
                reader = RunReader(out)
                sizes[name] = reader.sizes()["file"]
                reader.close()
            times[name].append(time.perf_counter() - t)
            print(f"rep {rep + 1} {name:5} {times[name][-1]:7.2f}s", flush=True)
    base = statistics.median(times["off"])
    print(f"\nhooked mapInPandas, {args.rows:,} rows in {args.partitions} partitions, "
          f"input {input_bytes / 1e6:.1f} MB Parquet, median of {args.reps}")
    for name, _ in VARIANTS:
        med = statistics.median(times[name])
        size = f"  run file {sizes[name] / 1e6:.1f} MB = {sizes[name] / input_bytes:.2f} × input" if name in sizes else ""
        print(f"  {name:5} {med:7.2f}s  ×{med / base:.3f}{size}")
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--job":  # what `tt record` runs, in this process
        job(sys.argv[2])
    else:
        main()

"""Recording overhead: the same dataflow with recording off and on, side by side.

Variants, interleaved in every repetition (one SparkSession, one process):
  off      python job.py               (no coordinator, no logs)
  10s      tt record --every 10s
  10/s     tt record --every 0.1s

Workloads: the fraud sample (200k payments) and a generated input of 1M payments
through the same dataflow. Prints median wall times, ratios to `off`, and the
control log (interactions + Input/Output logs + logged results) as a share of the
input: the Parquet file read, and the same rows in memory as Arrow.

    python benches/record_overhead.py [--reps 3] [--rows 200000 1000000]

Targets (docs/ARCHITECTURE.md, "Bars"): 10s ≤ 1.02 × off, 10/s ≤ 1.05 × off, control log ≤ 2 % of input.
"whole s" also counts what a user of `tt record` waits for around the job: the run file's
creation and the coordinator's start and shutdown. Results go to benches/results/.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "sample_runs" / "fraud"))
sys.path.insert(0, str(ROOT / "benches"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("TT_KEY_FILE", str(Path(tempfile.gettempdir()) / "tt-bench-key"))

import generate  # noqa: E402  (the sample's data generator)
import job as fraud  # noqa: E402
from reporting import bytecode_cached, write_result  # noqa: E402  (benches/reporting.py)

import tt  # noqa: E402
from tt.recorder.session import RecordingSession  # noqa: E402
from tt.store.reader import RunReader  # noqa: E402

VARIANTS = [("off", None), ("10s", 10.0), ("10/s", 0.1)]


def run_once(spark, data: str, partitions: int, every: float | None, out: Path) -> tuple[float, float, dict]:
    """(seconds in flow.run(), seconds from the session's start to its close, run file facts)."""
    flow = fraud.build(spark, data, partitions)
    if every is None:
        t = time.perf_counter()
        flow.run()
        elapsed = time.perf_counter() - t
        return elapsed, elapsed, {}
    whole = time.perf_counter()
    session = RecordingSession(out, ROOT / "sample_runs" / "fraud" / "job.py", [], watch="FE", every=every)
    try:
        with session:
            t = time.perf_counter()
            flow.run()
            elapsed = time.perf_counter() - t
    finally:
        session.close()
    whole = time.perf_counter() - whole
    reader = RunReader(out)
    sizes = reader.sizes()
    info = {"control": reader.control_log_bytes(), "file": sizes["file"], "tuples": sizes["recorded_tuples"],
            "interactions": len(reader.interactions())}
    reader.close()
    return elapsed, whole, info


def bench(spark, rows: int, reps: int, partitions: int, tmp: Path) -> list[str]:
    import pyarrow.parquet as pq

    data = tmp / f"payments-{rows}.parquet"
    if not data.exists():
        generate.write(rows, data)
    parquet_bytes = data.stat().st_size
    arrow_bytes = pq.read_table(data).nbytes
    times: dict[str, list[float]] = {name: [] for name, _ in VARIANTS}
    wholes: dict[str, list[float]] = {name: [] for name, _ in VARIANTS}
    infos: dict[str, dict] = {}
    run_once(spark, str(data), partitions, None, tmp / "warm.db")  # warm up the JVM and the workers
    for rep in range(reps):
        order = VARIANTS[rep % len(VARIANTS):] + VARIANTS[:rep % len(VARIANTS)]  # rotate: no variant always first
        for name, every in order:
            out = tmp / f"run-{rows}-{name.replace('/', 'per')}-{rep}.db"
            elapsed, whole, info = run_once(spark, str(data), partitions, every, out)
            times[name].append(elapsed)
            wholes[name].append(whole)
            if info:
                infos[name] = info
            for p in (out, Path(str(out) + "-wal"), Path(str(out) + "-shm")):
                if p.exists() and rep < reps - 1:
                    p.unlink()
            print(f"  rows={rows:>9,} rep={rep} {name:>5}: {elapsed:7.2f}s", flush=True)
    base, whole_base = statistics.median(times["off"]), statistics.median(wholes["off"])
    lines = [f"{rows:,} payments, {partitions} partitions, {reps} repetitions (median wall times: of flow.run(), "
             f"and of the whole recording, from the session's start to its close)",
             f"  input: Parquet {parquet_bytes / 1e6:.1f} MB, in memory (Arrow) {arrow_bytes / 1e6:.1f} MB",
             f"  {'variant':8} {'median s':>9} {'min s':>7} {'ratio':>7} {'whole s':>8} {'ratio':>7}   "
             f"{'interactions':>12} {'control log':>12} {'% parquet':>9} {'% arrow':>8} {'run file':>9}"]
    for name, _ in VARIANTS:
        t, m, w = times[name], statistics.median(times[name]), statistics.median(wholes[name])
        line = f"  {name:8} {m:9.2f} {min(t):7.2f} {m / base:7.3f} {w:8.2f} {w / whole_base:7.3f}"
        if name in infos:
            i = infos[name]
            line += (f"   {i['interactions']:>12} {i['control'] / 1e3:9.1f} KB {100 * i['control'] / parquet_bytes:8.2f}%"
                     f" {100 * i['control'] / arrow_bytes:7.2f}% {i['file'] / 1e6:7.1f} MB")
        lines.append(line)
    print("\n" + "\n".join(lines) + "\n", flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, nargs="+", default=[200_000, 1_000_000])
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    bytecode_cached()   # the workers read tt's modules compiled, as from an installed package
    spark = tt.spark_session("bench-record-overhead", master="local[2]")
    blocks = []
    with tempfile.TemporaryDirectory(prefix="tt-bench-") as d:
        for rows in args.rows:
            blocks.append(bench(spark, rows, args.reps, args.partitions, Path(d)))
    version = spark.version
    spark.stop()
    today = datetime.date.today().isoformat()
    command = " ".join(["python benches/record_overhead.py", "--reps", str(args.reps), "--rows",
                        *map(str, args.rows), "--partitions", str(args.partitions)])
    report = write_result("record-overhead", "Recording overhead on the fraud Dataflow",
                          f"    {command}\n\nSpark {version} `local[2]`, Python {platform.python_version()}, "
                          f"{os.cpu_count()} cores; variants interleaved in every repetition, one process.\n\n"
                          + "\n\n".join("```\n" + "\n".join(b) + "\n```" for b in blocks), today)
    print(f"wrote {report}")


if __name__ == "__main__":
    main()

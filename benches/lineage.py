"""Row lineage on TPC-H Q10 (IcedTea's W2, benches/tpch.py): how long `tt lineage` takes on a big run.

Records W2 once (lineitem ⋈ orders ⋈ customer ⋈ nation, revenue per customer; θ = the first
join J1, one interaction every 10 s), then times, in this process from the command's start
(Python's own start-up excluded, as issue 16 asks), the two queries of issue 16 item 5:

  back     the top customer's sink row of `rev`, down to the lineitems and orders it came from
  forward  one order of `O` (a source row), up to the sink row it reached

each run twice on the same run file (a new `tt lineage` process each time would pay the
first run's cost again). Prints the seconds, the tuples the run holds, the run file as a
share of the Parquet input, and where `tt record --lineage` would be compared (not built).

    python benches/lineage.py [--scale 1] [--partitions 4]

Goals (issue 16): each query ≤ 0.2 s on a run of ≥ 1M tuples; `--lineage` ≤ 1.5 % recording
overhead and ≤ 1 % extra log bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("TT_KEY_FILE", str(Path(tempfile.gettempdir()) / "tt-bench-key"))

from tpch import TABLES, q10_flow, q10_tt, tpch_parquet   # noqa: E402  (benches/tpch.py)

RESULTS = Path(__file__).resolve().parent / "results"
GOAL_SECONDS = 0.2


def record(data: Path, partitions: int, out: Path) -> tuple[list[tuple], float]:
    """W2 recorded into `out`: (its top 20, seconds)."""
    import tt
    from tt.recorder.session import RecordingSession

    split = -(-(data / "lineitem.parquet").stat().st_size // partitions)
    spark = tt.spark_session("tt-bench-lineage", master="local[2]",
                             conf={"spark.sql.files.maxPartitionBytes": split,
                                   "spark.sql.shuffle.partitions": partitions})
    flow = q10_flow(spark, data, partitions)
    start = time.perf_counter()
    session = RecordingSession(out, Path(__file__), [], watch="J1", every=10.0)
    try:
        with session:
            result = flow.run()
    finally:
        session.close()
    seconds = time.perf_counter() - start
    spark.stop()
    return q10_tt(result), seconds


def query(run: Path, args: list[str]) -> tuple[float, str]:
    """One `tt lineage` in this process: (seconds from the command's start, what it printed)."""
    from tt.cli.main import main

    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = main(["lineage", str(run), *args])
    seconds = time.perf_counter() - start
    if rc != 0:
        raise SystemExit(f"tt lineage {' '.join(args)} exited {rc}")
    return seconds, out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (1 = 6M lineitem rows)")
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()

    data = tpch_parquet(args.scale)
    work = Path(tempfile.mkdtemp(prefix="tt-bench-lineage-"))
    run = work / "w2.db"
    top, rec_seconds = record(data, args.partitions, run)

    from tt.store.reader import RunReader

    reader = RunReader(run)
    tuples = reader.conn.execute("SELECT COALESCE(SUM(n), 0) FROM entry_chunks").fetchone()[0]
    file_bytes = reader.sizes()["file"]
    reader.close()
    input_bytes = sum((data / f"{t}.parquet").stat().st_size for t in TABLES)

    custkey = top[0][0]
    order = _an_order_of(data, custkey)
    queries = {
        "back": ["rev", "--where", f"row[0] == {custkey}", "--back", "--depth", "3"],
        "forward": ["O", "--where", f"o_orderkey == {order}", "--forward"],
    }
    timings: dict[str, list[float]] = {}
    for name, q in queries.items():
        timings[name] = []
        for _ in range(2):
            seconds, text = query(run, q)
            timings[name].append(seconds)
        print(f"{name}: {', '.join(f'{s:.2f}' for s in timings[name])} s — {text.splitlines()[0][:100]}")
    shutil.rmtree(work, ignore_errors=True)

    today = datetime.date.today().isoformat()
    head = (f"TPC-H scale {args.scale:g}, W2 (Q10), θ = J1, {args.partitions} partitions; Python "
            f"{platform.python_version()}, {os.cpu_count()} cores")
    lines = [
        head,
        f"recorded in {rec_seconds:.1f} s; {tuples:,} tuples entered G(θ); "
        f"run file {file_bytes / 1e6:.1f} MB = {100 * file_bytes / input_bytes:.2f} % of the "
        f"{input_bytes / 1e6:.0f} MB input",
        *(f"{name} query (`tt lineage RUN {' '.join(q)}`): first {timings[name][0]:.2f} s, again "
          f"{timings[name][1]:.2f} s; goal {GOAL_SECONDS} s: x{min(timings[name]) / GOAL_SECONDS:.0f} over"
          for name, q in queries.items()),
        "tt record --lineage (whole-job logs): not built, so no overhead ratio and no extra log bytes to report",
    ]
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{today}-lineage-w2-sf{args.scale:g}.md"
    out.write_text(f"# tt lineage on TPC-H W2 ({today})\n\n    python benches/lineage.py --scale {args.scale:g} "
                   f"--partitions {args.partitions}\n\n" + "\n".join(f"- {line}" for line in lines) + "\n")
    print(f"wrote {out}")


def _an_order_of(data: Path, custkey: int) -> int:
    """One order of the customer in Q10's quarter (read with pyarrow: not from the run)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    orders = pq.read_table(data / "orders.parquet", columns=["o_orderkey", "o_custkey", "o_orderdate"])
    mask = pc.and_(pc.equal(orders["o_custkey"], custkey),
                   pc.and_(pc.greater_equal(orders["o_orderdate"], datetime.date(1993, 10, 1)),
                           pc.less(orders["o_orderdate"], datetime.date(1994, 1, 1))))
    return int(orders.filter(mask)["o_orderkey"][0].as_py())


if __name__ == "__main__":
    main()

"""Recording overhead of StatefulProcessors (transformWithStateInPandas), side by side.

Three workloads, each run plainly and under `tt record --every 10s`, interleaved in every
repetition (one SparkSession, one process):

  keyed   a keyed aggregation over ROWS rows (`spark.range`, KEYS customers): `KeyedSum` keeps
          a ValueState (sum, count) per key and emits it at the end of the key's rows; the
          answer is checked against Spark SQL's groupBy on the same rows.
  stream  a Structured Streaming query over FILES CSV files of STREAM_ROWS rows each, one file
          a micro-batch (`availableNow`), RocksDB state store: `StreamSum`, the same processor,
          emits each key's running sum every micro-batch; the last sums are checked against
          pandas.
  sessions  the `sample_runs/sessions_streaming/` sample as it is (transformWithState, EventTime
          timers, a `processingTime="1 second"` trigger over five files): its sessions per user,
          recorded, must be what it prints with recording off.

Both ways run the job file as its user would: off as `python tws_overhead.py --job ...` runs it
(`run_as_main`: the module executed as `__main__`, its answer written to a file), 10s as `tt record`
runs that same command (`record_job`), so that what the job itself does besides its query counts
on both sides. Each workload runs once each way before the measured repetitions, which
alternate the order (off first in the first, 10s first in the second, and so on). Prints
median wall times, their ratio, the median of each repetition's own ratio with a 95 %
bootstrap interval and whether it tells the goal met or missed (benches/reporting.py), CPU
(this process and every process under it; and the Python workers' alone, where tt's work runs)
and the run file's size; writes the same as markdown to benches/results/. Goal (issue 14): on
≤ 1.05 × off for each.

`--side-by-side` runs off and 10s at the same moment instead, each in a SparkSession of its own
(`local[1]`) pinned to one of two cores, swapping cores every repetition (benches/side_by_side.py):
each repetition's ratio is then of two runs that met the machine at the same time.
`--same-core` runs them at once on one core, a pair on each core: each pair's ratio is of the two
runs' CPU times (on a core of its own, a run's CPU time is its wall time), the two having met the
same core at the same moments.

    python benches/tws_overhead.py [--reps 3] [--rows 1000000] [--keys 10000] [--files 4] [--workloads keyed,stream,sessions]
                                   [--shuffle-partitions 4] [--side-by-side | --same-core]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("TT_KEY_FILE", str(Path(tempfile.gettempdir()) / "tt-bench-key"))

GOAL = 1.05
sys.path.insert(0, str(Path(__file__).resolve().parent))
from reporting import bytecode_cached, interval_text, write_result   # noqa: E402  (benches/reporting.py)
from tpch import WORKERS, cpu_seconds   # noqa: E402  (benches/tpch.py)
STREAM_ROWS = 50_000
SESSIONS_JOB = Path(__file__).resolve().parent.parent / "sample_runs" / "sessions_streaming" / "job.py"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def processor():
    """The processor class, defined where pyspark is importable (the bench's own process)."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class KeyedSum(StatefulProcessor):
        def init(self, handle):
            self.total = handle.getValueState("total", "amount double, n long")

        def handleInputRows(self, key, rows, timerValues):
            amount, n = self.total.get() or (0.0, 0)
            for chunk in rows:
                amount += float(chunk["amount"].sum())
                n += len(chunk)
            self.total.update((amount, n))
            yield pd.DataFrame({"k": [key[0]], "amount": [amount], "n": [n]})

        def close(self):
            pass
    return KeyedSum


def keyed_rows(spark, rows: int, keys: int):
    """The keyed workload's input: `rows` amounts over `keys` keys, in 4 partitions."""
    return spark.range(0, rows, numPartitions=4).selectExpr(f"id % {keys} AS k", "CAST(id % 101 AS DOUBLE) AS amount")


def keyed_answer(spark, rows: int, keys: int) -> list[tuple]:
    """What `keyed_job` must answer, by Spark SQL's groupBy (no Python worker runs it)."""
    return sorted((r["k"], r["amount"], r["n"]) for r in keyed_rows(spark, rows, keys)
                  .groupBy("k").agg({"amount": "sum", "*": "count"})
                  .selectExpr("k", "`sum(amount)` AS amount", "`count(1)` AS n").collect())


def keyed_job(rows: int, keys: int) -> list[tuple]:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    out = keyed_rows(spark, rows, keys).groupBy("k").transformWithStateInPandas(
        statefulProcessor=processor()(), outputStructType="k long, amount double, n long",
        outputMode="Update", timeMode="None")
    return sorted(tuple(r) for r in out.collect())


def stream_job(in_dir: str, ckpt: str, files: int, keys: int) -> list[tuple]:
    import pandas as pd
    from pyspark.sql import SparkSession

    Path(in_dir).mkdir(parents=True, exist_ok=True)
    t0 = time.time() - files - 10
    for f in range(files):
        ids = range(f * STREAM_ROWS, (f + 1) * STREAM_ROWS)
        pd.DataFrame({"k": [i % keys for i in ids], "amount": [float(i % 101) for i in ids]}).to_csv(
            Path(in_dir) / f".p{f}.csv", index=False)
        os.utime(Path(in_dir) / f".p{f}.csv", (t0 + f, t0 + f))   # Spark takes files in mtime order
        os.replace(Path(in_dir) / f".p{f}.csv", Path(in_dir) / f"p{f}.csv")
    spark = SparkSession.builder.getOrCreate()
    src = spark.readStream.schema("k long, amount double").option("header", True) \
        .option("maxFilesPerTrigger", 1).csv(in_dir)
    out = src.groupBy("k").transformWithStateInPandas(
        statefulProcessor=processor()(), outputStructType="k long, amount double, n long",
        outputMode="Update", timeMode="None")
    name = f"sums_{abs(hash(ckpt))}"
    q = (out.writeStream.format("memory").queryName(name).outputMode("update")
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    q.awaitTermination()
    rows = spark.sql(f"SELECT k, max(n) AS n, max(amount) AS amount FROM {name} GROUP BY k").collect()
    return sorted((r["k"], r["amount"], r["n"]) for r in rows)


def sessions_job(out: str) -> list[tuple]:
    """The sessions_streaming sample (its own processingTime trigger, EventTime timers), as
    `python job.py --out OUT` runs it: (user, 0.0, sessions closed) from what it prints."""
    import contextlib
    import importlib.util
    import io
    import re

    spec = importlib.util.spec_from_file_location("sessions_job", SESSIONS_JOB)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        job.main(["--out", out])
    line = next(x for x in printed.getvalue().splitlines() if x.startswith("sessions closed:"))
    return sorted((u, 0.0, int(n)) for u, n in re.findall(r"(\w+) (\d+)", line.split("(", 1)[1]))


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--workloads", default="keyed,stream,sessions", help="which to run, comma-separated")
    ap.add_argument("--shuffle-partitions", type=int, default=4,
                    help="spark.sql.shuffle.partitions: the keyed and stream workloads' tasks a query (a job "
                         "that leaves it has Spark's 200, and pays each task's cost of recording 200 times)")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--side-by-side", action="store_true",
                     help="run off and 10s at the same moment, each on a core of its own (Spark local[1]), "
                          "swapping cores every repetition (benches/side_by_side.py): for a machine whose "
                          "speed drifts between runs")
    how.add_argument("--same-core", action="store_true",
                     help="run off and 10s at the same moment on one core, a pair on each core (Spark local[1]), "
                          "and compare their CPU times: for a machine whose two cores differ in speed too; "
                          "a repetition gives two pairs")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)   # a side-by-side runner
    return ap.parse_args()


class Workloads:
    """The workloads' job command lines and oracles, and one run of a variant of one."""

    def __init__(self, args: argparse.Namespace, master: str):
        import tt

        self.spark = tt.spark_session("tt-bench-tws", master=master,
                                      conf={"spark.sql.shuffle.partitions": args.shuffle_partitions,
                                            "spark.sql.streaming.stateStore.providerClass": ROCKSDB})
        want_keyed = keyed_answer(self.spark, args.rows, args.keys)
        sums: dict = {}
        for i in range(args.files * STREAM_ROWS):
            a, n = sums.get(i % args.keys, (0.0, 0))
            sums[i % args.keys] = (a + float(i % 101), n + 1)
        want_stream = sorted((k, a, n) for k, (a, n) in sums.items())
        self.work = Path(tempfile.mkdtemp(prefix="tt-bench-tws-"))
        self.me = Path(__file__).resolve()
        self.jobs = {   # each: the job's command line in folder d, and its oracle's answer (None: off's)
            "keyed": (lambda d: ["--job", "keyed", str(d / "answer.json"), str(args.rows), str(args.keys)], want_keyed),
            "stream": (lambda d: ["--job", "stream", str(d / "answer.json"), str(d / "in"), str(d / "ck"),
                                  str(args.files), str(args.keys)], want_stream),
            "sessions": (lambda d: ["--job", "sessions", str(d / "answer.json"), str(d / "data")], None),
        }

    def run(self, workload: str, variant: str, name: str) -> dict:
        """Run `workload` one way in a folder of its own: wall and CPU seconds (this process and
        every process under it; the Python workers' alone), the run file's size, the answer."""
        from tt.recorder.job import record_job, run_as_main
        from tt.store.reader import RunReader

        argv, _ = self.jobs[workload]
        d = self.work / name
        d.mkdir(parents=True)
        t, cpu, wcpu = time.perf_counter(), cpu_seconds(), cpu_seconds(WORKERS)
        if variant == "off":
            run_as_main(self.me, argv(d))
        else:
            outcome = record_job(self.me, argv(d), d / "run.db", every=10.0, force=True)
            if outcome.status != "complete":
                raise SystemExit(f"{workload}: recording failed: {outcome.error}")
        got = {"wall": time.perf_counter() - t, "cpu": cpu_seconds() - cpu, "workers": cpu_seconds(WORKERS) - wcpu,
               "size": None, "answer": json.loads((d / "answer.json").read_text())}
        if variant != "off":
            reader = RunReader(d / "run.db")
            got["size"] = reader.sizes()["file"]
            reader.close()
        shutil.rmtree(d, ignore_errors=True)
        return got



def check(what: str, got: list, want: list) -> None:
    """`got` is `want`, the sums to 1e-6."""
    got, want = [tuple(r) for r in got], [tuple(r) for r in want]
    if [(k, n) for k, _, n in got] != [(k, n) for k, _, n in want] or any(
            abs(a - b) > 1e-6 * max(1.0, abs(b)) for (_, a, _), (_, b, _) in zip(got, want)):
        raise SystemExit(f"{what}: the answer differs from the oracle")


def sequential(args: argparse.Namespace) -> None:
    """Both ways one after the other in one SparkSession (`local[2]`)."""
    loads = Workloads(args, "local[2]")
    workloads = args.workloads.split(",")
    runs = {(w, v): [] for w in workloads for v in ("off", "10s")}   # (wall, CPU, the workers' CPU) a repetition
    sizes: dict[str, int] = {}
    # Warm-up, outside the figures: each workload once each way at full size. The JVM's compiled
    # code and the Python workers' imports (tt's among them) then serve every measured run alike;
    # with a small warm-up, recording off sped up from 10.6 to 8.1 s over seven repetitions.
    for w in workloads:
        loads.run(w, "off", f"{w}-warm-off")
        loads.run(w, "10s", f"{w}-warm-10s")
    for rep in range(args.reps):
        for w in workloads:
            answers = {}
            # off first in the first repetition, 10s first in the second, and so on: a drift left over favours neither
            for variant in (("off", "10s") if rep % 2 == 0 else ("10s", "off")):
                got = loads.run(w, variant, f"{w}-{rep}-{variant}")
                runs[(w, variant)].append((got["wall"], got["cpu"], got["workers"]))
                if got["size"] is not None:
                    sizes[w] = got["size"]
                answers[variant] = got["answer"]
                print(f"rep {rep + 1} {w:6} {variant:4} {got['wall']:7.2f}s  CPU {got['cpu']:7.2f}s", flush=True)
            for variant, answer in answers.items():   # (a workload without an oracle: off's answer is 10s's)
                check(f"rep {rep + 1} {w} {variant}", answer, loads.jobs[w][1] or answers["off"])
    spark_version = loads.spark.version
    loads.spark.stop()
    report(args, workloads, spark_version, "local[2]", "Variants interleaved in each repetition, one process",
           runs, sizes)


def side_by_side(args: argparse.Namespace) -> None:
    """Both ways at once, each on a core of its own, or a pair on each core (`--same-core`;
    benches/side_by_side.py)."""
    from side_by_side import run_pairs

    workloads = args.workloads.split(",")
    runs = {(w, v): [] for w in workloads for v in ("off", "10s")}
    sizes: dict[str, int] = {}
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve", "--rows", str(args.rows), "--keys",
            str(args.keys), "--files", str(args.files), "--shuffle-partitions", str(args.shuffle_partitions)]
    for w in workloads:
        def pair(rep: int, off: dict, on: dict, w=w) -> None:
            check(f"rep {rep + 1} {w} 10s", on["answer"], off["answer"])   # (each runner checked its oracle's)
            runs[(w, "off")].append((off["wall"], off["cpu"], off["workers"]))
            runs[(w, "10s")].append((on["wall"], on["cpu"], on["workers"]))
            sizes[w] = on["size"]
            by, shown = ("cpu", " CPU") if args.same_core else ("wall", "")   # (a shared core's wall times are not the runs')
            print(f"rep {rep + 1} {w:6} off{shown} {off[by]:7.2f}s  10s{shown} {on[by]:7.2f}s  ×{on[by] / off[by]:.3f}  "
                  f"workers' CPU ×{on['workers'] / off['workers']:.3f}", flush=True)
        pairs = run_pairs(argv, ("off", "10s"), args.reps,
                          lambda variant, rep, w=w: {"workload": w, "variant": variant, "rep": rep}, pair,
                          same_core=args.same_core)
    if args.same_core:
        how = ("Variants at the same moment on one core, a pair on each of the two cores (four SparkSessions, each "
               "with its JVM and Python workers pinned with it), variants swapping runners every repetition "
               "(benches/side_by_side.py), after a warm-up pair each way round; a pair's ratio is of its CPU times, "
               "its wall times being the shared core's")
    else:
        how = ("Variants at the same moment, each in a SparkSession on a core of its own (its JVM and Python workers "
               "pinned with it), swapping cores every repetition (benches/side_by_side.py), after a warm-up pair each "
               "way round")
    report(args, workloads, pairs[0][0]["spark"], "local[1]", how, runs, sizes)


def serve(args: argparse.Namespace) -> None:
    """A side-by-side runner: one SparkSession on the one core it is pinned to."""
    from side_by_side import serve as serve_requests

    loads = Workloads(args, "local[1]")

    def run(workload: str, variant: str, rep: int) -> dict:
        got = loads.run(workload, variant, f"{workload}-{rep}-{variant}")
        if loads.jobs[workload][1] is not None:
            check(f"rep {rep + 1} {workload} {variant}", got["answer"], loads.jobs[workload][1])
        return {**got, "spark": loads.spark.version}
    serve_requests(run)
    loads.spark.stop()


def report(args: argparse.Namespace, workloads: list[str], spark_version: str, master: str, how: str,
           runs: dict[tuple[str, str], list[tuple[float, float, float]]], sizes: dict[str, int]) -> None:
    """Print the medians, their ratios and the goal's verdict; write them to benches/results/."""
    described = {"keyed": f"keyed: {args.rows:,} rows over {args.keys:,} keys, 4 partitions, "
                          f"{args.shuffle_partitions} shuffle partitions (tasks a query)",
                 "stream": f"stream: {args.files} files × {STREAM_ROWS:,} rows, one a micro-batch, "
                           f"{args.shuffle_partitions} shuffle partitions",
                 "sessions": "sessions: the sessions_streaming sample, five files, processingTime 1 s"}
    by = 1 if args.same_core else 0   # each pair's ratio: of CPU times where the pair shared a core, else of wall times
    of, each = ("CPU ", "pair") if by else ("", "repetition")   # (how the text names that ratio)
    head = "; ".join(described[w] for w in workloads) + f"; median of {len(runs[(workloads[0], 'off')])}"
    table = [f"| workload | off s | 10s s | × off | median of {of}ratios | CPU × off | "
             "workers' CPU × off | run file |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    verdicts = []
    print(f"\n{head}")
    for w in workloads:
        off, on = runs[(w, "off")], runs[(w, "10s")]
        med = [[statistics.median(r[i] for r in side) for i in range(3)] for side in (off, on)]
        ratios = [b[by] / a[by] for a, b in zip(off, on)]   # each repetition's own
        paired = statistics.median(ratios)
        ratio, cpu, wcpu = (med[1][i] / med[0][i] for i in range(3))
        print(f"  {w:6} off {med[0][0]:7.2f}s  10s {med[1][0]:7.2f}s  ×{ratio:.3f}  (median of each repetition's "
              f"{of}ratio ×{paired:.3f}; CPU ×{cpu:.3f}, the Python workers' ×{wcpu:.3f})  "
              f"run file {sizes[w] / 1e6:.1f} MB")
        table.append(f"| {w} | {med[0][0]:.2f} | {med[1][0]:.2f} | {ratio:.3f} | {paired:.3f} | {cpu:.3f} | {wcpu:.3f} | "
                     f"{sizes[w] / 1e6:.1f} MB |")
        verdicts.append(f"{w}, each {each}'s own {of}ratio, {interval_text(ratios, GOAL)}")
        verdicts.append(f"{w}, the Python workers' CPU, each {each}'s own ratio, "
                        f"{interval_text([b[2] / a[2] for a, b in zip(off, on)])}")
    verdict = f"goal (issue 14): 10s ≤ ×{GOAL} off; measured " + ", ".join(verdicts)
    print(f"  {verdict}")
    per_rep = "\n".join(f"- {w} {v}: " + ", ".join(f"{t:.2f}/{c:.2f}/{p:.2f}" for t, c, p in got)
                        + " s (wall/CPU/workers' CPU)" for (w, v), got in runs.items())
    command = (f"    python benches/tws_overhead.py --reps {args.reps} --rows {args.rows} --keys {args.keys} "
               f"--files {args.files} --workloads {args.workloads}" + (" --side-by-side" if args.side_by_side else "")
               + (" --same-core" if args.same_core else ""))
    out = write_result(
        "tws-overhead", "StatefulProcessor recording overhead",
        f"{command}\n\n"
        f"{head}. Spark {spark_version} `{master}`, Python {platform.python_version()}, {os.cpu_count()} cores. "
        f"{how}; every answer checked. CPU = the process that ran the job and every process under it (the JVM, "
        f"its Python workers); workers' CPU = the Python workers' alone.\n\n"
        + "\n".join(table) + f"\n\n{verdict[0].upper() + verdict[1:]}.\n\nWall times per repetition:\n\n{per_rep}\n",
        datetime.date.today().isoformat())
    print(f"\nwrote {out}")


def main() -> None:
    args = arguments()
    bytecode_cached()   # the workers read tt's modules compiled, as from an installed package
    if args.serve:
        serve(args)
    elif args.side_by_side or args.same_core:
        side_by_side(args)
    else:
        sequential(args)


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--job":   # what `tt record` runs, in this process
        kind, answer, rest = sys.argv[2], sys.argv[3], sys.argv[4:]
        rows = (keyed_job(int(rest[0]), int(rest[1])) if kind == "keyed"
                else sessions_job(rest[0]) if kind == "sessions"
                else stream_job(rest[0], rest[1], int(rest[2]), int(rest[3])))
        Path(answer).write_text(json.dumps([list(r) for r in rows]))
    else:
        main()

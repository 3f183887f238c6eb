"""The instructions tt's Python workers execute on TPC-H W1/W2 and a StatefulProcessor, recording off and on, counted by valgrind.

`benches/tpch.py` times the variants; on this 2-core machine one repetition differs from the
next by ±10–20 %, from one day to the next by a factor of two, so a goal of ×1.02 is beyond what
its repetitions can tell. The instructions a program executes do not move with what else the
machine runs. Here each variant runs in a SparkSession of its own (a child process) whose Python
workers run under valgrind's cachegrind (`--cache-sim=no`: instructions only; `--simulate` adds
its simulated caches' misses and branch mispredictions) with a fixed
`PYTHONHASHSEED`, and the bench adds up what the workers executed after PySpark's daemon forked
them (`worker_instructions`; Spark's workers started without the daemon must connect back
within 10 s, which a worker under valgrind does not). On 2026-12-01 two runs of W2's variants
agreed within 0.05 %.

A recording task sends its logs every 50,000 inputs and every 2 s; under valgrind those 2 s
came as often as the machine's load let them, and a keyed TWS recording counted 12.91 G on a
quiet machine, 13.14 G on a busy one (each flush packs the Arrow batches its processor's rows
lie in, one of them once more). So the workers run with `TT_FLUSH_SECONDS` (recorder/task.py)
beyond any run: they send by rows and bytes (a TWS task of scale 1, once at its end, where a
timed run's task of some 3 s sends about twice). Figures from before 2026-12-07's second session were
counted with timed flushes.

What it counts is tt's own Python work and what it makes PySpark's Python code do. Not
counted: the JVM (Spark's scans and shuffles; recording reads the scans' position columns too),
the driver (tt's coordinator and writer: `tpch.py` prints its CPU time), waits, and what a cache
miss costs over an instruction (an end snapshot reads every list of a join). So the figure is
a floor of what recording costs in time, and the share of it that tt's Python code can win back.
How low a floor, measured on TWS at scale 1 (2026-12-04-instructions-tws-sf1.md): recording's
instructions ×1.041 of off, its workers' CPU ×1.092 in `tws_overhead.py` on a quiet machine: tt's
added instructions took about twice the time each of the workload's own (most likely interpreted
Python against Arrow's and pandas' C loops). Judge a time goal on the timed bench; use this one
to find and compare tt's costs.

Workloads: W1 and W2 as `benches/tpch.py` runs them (tt.Dataflow jobs over TPC-H at --scale);
TWS, `benches/tws_overhead.py`'s keyed aggregation (a transformWithStateInPandas processor over
1M × scale rows and 10,000 × scale keys, 100 rows a key), a plain PySpark job that `tt record`
hooks. Every answer is checked against Spark SQL's.

Variants (one child process each, `--reps` times):
  off    the job, recording off (W1, W2: the tt.Dataflow; TWS: plain PySpark)
  end    tt record with an interval no run reaches: only the interactions every recording takes
         (its first and its end's, 2 on W1 and W2), what 1 interaction/10 s takes on a W2 run
         of 10 s at scale 1 (`tpch.py`'s 10 s variant)
  rev, rev+lineage
         (`--lineage`, W2) tt record with θ = REV, the last operator, as benches/lineage.py
         records it, without and with --lineage (J1, J2 and J3 logged outside G(θ)), only the
         interactions every recording takes: their ratio is what --lineage costs (issue 16)
  when   (`--when`, W1 and W2) tt record with a `--when` condition that reads each of θ's
         inputs and never holds (`NEVER`), only the interactions every recording takes: its
         ratio to `end` is what testing θ's every input costs
  many   (`--when`, W1 and W2) tt record with a `--when` condition that holds for one order key
         in 3,000 (`MANY`): tens of interactions, the same number every run, where `--every`
         gives a number that varies; (many − when) / (its interactions − 2) is what an
         interaction costs the workers (at 10/s, a W2 run of 10 s at scale 1 takes 100; its
         condition's modulo, a few instructions an input more than `when`'s, counts in)
  S      (`--every S`) tt record, an interaction every S seconds; valgrind runs the workers ~5×
         slower, so a time-based interval takes about 5× more interactions per tuple than it
         would, and their number varies from run to run (it is printed)

    python benches/instructions.py [--workloads W1 W2 TWS] [--scale 0.1] [--reps 1] [--every 0.5] [--lineage] [--when]
                                   [--simulate]

Needs valgrind on PATH. Prints each variant's workers' instructions and their ratio to `off`,
and writes the same to benches/results/.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reporting import bytecode_cached, write_result   # noqa: E402  (benches/reporting.py)

END_ONLY = 1e9   # an interval no run reaches: only the interactions every recording takes
NO_TIMED_FLUSH = "1e9"   # TT_FLUSH_SECONDS: a task sends its logs by rows and bytes, not every 2 s of valgrind's pace
NEVER = "row.get('l_orderkey', 0) < 0"   # the `when` variant's condition: read on each of θ's inputs, never true
MANY = "row.get('l_orderkey', 1) % 3000 == 0"   # the `many` variant's: true for one order key in 3,000
LINEAGE_VARIANTS = ("rev", "rev+lineage")   # W2 with θ = REV, recorded without and with --lineage (`--lineage`)
_LOG = re.compile(r"==(\d+)== (Command|Parent PID|I\s+refs|I1\s+misses|LLi\s+misses|D\s+refs|D1\s+misses|"
                  r"LLd\s+misses|LL\s+misses|Branches|Mispredicts):\s+([^(\n]*)")
#: what valgrind counts besides instructions with `--simulate` (its simulated caches, sized from
#: what the CPU reports, and its branch predictor), in its own words
SIMULATED = ("I1 misses", "LLi misses", "D refs", "D1 misses", "LLd misses", "LL misses", "Branches", "Mispredicts")


def worker_counts(logs: Path) -> tuple[dict[str, int], int]:
    """(counts, workers) of the Python workers PySpark's daemon forked, from valgrind's logs in
    `logs` (one file per process): their instructions ("I refs") and, with `--simulate`, the
    `SIMULATED` counts, each added up over the workers. A forked process's count includes its
    parent's before the fork, so the daemon's count is taken off each worker's. The daemon's count
    includes what it did after the forks too (its exit, mostly): each worker is short by that, the
    same in every variant, so a difference between variants is exact and a ratio close to it."""
    procs: dict[int, dict] = {}
    for f in logs.glob("log.*"):
        for pid, field, value in _LOG.findall(f.read_text(errors="replace")):
            procs.setdefault(int(pid), {})[" ".join(field.split())] = value.strip()
    daemons = [pid for pid, p in procs.items() if "pyspark.daemon" in p.get("Command", "")
               and int(p.get("Parent PID", 0)) not in procs]
    if len(daemons) != 1:
        raise SystemExit(f"instructions: expected one PySpark daemon under valgrind, found {len(daemons)} "
                         f"(logs in {logs})")
    daemon = procs[daemons[0]]
    counted = [k for k in daemon if k not in ("Command", "Parent PID")]
    workers = [p for p in procs.values() if int(p.get("Parent PID", 0)) == daemons[0]]
    if not workers or "I refs" not in counted or any(k not in p for p in workers for k in counted):
        raise SystemExit(f"instructions: a Python process left no count (killed?): logs in {logs}")
    return {k: sum(_number(p[k]) - _number(daemon[k]) for p in workers) for k in counted}, len(workers)


def worker_instructions(logs: Path) -> tuple[int, int]:
    """(instructions, workers) of the forked Python workers (`worker_counts`)."""
    counts, workers = worker_counts(logs)
    return counts["I refs"], workers


def _counted(logs: Path, patience: float = 120.0) -> tuple[dict[str, int], int]:
    """`worker_counts`, once every worker's valgrind has written its count: Spark stops its
    workers with SIGHUP as the session ends, and a worker's valgrind writes its count after that,
    so the child's exit may come first (seen on W2 at scale 1: "left no count", each log complete
    a moment later)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return worker_counts(logs)
        except SystemExit:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def child(workload: str, variant: str, scale: float, partitions: int) -> None:
    """One variant in this process's own SparkSession (its workers under valgrind): prints its
    wall time and interactions."""
    if workload == "TWS":
        return tws_child(variant, scale, partitions)
    from tpch import WORKLOADS, check, run_variant, spark_for, tpch_parquet

    w = WORKLOADS[workload]
    data = tpch_parquet(scale)
    spark = spark_for(data, partitions, "tt-bench-instructions")
    for t in w.tables:
        spark.read.parquet(str(data / f"{t}.parquet")).createOrReplaceTempView(t)
    reference = w.sql(spark)
    out = Path(tempfile.mkdtemp(prefix="tt-bench-instructions-")) / "run.db"
    start = time.perf_counter()
    if variant in LINEAGE_VARIANTS:
        rows = lineage_variant(spark, variant, data, partitions, out)
    else:
        every = None if variant == "off" else END_ONLY if variant in ("end", "when", "many") else float(variant)
        rows, _ = run_variant(spark, w, "record" if every else "off", every, data, partitions, out,
                              when={"when": NEVER, "many": MANY}.get(variant))
    wall = time.perf_counter() - start
    check(rows, reference, f"{workload} {variant}")
    interactions = 0
    if variant != "off":
        from tt.store.reader import RunReader

        reader = RunReader(out)
        interactions = len(reader.interactions())
        reader.close()
    spark.stop()
    shutil.rmtree(out.parent, ignore_errors=True)
    print(f"RESULT {wall:.1f} {interactions}", flush=True)


def lineage_variant(spark, variant: str, data: Path, partitions: int, out: Path) -> list[tuple]:
    """W2 recorded as `benches/lineage.py` records it, θ = REV (the last operator, so that
    `--lineage` logs J1, J2 and J3 outside G(θ)), with only the interactions every recording
    takes: without `--lineage` ("rev") or with it ("rev+lineage"). Their ratio is what
    `--lineage` costs the workers (issue 16: ≤ 1.5 %)."""
    import lineage

    return lineage.record(spark, data, partitions, out, "REV", lineage=variant == "rev+lineage", every=END_ONLY)[0]


def tws_child(variant: str, scale: float, partitions: int) -> None:
    """`child` for TWS: benches/tws_overhead.py's keyed aggregation (a transformWithStateInPandas
    `KeyedSum` over 1M × scale rows, 10,000 × scale keys), plainly or under `tt record`, its
    answer checked against Spark SQL's (`keyed_answer`)."""
    import json

    import tt
    import tws_overhead
    from tt.recorder.job import record_job
    from tt.store.reader import RunReader

    rows, keys = round(1_000_000 * scale), round(10_000 * scale)
    spark = tt.spark_session("tt-bench-instructions", master="local[2]",
                             conf={"spark.sql.shuffle.partitions": partitions})
    want = tws_overhead.keyed_answer(spark, rows, keys)
    work = Path(tempfile.mkdtemp(prefix="tt-bench-instructions-"))
    start, interactions = time.perf_counter(), 0
    if variant == "off":
        got = tws_overhead.keyed_job(rows, keys)
    else:
        every = END_ONLY if variant == "end" else float(variant)
        outcome = record_job(Path(tws_overhead.__file__), ["--job", "keyed", str(work / "answer.json"), str(rows),
                                                          str(keys)], work / "run.db", every=every, force=True)
        if outcome.status != "complete":
            raise SystemExit(f"TWS {variant}: the recording failed: {outcome.error}")
        got = [tuple(r) for r in json.loads((work / "answer.json").read_text())]
        reader = RunReader(work / "run.db")
        interactions = len(reader.interactions())
        reader.close()
    wall = time.perf_counter() - start
    if got != want:
        raise SystemExit(f"TWS {variant}: the answer differs from Spark SQL's")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    print(f"RESULT {wall:.1f} {interactions}", flush=True)


def measure(workload: str, variant: str, scale: float, partitions: int, simulate: bool = False) -> dict:
    """A child process's run of one variant, its workers under valgrind: their instructions
    (`own`) and, `simulate`d, their cache misses and branch mispredictions (`counts`)."""
    logs = Path(tempfile.mkdtemp(prefix="tt-bench-valgrind-"))
    wrapper = logs / "python"
    sim = "--cache-sim=yes --branch-sim=yes" if simulate else "--cache-sim=no"
    wrapper.write_text(f"#!/bin/sh\nexec valgrind --tool=cachegrind {sim} "
                       f"--cachegrind-out-file=/dev/null --log-file={logs}/log.%p {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    env = {**os.environ, "PYSPARK_PYTHON": str(wrapper), "PYTHONHASHSEED": "0", "TT_FLUSH_SECONDS": NO_TIMED_FLUSH}
    proc = subprocess.run([sys.executable, __file__, "--child", workload, variant, str(scale), str(partitions)],
                          env=env, capture_output=True, text=True)
    found = re.search(r"^RESULT (\S+) (\d+)$", proc.stdout, re.M)
    if proc.returncode != 0 or not found:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"instructions: {workload} {variant} failed: {tail}")
    counts, workers = _counted(logs)
    shutil.rmtree(logs, ignore_errors=True)
    return {"own": counts["I refs"], "counts": counts, "workers": workers, "wall": float(found[1]),
            "interactions": int(found[2])}


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["W1", "W2"], choices=["W1", "W2", "TWS"],
                    help="TPC-H's W1, W2 (benches/tpch.py); TWS: benches/tws_overhead.py's keyed aggregation")
    ap.add_argument("--scale", type=float, default=0.1,
                    help="TPC-H scale factor; for TWS, 1M × scale rows over 10,000 × scale keys (valgrind runs ~5× slower)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--reps", type=int, default=1, help="runs of each variant (they agree within 0.05 %%)")
    ap.add_argument("--every", type=float, action="append", default=[],
                    help="also record with an interaction every this many seconds (repeatable)")
    ap.add_argument("--when", action="store_true",
                    help="W1 and W2 also with a --when condition that never holds (what testing θ's inputs "
                         "costs) and with one that holds for one order key in 3,000 (what an interaction costs)")
    ap.add_argument("--lineage", action="store_true",
                    help="W2 also with θ = REV, recorded without and with --lineage: what --lineage costs (issue 16)")
    ap.add_argument("--simulate", action="store_true",
                    help="also count the workers' cache misses and branch mispredictions, in valgrind's simulated "
                         "caches and branch predictor: whether recording's added work misses more per instruction "
                         "than the workload's (valgrind runs slower so)")
    args = ap.parse_args()
    if args.lineage and "W2" not in args.workloads:
        raise SystemExit("instructions: --lineage measures W2: add it to --workloads")
    bytecode_cached()   # the workers read tt's modules compiled, as from an installed package
    if shutil.which("valgrind") is None:
        raise SystemExit("instructions: valgrind is not on PATH (Debian: apt install valgrind)")
    from tpch import tpch_parquet

    if set(args.workloads) - {"TWS"}:
        tpch_parquet(args.scale)   # generated once, before any run is counted
    results: dict[str, dict[str, list[dict]]] = {}
    for name in args.workloads:
        variants = ["off", "end"] + (["when", "many"] if args.when and name != "TWS" else []) + \
            [f"{s:g}" for s in args.every]
        if args.lineage and name == "W2":
            variants += LINEAGE_VARIANTS
        results[name] = {v: [] for v in variants}
        for rep in range(args.reps):
            for v in (variants if rep % 2 == 0 else variants[::-1]):
                r = measure(name, v, args.scale, args.partitions, args.simulate)
                results[name][v].append(r)
                print(f"  {name} rep {rep + 1} {v:>5}: {r['own'] / 1e9:.3f} G instructions in {r['workers']} "
                      f"workers, {r['wall']:.1f} s under valgrind, {r['interactions']} interactions", flush=True)
    head = (f"scale {args.scale:g} (TPC-H's; TWS: {round(1e6 * args.scale):,} rows, {round(1e4 * args.scale):,} keys), "
            f"{args.partitions} partitions, Spark `local[2]`, Python "
            f"{platform.python_version()}, {os.cpu_count()} cores; {args.reps} run(s) of each variant")
    lines = [head, ""]
    for name, by in results.items():
        off = min(r["own"] for r in by["off"])
        lines += [f"{name}:", "", "| variant | workers' instructions (G) | × off | spread of its runs | interactions |",
                  "|---|---:|---:|---:|---:|"]
        for v, runs in by.items():
            own = [r["own"] for r in runs]
            spread = (max(own) - min(own)) / min(own)
            lines.append(f"| {'every ' + v + ' s' if v[0].isdigit() else v} | {min(own) / 1e9:.3f} | "
                         f"{min(own) / off:.4f} | {spread * 100:.2f} % | "
                         f"{', '.join(str(r['interactions']) for r in runs) if v != 'off' else '–'} |")
        if args.simulate:
            lines += ["", "| variant | " + " | ".join(f"{k} (M) | × off" for k in SIMULATED) + " |",
                      "|---|" + "---:|---:|" * len(SIMULATED)]
            base = {k: min(r["counts"][k] for r in by["off"]) for k in SIMULATED}
            for v, runs in by.items():
                got = {k: min(r["counts"][k] for r in runs) for k in SIMULATED}
                lines.append(f"| {v} | " + " | ".join(f"{got[k] / 1e6:,.1f} | {got[k] / base[k]:.4f}" for k in SIMULATED)
                             + " |")
        if all(v in by for v in LINEAGE_VARIANTS):
            plain, lin = (min(r["own"] for r in by[v]) for v in LINEAGE_VARIANTS)
            lines += ["", f"--lineage (θ = REV): rev+lineage × rev = {lin / plain:.4f} "
                          f"({(lin - plain) / 1e9:+.3f} G; goal ≤ 1.015, issue 16)"]
        if "when" in by:
            end, when = (min(r["own"] for r in by[v]) for v in ("end", "when"))
            lines += ["", f"--when {NEVER!r} (never true): when × end = {when / end:.4f} ({(when - end) / 1e9:+.3f} G)"]
            many, n = min(r["own"] for r in by["many"]), min(r["interactions"] for r in by["many"])
            if n > 2:
                lines.append(f"--when {MANY!r}: {n} interactions, (many − when) / {n - 2} = "
                             f"{(many - when) / (n - 2) / 1e6:.2f} M instructions an interaction")
        lines.append("")
    text = "\n".join(lines)
    print("\n" + text)
    out = write_result(f"instructions-{'-'.join(args.workloads).lower()}-sf{args.scale:g}",
                       "Python workers' instructions, recording off and on (valgrind)",
                       f"    python benches/instructions.py --workloads {' '.join(args.workloads)} "
                       f"--scale {args.scale:g} --reps {args.reps}"
                       + "".join(f" --every {s:g}" for s in args.every) + (" --lineage" if args.lineage else "")
                       + (" --when" if args.when else "") + (" --simulate" if args.simulate else "")
                       + f"\n\n{text}\n",
                       datetime.date.today().isoformat())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

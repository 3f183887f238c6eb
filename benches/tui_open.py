"""How fast `tt debug` shows its first screen, and how long a jump takes, on a run file of 1 GB or more.

The run: wide input rows (512 hex characters of payload each) through a
running total per key (θ = Totals, one entry per key in its state), recorded
with an interaction every 0.5 s: the file fills with the recorded input batches,
many interactions and large states. It is recorded once into a cache directory
(default /tmp/tt-bench) and reused while it is at least --min-gb large.

Measured in-process with `App.run_test()` on the real app:
* first screen: from creating the app until the DAG, the interaction timeline
  and the position line show the run (the replay engine still loading);
* engine ready: until the debug session has loaded and the first frame is shown;
* jump: pressing j, typing an interaction in the middle of the run and Enter,
  until the position line says the session is there;
* step over: pressing n until the step's result is on screen (the first step
  after the jump, then the median and max of the next ones);
* log browser: opening the recorded input of one instance (millions of rows)
  until its first page is drawn, End until the last page is drawn, PageUp.

    python benches/tui_open.py [--cache /tmp/tt-bench] [--min-gb 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

STEPS = 11

JOB = '''
"""Wide input rows through a keyed running total: a big run file, for the tt debug benchmark."""
import sys

import tt


class Totals(tt.Operator):
    """Count and sum per key (plain dicts: stored as they are, no per-entry encoding)."""

    def __init__(self):
        self.count = {}
        self.total = {}

    def process(self, row, port=0):
        k = row["key"]
        self.count[k] = self.count.get(k, 0) + 1
        self.total[k] = self.total.get(k, 0.0) + row["v"]
        return ()


def main(argv):
    rows, keys, parts = int(argv[0]), int(argv[1]), int(argv[2])
    spark = tt.spark_session("tui-bench")
    digest = ", ".join(f"sha2(concat(cast(id as string), '#{i}'), 512)" for i in range(4))
    df = spark.range(rows, numPartitions=parts).selectExpr(
        "id", f"concat('key', cast((id * 7919) % {keys} as string)) as key", "cast(id % 997 as double) as v",
        f"concat({digest}) as payload")
    flow = tt.Dataflow("bench")
    flow.source("U", df).process(Totals(), name="Totals").collect("S")
    flow.run()


if __name__ == "__main__":
    main(sys.argv[1:])
'''


def ensure_run(cache: Path, rows: int, keys: int, parts: int, every: str, min_gb: float) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / "big.db"
    if out.exists() and _size(out) >= min_gb * 1e9:
        print(f"reusing {out} ({_size(out) / 1e9:.2f} GB)")
        return out
    job = cache / "bench_job.py"
    job.write_text(JOB)
    cmd = [sys.executable, "-m", "tt", "record", str(job), "--watch", "Totals", "--every", every,
           "-o", str(out), "-f", "--", str(rows), str(keys), str(parts)]
    print("recording:", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=cache)
    print(f"recorded {out}: {_size(out) / 1e9:.2f} GB in {time.perf_counter() - t0:.0f} s", flush=True)
    if _size(out) < min_gb * 1e9:
        print(f"warning: {out} is smaller than {min_gb} GB; raise --rows or --keys", flush=True)
    return out


def _size(p: Path) -> int:
    return sum(Path(str(p) + s).stat().st_size for s in ("", "-wal") if Path(str(p) + s).exists())


async def measure(path: Path, size: tuple[int, int], timeout: float) -> dict:
    from tt.tui.app import DebuggerApp
    from tt.tui.widgets.dag_view import DagView
    from tt.tui.widgets.progress_line import ProgressLine
    from tt.tui.widgets.timeline import InteractionTimeline

    t0 = time.perf_counter()
    app = DebuggerApp(path)
    out: dict = {}
    async with app.run_test(size=size) as pilot:
        while True:  # the first screen: the run's facts are on screen
            timeline = app.query_one(InteractionTimeline)
            if timeline.row_count and "[Totals" in app.query_one(DagView).render_text() \
                    and "tuples" in app.query_one(ProgressLine).text:
                break
            await pilot.pause(0.005)
        out["first_screen"] = time.perf_counter() - t0
        out["interactions"] = timeline.row_count
        while app.model is None:
            if app.session_error:
                raise RuntimeError(app.session_error)
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError("the replay engine did not load")
            await pilot.pause(0.02)
        out["engine_ready"] = time.perf_counter() - t0
        complete = [r["k"] for r in app.interactions if r["complete"]]
        k = complete[len(complete) // 2]
        out["jump_to"] = k
        out["jump_tuples"] = sum(next(r for r in app.interactions if r["k"] == k)["positions"].values())
        await pilot.press("j")
        await pilot.pause(0.05)
        app.screen.query_one("Input").value = ""
        for ch in str(k):
            await pilot.press(ch)
        t1 = time.perf_counter()
        app.simulate_key("enter")  # (pilot.press would also wait for the app to go idle)
        while app.busy or app.shown is None or app.shown.interaction != k:
            if time.perf_counter() - t1 > timeout:
                raise TimeoutError(f"the jump to {k} did not finish in {timeout} s")
            await pilot.pause(0.02)
        out["jump"] = time.perf_counter() - t1
        out["jump_reported"] = app.shown.result.seconds if app.shown.result else None
        await pilot.pause(0.5)
        steps, last = [], app.shown.result
        for _ in range(STEPS):
            t2 = time.perf_counter()
            app.simulate_key("n")
            while app.busy or app.shown.result is None or app.shown.result is last:
                await pilot.pause(0.002)
            last = app.shown.result
            steps.append((time.perf_counter() - t2, last.seconds))
            await pilot.pause(0.1)
        out["steps"] = steps

        # the log browser on the recorded input of one instance (millions of rows)
        from tt.tui.widgets.log_browser import LogBrowser

        app.simulate_key("4")
        logs = app.query_one(LogBrowser)
        while logs.base is None:
            await pilot.pause(0.01)
        key = "tuples:Totals:0"
        t3 = time.perf_counter()
        logs.open_source(key)
        lines = logs.lines
        while logs.base.key != key or not lines.visible_rows() or None in lines.visible_rows():
            await pilot.pause(0.005)
        out["log_rows"] = lines.total
        out["log_open"] = time.perf_counter() - t3
        lines.focus()
        await pilot.pause(0.05)
        t4 = time.perf_counter()
        app.simulate_key("end")
        while lines.cursor != lines.total - 1 or None in lines.visible_rows():
            await pilot.pause(0.005)
        out["log_end"] = time.perf_counter() - t4
        t5 = time.perf_counter()
        for _ in range(20):
            app.simulate_key("pageup")
        while None in lines.visible_rows() or lines.cursor > lines.total - 20 * (lines.size.height - 1):
            await pilot.pause(0.005)
        out["log_pageup"] = (time.perf_counter() - t5) / 20
    return out


def import_cost() -> tuple[float, float]:
    """Seconds a fresh process spends importing the debugger, and the part of it spent importing the store."""
    code = ("import time; t = time.perf_counter(); import tt.store.reader; s = time.perf_counter() - t; "
            "import tt.tui.app; print(time.perf_counter() - t, s)")
    best = None
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        total, store = float(out[0]), float(out[1])
        best = (total, store) if best is None or total < best[0] else best
    return best


def ensure_plan(path: Path, tau: float) -> Path:
    """A copy of the run with an offline checkpoint plan (made once, then reused)."""
    planned = path.with_name(path.stem + f"-tau{tau:g}.db")
    if not planned.exists():
        print(f"making {planned}: tt checkpoint --tau {tau:g}s …", flush=True)
        tmp = planned.with_suffix(".partial")
        tmp.write_bytes(path.read_bytes())
        subprocess.run([sys.executable, "-m", "tt", "checkpoint", str(tmp), "--tau", f"{tau}s", "--trust"],
                       check=True)
        tmp.rename(planned)
    return planned


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=os.environ.get("TT_BENCH_CACHE", "/tmp/tt-bench"))
    ap.add_argument("--rows", type=int, default=4_500_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--every", default="0.5s")
    ap.add_argument("--min-gb", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--tau", type=float, default=2.0, help="τ of the checkpoint plan of the second pass")
    args = ap.parse_args()
    path = ensure_run(Path(args.cache), args.rows, args.keys, args.partitions, args.every, args.min_gb)
    total, store = import_cost()
    print(f"a fresh `tt debug` process first imports the debugger: {total:.3f} s "
          f"(of which {store:.3f} s for tt.store); the in-app figures below start after that")
    planned = ensure_plan(path, args.tau)
    runs = [(path, (80, 24), "no checkpoints"), (path, (160, 48), "no checkpoints"),
            (planned, (80, 24), f"offline plan, τ = {args.tau:g}s")]
    for run, size, label in runs:
        r = asyncio.run(measure(run, size, args.timeout))
        print(f"{run} ({_size(run) / 1e9:.2f} GB, {r['interactions']} interactions, {label}) at {size[0]}x{size[1]}:")
        shell = total + r["first_screen"]
        print(f"  first screen      {r['first_screen']:.3f} s in the app; {shell:.3f} s from the shell "
              f"(target <= 1 s: {'met' if shell <= 1.0 else 'MISSED'})")
        print(f"  engine ready      {r['engine_ready']:.3f} s")
        print(f"  jump to I{r['jump_to']:<5}    {r['jump']:.3f} s   ({r['jump_tuples']:,} tuples replayed from the "
              f"start or a restore point; session reports {r['jump_reported']:.3f} s)")
        first, rest = r["steps"][0], sorted(r["steps"][1:])
        mid, worst = rest[len(rest) // 2], rest[-1]
        print(f"  step over         first after the jump {first[0] * 1000:.0f} ms, then median {mid[0] * 1000:.0f} ms, "
              f"max {worst[0] * 1000:.0f} ms over {len(rest)} (session reports {first[1] * 1000:.0f} / "
              f"{mid[1] * 1000:.0f} / {worst[1] * 1000:.0f} ms)")
        print(f"  log browser       {r['log_rows']:,} recorded tuples: first page {r['log_open'] * 1000:.0f} ms, "
              f"End {r['log_end'] * 1000:.0f} ms, PageUp {r['log_pageup'] * 1000:.0f} ms each")


if __name__ == "__main__":
    main()

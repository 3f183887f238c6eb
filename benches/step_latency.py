"""Step latency on a run with a million tuples into θ: p50 and p99 per kind of step.

The fraud sample with 1M payments is recorded once (interactions every second).
Then, in one process, with no checkpoints and with an offline checkpoint plan
(τ = --tau), a debug session jumps to random interactions and, at each, takes
the steps a user takes: step-over of θ's next tuple, step-into of the next one,
step-into of its output downstream, step-out, and step-back (undoing the last
two steps, then, at the fresh position the jump left, stepping back over θ's
previous input). Each step is timed on its own (jumps are not steps and are not
counted). Target: p99 ≤ 50 ms.

Then key presses as the debugger takes them: `n`, `s` and `N` through the TUI's
model, each timed with what the screen needs after it (the waiting tuples, what
every step key can do and why not, θ's states, the selected tuple's scope), and
how many step plans each key press computed.

Then the README's session, a few times: from interaction 0, run until
"'Bob' in FD.blacklist" (a long replay), then `C` on the field that step changed
(`last_change`), which should cost about what `N` costs, not the run until again.

    python benches/step_latency.py [--rows 1000000] [--rounds 60] [--tau 1]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "sample_runs" / "fraud"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("TT_KEY_FILE", str(Path(tempfile.gettempdir()) / "tt-bench-key"))

import generate  # noqa: E402
import job as fraud  # noqa: E402

import tt  # noqa: E402

ACTIONS = ["step_over", "step_into", "step_into (downstream)", "step_out", "step_back",
           "step_back (after a jump)"]


def record(out: Path, rows: int) -> None:
    from tt.recorder.session import RecordingSession

    data = out.with_suffix(".parquet")
    if not data.exists():
        generate.write(rows, data)
    spark = tt.spark_session("bench-steps", master="local[2]")
    session = RecordingSession(out, ROOT / "sample_runs" / "fraud" / "job.py", [], watch="FE", every=1.0)
    with session:
        fraud.build(spark, str(data), 4).run()
    session.close()
    spark.stop()


def measure(run: Path, rounds: int, seed: int) -> dict[str, list[float]]:
    from tt.replay.session import DebugSession

    s = DebugSession(run)
    rng = random.Random(seed)
    theta = s.reader.theta.id
    mid = [i.k for i in s.interactions()]
    times: dict[str, list[float]] = {a: [] for a in ACTIONS}

    def timed(name, fn, *args):
        t = time.perf_counter()
        r = fn(*args)
        if r.ok:
            times[name].append(time.perf_counter() - t)
        return r

    def next_root():
        return min((p for p in s.pending() if p.next and p.ref.op == theta),
                   key=lambda p: s.provenance.rank(p.ref), default=None)

    for _ in range(rounds):
        s.jump(rng.choice(mid))
        p = next_root()
        if p is None:
            continue
        timed("step_over", s.step_over, p.ref)
        p = next_root()
        if p is None:
            continue
        timed("step_into", s.step_into, p.ref)
        down = [q for q in s.pending() if q.next and q.ref.op != theta and not q.free]
        if down:
            timed("step_into (downstream)", s.step_into, down[0].ref)
        timed("step_out", s.step_out)
        timed("step_back", s.step_back)
        timed("step_back", s.step_back)
        timed("step_back (after a jump)", s.step_back)
    return times


def measure_last_change(run: Path, reps: int, save_every: float) -> tuple[list[float], list[float]]:
    """The README's session: from interaction 0, `c 'Bob' in FD.blacklist`, then `C` on the field
    that step changed, then `N`. Returns the seconds of each C and each N. `save_every` is how
    often a long action leaves a restore point (infinity: never, as before issue 11)."""
    from tt.replay import restore_points
    from tt.replay.session import DebugSession

    saved = restore_points.SAVE_EVERY
    restore_points.SAVE_EVERY = save_every
    try:
        cs, ns = [], []
        for _ in range(reps):
            s = DebugSession(run)
            s.jump(0)
            r = s.run_until("'Bob' in FD.blacklist")
            inst, fields = next((i, f) for i, f in r.changed.items() if any(x.startswith("blacklist") for x in f))
            t = time.perf_counter()
            assert s.last_change(inst, next(x for x in fields if x.startswith("blacklist"))).ok
            cs.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert s.step_back().ok
            ns.append(time.perf_counter() - t)
        return cs, ns
    finally:
        restore_points.SAVE_EVERY = saved


KEYS = {"n": "step_over", "s": "step_into", "N": "step_back"}


def measure_keys(run: Path, rounds: int, seed: int) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Seconds and step plans computed per key press, for n, s and N after random jumps."""
    from tt.replay import session as session_module
    from tt.tui.model import Model

    s = session_module.DebugSession(run)
    model = Model(s)
    plans = [0]
    try:   # count the plans computed (since issue 12 the planner caches them per position)
        from tt.replay.stepping import Planner
        owner, name = Planner, "_make"
    except ImportError:
        owner, name = session_module.DebugSession, "_plan"
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        plans[0] += 1
        return original(*args, **kwargs)
    setattr(owner, name, counted)
    rng = random.Random(seed)
    ks = [i.k for i in s.interactions()]
    times: dict[str, list[float]] = {k: [] for k in KEYS}
    made: dict[str, list[int]] = {k: [] for k in KEYS}
    try:
        for _ in range(rounds):
            s.jump(rng.choice(ks))
            model.select(None, None)
            for key, action in KEYS.items():
                ref = model.shown.default
                if ref is None and key != "N":
                    continue
                step = getattr(s, action)
                plans[0] = 0
                t = time.perf_counter()
                shown = model.act(lambda s_: step() if key == "N" else step(ref), None, None)
                if shown.result is not None and shown.result.ok:
                    times[key].append(time.perf_counter() - t)
                    made[key].append(plans[0])
    finally:
        setattr(owner, name, original)
    return times, made


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    from tt.replay import checkpoints as ck
    from tt.store.reader import RunReader

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--tau", type=float, default=1.0)
    ap.add_argument("--c-reps", type=int, default=3, help="repetitions of the c-then-C session")
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "tt-bench-steps"))
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    base = work / f"fraud-{args.rows}.db"
    if not base.exists():
        record(base, args.rows)
    reader = RunReader(base)
    theta = reader.theta
    tuples = sum(reader.final(theta.id, i).position - 1 for i in range(theta.instances))
    print(f"{base}: {tuples:,} tuples into θ = {theta.name}, {len(reader.interactions())} interactions")
    plain = base.parent / "plain.db"
    plain.write_bytes(base.read_bytes())
    planned = base.parent / "planned.db"
    planned.write_bytes(base.read_bytes())
    prof = ck.profile(RunReader(planned))
    plan = ck.choose(prof, "offline", args.tau)
    ck.take(planned, prof, plan)
    print(f"offline plan for τ = {args.tau:g}s: checkpoints at {sorted(plan.checkpoints)}")
    print(f"\n{'step':24} {'no checkpoints':>26} {'with checkpoints':>26}")
    print(f"{'':24} {'p50 ms':>8} {'p99 ms':>8} {'n':>8} {'p50 ms':>8} {'p99 ms':>8} {'n':>8}")
    results = {name: measure(run, args.rounds, seed=1) for name, run in (("plain", plain), ("planned", planned))}
    worst = 0.0
    for a in ACTIONS:
        cells = []
        for name in ("plain", "planned"):
            xs = results[name][a]
            if xs:
                cells += [f"{1e3 * pct(xs, 0.5):8.1f}", f"{1e3 * pct(xs, 0.99):8.1f}", f"{len(xs):8d}"]
                worst = max(worst, pct(xs, 0.99))
            else:
                cells += [f"{'-':>8}"] * 3
        print(f"{a:24} " + " ".join(cells))
    print(f"\nworst p99: {1e3 * worst:.1f} ms (target ≤ 50 ms)")

    print("\nkey presses as the debugger takes them (the step and what the screen shows after it), no checkpoints:")
    print(f"{'key':24} {'p50 ms':>8} {'p99 ms':>8} {'n':>8} {'plans per key':>14}")
    times, made = measure_keys(plain, args.rounds, seed=2)
    for key, action in KEYS.items():
        xs = times[key]
        if xs:
            print(f"{key + ' (' + action + ')':24} {1e3 * pct(xs, 0.5):8.1f} {1e3 * pct(xs, 0.99):8.1f} {len(xs):8d} "
                  f"{statistics.mean(made[key]):14.1f}")

    print("\nC after a long run until (from interaction 0, c 'Bob' in FD.blacklist, then C on that field):")
    print(f"{'variant':44} {'C median ms':>12} {'C max ms':>10} {'N median ms':>12}")
    from tt.replay.restore_points import SAVE_EVERY
    rows = {}
    for name, every in ((f"restore points every {SAVE_EVERY:g} s of replay", SAVE_EVERY),
                        ("no restore points along the way (before)", float("inf"))):
        cs, ns = measure_last_change(plain, args.c_reps, every)
        rows[name] = statistics.median(cs)
        print(f"{name:44} {1e3 * statistics.median(cs):12.1f} {1e3 * max(cs):10.1f} {1e3 * statistics.median(ns):12.1f}")
    new, old = rows.values()
    print(f"C is {old / new:.0f}x faster with restore points along the way")


if __name__ == "__main__":
    main()

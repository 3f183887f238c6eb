"""Two variants of one job at the same moment, each on a core of its own.

On this VM the same work runs 8–12 s on a quiet day and 20–26 s on a slow one, and drifts
within a run by more than the few percent a recording costs: a bench that times its variants
one after the other measures the drift as much as the variants (2026-12-07-tws-overhead.md:
repetitions of one run from ×0.96 to ×1.18). Here two runner processes, each pinned to one core
with everything it starts (its JVM and Python workers inherit the affinity), run the job
together, one as variant A and the other as B, and swap in the next repetition: each
repetition's ratio is of two runs that met the same machine at the same time, and neither core
favours a variant. What it costs: each variant has one core (Spark `local[1]`), and the two share
the memory bandwidth and the last-level cache. What it gave the keyed TWS bench on its first
evening (2026-12-07-tws-overhead.md): ratios from ×0.985 to ×1.198, each pair's workers' CPU
following its wall time: the two cores ran the same work at different speeds at the same
moment, so pairing takes out the drift but not this spread. `same_core` takes it out too: both
variants of a pair share one core, a pair on each core, and a pair's CPU times are compared.

A bench serves runs with `serve(run)`: its runner reads one JSON request a line on stdin and
answers with one line, `RESULT` and the answer's JSON, on stdout (other lines, a job's prints,
are skipped).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Callable

RESULT = "@@tt-bench-result "


def serve(run: Callable[..., dict]) -> None:
    """The runner's loop: each request's fields are `run`'s keyword arguments; what it returns
    (or the error it raised, as `{"error": ...}`) goes back on one line."""
    for line in sys.stdin:
        try:
            answer = run(**json.loads(line))
        except BaseException as e:   # the parent says it and stops both runners
            answer = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(RESULT + json.dumps(answer) + "\n")
        sys.stdout.flush()


class Runner:
    """A runner process pinned to `core`."""

    def __init__(self, argv: list[str], core: int):
        self.core = core
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     preexec_fn=lambda: os.sched_setaffinity(0, {core}))

    def start(self, **request) -> None:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def result(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(RESULT):
                answer = json.loads(line[len(RESULT):])
                if "error" in answer:
                    raise SystemExit(f"the runner on core {self.core}: {answer['error']}")
                return answer
        raise SystemExit(f"the runner on core {self.core} ended (exit {self.proc.wait()}) before answering")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def cores() -> tuple[int, int]:
    """The first two cores this process may run on."""
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        raise SystemExit("side by side needs two cores")
    return mine[0], mine[1]


def run_pairs(argv: list[str], variants: tuple[str, str], reps: int, request: Callable[[str, int], dict],
              on_pair: Callable[[int, dict, dict], None] = lambda rep, a, b: None,
              same_core: bool = False) -> list[tuple[dict, dict]]:
    """`reps` repetitions of variants (A, B) at once, A on the first core in even repetitions and
    on the second in odd ones, after a warm-up pair each way round (outside the figures: the
    JVM's compiled code and the workers' imports then serve every measured run alike).
    `request(variant, rep)` is what a runner is asked (rep -1, -2: the warm-ups); returns each
    repetition's (A's answer, B's answer).

    `same_core`: both variants of a pair share one core (A on the core's first runner in even
    repetitions, on its second in odd ones), which the kernel hands to each in
    turn every few milliseconds, so that they meet the same speed of the same core at the same
    moments; each core runs a pair (four runners), so a repetition gives two pairs. A variant's
    wall time is then not its own (the core is shared), but its CPU time is: on a core of its
    own a run's CPU time is its wall time (the keyed TWS job's wall time was 1.003 to 1.025 times
    its CPU time in 19 of 20 runs side by side on 2026-12-08, 1.057 in one), the core never
    idle while the driver, the JVM or the Python worker has work."""
    first, second = cores()
    slots = [(first, first), (second, second)] if same_core else [(first, second)]
    runners = [(Runner(argv, core_a), Runner(argv, core_b)) for core_a, core_b in slots]
    a, b = variants
    try:
        pairs = []
        for rep in (-2, -1, *range(reps)):
            swapped = rep % 2 != 0
            for one, other in runners:
                one.start(**request(b if swapped else a, rep))
                other.start(**request(a if swapped else b, rep))
            for one, other in runners:
                got = [one.result(), other.result()]
                got_a, got_b = got[::-1] if swapped else got
                if rep >= 0:
                    pairs.append((got_a, got_b))
                    on_pair(rep, got_a, got_b)
        return pairs
    finally:
        for pair in runners:
            for runner in pair:
                runner.close()

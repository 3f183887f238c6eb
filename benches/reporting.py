"""What the benches share to report: how sure a ratio is, and a results file that keeps the day's runs;
and tt's modules compiled before a bench starts processes (`bytecode_cached`), its input in the page
cache before each run (`page_in`).

On this project's 2-core machine one repetition of a job differs from the next by ±10–20 %,
so a goal of ×1.02 cannot be read off a median of five. `paired_interval` gives, beside the
median of the per-repetition ratios (each repetition runs the compared variants side by side),
a bootstrap interval for it, and `verdict` says whether the goal is met, missed, or whether
these repetitions cannot tell. `write_result` writes `benches/results/DATE-NAME.md` and keeps,
below the new run, whatever that file held from the same day's earlier runs; a smoke run
writes elsewhere with `TT_BENCH_RESULTS=DIR` (a `git checkout` of a smoke run's file once took
a day's measured runs with it).
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
EARLIER = "## Earlier the same day"


def bytecode_cached() -> None:
    """Compile tt's modules into their `__pycache__`, as installing a package does: a new
    process (a Python worker, a `tt` command) then reads them as a user's would. Where
    `PYTHONDONTWRITEBYTECODE` is set (as on this project's machine) and a module changed since
    its `.pyc`, every process compiles it from source again. On 2026-12-02 that was 29 % of what
    recording added to the workers' instructions on tws_overhead.py's keyed job (200,000 rows:
    +1.362 G with six of tt's modules stale, +0.970 G compiled), charged to recording alone:
    recording off runs no tt code in those workers. `compileall` writes the files whatever
    that variable says."""
    import compileall
    import re

    compileall.compile_dir(str(ROOT), quiet=1, rx=re.compile(r"[/\\](\.venv|benches|tests|sample_runs)[/\\]"))


def page_in(paths) -> int:
    """Read every byte of the files at `paths` (a directory: the files under it), so that the run
    after this call finds them in the page cache: the bytes read.

    This project's machine pages out what it has not seen used for about a minute (the kernel's
    DAMON, scheme `pageout`: a region with at most one access in each 5 s it samples, twelve
    samples in a row), and a bench reads its input once a run, ten seconds apart: often enough
    to be read, not to be seen used. A run then found some of its input paged out, at random, and
    read it from the disk: TPC-H SF1's lineitem file, 232 MB, in 1.29 s where the page cache
    gives it in 0.04 s, within a W2 run of about 10 s. Called outside the time a bench takes. It
    takes away that cause and not the spread: on 2026-12-02 the CPU time of twelve identical W2
    recordings still ran from 15.2 to 25.2 s, the machine's own speed varying."""
    total = 0
    for path in paths:
        path = Path(path)
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.is_file():
                with open(f, "rb", buffering=0) as fh:
                    while chunk := fh.read(8 << 20):
                        total += len(chunk)
    return total


def paired_interval(ratios: list[float], level: float = 0.95, draws: int = 10_000,
                    seed: int = 1) -> tuple[float, float, float]:
    """(median, low, high): the median of the per-repetition ratios and a percentile-bootstrap
    interval for it at `level` (repetitions drawn with replacement, `draws` times, a fixed
    seed so that a report is reproducible from its figures)."""
    med = statistics.median(ratios)
    if len(ratios) < 2:
        return med, med, med
    rng = random.Random(seed)
    n = len(ratios)
    meds = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(draws))
    cut = (1 - level) / 2
    return med, meds[int(cut * draws)], meds[min(draws - 1, int((1 - cut) * draws))]


def verdict(low: float, high: float, goal: float) -> str:
    """`met` when the whole interval is within the goal, `not met` when it is all above it, else
    `cannot tell`."""
    if high <= goal:
        return "met"
    if low > goal:
        return "not met"
    return "cannot tell"


#: Repetitions below which a bench names no verdict: the bootstrap interval of one or two
#: ratios is the ratios themselves (a `--reps 1` run said "met" of one lucky repetition).
FEWEST_FOR_VERDICT = 3


def interval_text(ratios: list[float], goal: float | None = None) -> str:
    """`×1.042 (95 % interval 0.981–1.102; goal ×1.02: cannot tell)` of per-repetition ratios."""
    med, low, high = paired_interval(ratios)
    text = f"×{med:.3f} (95 % interval {low:.3f}–{high:.3f}"
    if goal is None:
        return text + ")"
    told = (verdict(low, high, goal) if len(ratios) >= FEWEST_FOR_VERDICT
            else f"cannot tell from {len(ratios)} repetition{'s' if len(ratios) != 1 else ''}")
    return text + f"; goal ×{goal:g}: {told})"


def revision() -> str:
    """The commit the bench ran on (`+` if its code had changes: not counting docs and results)."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)*.md"], cwd=here.parent, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+" if dirty else "")


def write_result(name: str, title: str, body: str, today: str) -> Path:
    """Write `results/TODAY-NAME.md`: `# TITLE (TODAY)`, then `body`; a file of the same name
    from an earlier run that day goes below it, under `## Earlier the same day (REV)`, its
    own earlier runs after it, so that no run of the day is lost. `TT_BENCH_RESULTS`: the
    folder to write in instead (a smoke run's)."""
    folder = Path(os.environ.get("TT_BENCH_RESULTS") or RESULTS)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{today}-{name}.md"
    text = f"# {title} ({today})\n\n{body.rstrip()}\n\nRun on {revision()}.\n"
    if out.exists():
        before = out.read_text()
        head, _, rest = before.partition("\n")
        if head.startswith("# "):   # its title goes: the new run's stands for the day
            text += f"\n{EARLIER} ({_run_on(rest)})\n\n" + rest.lstrip("\n")
        else:
            text += f"\n{EARLIER}\n\n{before}"
    out.write_text(text)
    return out


def _run_on(text: str) -> str:
    """The commit an earlier run names (`Run on REV`), before its own earlier runs."""
    own = text.split(f"\n{EARLIER}", 1)[0]
    for line in own.splitlines():
        if line.startswith("Run on "):
            return line[len("Run on "):].split()[0].rstrip(".,:;")
    return "an earlier run"

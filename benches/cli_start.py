"""How long a `tt` command takes as a user types it, with the typer that tt installs and with
typer 0.29 (which parses every option through pydantic), side by side.

Each repetition runs every command once with each typer, alternating which goes first, in a
new process (`python -m tt …`, the interpreter's start included), output discarded. Typer
0.29 is installed by this bench into a folder of its own (`pip install --target`) that goes
first on PYTHONPATH; the installed one is whatever `pip install -e .` resolved
(pyproject.toml pins `typer<0.29`). Both print the same, checked on every command but
`--help` (0.29 adds `<bool>` after flags).

    python benches/cli_start.py RUN [--reps 9] [--lineage "rev --where 'row[0] == 57040' --back"]

RUN is any run file; `--lineage` adds a `tt lineage RUN …` query (its arguments after RUN).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reporting import bytecode_cached, interval_text, write_result   # noqa: E402  (benches/reporting.py)

os.environ.setdefault("TT_KEY_FILE", str(Path(tempfile.gettempdir()) / "tt-bench-key"))
NEWER = "typer>=0.29,<0.30"


def newer_typer(cache: Path) -> Path:
    """A folder holding typer 0.29 and its dependencies, pydantic among them."""
    target = cache / "typer-0.29"
    if not (target / "typer").is_dir():
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), NEWER],
                              capture_output=True, text=True)   # (pip warns that tt pins typer<0.29)
        if not (target / "typer").is_dir():
            raise SystemExit(f"could not install {NEWER}: {done.stderr.strip()[-300:]}")
    return target


def timed(argv: list[str], pythonpath: str | None) -> tuple[float, str]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    else:
        env.pop("PYTHONPATH", None)
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tt", *argv], env=env, capture_output=True, text=True)
    took = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"tt {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return took, done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--lineage", default=None, help="a tt lineage query's arguments after RUN")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "tt-bench")
    args = ap.parse_args()
    bytecode_cached()   # each command reads tt's modules compiled, as from an installed package
    args.cache.mkdir(parents=True, exist_ok=True)
    newer = str(newer_typer(args.cache))
    installed = subprocess.run([sys.executable, "-c", "import typer; print(typer.__version__)"],
                               capture_output=True, text=True, check=True).stdout.strip()
    commands = {"tt --help": ["--help"],
                "tt inspect RUN interactions": ["inspect", str(args.run), "interactions"]}
    if args.lineage:
        commands[f"tt lineage RUN {args.lineage}"] = ["lineage", str(args.run), *shlex.split(args.lineage)]
    variants = {f"typer {installed}": None, "typer 0.29": newer}
    for argv in commands.values():   # once each, outside the figures: files in the page cache, bytecode written
        outs = {v: timed(argv, p)[1] for v, p in variants.items()}
        if argv != ["--help"] and len(set(outs.values())) != 1:
            raise SystemExit(f"tt {' '.join(argv)} printed differently with the two typers")
    times = {(c, v): [] for c in commands for v in variants}
    for rep in range(args.reps):
        order = list(variants.items()) if rep % 2 == 0 else list(reversed(variants.items()))
        for c, argv in commands.items():
            for v, p in order:
                times[(c, v)].append(timed(argv, p)[0])
    old, new = list(variants)
    lines = [f"{args.reps} repetitions, each command once with each typer (alternating which first), "
             f"in a new process; Python {sys.version.split()[0]}, {os.cpu_count()} cores; run file "
             f"{args.run.name}, {args.run.stat().st_size / 1e6:.1f} MB.", "",
             f"| command | {old} median s | {new} median s | {old} × {new}, each repetition's own |",
             "|---|---:|---:|---:|"]
    for c in commands:
        a, b = times[(c, old)], times[(c, new)]
        lines.append(f"| `{c}` | {statistics.median(a):.3f} | {statistics.median(b):.3f} | "
                     f"{interval_text([x / y for x, y in zip(a, b)])} |")
    command = "python benches/cli_start.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    body = f"    {command}\n\n" + "\n".join(lines)
    print("\n".join(lines))
    out = write_result("cli-start", "tt's commands as typed, by typer version", body, datetime.date.today().isoformat())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

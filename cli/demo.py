"""`tt demo`: record the fraud-detection sample on local Spark, then show it."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ..core.errors import UsageError
from .main import app, debugging

SAMPLES = Path(__file__).resolve().parent.parent / "sample_runs"


@app.command()
def demo(
    out: Path = typer.Option(Path("fraud.db"), "-o", "--out", help="Where to write the run file."),
    rows: int = typer.Option(200_000, "--rows", help="Payments to generate."),
    show: bool = typer.Option(True, "--show/--no-show", help="Open the result (the debugger on a terminal)."),
):
    """Record IcedTea's fraud-detection example on local Spark, then open it.

    The sample's bug: a ¥5,000 payment read as $5,000 gets Bob blacklisted. The
    recording watches FE, takes an interaction every second and one right after
    the ¥ payment.
    """
    from ..recorder.job import record_job

    job = SAMPLES / "fraud" / "job.py"
    if not job.exists():
        raise UsageError("the demo needs tt's source checkout (sample_runs/ is not installed with the package)")
    print(f"tt demo: recording {job.relative_to(SAMPLES.parent)} on local Spark into {out} …", file=sys.stderr)
    log = Path(str(out) + ".log")
    outcome = record_job(job, ["--rows", str(rows)], out, watch="FE", every=1.0,
                         when="row['amount'].startswith('¥')", force=True, debug=debugging(), spark_log=log)
    if outcome.status != "complete":
        raise UsageError(f"the demo recording failed: {outcome.error} (Spark's output is in {log})")
    if not show:
        return 0
    return _show(out)


def _show(out: Path) -> int:
    """On a terminal, open the debugger on the new run; otherwise print what it holds."""
    if sys.stdin.isatty() and sys.stdout.isatty():
        from ..tui.app import DebuggerApp

        DebuggerApp(out).run()
        print(f"debug it again with: tt debug {out}")
        return 0
    from ..replay import facts
    from ..store.reader import RunReader
    from .inspect import _count_tuples, _interactions_text, _summary_text, interaction_rows

    reader = RunReader(out)
    try:
        summary = facts.summary(reader)
        _count_tuples(reader, summary)   # tuples, as `tt inspect` counts them (not the end-of-input step)
        print(_summary_text(summary))
        print()
        print(_interactions_text(interaction_rows(reader)))
    finally:
        reader.close()
    print(f"\nnext: tt debug {out}   ·   tt inspect {out} state --at K --op FD   ·   tt verify {out}")
    return 0

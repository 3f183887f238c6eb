"""`tt record`: run a PySpark job on Spark and record it into a run file."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Optional

import typer

from ..core.errors import UsageError
from ..recorder.triggers import parse_duration
from .main import app, debugging
from .output import human_bytes


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def record(
    ctx: typer.Context,
    job: Path = typer.Argument(..., help="The PySpark job: a Python file that runs a tt.Dataflow, or a plain "
                               "PySpark job, recorded unchanged: the Python functions it hands Spark "
                               "(mapPartitions, mapInPandas, applyInPandas, iterator UDFs, UDTFs, StatefulProcessors, "
                               "…: docs/HOOKS.md) are its operators."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Run file to write [default: JOB name + .db]."),
    watch: Optional[str] = typer.Option(None, "--watch", "-w", metavar="OP",
                                        help="The interesting operator θ [default: the first stateful one; "
                                             "in a plain PySpark job, the first function it hands Spark]."),
    every: Optional[str] = typer.Option(None, "--every", metavar="DURATION",
                                        help="Take an interaction periodically, e.g. 1s, 500ms, 2m."),
    when: Optional[str] = typer.Option(None, "--when", metavar="EXPR",
                                       help="Take an interaction after each θ input where EXPR holds, "
                                            "e.g. \"row['amount'] > 1000\" (a tt.Dataflow row); a hooked "
                                            "function's input is its unit: a DataFrame, a key's step "
                                            "(docs/HOOKS.md). An input it raises on counts as false; "
                                            "raising on every one fails the record (the run is kept)."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL [default: the job's; where "
                                         "it sets none, local[2,4] for tt.spark_session and PySpark's local[*] "
                                         "for a SparkSession builder, as with python job.py]."),
    checkpoint: Optional[str] = typer.Option(None, "--checkpoint", metavar="online",
                                             help="Checkpoint while recording (online policy); needs --tau. "
                                                  "Without it, nothing is checkpointed during the run: "
                                                  "run `tt checkpoint RUN --tau ...` afterwards."),
    tau: Optional[str] = typer.Option(None, "--tau", metavar="DURATION",
                                      help="The longest a jump may take, e.g. 2s (with --checkpoint online)."),
    copy_sources: bool = typer.Option(False, "--copy-sources", help="Copy the rows of Parquet sources into the "
                                      "run file instead of their file positions (as `tt pack` does afterwards): "
                                      "a bigger file that replays without the data files."),
    lineage: bool = typer.Option(False, "--lineage", help="Whole-job lineage: every operator outside G(θ) "
                                 "also logs which input each of its outputs came from (ids and counts, not "
                                 "rows), so `tt lineage` reaches the sources however far θ is from them."),
    tui: bool = typer.Option(False, "--tui", help="Open the debugger live while recording."),
    spark_log: bool = typer.Option(False, "--spark-log", help="Show Spark's own output instead of writing "
                                   "it to RUN.log."),
    force: bool = typer.Option(False, "--force", "-f", help="Overwrite the run file if it exists."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only errors."),
):
    """Run JOB on Spark and record it into a run file.

    Arguments after `--` go to the job. Interactions (tuple-consistent snapshots of
    θ and everything downstream) are taken --every DURATION, when --when EXPR holds
    on θ's input, when you press Enter (or send SIGUSR1), and at the end.

    Rows a source reads from Parquet files (a read, filters and a choice of
    columns, renamed or not; a table partitioned by directory too) are recorded
    by reference: their files and row positions, not the rows. Replaying needs
    the files where they were; `tt pack` copies the rows in.

    Example: tt record sample_runs/fraud/job.py --watch FE --every 1s -o fraud.db
    """
    from ..recorder.job import record_job

    every_s = parse_duration(every) if every else None
    if checkpoint not in (None, "online"):
        raise UsageError(f"--checkpoint takes `online` (offline plans: `tt checkpoint RUN --tau ...`), not {checkpoint!r}")
    if (checkpoint is None) != (tau is None):
        raise UsageError("--checkpoint online and --tau go together")
    tau_s = parse_duration(tau) if tau else None
    out = out or Path(job.stem + ".db")
    if tui:
        from ..tui.live import record_with_tui

        from ..recorder.job import record_job as recorder

        rc = record_with_tui(job, list(ctx.args), out, watch=watch, every=every_s, when=when,
                             master=master, force=force, recorder=recorder, checkpoint_tau=tau_s,
                             copy_sources=copy_sources, lineage=lineage)
        if rc == 0:
            warning = incomplete_warning(out)
            if warning:
                print(f"tt: warning: {warning}", file=sys.stderr)
            if not quiet:
                _summary(out)
            return _said_when(out)
        return rc
    status = _Status(enabled=not quiet and sys.stderr.isatty())
    sessions = []
    log = None if spark_log else Path(str(out) + ".log")
    outcome = record_job(job, list(ctx.args), out, watch=watch, every=every_s, when=when, master=master,
                         checkpoint_tau=tau_s, force=force, on_event=status.event, on_session=sessions.append,
                         debug=debugging(), spark_log=log, copy_sources=copy_sources, lineage=lineage)
    status.stop()
    if outcome.status != "complete":
        if out.exists():
            status, hint = _kept(out, outcome.status)
            kept = f"{out} keeps what was recorded (status {status}){hint}"
        else:
            kept = "nothing recorded"
        where = f"; Spark's output is in {log}" if log is not None and log.exists() else ""
        print(f"tt: error: {outcome.error}; {kept}{where}", file=sys.stderr)
        return outcome.exit_code or 1
    warning = incomplete_warning(out)
    if warning:
        print(f"tt: warning: {warning}", file=sys.stderr)
    if not quiet:
        _summary(out)
    return _said_when(out)


def _said_when(out: Path) -> int:
    """The exit code of a complete run, after saying how `--when` fared: 1 where it raised on
    every input it was tested on (it held for none, so the run has no interaction of its)."""
    failure, warning = when_failure(out)
    if warning:
        print(f"tt: warning: {warning}", file=sys.stderr)
    if failure:
        print(f"tt: error: {failure}", file=sys.stderr)
        return 1
    return 0


def when_failure(out: Path) -> tuple[str | None, str | None]:
    """(an error, a warning) on a complete run's `--when` condition: an error where it raised
    on every one of θ's inputs it was tested on, a warning with the count where on some. The
    recording said the first exception as it came; only the end knows whether any input was
    tested without one."""
    from ..store.reader import RunReader

    reader = RunReader(out)
    try:
        counts = reader.when_counts()
        when = (reader.run.get("options") or {}).get("when")
        theta = reader.theta.name
    finally:
        reader.close()
    if counts is None or not counts[1]:
        return None, None
    tested, raised = counts
    if raised >= tested:
        return (f"--when {when!r} raised on every one of {theta}'s {tested:,} inputs, so it held for none and took "
                f"no interaction: the warning above says its first exception. {out} is kept, with the interactions "
                f"its start and end took; fix the condition and record again, or search the run with "
                f"`tt replay {out} --run-until EXPR` (`c` in tt debug)"), None
    return None, (f"--when {when!r} raised on {raised:,} of {theta}'s {tested:,} inputs, which count as false "
                  f"for it (the warning above says the first exception)")


def incomplete_warning(out: Path) -> str | None:
    """After a complete run: say so if some interactions never became complete (an
    instance in G(θ) has no known state there), since they cannot be jumped to."""
    from ..store.reader import RunReader

    reader = RunReader(out)
    try:
        if reader.status != "complete":
            return None
        missing = [i.k for i in reader.interactions_all if reader.instances_at(i.k) is None]
        total = len(reader.interactions_all)
    finally:
        reader.close()
    if not missing:
        return None
    shown = ", ".join(map(str, missing[:10])) + (", …" if len(missing) > 10 else "")
    return (f"{len(missing)} of {total} interactions stayed incomplete (k = {shown}): some instance in G(θ) "
            f"has no state there, so they cannot be jumped to or verified; this is a bug in tt, please report it")


def _kept(out: Path, said: str) -> tuple[str, str]:
    """A failed run's file as a reader will see it: its status (`said` where the file cannot tell:
    a run whose status could not be written says `incomplete`), and, where an operator in G(θ)
    raised on a tuple the run keeps, what opens the debugger there."""
    from ..store.reader import RunReader

    try:
        reader = RunReader(out)
    except Exception:
        return said, ""
    try:
        status = reader.status
        steppable = any(f["visible"] and f["in_g"] for f in reader.failures())
    except Exception:
        return said, ""
    finally:
        reader.close()
    return status, f"; `tt debug {out}` opens just before the tuple it raised on" if steppable else ""


class _Status:
    """A one-line live status on stderr, and Enter-to-interact when stdin is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.interactions = 0
        self.tasks = 0
        self.started = time.monotonic()
        self.coordinator = None
        self._stop = threading.Event()
        if enabled:
            threading.Thread(target=self._draw, daemon=True).start()

    def event(self, kind: str, info: dict) -> None:
        if kind == "interaction":
            self.interactions = info["k"]
        elif kind == "task":
            self.tasks += 1
        elif kind == "begin":
            if self.enabled:
                print(f"tt: recording; θ = {info['theta']}. Press Enter to take an interaction.",
                      file=sys.stderr)
                self._start_keys()
        elif kind == "warning":
            if self.enabled:
                sys.stderr.write("\r\x1b[2K")
            print(f"tt: warning: {info['message']}", file=sys.stderr)
        elif kind == "failure":
            pass  # reported once, at the end

    def _start_keys(self) -> None:
        from ..recorder.session import active

        session = active()
        if session is None or not sys.stdin.isatty():
            return
        self.coordinator = session.coordinator

        def read():
            for _ in sys.stdin:
                if self._stop.is_set():
                    return
                self.coordinator.interaction("user", {"via": "keyboard"})
        threading.Thread(target=read, daemon=True).start()

    def _draw(self) -> None:
        while not self._stop.wait(0.5):
            t = time.monotonic() - self.started
            sys.stderr.write(f"\r\x1b[2Ktt: {t:5.0f}s · {self.interactions} interactions · "
                             f"{self.tasks} tasks done")
            sys.stderr.flush()

    def stop(self) -> None:
        self._stop.set()
        if self.enabled:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


def _summary(out: Path) -> None:
    from ..store.reader import RunReader
    from .inspect import _end_steps, _tuples

    r = RunReader(out)
    try:
        complete = len(r.interactions())
        sizes = r.sizes()
        theta = r.theta
        ends = _end_steps(r)   # (an instance cut short by a `take` has no END step to leave out)
        inputs = sum(_tuples(ends, (theta.id, i), r.final(theta.id, i).position)[0] for i in range(theta.instances)
                     if r.final(theta.id, i) is not None)
        control = r.control_log_bytes()
        input_bytes = r.run.get("input_bytes")
        ratio = f" ({100 * control / input_bytes:.2f}% of the input)" if input_bytes else ""
        print(f"recorded {out}: {complete} interactions, {inputs:,} tuples into θ = {theta.name}, "
              f"file {human_bytes(sizes['file'])}, control log {human_bytes(control)}{ratio}")
        print(f"next: tt debug {out}   ·   tt inspect {out} interactions   ·   tt verify {out}")
    finally:
        r.close()

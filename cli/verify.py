"""`tt verify`: replay every interaction of a run and check it against the recording."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from .main import app
from .output import JSON, emit, require_dataflow, require_intact


@app.command()
def verify(
    run: Path = typer.Argument(..., help="A run file written by `tt record`."),
    trust: bool = typer.Option(False, "--trust", help="Allow replaying code from a run you did not record."),
    json: bool = JSON,
):
    """Replay every complete interaction locally and compare states with the recorded ones.

    Exits 0 when every replayed state equals the recorded one; otherwise names the
    first operator, instance, state field and input tuple that differ and exits 1.
    Also exits 1 when an interaction is incomplete for any other reason than the run
    having been cut off (only those after the last complete one may be). Needs no Spark.
    """
    from ..replay.verify import verify as run_verify
    from ..store.reader import RunReader

    reader = RunReader(run)
    try:
        require_intact(reader)
        require_dataflow(reader, "verify")
        progress = _progress(len(reader.interactions())) if sys.stderr.isatty() and not json else None
        try:
            results = run_verify(reader, trust=trust, progress=progress.update if progress else None)
        finally:
            if progress:
                progress.close()
        failed = sorted((r for r in results if not r["ok"]), key=lambda r: (bool(r.get("checkpoint")), r["k"]))
        checked = sum(1 for r in results if r["ok"] and not r.get("checkpoint"))
        via_checkpoints = sum(1 for r in results if r["ok"] and r.get("checkpoint"))
        recorded = len(reader.interactions_all)
        status = reader.status
        data = {"file": str(run), "status": status, "checked": checked, "recorded": recorded, "ok": not failed,
                "divergence": failed[0] if failed else None, "results": results}
        done = f"verified {checked} of {recorded} interactions"
        if failed:
            bad = failed[0]
            if bad.get("incomplete"):
                text = f"{run}: {done}, but {bad['error']}"
            else:
                text = f"{run}: {done}, then replay diverges at interaction {bad['k']}: {bad['error']}"
        else:
            cut = recorded - checked
            note = "" if status == "complete" and not cut else (
                f" (the run is {status}; " + (f"the {cut} interaction{'s' if cut != 1 else ''} after the last "
                                              f"complete one {'were' if cut != 1 else 'was'} cut off)" if cut
                                              else "every interaction was complete)"))
            via = f"; again from the checkpoints for {via_checkpoints}" if via_checkpoints else ""
            text = f"{run}: {done}{via} — every replayed state equals the recorded one{note}"
        emit(data, json=json, text=text)
        return 1 if failed else 0
    finally:
        reader.close()


class _progress:
    def __init__(self, total: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.p = Progress(TextColumn("verifying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          transient=True, redirect_stdout=False)
        self.task = self.p.add_task("verify", total=total)
        self.p.start()

    def update(self, done: int, total: int) -> None:
        self.p.update(self.task, completed=done, total=total)

    def close(self) -> None:
        self.p.stop()

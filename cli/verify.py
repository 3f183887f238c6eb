"""`tt verify`: replay every interaction of a run and check it against the recording."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from .main import app
from .output import JSON, emit


@app.command()
def verify(
    run: Path = typer.Argument(..., help="A run file written by `tt record`."),
    trust: bool = typer.Option(False, "--trust", help="Allow replaying code from a run you did not record."),
    json: bool = JSON,
):
    """Replay every complete interaction locally and compare states with the recorded ones.

    Exits 0 when every replayed state equals the recorded one; otherwise names the
    first operator, instance and state field that differ and exits 1. Needs no Spark.
    """
    from ..replay.engine import verify as run_verify
    from ..store.reader import RunReader

    reader = RunReader(run)
    try:
        progress = _progress(len(reader.interactions())) if sys.stderr.isatty() and not json else None
        try:
            results = run_verify(reader, trust=trust, progress=progress.update if progress else None)
        finally:
            if progress:
                progress.close()
        failed = [r for r in results if not r["ok"]]
        checked = sum(1 for r in results if r["ok"] and not r.get("checkpoint"))
        via_checkpoints = sum(1 for r in results if r["ok"] and r.get("checkpoint"))
        status = reader.status
        data = {"file": str(run), "status": status, "checked": checked, "ok": not failed,
                "divergence": failed[0] if failed else None, "results": results}
        if failed:
            text = f"{run}: replay diverges at interaction {failed[0]['k']}: {failed[0]['error']}"
        else:
            note = "" if status == "complete" else f" (the run is {status}; its complete interactions were checked)"
            via = f"; again from the checkpoints for {via_checkpoints}" if via_checkpoints else ""
            text = (f"{run}: verified {checked} interactions{via} — every replayed state equals the recorded one"
                    f"{note}")
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

"""`tt debug`: open the terminal debugger on a run file."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ..core.errors import RunFileError, UntrustedRunError, UsageError
from .main import app
from .output import require_dataflow


@app.command()
def debug(
    run: Path = typer.Argument(..., help="A run file written by `tt record` (it may still be recording)."),
    trust: bool = typer.Option(False, "--trust", help="Allow replaying code from a run you did not record."),
):
    """Open the terminal debugger: browse interactions and states, jump, step, search the logs.

    Keys: n s f step over/into/out, N S F step back, c run until, C last change,
    j jump, [ ] previous/next interaction, / search, ! the recording's warnings,
    ? help, q quit. Works over SSH in an 80×24 terminal; needs neither Spark nor
    Java. A run that `tt record` is still writing is followed live.
    """
    from ..core.code_pickle import require_python
    from ..store.reader import RunReader
    from ..store.trust import require_trust

    reader = RunReader(run)
    try:
        status = reader.status
        if status == "recording":
            try:
                ops = reader.operators
                reader.plan
            except RunFileError:
                ops = None  # a live run whose dataflow has not started: the debugger waits for it
        else:
            require_dataflow(reader, "debug")  # before the trust check: a run that never started has no code
            ops = reader.operators
        if ops:
            require_python(reader.python, reader.path)   # (the app would only find out at its first replay)
            try:
                require_trust(reader.path, reader.run.get("signature"), reader.signed_code(), trust)
            except UntrustedRunError as e:
                raise UntrustedRunError(f"{str(e).rstrip('.')}: tt debug {run} --trust") from None
    finally:
        reader.close()
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("tt debug needs a terminal; in scripts use `tt inspect` or `tt replay`")
    from ..tui.app import DebuggerApp

    tui = DebuggerApp(run, trust=trust)
    tui.run()
    # An exception the app did not handle ends it with its traceback printed and a non-zero return
    # code: the command must fail too, never exit 0 after a crash.
    if tui.return_code or getattr(tui, "_exception", None) is not None:
        print("tt debug: the debugger crashed (traceback above)", file=sys.stderr)
        return 1
    return 0

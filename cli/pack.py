"""`tt pack`: copy the rows a run reads from Parquet files into the run file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .main import app
from .output import JSON, bar, emit, human_bytes


@app.command()
def pack(
    run: Path = typer.Argument(..., help="A run file written by `tt record`."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write the packed run to this new file "
                                       "[default: pack RUN in place]."),
    json: bool = JSON,
):
    """Copy the rows RUN reads by reference from Parquet files into the run file.

    `tt record` stores a Parquet source's rows as positions in its files, so that
    the run file stays small; replaying then reads the files again. Run `tt pack`
    where those files are to make the run self-contained, e.g. before copying it
    to a laptop. Every file is checked first (size, modification time, footer):
    a file that changed stops the pack before anything is written.

    Examples:
      tt pack q1.db
      tt pack q1.db -o q1-packed.db
    """
    from ..store.pack import pack as pack_run

    show = sys.stderr.isatty() and not json
    result = pack_run(run, out, progress=bar("packing") if show else None)
    target = out or run
    size = target.stat().st_size
    result = {"file": str(target), **result, "bytes": size}
    if result["chunks"] == 0:
        text = f"{target}: nothing to pack; every row is already in the run file"
    else:
        text = (f"{target}: packed {result['rows']:,} rows from {result['files']} file"
                f"{'s' if result['files'] != 1 else ''}; the run file is {human_bytes(size)} and replays "
                f"without them")
    emit(result, json=json, text=text)
    return 0

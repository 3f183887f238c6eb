"""`tt pack`: copy the rows a run reads from Parquet files, and the large files its functions read, into the run file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .main import app
from .output import JSON, Progress, emit, human_bytes


@app.command()
def pack(
    run: Path = typer.Argument(..., help="A run file written by `tt record`."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write the packed run to this new file "
                                       "[default: pack RUN in place]."),
    json: bool = JSON,
):
    """Copy the rows RUN reads by reference from Parquet files into the run file.

    `tt record` stores a Parquet source's rows as positions in its files, so that
    the run file stays small; replaying then reads the files again. So too the files
    over 1 MiB that the job's functions read (a model, a lookup table): the run keeps
    their size and digest, not their bytes. Run `tt pack` where those files are to
    make the run self-contained, e.g. before copying it to a laptop. Every file is
    checked first (size, modification time, footer; a read file by its digest): a
    file that changed stops the pack before anything is written.

    Examples:
      tt pack q1.db
      tt pack q1.db -o q1-packed.db
    """
    from ..store.pack import pack as pack_run

    result = pack_run(run, out, progress=Progress("packing"))
    target = out or run
    size = target.stat().st_size
    result = {"file": str(target), **result, "bytes": size}
    n = result["files_read"]
    read = f"{n} file{'s' if n != 1 else ''} the job's functions read"
    if result["chunks"] == 0 and not n:
        text = f"{target}: nothing to pack; every row and file is already in the run file"
    else:
        what = " and ".join(([f"{result['rows']:,} rows from {result['files']} file"
                              f"{'s' if result['files'] != 1 else ''}"] if result["chunks"] else []) + ([read] if n else []))
        text = f"{target}: packed {what}; the run file is {human_bytes(size)} and replays without them"
    emit(result, json=json, text=text)
    return 0

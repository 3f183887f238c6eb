"""`tt migrate`: bring a run file written by an older tt up to this tt's format."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import typer

from ..core.errors import RunFileError
from .main import app
from .output import JSON, emit


@app.command()
def migrate(
    run: Path = typer.Argument(..., help="A run file written by an older `tt record`."),
    json: bool = JSON,
):
    """Upgrade a run file from an older format, in place, so that this tt can read it.

    Applies the schema migrations this tt knows, in order. A file already in the
    current format is left as it is. When no migration leads from the file's format
    to the current one, nothing is changed and the command says so (record the job
    again with this tt).
    """
    from ..store import schema

    before = _version(run)
    current = schema.SCHEMA_VERSION
    if before is not None and before > current:
        raise RunFileError(f"{run} was written by a newer tt (format {before}; this tt reads up to {current}); "
                           f"upgrade tt to open it")
    if before == current:
        emit({"file": str(run), "from": before, "to": current, "migrated": False}, json=json,
             text=f"{run}: already in the current format ({current}); nothing to do")
        return 0
    steps = sorted(v for v, _ in schema.MIGRATIONS if v > (before or 0))
    if steps != list(range((before or 0) + 1, current + 1)):   # each format's step, none missing
        raise RunFileError(f"{run} uses format {before}, and this tt has no migration from it to format {current}; "
                           f"record the job again with this tt (or open the file with the tt that recorded it)")
    conn = schema.open_existing(run, write=True)  # applies the migrations
    try:
        schema.settle(conn)
    finally:
        conn.close()
    after = _version(run)
    if after != current:
        raise RunFileError(f"{run}: migrating from format {before} stopped at format {after}, not {current}")
    emit({"file": str(run), "from": before, "to": after, "migrated": True}, json=json,
         text=f"{run}: migrated from format {before} to {after}")
    return 0


def _version(run: Path) -> int | None:
    """The file's format (SQLite's user_version), after the checks any reader makes."""
    from ..store import schema

    conn = None
    try:
        conn = schema.open_existing(run)
    except RunFileError as e:
        if "older format" not in str(e):
            raise
    finally:
        if conn is not None:
            conn.close()
    try:
        c = sqlite3.connect(f"file:{run}?mode=ro", uri=True)
        try:
            return c.execute("PRAGMA user_version").fetchone()[0]
        finally:
            c.close()
    except sqlite3.DatabaseError as e:
        raise RunFileError(f"{run} is damaged: {e}") from None

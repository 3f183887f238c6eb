"""Output formats shared by commands: a readable table/text, or `--json`, `--nl`, `--csv`."""

from __future__ import annotations

import csv
import io
import sys
from typing import Any, Iterable

import orjson
import typer

JSON = typer.Option(False, "--json", help="Print JSON (one document).")
NL = typer.Option(False, "--nl", help="Print newline-delimited JSON, one object per line.")
CSV = typer.Option(False, "--csv", help="Print CSV with a header row.")


def emit(data: Any, *, json: bool = False, nl: bool = False, csv_: bool = False,
         text: str | None = None, columns: list[str] | None = None) -> None:
    """Print `data` in the chosen format; `text` is the human-readable default."""
    out = sys.stdout
    if json:
        out.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")
    elif nl:
        rows = data if isinstance(data, list) else [data]
        for row in rows:
            out.write(orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
    elif csv_:
        rows = data if isinstance(data, list) else [data]
        cols = columns or (list(rows[0]) if rows else [])
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({k: _flat(v) for k, v in row.items()})
        out.write(buf.getvalue())
    else:
        out.write((text if text is not None else str(data)) + "\n")


def _flat(v: Any) -> Any:
    if isinstance(v, (dict, list)):
        return orjson.dumps(v).decode()
    return v


def table(rows: Iterable[list[Any]], header: list[str]) -> str:
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def only_one(**flags: bool) -> None:
    chosen = [k for k, v in flags.items() if v]
    if len(chosen) > 1:
        from .main import click_errors

        raise click_errors.UsageError(f"choose one output format, not {' and '.join('--' + c for c in chosen)}")

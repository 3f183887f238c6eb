"""Output formats shared by commands: a readable table/text, or `--json`, `--nl`, `--csv`."""

from __future__ import annotations

import csv
import io
import sys
import time
from pathlib import Path
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


# Text views print tuples whole up to this many characters; a longer one is cut and
# says so (`…[+N chars]`), and the view then says how to see it whole.
ROW_LIMIT = 400


def row_text(value: Any, limit: int | None = None) -> tuple[str, bool]:
    """An encoded value (a tuple, a state) on one line: (text, whether it was cut)."""
    from ..core.values import render

    limit = ROW_LIMIT if limit is None else limit
    text = render(value, 1 << 62)
    if len(text) <= limit:
        return text, False
    return f"{text[:limit]}…[+{len(text) - limit} chars]", True


def cut_hint(how: str) -> str:
    """The line that follows a text view in which `row_text` cut something."""
    return f"(a value ending in …[+N chars] is cut; {how} prints it whole)"


class Activity:
    """A spinner with the elapsed time on stderr, only when stderr is a terminal, for a
    long step whose own progress cannot be counted (`with Activity("replaying …"):`)."""

    def __init__(self, label: str):
        self.label = label
        self._progress = None

    def __enter__(self) -> "Activity":
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(SpinnerColumn(), TextColumn(self.label), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=True)
            self._progress.add_task(self.label, total=None)
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class Progress:
    """Progress of long work on stderr, as `update(done, total)`: a bar on a terminal;
    elsewhere (a log file, CI, `nohup`) a line every `line_every` seconds once the work has
    run that long, so a long run does not look hung and a short one prints nothing. The bar
    ends itself when done reaches total; `close()` ends it early (an error, a cancel)."""

    LINE_EVERY = 30.0

    def __init__(self, label: str, line_every: float | None = None):
        self.label = label
        self.started = time.monotonic()
        self.every = self.LINE_EVERY if line_every is None else line_every
        self.due = self.started + self.every
        self.said = False   # (off a terminal: whether a line was printed, so the end is said too)
        self.ended = False  # (and the end is said once)
        self._bar = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
            self._task = self._bar.add_task(label, total=None)
            self._bar.start()

    def __call__(self, done: int, total: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total)
            if done >= total:
                self.close()
            return
        if self.ended:
            return
        self.ended = done >= total
        now = time.monotonic()
        if now >= self.due or (self.said and self.ended):
            self.said = True
            self.due = now + self.every
            sys.stderr.write(f"tt: {self.label}: {done:,} of {total:,} ({_elapsed(now - self.started)})\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


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


def require_dataflow(reader, doing: str) -> None:
    """Refuse a run whose dataflow never started (the job was killed while Spark started,
    called sys.exit, or raised before `run()`), saying so before anything else: such a run
    holds no operators, so any later check (the code's signature, say) would mislead."""
    from ..core.errors import RunFileError

    try:
        reader.plan
        if reader.operators:
            return
    except RunFileError:
        pass
    status = reader.status
    if status == "recording":
        raise RunFileError(f"{reader.path} is still being recorded and its dataflow has not started yet; "
                           f"wait for it (or follow it with `tt debug {reader.path}`)")
    error = " ".join(str(reader.run.get("error") or "").split("\n")[0].split())
    why = f"the run is {status}" + (f": {error[:200]}" if error else "")
    raise RunFileError(f"{reader.path}: the dataflow never started ({why}); there is nothing to {doing}")


def require_intact(reader) -> None:
    """Refuse a damaged run file in one line: cut short (its header counts more pages than
    it holds) or with broken pages (SQLite's quick_check). Reading a damaged file may
    otherwise succeed for the pages a command happens to touch, and print half the truth."""
    import sqlite3

    from ..core.errors import RunFileError

    path = reader.path
    try:
        with open(path, "rb") as f:
            header = f.read(100)
        size = path.stat().st_size
        wal = Path(str(path) + "-wal")
        wal_bytes = wal.stat().st_size if wal.exists() else 0
    except OSError as e:
        raise RunFileError(f"{path} cannot be read: {e.strerror or e}") from None
    page = int.from_bytes(header[16:18], "big") if len(header) >= 18 else 0
    page = 65536 if page == 1 else page
    pages = int.from_bytes(header[28:32], "big") if len(header) >= 32 else 0
    counted = len(header) >= 96 and header[24:28] == header[92:96]  # the page count is valid
    if counted and page and pages and not wal_bytes and size < page * pages:
        raise RunFileError(f"{path} is damaged: it is cut short ({size} bytes; its header says "
                           f"{page * pages}); copy it again from where it was recorded")
    try:
        found = [r[0] for r in reader.conn.execute("PRAGMA quick_check(3)")]
    except sqlite3.DatabaseError as e:
        found = [str(e)]
    if found != ["ok"]:
        detail = " ".join(" ".join(found).replace("*** in database main ***", "").split())
        raise RunFileError(f"{path} is damaged: {detail[:200]} (SQLite's integrity check)")


def only_one(**flags: bool) -> None:
    chosen = [k for k, v in flags.items() if v]
    if len(chosen) > 1:
        from .main import click_errors

        raise click_errors.UsageError(f"choose one output format, not {' and '.join('--' + c for c in chosen)}")

"""One tuple, whole: every field on its own line, never cut off (Enter on a tuple; Esc returns).

At 80×24 a waiting tuple's row is a few dozen characters of a long line; the
evidence (`amount: '¥5000'`) is often past the edge. This screen shows the
tuple field by field, values wrapped rather than truncated. When the tuple has
been processed and its outputs are waiting downstream (after a step into), the
outputs stand beside the input, fields the operator added first. The log
browser uses it too, for a logged row (column by column).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

FULL = 100_000   # render limit: in practice, never cut


def _fields(row: Any) -> dict[str, Any] | None:
    """The row's fields, if it is a record (an encoded dict that is not a tagged value)."""
    if isinstance(row, dict) and not (len(row) == 1 and str(next(iter(row), "")).startswith("$")):
        return {str(k): v for k, v in row.items()}
    return None


def _show(value: Any) -> str:
    from ..core.values import render

    return render(value, FULL)


def tuple_table(row: Any, outputs: list[tuple[str, Any]] | None = None) -> tuple[Table, str]:
    """A table of the tuple's fields (and its outputs' beside them); also its plain text (tests)."""
    outputs = outputs or []
    table = Table(box=None, padding=(0, 2), show_header=bool(outputs), header_style="bold", expand=True)
    table.add_column("field", style="bold cyan", no_wrap=True)
    table.add_column("input" if outputs else "value", overflow="fold", ratio=1)
    for label, _ in outputs:
        table.add_column(f"output {label}", overflow="fold", ratio=1)
    lines: list[str] = []
    fields = _fields(row)
    out_fields = [_fields(o) for _, o in outputs]
    if fields is None and not any(f is not None for f in out_fields):
        cells = [_show(row)] + [_show(o) for _, o in outputs]
        table.add_row("value", *cells)
        lines.append("value: " + " | ".join(cells))
        return table, "\n".join(lines)
    fields = fields or {}
    added: list[str] = []   # fields an output has that the input has not: what the operator did, first
    for of in out_fields:
        for k in of or {}:
            if k not in fields and k not in added:
                added.append(k)
    for k in added + list(fields):
        new = k in added
        key = Text(k, style="bold yellow" if new else "bold cyan")
        cells = [Text("—", style="dim") if k not in fields else Text(_show(fields[k]))]
        for of in out_fields:
            if of is None or k not in of:
                cells.append(Text("—" if of is not None else "", style="dim"))
            else:
                changed = k not in fields or of[k] != fields[k]
                cells.append(Text(_show(of[k]), style="yellow" if changed else ""))
        table.add_row(key, *cells)
        lines.append(f"{k}: " + " | ".join(c.plain for c in cells))
    return table, "\n".join(lines)


class TupleScreen(ModalScreen[None]):
    """A tuple (or a logged row) in full; Escape, q or Enter closes it."""

    BINDINGS = [Binding("escape,q,enter", "close", "back", show=True)]

    DEFAULT_CSS = """
    TupleScreen { align: center middle; }
    TupleScreen > VerticalScroll {
        width: 96%; max-width: 160; height: auto; max-height: 90%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    TupleScreen #tuple-title { text-style: bold; }
    TupleScreen #tuple-note { color: $text-muted; }
    """

    def __init__(self, title: str, row: Any, outputs: list[tuple[str, Any]] | None = None, note: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.note = note
        self.table, self.text = tuple_table(row, outputs)

    @classmethod
    def from_cells(cls, title: str, columns: tuple[str, ...], cells: tuple[str, ...], note: str = "") -> TupleScreen:
        """A row of the log browser: one line per column (a last, unnamed column is the tuple)."""
        row: dict[str, Any] = {}
        for i, cell in enumerate(cells):
            name = columns[i] if i < len(columns) else ("tuple" if i == len(columns) else f"column {i + 1}")
            row[name] = {"$repr": cell}
        return cls(title, row, note=note)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="tuple-box"):
            yield Static(Text(self.title_text) if isinstance(self.title_text, str) else self.title_text, id="tuple-title")
            yield Static(self.table, id="tuple-fields")
            yield Static(Text(self.note or "Esc returns"), id="tuple-note")

    def action_close(self) -> None:
        self.dismiss(None)

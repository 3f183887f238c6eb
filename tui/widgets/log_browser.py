"""The raw logs of the run, browsable however large they are.

Choose a source (the interactions, an instance's Input log position by
position, its Output log with destinations, the tuples recorded where they
entered G(θ)), scroll it, search it (Enter finds the next match) or filter it
down to matching rows. Reading, searching and filtering happen in a
`LogLoader` thread over paged SQL queries; the rows are drawn by `LogLines`.
Esc leaves the search box (so 1…5 switch views again); Enter on a row shows it
whole. Rows are numbered from 0 everywhere, as the first column (a position,
a sequence number, an interaction) numbers them; a filter counts its matches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.containers import Horizontal, Vertical
from textual.widgets import Checkbox, Input, Select, Static

from ...replay import logview
from ..log_loader import LogLoader
from .log_lines import LogLines


class FilterBox(Checkbox):
    """The filter switch: ✓ when on, an empty box when off (the stock box shows X either way)."""

    @property
    def _button(self) -> Content:
        inner = "✓" if self.value else " "
        return Content.assemble("[", (inner, "bold green" if self.value else ""), "]")


class LogBrowser(Vertical):
    """Source picker, search box and filter switch above a virtual list of rows."""

    BINDINGS = [Binding("escape", "leave_search", "leave the search box", show=False)]

    DEFAULT_CSS = """
    LogBrowser > #log-bar { height: 1; }
    LogBrowser #log-source { width: 30; height: 1; }
    LogBrowser #log-source > SelectCurrent { height: 1; border: none; padding: 0 1; }
    LogBrowser #log-search { width: 1fr; height: 1; border: none; padding: 0 1; }
    LogBrowser #log-filter { width: auto; height: 1; border: none; padding: 0 1; }
    LogBrowser > #log-head { height: 1; color: $text-muted; text-style: bold; }
    LogBrowser > #log-status { height: 1; color: $text-muted; }
    """

    def __init__(self, path: str | Path, trust: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.loader = LogLoader(path, trust=trust, on_error=self._error_from_thread)
        self.source: logview.Source | None = None
        self.base: logview.Source | None = None
        self.key = "interactions"
        self.status_text = ""
        self._search_note = ""
        self._started = False

    def compose(self) -> ComposeResult:
        with Horizontal(id="log-bar"):
            yield Select([("interactions", "interactions")], value="interactions", allow_blank=False,
                         id="log-source", compact=True)
            yield Input(placeholder="/ search: Enter finds the next match", id="log-search", compact=True)
            yield FilterBox("filter", id="log-filter", compact=True)
        yield Static("", id="log-head")
        yield LogLines(self.loader, id="log-lines")
        yield Static("", id="log-status")

    @property
    def lines(self) -> LogLines:
        return self.query_one("#log-lines", LogLines)

    def start(self) -> None:
        """Start reading (called when the browser is first shown, so a hidden browser costs nothing)."""
        if self._started:
            return
        self._started = True
        self.loader.start()
        self._submit(lambda v: v.choices(), self._got_choices)
        self.open_source(self.key)

    def on_unmount(self) -> None:
        self.loader.stop()

    # --- thread plumbing --------------------------------------------------------------------------

    def _ui(self, fn: Callable, *args) -> None:
        try:
            self.app.call_from_thread(fn, *args)
        except Exception:  # the app is closing
            pass

    def _submit(self, fn: Callable[[logview.LogView], Any], done: Callable[[Any], None]) -> None:
        self.loader.submit(fn, lambda result: self._ui(done, result))

    def _error_from_thread(self, message: str) -> None:
        self._ui(self._status, f"error: {message}")

    # --- sources ----------------------------------------------------------------------------------

    def _got_choices(self, choices: list[tuple[str, str]]) -> None:
        select = self.query_one("#log-source", Select)
        with self.prevent(Select.Changed):
            select.set_options(choices)
            select.value = self.key

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if isinstance(event.value, str) and event.value != self.key:
            self.open_source(event.value)

    def open_source(self, key: str) -> None:
        self.key = key
        self.query_one("#log-filter", Checkbox).value = False
        self.loader.cancel_task()
        self._search_note = ""  # the previous source's search result means nothing here

        def load(view: logview.LogView):
            s = view.source(key)
            return s, len(s)
        self._submit(load, self._opened)

    def _opened(self, result) -> None:
        source, total = result
        self.base = self.source = source
        widths = source.widths
        head = Text(no_wrap=True)
        for i, col in enumerate(source.columns):
            if i < len(widths):
                head.append((col.rjust(widths[i]) if i == 0 else col.ljust(widths[i])) + " ")
            else:
                head.append(col)
        self.query_one("#log-head", Static).update(head)
        self.lines.set_source(source, total)
        self._status()

    def refresh_live(self) -> None:
        """A live recording wrote more: recount the current source."""
        if not self._started or self.base is None:
            return
        base, shown = self.base, self.source

        def recount(view: logview.LogView):
            view.refresh()
            return len(base)

        def done(total: int) -> None:
            if shown is base and self.source is base:
                self.lines.grow(total, reread=True)
                self._status()
        self._submit(recount, done)

    # --- search and filter -----------------------------------------------------------------------

    def focus_search(self) -> None:
        self.start()
        self.query_one("#log-search", Input).focus()

    def action_leave_search(self) -> None:
        """Esc in the search box: back to the rows; elsewhere Esc cancels a running action."""
        if isinstance(self.app.focused, Input):
            self.lines.focus()
        else:
            self.app.action_cancel()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.search(event.value)

    def search(self, text: str, step: int = 1) -> None:
        """Find the next row containing `text` (or, with the filter on, show only such rows)."""
        self.lines.set_needle(text)
        if self.query_one("#log-filter", Checkbox).value:
            self._apply_filter(text)
            return
        if self.source is None or not text:
            return
        start = self.lines.cursor + step if self._search_note.startswith("found") else self.lines.cursor
        self._search_note = f"searching {text!r}…"
        self._status()
        self.loader.search(self.source, text, start, step,
                           done=lambda row: self._ui(self._found, text, row),
                           progress=lambda done, total: self._ui(self._searching, text, done, total))

    def _searching(self, text: str, done: int, total: int) -> None:
        self._search_note = f"searching {text!r}… {done:,} rows"
        self._status()

    def _found(self, text: str, row: int | None) -> None:
        if row is None:
            self._search_note = f"{text!r}: no more matches"
        else:
            self._search_note = f"found {text!r} at row {row:,}"
            self.lines.go_to(row)
        self._status()

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        text = self.query_one("#log-search", Input).value
        if event.value and text:
            self._apply_filter(text)
        elif not event.value and self.base is not None and self.source is not self.base:
            self.loader.cancel_task()
            self.source = self.base
            self.lines.set_source(self.base, len(self.base))
            self._search_note = ""
            self._status()

    def _apply_filter(self, text: str) -> None:
        if self.base is None:
            return
        flt = logview.Filter(self.base, text)
        self.source = flt
        self.lines.set_source(flt, 0)
        self._search_note = f"filter {text!r}: scanning…"
        self._status()

        def progress(done: int, total: int) -> None:
            self._ui(self._filter_progress, flt, done, total)

        def finished() -> None:
            self._ui(self._filter_progress, flt, len(flt.base), len(flt.base))
        self.loader.scan(flt, progress, finished)

    def _filter_progress(self, flt: logview.Filter, done: int, total: int) -> None:
        if flt is not self.source:
            return
        self.lines.grow(len(flt))
        pct = 100 * done / total if total else 100
        state = "done" if flt.done or done >= total else f"scanning {pct:.0f}%"
        self._search_note = f"filter {flt.text!r}: {len(flt):,} matching rows ({state})"
        self._status()

    # --- status -----------------------------------------------------------------------------------

    def on_log_lines_cursor_moved(self, event: LogLines.CursorMoved) -> None:
        event.stop()
        self._status()

    def on_log_lines_row_chosen(self, event: LogLines.RowChosen) -> None:
        event.stop()
        from ..tuple_screen import TupleScreen

        title = self.source.title if self.source is not None else "log"
        self.app.push_screen(TupleScreen.from_cells(f"{title} · row {event.cells[0] if event.cells else event.row}", self.source.columns
                                                    if self.source is not None else (), event.cells))

    def selected_tuple(self) -> tuple | None:
        """The tuple of the row under the cursor (`logview.Source.tuple_at`), for `w`."""
        if self.source is None or not self.lines.total:
            return None
        return self.source.tuple_at(self.lines.cursor)

    def _status(self, extra: str | None = None) -> None:
        lines = self.lines
        title = self.source.title if self.source is not None else "…"
        if not lines.total:
            where = f"{title} · no rows"
        elif self.source is not None and self.source is not self.base:
            where = f"{title} · match {lines.cursor + 1:,} of {lines.total:,}"
        else:
            where = f"{title} · row {lines.cursor:,} (0…{lines.total - 1:,})"
        parts = [where]
        if self._search_note:
            parts.append(self._search_note)
        if extra:
            parts.append(extra)
        self.status_text = " · ".join(parts)
        self.query_one("#log-status", Static).update(Text(self.status_text, no_wrap=True, overflow="ellipsis"))

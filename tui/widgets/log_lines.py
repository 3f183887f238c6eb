"""A virtual list of log rows: draws only what is on screen, from pages read in the background.

In the manner of Textualize's toolong: one line-API widget, no widget per row.
Its height is the source's row count (millions are fine); `render_line` takes
the row from the source's page cache, or draws a placeholder and asks the
`LogLoader` thread for the page, repainting when it arrives. A cursor row can
be moved with the usual keys; search hits are highlighted.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.cache import LRUCache
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ...replay import logview
from ..log_loader import LogLoader


class LogLines(ScrollView, can_focus=True):
    """Rows of one log source, rendered on demand."""

    BINDINGS = [
        Binding("up", "cursor(-1)", "up", show=False),
        Binding("down", "cursor(1)", "down", show=False),
        Binding("pageup", "page(-1)", "page up", show=False),
        Binding("pagedown", "page(1)", "page down", show=False),
        Binding("home", "edge(0)", "first row", show=False),
        Binding("end", "edge(1)", "last row", show=False),
        Binding("enter", "choose", "show the whole row", show=False),
    ]

    DEFAULT_CSS = """
    LogLines { height: 1fr; overflow-x: auto; overflow-y: scroll; }
    """

    cursor: reactive[int] = reactive(0, always_update=True, repaint=False)

    class CursorMoved(Message):
        def __init__(self, row: int, total: int) -> None:
            super().__init__()
            self.row, self.total = row, total

    class RowChosen(Message):
        def __init__(self, row: int, cells: tuple[str, ...]) -> None:
            super().__init__()
            self.row, self.cells = row, cells

    def __init__(self, loader: LogLoader, **kwargs) -> None:
        super().__init__(**kwargs)
        self.loader = loader
        self.source: logview.Source | None = None
        self.total = 0
        self.needle = ""
        self._width = 80
        self._strips: LRUCache[tuple, Strip] = LRUCache(2048)

    # --- content --------------------------------------------------------------------------------

    def set_source(self, source: logview.Source | None, total: int, keep_cursor: bool = False) -> None:
        self.source = source
        self.total = total
        self._strips.clear()
        self._width = sum(w + 1 for w in (source.widths if source else ())) + 40
        self.virtual_size = Size(self._width, total)
        if not keep_cursor:
            self.set_reactive(LogLines.cursor, 0)
            self.scroll_to(0, 0, animate=False)
        self.refresh()
        self.post_message(self.CursorMoved(self.cursor, total))

    def grow(self, total: int, reread: bool = False) -> None:
        """The source has more rows: a filter found more, after those drawn, which stay drawn
        (its progress redrew every line four times a second); or, `reread`, a live run grew
        and its rows were read again, so every line is drawn anew."""
        if total != self.total:
            self.total = total
            self.virtual_size = Size(self.virtual_size.width, total)
            if reread:
                self._strips.clear()
            self.refresh()

    def set_needle(self, text: str) -> None:
        self.needle = text.lower()
        self._strips.clear()
        self.refresh()

    def row_cells(self, row: int) -> tuple[str, ...] | None:
        if self.source is None or not 0 <= row < self.total:
            return None
        return self.source.cached_row(row)

    def visible_rows(self) -> list[tuple[str, ...] | None]:
        top = int(self.scroll_offset.y)
        return [self.row_cells(i) for i in range(top, min(self.total, top + self.size.height))]

    # --- drawing --------------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        row = scroll_y + y
        width = self.size.width
        if row >= self.total or self.source is None:
            return Strip.blank(width, self.rich_style)
        key = (row, row == self.cursor and self.has_focus, row == self.cursor, scroll_x, width)
        cached = self._strips.get(key)
        if cached is not None:
            return cached
        cells = self.row_cells(row)
        if cells is None:
            src = self.source
            self.loader.request_page(src, row // logview.PAGE, lambda: self._page_arrived(src))
            text = Text("…", style="dim")
        else:
            text = self._render_row(cells)
        if row == self.cursor:
            text.stylize(Style(reverse=True) if self.has_focus else Style(bold=True, underline=True))
        if text.cell_len > self._width:  # a longer row than seen so far: widen the scrollable area
            self._width = min(4000, text.cell_len)
            self.call_later(self._widen)
        segments = list(text.render(self.app.console))
        strip = Strip(segments).crop(scroll_x, scroll_x + width).extend_cell_length(width, self.rich_style)
        if cells is not None:
            self._strips[key] = strip
        return strip

    def _render_row(self, cells: tuple[str, ...]) -> Text:
        widths = self.source.widths if self.source else ()
        t = Text(no_wrap=True, end="")
        for i, cell in enumerate(cells):
            if i < len(widths):
                w = widths[i]
                c = cell if len(cell) <= w else cell[: w - 1] + "…"
                t.append(c.rjust(w) if i == 0 else c.ljust(w), style="cyan" if i == 0 else "")
                t.append(" ")
            else:
                t.append(cell.replace("\n", " "))
        if self.needle:
            t.highlight_words([self.needle], style="black on yellow", case_sensitive=False)
        return t

    def _widen(self) -> None:
        if self.virtual_size.width < self._width:
            self.virtual_size = Size(self._width, self.total)

    def _page_arrived(self, source) -> None:
        def repaint() -> None:
            if source is self.source:
                self._strips.clear()
                self.refresh()
        try:
            self.app.call_from_thread(repaint)
        except Exception:  # the app has gone
            pass

    # --- moving ---------------------------------------------------------------------------------

    def watch_cursor(self, row: int) -> None:
        self._strips.clear()
        self.refresh()
        self.post_message(self.CursorMoved(row, self.total))

    def go_to(self, row: int) -> None:
        if self.total == 0:
            return
        row = max(0, min(self.total - 1, row))
        self.cursor = row
        height = max(1, self.size.height)
        top = int(self.scroll_offset.y)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + height:
            self.scroll_to(y=row - height + 1, animate=False)

    def action_cursor(self, delta: int) -> None:
        self.go_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self.go_to(self.cursor + direction * max(1, self.size.height - 1))

    def action_edge(self, end: int) -> None:
        self.go_to(self.total - 1 if end else 0)

    def action_choose(self) -> None:
        cells = self.row_cells(self.cursor)
        if cells is not None:
            self.post_message(self.RowChosen(self.cursor, cells))

    def on_click(self, event: Click) -> None:
        self.go_to(int(self.scroll_offset.y) + event.y)

    def on_focus(self) -> None:
        self._strips.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._strips.clear()
        self.refresh()

"""The one-line list of views (debug, timeline, scope, logs, plots) with the current one lit.

At 80×24 the debugger shows one view at a time, so the user must always see
which views exist and which key (1…5) or click reaches them; a full-size
terminal folds the timeline and the scope into the debug view and the bar
lists only what is left. One line, because every line counts at 24 rows.
"""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

NAMES = {"debug": "Debug", "timeline": "Timeline", "scope": "Scope", "logs": "Logs", "plots": "Plots"}
KEYS = {"debug": "1", "timeline": "2", "scope": "3", "logs": "4", "plots": "5"}


class ViewBar(Static):
    """Clickable view names; `show(views, current)` redraws it."""

    DEFAULT_CSS = """
    ViewBar { height: 1; background: $panel; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.views: list[str] = []
        self.current = ""

    def show(self, views: list[str], current: str, extra: str = "") -> None:
        self.views, self.current = views, current
        parts = []
        for v in views:
            label = f" {KEYS[v]} {NAMES[v]} "
            if v == current:
                parts.append(Content.from_markup(f"[reverse bold]{label}[/]"))
            else:
                parts.append(Content.from_markup(f"[@click=app.view('{v}')]{label}[/]"))
        content = Content(" ").join(parts)
        if extra:
            content = content + Content("  ") + Content.from_markup(extra)
        self.update(content)

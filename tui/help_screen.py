"""Every key of the debugger on one page (`?`).

The footer can only show a few bindings at 80 columns; this screen lists all
of them with what they do, grouped like pudb's help: moving through time,
stepping, looking around, and the application itself. The keys and their
lines come from the table of actions (`actions.py`); the rows in between are
about what is not an action of the app (the markers, Enter, Tab, Ctrl+P).
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from .actions import named


def _row(*names: str) -> tuple[str, str]:
    """One line of the help for these actions (of `actions.ACTIONS`): their keys, and the first one's text."""
    listed = named(*names)
    return "  ".join(dict.fromkeys(a.keys_on_help for a in listed)), listed[0].help


SECTIONS = [
    ("Stepping (on the selected tuple, ▶ by default)", [
        _row("step_over"),
        _row("step_into"),
        _row("step_out"),
        _row("step_back"),
        ("▶  •", "in the waiting tuples: ▶ is the tuple n and s act on unless you pick another (θ's next, "
                 "or the next one inside the scope stepped into); • is each instance's next input"),
        ("Enter", "on a waiting tuple, a scope's tuple or a logged row: show it whole (Esc returns)"),
    ]),
    ("Moving through time", [
        _row("jump"),
        _row("prev_interaction", "next_interaction"),
        _row("run_until"),
        _row("last_change"),
        _row("cancel"),
    ]),
    ("Looking around", [
        _row("view"),
        ("Tab", "next pane; arrows move inside it; Enter acts (jump, show state, open)"),
        _row("search"),
        _row("overlaps"),
        _row("evaluate"),
        _row("watch", "unwatch"),
        _row("why"),
        _row("warnings"),
        ("Ctrl+P", "command palette: every action, with why it is unavailable"),
    ]),
    ("Application", [
        _row("interact"),
        _row("help"),
        _row("quit"),
    ]),
]


class HelpScreen(ModalScreen[None]):
    """The key reference; any of Escape, q or ? closes it."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "close", show=True)]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90%; max-width: 96; height: 90%; border: round $accent; background: $surface; padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self._table(), id="help-text")

    def _table(self) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        table.add_row(Text("tt debug", style="bold"), "time-travel debugging of a recorded PySpark dataflow")
        for title, rows in SECTIONS:
            table.add_row("", "")
            table.add_row("", Text(title, style="bold underline"))
            for key, what in rows:
                table.add_row(key, what)
        return table

    def action_close(self) -> None:
        self.dismiss(None)

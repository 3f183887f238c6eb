"""Every key of the debugger on one page (`?`).

The footer can only show a few bindings at 80 columns; this screen lists all
of them with what they do, grouped like pudb's help: moving through time,
stepping, looking around, and the application itself.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

SECTIONS = [
    ("Stepping (on the selected tuple, ▶ by default)", [
        ("n", "step over: process the tuple and its whole scope"),
        ("s", "step into: only its operator processes it; its outputs wait downstream"),
        ("f", "step out: finish the scope stepped into last"),
        ("N  S  F", "step back: undo the last action; after a jump, back over θ's previous input"),
        ("▶  •", "in the waiting tuples: ▶ is the tuple n and s act on unless you pick another (θ's next, "
                 "or the next one inside the scope stepped into); • is each instance's next input"),
        ("Enter", "on a waiting tuple, a scope's tuple or a logged row: show it whole (Esc returns)"),
    ]),
    ("Moving through time", [
        ("j", "jump to an interaction: asks for its number (the timeline's highlighted row filled in); "
              "Enter on a timeline row jumps there"),
        ("[  ]", "previous / next interaction"),
        ("c", "run until a condition holds, e.g. 'Bob' in FD.blacklist"),
        ("C", "go back to the last change of a field, e.g. FD:0.blacklist.Bob"),
        ("Esc", "cancel a running jump or run-until (the position stays where it was)"),
    ]),
    ("Looking around", [
        ("1 … 5", "views: debug, timeline, scope, logs, plots (at 80×24 one at a time)"),
        ("Tab", "next pane; arrows move inside it; Enter acts (jump, show state, open)"),
        ("/", "search: the state tree in the debug view, the logs elsewhere (Esc leaves the search box)"),
        ("o", "compute scope overlaps now (large runs skip it at start)"),
        ("e", "evaluate an expression over the states here, e.g. len(FD.blacklist); row is the selected tuple"),
        ("w  W", "watch an expression (re-evaluated after every action, shown above the state); remove the last"),
        ("Ctrl+P", "command palette: every action, with why it is unavailable"),
    ]),
    ("Application", [
        ("i", "take an interaction now (only while recording, with `tt record --tui`)"),
        ("?", "this help"),
        ("q", "quit"),
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

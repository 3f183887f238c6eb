"""Every warning the recording made, on one page (`!`; Esc returns).

When the replay engine is ready the message line says the recording's first warning and how
many more there are; a run can have several (a hooked function that asked a network service,
input partitions that ran unrecorded, a `--when` condition that raised). This screen lists them
all, each wrapped, as `tt inspect` prints them, so a user need not leave the debugger to read them.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def warnings_table(warnings: list[str]) -> Table:
    """The warnings numbered, one a row, wrapped rather than cut off."""
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(style="bold yellow", no_wrap=True)
    table.add_column(overflow="fold", ratio=1)
    for n, warning in enumerate(warnings, 1):
        table.add_row(f"{n}.", Text(warning))
    return table


class WarningsScreen(ModalScreen[None]):
    """The recording's warnings; any of Escape, q or ! closes it."""

    BINDINGS = [Binding("escape,q,exclamation_mark", "close", "back", show=True)]

    DEFAULT_CSS = """
    WarningsScreen { align: center middle; }
    WarningsScreen > VerticalScroll {
        width: 96%; max-width: 160; height: auto; max-height: 90%;
        border: round $warning; background: $surface; padding: 0 1;
    }
    WarningsScreen #warnings-title { text-style: bold; }
    WarningsScreen #warnings-note { color: $text-muted; }
    """

    def __init__(self, warnings: list[str], run: str = "RUN") -> None:
        super().__init__()
        self.warnings = list(warnings)
        self.run = run

    def compose(self) -> ComposeResult:
        count = len(self.warnings)
        with VerticalScroll(id="warnings-box"):
            yield Static(f"The recording warned of {count} thing{'s' if count != 1 else ''}", id="warnings-title")
            yield Static(warnings_table(self.warnings), id="warnings-list")
            yield Static(f"Esc returns · tt inspect {self.run} prints them too", id="warnings-note")

    def action_close(self) -> None:
        self.dismiss(None)

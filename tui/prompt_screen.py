"""A one-line question (run-until condition, last-change field, interaction number, search).

Modal, like gdb's command line under a single-key mode: Enter answers, Escape
cancels and leaves the session as it was. The hint says what to type, with an
example drawn from the run, so a user never has to remember the syntax.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static


class PromptScreen(ModalScreen[str | None]):
    """Ask for one value; dismisses with the text, or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "cancel", show=True)]
    AUTO_FOCUS = "#prompt-input"  # focused as the screen opens, so typed keys never reach the app

    DEFAULT_CSS = """
    PromptScreen { align: center middle; }
    PromptScreen > Vertical {
        width: 90%; max-width: 100; height: auto; padding: 0 1;
        border: round $accent; background: $surface;
    }
    PromptScreen Label { width: 1fr; text-style: bold; }
    PromptScreen #prompt-hint { color: $text-muted; }
    PromptScreen Input { margin: 0; }
    """

    def __init__(self, question: str, hint: str = "", value: str = "", placeholder: str = "") -> None:
        super().__init__()
        self.question, self.hint, self.value, self.placeholder = question, hint, value, placeholder

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(self.question))
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")
            if self.hint:
                yield Static(Text(self.hint), id="prompt-hint")   # (OP[i].field is no markup)

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)

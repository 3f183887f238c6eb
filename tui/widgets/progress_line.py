"""Where in the run the session stands, and how far a long action has got.

Normally one line: the interaction the session is at (or the one it passed
last), tuples processed out of all logged, and the percentage. While a jump or
a run-until replays, a bar and "Esc cancels" take over, so a long replay is
visibly alive and can be stopped.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import ProgressBar, Static


class ProgressLine(Horizontal):
    """The position line; shows a progress bar while the session works."""

    DEFAULT_CSS = """
    ProgressLine { height: 1; }
    ProgressLine > #where { width: 1fr; height: 1; }
    ProgressLine > #work { width: auto; height: 1; display: none; }
    ProgressLine.-busy > #work { display: block; }
    ProgressLine > #work Bar { width: 20; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="where")
        # Not indeterminate while idle: an indeterminate bar repaints 15 times a second even when hidden.
        yield ProgressBar(total=100, show_eta=False, id="work")

    def show_position(self, interaction: int | None, last: int | None, tuples: int, total: int,
                      percent: float, note: str = "") -> None:
        t = Text()
        if interaction is not None:
            t.append(f"at interaction {interaction}", style="bold")
        elif last is not None:
            t.append(f"after interaction {last}", style="bold")
        else:
            t.append("before interaction 0", style="bold")
        if total:
            t.append(f" · {tuples:,} of {total:,} tuples · {percent:.1f}%")
        else:
            t.append(f" · {tuples:,} tuples")
        if note:
            t.append(f" · {note}", style="italic")
        self.query_one("#where", Static).update(t)

    def show_text(self, text: str | Text) -> None:
        self.query_one("#where", Static).update(text if isinstance(text, Text) else Text(text))

    @property
    def text(self) -> str:
        content = self.query_one("#where", Static).content
        return content.plain if isinstance(content, Text) else str(content)

    def busy(self, what: str, done: int | None = None, total: int | None = None, cancellable: bool = True) -> None:
        self.add_class("-busy")
        bar = self.query_one("#work", ProgressBar)
        if total:  # `done` of `total` tuples of the run: where the replay stands
            done = min(done or 0, total)
            bar.update(total=total, progress=done)
            pct = f" {done:,} of {total:,} tuples · {100 * done / total:.0f}%"
        else:
            bar.update(total=None)
            pct = f" {done:,} tuples" if done else ""
        self.query_one("#where", Static).update(Text.assemble((f"{what}…{pct}", "bold"),
                                                              "  Esc cancels" if cancellable else ""))

    def idle(self) -> None:
        self.remove_class("-busy")
        self.query_one("#work", ProgressBar).update(total=100, progress=0)

"""The answer to the last key press: what a step consumed and changed, or why it could not run.

Like gdb's echo area: one or two lines above the footer, replaced by the next
action, so the user always sees the outcome of what they just did (including
a refused step's reason and a replay divergence) without a popup to dismiss.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class MessageLine(Static):
    """The last outcome; `say` replaces it."""

    DEFAULT_CSS = """
    MessageLine { height: auto; max-height: 2; padding: 0 1; }
    MessageLine.-error { color: $error; }
    MessageLine.-warning { color: $warning; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.plain = ""

    def say(self, text: str | Text, level: str = "info") -> None:
        self.plain = text.plain if isinstance(text, Text) else str(text)
        self.set_class(level == "error", "-error")
        self.set_class(level == "warning", "-warning")
        self.update(text)

    def result(self, r, timings: bool = True, first: str | None = None) -> None:
        """A `StepResult`."""
        from ...core.values import render

        head = f"{r.action.replace('_', ' ')} {r.target or ''}".strip()
        t = Text()
        if not r.ok:
            t.append(f"✗ {head}: ", style="bold red")
            t.append(r.note or "not possible")
            self.say(t, "warning")
            return
        t.append(f"✓ {head}", style="bold green")
        if r.interaction is not None:
            t.append(f" → at interaction {r.interaction}")
        if timings:
            t.append(f" [{r.seconds * 1000:.0f} ms]", style="dim")
        if r.note:
            t.append(f" · {r.note}", style="italic")
        if r.consumed:
            t.append(f" · consumed {len(r.consumed)}: {', '.join(r.consumed[:3])}"
                     + (" …" if len(r.consumed) > 3 else ""))
        def show(v) -> str:
            return "∅" if v == "<missing>" else render(v, 24)
        ordered = sorted(r.changed.items(), key=lambda kv: kv[0].rsplit(":", 1)[0] != first)
        changes = [f"{inst}.{f} {show(old)}→{show(new)}" for inst, fields in ordered for f, (old, new) in fields.items()]
        if changes:
            t.append(" · ")
            t.append("; ".join(changes[:3]) + (" …" if len(changes) > 3 else ""), style="yellow")
        self.say(t)

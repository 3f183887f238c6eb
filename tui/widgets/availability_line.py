"""Which step keys work on the selected tuple right now, and why the others do not.

A step can be impossible (the tuple's scope overlaps a later one, it was
already consumed, there is no scope to step out of, no history to step back
through); the session says why, and this line says it next to the key instead
of letting a key press do nothing.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

KEYS = (("over", "n", "over"), ("into", "s", "into"), ("out", "f", "out"), ("back", "N", "back"))


class AvailabilityLine(Static):
    """`n over ✓ · s into ✓ · f out ✗ · N back ✓` for the selected tuple, then why the ✗ are ✗."""

    DEFAULT_CSS = """
    AvailabilityLine { height: auto; max-height: 4; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.reasons: dict[str, str] = {}
        self.target: str | None = None

    def show(self, target: str | None, availability: dict) -> None:
        self.reasons = {k: a.reason for k, a in availability.items() if not a.ok}
        t = Text()
        self.target = target
        for i, (name, key, word) in enumerate(KEYS):
            a = availability.get(name)
            if a is None:
                continue
            if i:
                t.append(" · ")
            t.append(key, style="bold")
            t.append(f" {word} ")
            t.append("✓" if a.ok else "✗", style="green" if a.ok else "red")
        blocked = [(word, availability[name].reason) for name, _, word in KEYS
                   if name in availability and not availability[name].ok and name not in ("back",)]
        for word, reason in blocked[:2]:
            t.append(f"\n{word}: ", style="red")
            t.append(reason, style="dim")
        self.update(t)

    def waiting(self, text: str) -> None:
        self.reasons = {}
        self.update(Text(text, style="dim italic"))

"""The watch list: expressions over the operators' states, re-evaluated after every action.

Like a debugger's watch window (pudb's variables pane, gdb's `display`): `w` adds an
expression, `W` removes the last one; each line shows the expression and its value
per instance, in yellow when the last action changed it. Hidden while empty.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static


class WatchList(Static):
    """`expr = value` per watched expression (per instance when it names `OP.field`)."""

    DEFAULT_CSS = """
    WatchList { height: auto; max-height: 8; padding: 0 1; display: none; }
    WatchList.-shown { display: block; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.lines: list[str] = []                    # what is shown, as plain text (tests read it)
        self._last: dict[str, str] = {}               # expression -> its values' text after the previous action

    def show(self, results: list[tuple[str, list[tuple[str, Any]] | str]]) -> None:
        """`results`: per expression, its `(who, value)` pairs, or the one-line reason it cannot be evaluated."""
        t = Text()
        self.lines = []
        last = {}
        for n, (expression, values) in enumerate(results):
            if isinstance(values, str):
                body = f"✗ {values}"
            else:
                body = format_values(expression, values)
            changed = expression in self._last and self._last[expression] != body
            last[expression] = body
            if n:
                t.append("\n")
            t.append(expression, style="bold")
            t.append(" = ")
            t.append(body, style="yellow" if changed else ("red" if body.startswith("✗") else ""))
            self.lines.append(f"{expression} = {body}")
        self._last = last
        self.set_class(bool(results), "-shown")
        self.border_title = f"watch ({len(results)})" if results else ""
        self.update(t)


def format_values(expression: str, values: list[tuple[str, Any]]) -> str:
    """`2` for one value, `FD:0: 2 · FD:1: 0` for one per instance."""
    if len(values) == 1 and values[0][0] == expression:
        return _value(values[0][1])
    return " · ".join(f"{who}: {_value(v)}" for who, v in values)


def _value(v: Any) -> str:
    from ...core.values import encode, render
    from ...replay.session import EvalError

    return f"✗ {v}" if isinstance(v, EvalError) else render(encode(v), 80)

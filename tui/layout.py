"""Which layout the debugger uses at a given terminal size: a pure function of the size.

At 80×24 the views take turns (debug, timeline, scope, logs, plots); from
`WIDE` up the debug view puts the DAG and timeline, the waiting tuples and the
scope, and the state side by side, and the view bar lists only what is left.
The app calls this with the size the resize event carries (never a size read
before the terminal's new size has been applied).
"""

from __future__ import annotations

WIDE = (140, 40)   # from this size up, the debug view shows its panes side by side
ALL_VIEWS = ("debug", "timeline", "scope", "logs", "plots")


def is_wide(width: int, height: int) -> bool:
    return width >= WIDE[0] and height >= WIDE[1]


def views(wide: bool) -> list[str]:
    """The views the view bar lists (the wide debug view includes the timeline and the scope)."""
    return ["debug", "logs", "plots"] if wide else list(ALL_VIEWS)


def shown_view(view: str, wide: bool) -> str:
    """The view actually on screen: the timeline and the scope are part of the wide debug view."""
    return "debug" if wide and view in ("timeline", "scope") else view

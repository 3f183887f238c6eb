"""Which layout the debugger uses at a given terminal size: a pure function of the size.

At 80×24 the views take turns (debug, timeline, scope, logs, plots); from
`WIDE` up the debug view puts the DAG and timeline, the waiting tuples and the
scope, and the state side by side, and the view bar lists only what is left.
The app calls `arrange` with the size the resize event carries (never a size read
before the terminal's new size has been applied) and applies what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Arrangement:
    """What the app sets on its widgets for one size and view (`DebuggerApp._apply_layout`)."""

    wide: bool
    view: str                              # the view on screen (`shown_view`)
    views: list[str]                       # what the view bar lists
    display: dict[str, bool]               # selector -> shown or not
    classes: dict[str, dict[str, bool]]    # selector -> CSS class -> set or not


def arrange(width: int, height: int, view: str) -> Arrangement:
    """The layout at this terminal size with `view` chosen (the last view key pressed)."""
    wide = is_wide(width, height)
    view = shown_view(view, wide)
    main = {"-wide": wide, "-narrow": not wide, **{f"-view-{name}": view == name for name in ALL_VIEWS}}
    display = {
        "#debug-area": view in ("debug", "timeline", "scope"), "#logs": view == "logs", "#plots": view == "plots",
        "#col-run": wide or view in ("debug", "timeline"),
        "#dag": True,
        "#timeline": wide or view == "timeline",
        "#col-tuples": wide or view in ("debug", "scope"),
        "#pending": wide or view == "debug",
        "#avail": True,
        "#scope": wide or view == "scope",
        "#col-state": wide or view == "debug",
    }
    return Arrangement(wide, view, views(wide), display, {"#main": main, "#plots": {"-wide": wide}})

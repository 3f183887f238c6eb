"""What the app's workers hand back to the UI thread.

Workers wait for the replay engine (which runs on its own thread, see
`engine_thread.EngineThread`); only the UI thread may touch the widgets. A worker
posts one of these to the app and the app's handler puts it on screen. Until
a `Report` has been handled the app is not idle (`DebuggerApp.is_idle`), so a
test never looks at the screen between a worker's end and its result being
shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.message import Message

if TYPE_CHECKING:
    from .model import Model, Shown


class Report(Message):
    """A worker's result for the UI thread."""


class SessionReady(Report):
    """The replay engine has loaded; `shown` is its first position, `failure` the run's (`DebugSession.failure`)."""

    def __init__(self, model: Model, shown: Shown, failure: Any = None) -> None:
        super().__init__()
        self.model = model
        self.shown = shown
        self.failure = failure


class SessionFailed(Report):
    """The replay engine cannot load: the app browses the recorded facts only."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message


class OverlapsReady(Report):
    """The scope overlaps have been computed (the model keeps them)."""


class ActionProgress(Report):
    """Where the replay stands while an action runs: `done` of the run's `total` tuples."""

    def __init__(self, label: str, done: int, total: int, cancellable: bool) -> None:
        super().__init__()
        self.label = label
        self.done = done
        self.total = total
        self.cancellable = cancellable


class ActionDone(Report):
    """An action has finished: what to show now (None if not even the position can be read) and what to say."""

    def __init__(self, shown: Shown | None, message: str | None, level: str) -> None:
        super().__init__()
        self.shown = shown
        self.message = message
        self.level = level


class SelectionShown(Report):
    """The same position seen with another operator or tuple selected (or after the run grew)."""

    def __init__(self, shown: Shown) -> None:
        super().__init__()
        self.shown = shown


class TupleFetched(Report):
    """A tuple's row and, when another operator emitted it, the input that operator was processing."""

    def __init__(self, label: str, row: Any, origin: str | None, before: Any) -> None:
        super().__init__()
        self.label = label
        self.row = row
        self.origin = origin
        self.before = before


class WatchesEvaluated(Report):
    """The watched expressions' values here (`adding`: an expression to add to the watches, now that it works)."""

    def __init__(self, results: list[tuple[str, Any]], adding: str | None) -> None:
        super().__init__()
        self.results = results
        self.adding = adding


class SeriesLoaded(Report):
    """The run's series for the plots view."""

    def __init__(self, data: Any) -> None:
        super().__init__()
        self.data = data


class Say(Report):
    """A line for the message line."""

    def __init__(self, text: str | Text, level: str = "info") -> None:
        super().__init__()
        self.text = text
        self.level = level


class RunPolled(Message):
    """What the run file says now, while it is being recorded (not a `Report`: the poll runs on its own)."""

    def __init__(self, status: str, interactions: list[dict], checkpointed: set[int]) -> None:
        super().__init__()
        self.status = status
        self.interactions = interactions
        self.checkpointed = checkpointed


class LineageReady(Report):
    """`w`: the lineage tree of `title` (widgets/lineage_tree.py `Line`s), or why there is none."""

    def __init__(self, title: str, root: Any = None, error: str | None = None, size: int = 0) -> None:
        super().__init__()
        self.title = title
        self.root = root
        self.error = error
        self.size = size

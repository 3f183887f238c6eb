"""The interaction history: every snapshot the recording took, and where the session stands.

One row per interaction with its number k (the number `j` takes and every
view shows), time, trigger (start, periodic, condition, user, end) and, for a
condition, the tuple that met it, named `OP:INSTANCE:INPUT#` as the waiting
tuples, `tt inspect scope` and `tt replay` name it; a ◆ marks interactions with
a stored checkpoint and ▶ the one the session is at. Enter jumps to the
highlighted row's k. Rows are the run file's facts: they appear before the
replay engine is loaded and grow while a live recording goes on.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable

from ...replay.facts import condition_tuple


class InteractionTimeline(DataTable):
    """A table of interactions; Enter asks to jump to the highlighted one."""

    BINDINGS = [Binding("enter", "jump_here", "jump here", show=False)]

    class JumpRequested(Message):
        def __init__(self, k: int) -> None:
            super().__init__()
            self.k = k

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.rows_data: list[dict] = []
        self.current: int | None = None
        self.checkpointed: set[int] = set()
        self._keys: list[int] = []
        self.live = False  # a run still being recorded: incomplete interactions are still coming in

    def on_mount(self) -> None:
        self.add_column("", key="at", width=1)
        self.add_column("k", key="k", width=4)
        self.add_column("t", key="t", width=8)
        self.add_column("trigger", key="trigger", width=9)
        self.add_column("", key="ckpt", width=1)
        self.add_column("detail", key="detail")

    def set_interactions(self, rows: list[dict], checkpointed: set[int] | None = None) -> None:
        """`rows` as `facts.interactions` gives them (k, t, trigger, detail, complete)."""
        if checkpointed is not None:
            self.checkpointed = checkpointed
        known = {r["k"]: r["complete"] for r in self.rows_data}
        changed = [r for r in rows if r["k"] not in known]
        complete_changed = any(r["k"] in known and r["complete"] != known[r["k"]] for r in rows)
        if not changed and not complete_changed and len(rows) == len(self.rows_data):
            return
        cursor = self.cursor_row
        follow = cursor >= len(self.rows_data) - 1 and bool(self.rows_data)
        self.rows_data = rows
        self.clear()
        self._keys = []
        for r in rows:
            self.add_row(*self._cells(r), key=str(r["k"]))
            self._keys.append(r["k"])
        if rows:
            self.move_cursor(row=len(rows) - 1 if follow and changed else min(cursor, len(rows) - 1), animate=False)

    def set_current(self, k: int | None) -> None:
        if k == self.current:
            return
        old, self.current = self.current, k
        for kk in (old, k):
            if kk is not None and kk in self._keys:
                self.update_cell(str(kk), "at", Text("▶", style="bold yellow") if kk == k else Text(""))

    def highlight(self, k: int) -> None:
        """Put the cursor on interaction k's row (rows are keyed by k, not by their index)."""
        if str(k) in self.rows:
            self.move_cursor(row=self.get_row_index(str(k)), animate=False)

    @property
    def highlighted_k(self) -> int | None:
        """The interaction number of the highlighted row: its row key, never its index."""
        if not self.row_count or not self.is_valid_row_index(self.cursor_row):
            return None
        row_key, _ = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0))
        return int(row_key.value)

    def _cells(self, r: dict) -> list:
        k = r["k"]
        style = "" if r["complete"] else "dim"
        trig = r["trigger"]
        detail = r.get("detail") or {}
        if trig == "condition":
            text = f"{condition_tuple(detail) or '?'} {detail.get('row', '')}".rstrip()
        elif trig == "user":
            text = f"via {detail.get('via', 'user')}"
        elif trig == "micro-batch" and r["complete"]:   # (the column is 9 wide: "micro-bat" read as cut)
            trig, text = "batch", f"micro-batch {detail.get('batch', '?')} ended"
        elif not r["complete"]:
            text = "(pending: not every instance has taken it yet)" if self.live else \
                "(incomplete: not every instance took it)"
        else:
            text = ""
        trig_style = {"condition": "magenta", "user": "green", "end": "bold", "start": "dim"}.get(trig, "")
        return [Text("▶", style="bold yellow") if k == self.current else Text(""),
                Text(str(k), style=style), Text(f"{r['t']:.2f}s", style=style),
                Text(trig, style=f"{trig_style} {style}".strip()),
                Text("◆", style="cyan") if k in self.checkpointed else Text(""),
                Text(text, style=style)]

    def action_jump_here(self) -> None:
        k = self.highlighted_k
        if k is not None:
            self.post_message(self.JumpRequested(k))

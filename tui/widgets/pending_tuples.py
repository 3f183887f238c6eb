"""What waits on each channel of each instance of G(θ): the tuples the step keys act on.

One row per waiting tuple, grouped by instance in consumption order. ▶ marks
the tuple n and s act on when the user has not picked another (θ's next tuple
in the original order, or the next tuple inside the scope stepped into); •
marks each instance's next input; `free` tuples entered G(θ) elsewhere and are
consumed as logged when in the way. Moving the cursor selects a tuple; Enter
shows it whole (`TupleChosen`), since a row is cut off at 80 columns.
"""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from ...core.scopes import TupleRef


class PendingTuples(DataTable):
    """Waiting tuples; the highlighted row is the selected tuple."""

    class TupleSelected(Message):
        def __init__(self, ref: TupleRef | None) -> None:
            super().__init__()
            self.ref = ref

    class TupleChosen(Message):
        """Enter on a row: show the tuple whole."""

        def __init__(self, ref: TupleRef) -> None:
            super().__init__()
            self.ref = ref

    LEGEND = "▶ n/s act on it · • next input · Enter: all of it"

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.refs: list[TupleRef | None] = []   # (None: a row that says how many more are to come)
        self.labels: list[str] = []
        self._current: TupleRef | None = None
        self._tuple_width = 0

    def on_mount(self) -> None:
        self._columns(14)

    def _columns(self, width: int) -> None:
        """The columns, the tuple's as wide as `width` (its labels': `UserSummary:0:` hid the input)."""
        self.clear(columns=True)
        self._tuple_width = width
        self.add_column("", key="mark", width=1)
        self.add_column("tuple", key="tuple", width=width)
        self.add_column("from", key="from", width=9)
        self.add_column("row", key="row")

    def show(self, pending: list, selected: TupleRef | None, default: TupleRef | None,
             to_come: dict[str, int] | None = None) -> None:
        """`pending`: the session's `Pending` records, the first few of each instance; `to_come`:
        the inputs each instance has still to consume, so that a list cut short says so (a row
        `…  N more at FE:1`, which selects nothing)."""
        from ...core.values import render

        self._current = selected
        width = max([14] + [len(p.label) for p in pending])
        width = min(width, 28)   # (beyond, the row's values matter more; Enter shows the tuple whole)
        if width != self._tuple_width:
            self._columns(width)
        else:
            self.clear()
        self.refs, self.labels = [], []
        shown: dict[str, int] = {}
        for n, p in enumerate(pending):
            if p.ref == default:
                mark = Text("▶", style="bold yellow")
            elif p.next:
                mark = Text("•", style="cyan")
            else:
                mark = Text("")
            sender = "end" if p.end else ("free" if p.free and p.sender != "recorded" else p.sender)
            row = "(end of input: finish())" if p.end else render(p.row, 300)
            style = "" if p.next else "dim"
            self.add_row(mark, Text(p.label, style=style), Text(sender, style=style),
                         Text(row, style=style), key=p.label)
            self.refs.append(p.ref)
            self.labels.append(p.label)
            instance = p.label.rsplit(":", 1)[0]
            shown[instance] = shown.get(instance, 0) + 1
            last = n + 1 == len(pending) or pending[n + 1].label.rsplit(":", 1)[0] != instance
            more = (to_come or {}).get(instance, 0) - shown[instance]
            if last and more > 0:
                label = f"{more:,} more at {instance}"
                self.add_row(Text(""), Text("…", style="dim"), Text(""), Text(label, style="dim italic"),
                             key=f"{instance} more")
                self.refs.append(None)
                self.labels.append(label)
        if selected in self.refs:
            self.move_cursor(row=self.refs.index(selected), animate=False)

    @property
    def selected_ref(self) -> TupleRef | None:
        if not self.refs or not 0 <= self.cursor_row < len(self.refs):
            return None
        return self.refs[self.cursor_row]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        ref = self.selected_ref
        if ref is None or ref == self._current:
            return  # the cursor was put there by `show`, not moved by the user
        self._current = ref
        self.post_message(self.TupleSelected(ref))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if 0 <= event.cursor_row < len(self.refs) and self.refs[event.cursor_row] is not None:
            self.post_message(self.TupleChosen(self.refs[event.cursor_row]))

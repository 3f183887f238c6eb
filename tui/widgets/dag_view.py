"""The dataflow as a drawing: which operators exist, how tuples flow, where θ and G(θ) are.

Operators are laid out in layers (longest path from a source), edges are drawn
with box characters (dashed where Spark shuffles, and where Spark itself carries
rows from one hooked PySpark function to the next, the note under the receiving
source saying what it did), G(θ) is highlighted and θ marked, an operator that a warning
of the recording concerns is marked `!` (the key that lists the warnings), and under every
operator of G(θ) stands how many tuples its instances have consumed at the session's
position (the model leaves out the end-of-input step each instance takes last, so θ's count
ends at the job's tuples into θ).
Selecting an operator (arrows, Enter or a click) shows its state in the state
inspector. Where the pane is lower than the drawing, the arrows and the mouse wheel move it, and
`▲ N more` / `▼ N more` at its right edge count the operators out of sight.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.events import Click, MouseScrollDown, MouseScrollUp
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.geometry import Size

GAP = 5          # columns between two layers
ROW = 3          # text lines per layer row: name, count, spacer

N, S, E, W = 1, 2, 4, 8
BOX = {
    E | W: "─", N | S: "│", S | E: "┌", S | W: "┐", N | E: "└", N | W: "┘",
    N | S | E: "├", N | S | W: "┤", S | E | W: "┬", N | E | W: "┴", N | S | E | W: "┼",
    E: "─", W: "─", N: "│", S: "│",
}


@dataclass
class DagNode:
    id: int
    name: str
    kind: str
    in_g: bool
    theta: bool
    instances: int
    note: str = ""     # shown under an operator outside G(θ): what Spark did to the rows it feeds on
    warned: bool = False   # a warning of the recording concerns it (`!` lists them)


@dataclass
class DagEdge:
    src: int
    dst: int
    shuffle: bool


class DagView(Widget, can_focus=True):
    """The operator DAG with per-operator counts; arrows move the selection."""

    BINDINGS = [
        Binding("left", "move(-1, 0)", "previous operator", show=False),
        Binding("right", "move(1, 0)", "next operator", show=False),
        Binding("up", "move(0, -1)", "operator above", show=False),
        Binding("down", "move(0, 1)", "operator below", show=False),
        Binding("enter", "choose", "show its state", show=False),
    ]

    DEFAULT_CSS = """
    DagView { height: auto; min-height: 3; }
    """

    selected: reactive[int | None] = reactive(None)

    class OperatorSelected(Message):
        """The user picked an operator."""

        def __init__(self, name: str, chosen: bool = False) -> None:
            super().__init__()
            self.name = name
            self.chosen = chosen

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.nodes: list[DagNode] = []
        self.edges: list[DagEdge] = []
        self.counts: dict[str, int] = {}
        self._dag_place: dict[int, tuple[int, int]] = {}       # node -> (layer, row)
        self._dag_boxes: dict[int, tuple[int, int, int]] = {}   # node -> (x0, x1, y)
        self._dag_lines: list[Text] = [Text("no run loaded")]
        self._gap, self._show_instances = GAP, True
        self._top = 0   # the drawing's first line shown (`_keep_in_view`)

    # --- data ---------------------------------------------------------------------------------

    def set_graph(self, nodes: list[DagNode], edges: list[DagEdge]) -> None:
        self.nodes, self.edges = nodes, edges
        self._place()
        if self.selected is None:
            theta = next((n for n in nodes if n.theta), None)
            self.selected = theta.id if theta else (nodes[0].id if nodes else None)
        self._draw()

    def set_counts(self, counts: dict[str, int]) -> None:
        """Per operator name, the tuples its instances have consumed."""
        if counts != self.counts:
            self.counts = dict(counts)
            self._draw()

    def select_name(self, name: str) -> None:
        for n in self.nodes:
            if n.name == name and n.id != self.selected:
                self.selected = n.id

    @property
    def selected_name(self) -> str | None:
        node = self._node(self.selected)
        return node.name if node else None

    def _node(self, nid: int | None) -> DagNode | None:
        return next((n for n in self.nodes if n.id == nid), None)

    def watch_selected(self, old: int | None, new: int | None) -> None:
        self._draw()
        node = self._node(new)
        if node is not None:
            self.call_after_refresh(self._keep_in_view)   # (once the layout has the new drawing)
        if node is not None and old is not None:
            self.post_message(self.OperatorSelected(node.name))

    def _keep_in_view(self) -> None:
        """Show the drawing from the line that keeps the selected operator's name and count in the
        pane: the narrow debug view's holds two rows of operators, and the arrows move to a third.
        (Textual scrolls a widget's children, not the lines it renders: `render` shows the
        drawing from `_top` on.)"""
        box = self._dag_boxes.get(self.selected)
        shown = self.content_region.height if self.is_mounted else 0
        if box is None or not shown:
            return
        y = box[2]
        top = min(max(self._top, y + 2 - shown), y)
        top = max(0, min(top, len(self._dag_lines) - shown))
        if top != self._top:
            self._top = top
            self.refresh()

    # --- layout ----------------------------------------------------------------------------------

    def _place(self) -> None:
        layer: dict[int, int] = {}
        preds: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for e in self.edges:
            preds.setdefault(e.dst, []).append(e.src)
        for n in self.nodes:  # creation order is topological
            layer[n.id] = max((layer[p] + 1 for p in preds.get(n.id, []) if p in layer), default=0)
        rows: dict[int, list[int]] = {}
        for n in self.nodes:
            rows.setdefault(layer[n.id], []).append(n.id)
        place: dict[int, tuple[int, int]] = {}
        for lay in sorted(rows):
            ids = rows[lay]
            if lay > 0:  # barycentre of the predecessors' rows keeps edges short and uncrossed
                def bary(nid: int) -> float:
                    ps = [place[p][1] for p in preds.get(nid, []) if p in place]
                    return sum(ps) / len(ps) if ps else 0.0
                ids = sorted(ids, key=lambda nid: (bary(nid), nid))
            for r, nid in enumerate(ids):
                place[nid] = (lay, r)
        self._dag_place = place

    def on_resize(self) -> None:
        self._draw()
        self.call_after_refresh(self._keep_in_view)

    def _draw(self) -> None:
        """Draw with the widest spacing that fits the widget (then tighter, then without ×N)."""
        if not self.nodes:
            self._dag_lines = [Text("waiting for the dataflow to start…", style="dim")]
            self.refresh(layout=True)
            return
        avail = self.content_region.width if self.is_mounted else 0
        for gap, counts in ((GAP, True), (3, True), (3, False)):
            self._gap, self._show_instances = gap, counts
            self._draw_once()
            if not avail or max(len(t) for t in self._dag_lines) <= avail:
                break
        self.refresh(layout=True)

    def _draw_once(self) -> None:
        place = self._dag_place
        layers = max(lay for lay, _ in place.values()) + 1
        width_of = {n.id: max(len(self._node_label(n)), len(self._count_text(n))) for n in self.nodes}
        col_w = [max([width_of[n] for n, (lay, _) in place.items() if lay == L] or [1]) for L in range(layers)]
        x0 = []
        x = 1
        for w in col_w:
            x0.append(x)
            x += w + self._gap
        total_w = x - self._gap + 1
        n_rows = max(r for _, r in place.values()) + 1
        height = n_rows * ROW - 1
        grid: list[list[str]] = [[" "] * total_w for _ in range(height)]
        dirs: dict[tuple[int, int], int] = {}
        dashed: set[tuple[int, int]] = set()
        arrows: dict[tuple[int, int], str] = {}

        def add(x: int, y: int, d: int, shuffle: bool) -> None:
            dirs[(x, y)] = dirs.get((x, y), 0) | d
            if shuffle:
                dashed.add((x, y))

        boxes = {}
        for n in self.nodes:
            lay, r = place[n.id]
            boxes[n.id] = (x0[lay], x0[lay] + len(self._node_label(n)), r * ROW)
        for e in self.edges:
            if e.src not in place or e.dst not in place:
                continue
            (sl, sr), (dl, dr) = place[e.src], place[e.dst]
            sx = boxes[e.src][1]
            sy = sr * ROW
            dx = x0[dl] - 1
            dy = dr * ROW
            turn = x0[sl] + col_w[sl] + self._gap // 2 if dl == sl + 1 else dx - 2
            for xx in range(sx, turn):
                add(xx, sy, E | W, e.shuffle)
            if sy == dy:
                add(turn, sy, E | W, e.shuffle)
            else:
                add(turn, sy, W | (S if dy > sy else N), e.shuffle)
                for yy in range(min(sy, dy) + 1, max(sy, dy)):
                    add(turn, yy, N | S, e.shuffle)
                add(turn, dy, E | (N if dy > sy else S), e.shuffle)
            for xx in range(turn + 1, dx):
                add(xx, dy, E | W, e.shuffle)
            arrows[(dx, dy)] = "▶"
        for (x, y), d in dirs.items():
            if 0 <= y < height and 0 <= x < total_w:
                ch = BOX.get(d, "┼")
                if (x, y) in dashed and ch == "─":
                    ch = "╌"
                grid[y][x] = ch
        for (x, y), ch in arrows.items():
            if 0 <= y < height and 0 <= x < total_w:
                grid[y][x] = ch
        lines = [Text("".join(row)) for row in grid]
        for t in lines:
            t.stylize("bright_black")
        self._dag_boxes = {}
        for n in self.nodes:
            bx, _, by = boxes[n.id]
            name, count = self._node_label(n), self._count_text(n)
            style = self._node_style(n)
            line = lines[by]
            line.plain = line.plain[:bx] + name + line.plain[bx + len(name):]
            line.stylize(style, bx, bx + len(name))
            if n.warned:   # (its `!`, before the closing bracket or space)
                line.stylize("bold dark_orange", bx + len(name) - 2, bx + len(name) - 1)
            if count and by + 1 < height:
                cl = lines[by + 1]
                cl.plain = cl.plain[:bx] + count + cl.plain[bx + len(count):]
                cl.stylize("dim" if not n.in_g else "", bx, bx + len(count))
            self._dag_boxes[n.id] = (bx, bx + len(name), by)
        for t in lines:
            t.no_wrap = True
            t.overflow = "crop"
        self._dag_lines = lines

    def _node_label(self, n: DagNode) -> str:
        mark = " θ" if n.theta else ""
        inst = f"×{n.instances}" if n.instances > 1 and self._show_instances else ""
        warned = " !" if n.warned else ""
        return f"[{n.name}{mark}{inst}{warned}]" if n.in_g else f" {n.name}{inst}{warned} "

    def _count_text(self, n: DagNode) -> str:
        if not n.in_g:
            return n.note
        c = self.counts.get(n.name)
        return "" if c is None else f"{c:,}"

    def _node_style(self, n: DagNode) -> Style:
        if n.id == self.selected:
            return Style(reverse=True, bold=True, color="yellow" if n.theta else None)
        if n.theta:
            return Style(bold=True, color="yellow")
        if n.in_g:
            return Style(bold=True, color="cyan")
        return Style(dim=True)

    # --- rendering --------------------------------------------------------------------------------

    def render(self) -> Text:
        lines = self._dag_lines[self._top:]
        shown = self.content_region.height if self.is_mounted else 0
        if self._dag_boxes and 0 < shown < len(lines) + self._top:
            lines = lines[:shown]
            above = sum(1 for _, _, y in self._dag_boxes.values() if y < self._top)
            below = sum(1 for _, _, y in self._dag_boxes.values() if y >= self._top + shown)
            if above:
                lines[0] = self._marked(lines[0], f"▲ {above} more")
            if below:
                lines[-1] = self._marked(lines[-1], f"▼ {below} more")
        text = Text("\n").join(lines)
        text.no_wrap = True
        text.overflow = "crop"
        return text

    def _marked(self, line: Text, marker: str) -> Text:
        """`line` with `marker` at the pane's right edge (in place of what the drawing has there),
        where the pane shows it scrolled sideways too (a drawing wider than the pane)."""
        width = int(self.scroll_x) + max(self.content_region.width, len(marker) + 1)
        cut = line[:width - len(marker) - 1]
        cut.pad_right(width - len(marker) - len(cut))
        cut.append(marker, style="dim italic")
        return cut

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self._dag_lines))

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return max((len(t) for t in self._dag_lines), default=1)

    def render_text(self) -> str:
        """The drawing as plain text (tests, the tmux smoke test)."""
        return "\n".join(t.plain for t in self._dag_lines)

    # --- input ------------------------------------------------------------------------------------

    def action_move(self, dx: int, dy: int) -> None:
        if not self.nodes:
            return
        order = sorted(self._dag_place.items(), key=lambda kv: (kv[1][0], kv[1][1]))
        ids = [nid for nid, _ in order]
        if self.selected not in ids:
            self.selected = ids[0]
            return
        lay, row = self._dag_place[self.selected]
        if dx:
            i = ids.index(self.selected) + dx
            if 0 <= i < len(ids):
                self.selected = ids[i]
        else:
            same = [nid for nid, (L, r) in order if L == lay and r == row + dy]
            if same:
                self.selected = same[0]

    def on_mouse_scroll_down(self, event: MouseScrollDown) -> None:
        self._scroll_by(event, 1)

    def on_mouse_scroll_up(self, event: MouseScrollUp) -> None:
        self._scroll_by(event, -1)

    def _scroll_by(self, event: MouseScrollDown | MouseScrollUp, lines: int) -> None:
        """The wheel moves the drawing a line (where the pane hides some), not the widget, which
        Textual would scroll by its own offset, not `_top`."""
        shown = self.content_region.height
        top = max(0, min(self._top + lines, len(self._dag_lines) - shown))
        event.prevent_default()
        if top != self._top:
            self._top = top
            self.refresh()
            event.stop()

    def action_choose(self) -> None:
        node = self._node(self.selected)
        if node is not None:
            self.post_message(self.OperatorSelected(node.name, chosen=True))

    def on_click(self, event: Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        cx, cy = offset.x + int(self.scroll_x), offset.y + int(self.scroll_y) + self._top
        for nid, (x0, x1, y) in self._dag_boxes.items():
            if cy in (y, y + 1) and x0 <= cx < x1:
                self.selected = nid
                self.post_message(self.OperatorSelected(self._node(nid).name, chosen=True))
                return

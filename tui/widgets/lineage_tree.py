"""Why is this here: the lineage tree of a tuple or a state value, beside the state (`w`).

The tree is `tt lineage --back` for what was selected (docs/LINEAGE.md): under each row,
the call that emitted it and the calls whose state writes it was made from, down to the
tuples that entered G(θ). Enter on such a leaf asks the app to jump to the last
interaction before it entered, with the cursor on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text
from textual.message import Message
from textual.widgets import Tree

from ...core.scopes import TupleRef


@dataclass
class Line:
    """One node of the tree, built on the engine thread (widgets are built from these on the UI thread)."""

    text: Text
    leaf: TupleRef | None = None      # a tuple that entered G(θ): Enter jumps before it
    children: list["Line"] = field(default_factory=list)


class LineageTree(Tree):
    """The lineage of one root; `leaf` nodes carry the tuple to jump to."""

    class LeafChosen(Message):
        def __init__(self, ref: TupleRef) -> None:
            super().__init__()
            self.ref = ref

    def __init__(self, **kwargs) -> None:
        super().__init__("why", **kwargs)
        self.root_label = ""

    def show(self, title: str, root: Line) -> None:
        self.clear()
        self.root_label = title
        self.root.set_label(root.text)
        self.root.data = root.leaf
        stack = [(self.root, root)]
        while stack:
            node, line = stack.pop()
            for child in line.children:
                sub = node.add(child.text, data=child.leaf, expand=True, allow_expand=bool(child.children))
                stack.append((sub, child))
        self.root.expand()
        self.cursor_line = 0

    @property
    def lines(self) -> list[str]:
        """The tree's lines as plain text, depth first (for tests and `--help`-like dumps)."""
        out = []

        def walk(node, depth: int) -> None:
            out.append("  " * depth + str(node.label.plain if isinstance(node.label, Text) else node.label))
            for child in node.children:
                walk(child, depth + 1)
        walk(self.root, 0)
        return out

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        event.stop()
        if isinstance(event.node.data, TupleRef):
            self.post_message(self.LeafChosen(event.node.data))


def outline(lineage, tree) -> Line:
    """`tree` (replay/lineage.py `Tree`, backward) as lines: each row once, its links under it
    (`Tree.shown_links`), where a leaf entered G(θ) before its values (a narrow pane cuts them)."""
    from ...core import values

    shown: set = set()

    def row(node) -> Text:
        text = Text(lineage.label(node), style="bold")
        note = tree.note(node)
        if note:
            text.append(f" {note}", style="green")
        value = tree.rows.get(node)
        text.append("  " + (values.render(value, 120) if value is not None else "(row not recorded)"))
        return text

    def lines_under(node) -> list[Line]:
        shown.add(node)
        out = []
        for link in tree.shown_links(node):
            if isinstance(link, tuple):
                out.append(Line(Text(f"… {link[1]} more through {link[0]} (tt lineage --json lists them)",
                                     style="dim")))
                continue
            how = Text("emitted while processing " if link.kind == "emitted" else
                       link.spark_text(back=True) + " " if link.kind == "spark"
                       else f"through {link.state}, by ", style="dim")
            if link.to in shown:
                out.append(Line(how + Text(f"{lineage.label(link.to)} (shown above)", style="dim")))
                continue
            out.append(Line(how + row(link.to), leaf(link.to), lines_under(link.to)))
        return out

    def leaf(node) -> TupleRef | None:
        """The tuple Enter goes to just before: one that entered G(θ) (the root too: a why tree
        of one tuple, a θ input, whose Enter did nothing)."""
        return node if isinstance(node, TupleRef) and node in tree.entered and node.op in lineage.graph.in_g \
            and tree.entered[node]["as"] != "end of input" else None

    return Line(row(tree.root), leaf(tree.root), lines_under(tree.root))

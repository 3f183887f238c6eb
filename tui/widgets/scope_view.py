"""The selected tuple's scope: every tuple its processing leads to, downstream, as a tree.

A step-over processes exactly this scope, so the tree shows what `n` will do:
✓ marks tuples already consumed, ○ those still to come. Where the scope
overlaps a later tuple's (Section 5.3 of the IcedTea paper: an instance
consumed a later root's tuple before one of this scope) the node is marked ⚠
with the tuple in the way, and the header repeats why a step is refused.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Static, Tree


class ScopeView(Vertical):
    """Header (target, sizes, overlaps) above a tree of the scope; Enter on a tuple shows it whole."""

    class TupleChosen(Message):
        def __init__(self, label: str) -> None:
            super().__init__()
            self.label = label

    DEFAULT_CSS = """
    ScopeView > #scope-head { height: auto; max-height: 4; }
    ScopeView > Tree { height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="scope-head")
        tree: Tree[str] = Tree("scope", id="scope-tree")
        tree.show_root = False
        yield tree

    def show(self, target: str | None, lines: list, truncated: bool, availability: dict,
             overlaps: list | None, overlap_count: int | None) -> None:
        head = Text()
        tree = self.query_one("#scope-tree", Tree)
        tree.clear()
        if target is None or not lines:
            head.append("no tuple selected", style="dim")
            self.query_one("#scope-head", Static).update(head)
            return
        done = sum(1 for ln in lines if ln.consumed)
        head.append(f"scope of {target}", style="bold")
        head.append(f": {len(lines)}{'+' if truncated else ''} tuple{'' if len(lines) == 1 and not truncated else 's'}, "
                    f"{done} consumed")
        if overlap_count is None:
            head.append(" · overlaps not computed yet", style="dim")
        elif overlap_count:
            head.append(f" · {overlap_count} θ inputs without step-over in this run", style="yellow")
        else:
            head.append(" · no scopes overlap in this run", style="dim")
        over = availability.get("over")
        if over is not None and not over.ok:
            head.append("\n⚠ ", style="yellow")
            head.append(over.reason, style="yellow")
        self.query_one("#scope-head", Static).update(head)
        stack = [tree.root]
        for ln in lines:
            del stack[ln.depth + 1:]
            parent = stack[-1]
            label = Text("✓ " if ln.consumed else "○ ", style="green" if ln.consumed else "cyan")
            label.append(ln.label, style="dim" if ln.consumed else "bold")
            if ln.overlap:
                label.append(f"  ⚠ {ln.overlap}", style="yellow")
            node = parent.add(label, data=ln.label, expand=True)
            node.allow_expand = False
            stack.append(node)
        if truncated:
            tree.root.add_leaf(Text("… (scope truncated)", style="dim"))

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        event.stop()
        if isinstance(event.node.data, str):
            self.post_message(self.TupleChosen(event.node.data))

    def text(self) -> str:
        head = self.query_one("#scope-head", Static).content
        out = [head.plain if isinstance(head, Text) else str(head)]

        def walk(node, depth):
            for c in node.children:
                out.append("  " * depth + c.label.plain)
                walk(c, depth + 1)
        walk(self.query_one("#scope-tree", Tree).root, 0)
        return "\n".join(out)

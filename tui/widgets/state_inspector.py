"""The selected operator's state, per instance, as a tree; what the last action changed stands out.

States can hold millions of entries, so the tree is filled lazily: a node gets
its children when it is expanded, at most `CHILD_LIMIT` at a time (changed
entries first), with a "more" node for the rest. Changed values are yellow and
carry their old value; removed entries stay visible, struck through, until the
next action. The line under the tree shows the full path and value (and the old
value) of the node under the cursor. `search` finds a key or value and opens
the tree down to it.

After a step on the same operator the tree is patched, not rebuilt: only the
nodes whose value or highlight changed are relabelled, and newly changed keys
are inserted at the top of their (open) parent. A rebuild of a few hundred
nodes costs more than the step itself on a large state.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from ...replay import state_paths

CHILD_LIMIT = 200
OPEN_UP_TO = 30      # fields with at most this many entries start expanded
MISSING = state_paths.MISSING


@dataclass(frozen=True)
class Slot:
    """What a tree node stands for: a path into one instance's state (or a 'more' marker)."""

    instance: str
    path: tuple
    more: bool = False    # the "… N more" node under `path`


def short(value: Any, limit: int = 60) -> str:
    """A one-line rendering that never walks a large container (an array shows its items: it
    holds at most `values.SHOWN_ITEMS` of them, or its first ten)."""
    from ...core.values import render, render_array

    if isinstance(value, dict) and "$object" in value and len(value) == 2:
        text = render_array(value)
        if text is not None:
            return text if len(text) <= limit else text[: limit - 1] + "…"
    if isinstance(value, dict) and not (len(value) == 1 and next(iter(value)).startswith("$")):
        return f"{{{len(value):,} {'entry' if len(value) == 1 else 'entries'}}}"
    if isinstance(value, list):
        return f"[{len(value):,} {'item' if len(value) == 1 else 'items'}]"
    if isinstance(value, dict):
        (tag, inner), = value.items()
        if isinstance(inner, list) and len(inner) > 50:
            return f"{tag[1:]} of {len(inner):,}"
    return render(value, limit)


def _whole_if_small(value: Any, limit: int) -> str:
    """The detail line's rendering: a small container in full (`[1772443800]`), not just its
    size, when it fits on the line."""
    if _container(value) and len(value) <= 10:
        from ...core.values import render

        text = render(value, limit=None)
        if len(text) <= limit:
            return text
    return short(value, limit)


def _container(value: Any) -> bool:
    if isinstance(value, dict):
        return not (len(value) == 1 and next(iter(value)).startswith("$"))
    return isinstance(value, list)


def _iter_items(value: Any):
    return iter(value.items()) if isinstance(value, dict) else enumerate(value)


def _has(value: Any, key: Any) -> bool:
    if isinstance(value, dict):
        return key in value
    return isinstance(key, int) and 0 <= key < len(value)


def _get(value: Any, key: Any) -> Any:
    return value[key]


def _at(value: Any, key: Any) -> Any:
    return value[key] if value != MISSING and _container(value) and _has(value, key) else MISSING


class _Rebuild(Exception):
    """The tree cannot be patched (a value changed kind): build it again."""


def _was(old: Any) -> str:
    return "  (new)" if old == MISSING else f"  (was {short(old, 40)})"


class StateInspector(Vertical):
    """A tree of the selected operator's instance states, with changes highlighted."""

    DEFAULT_CSS = """
    StateInspector > Tree { height: 1fr; }
    StateInspector > #state-detail { height: auto; max-height: 3; color: $text-muted; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.op: str | None = None
        self.states: dict[str, Any] = {}
        self.changes: dict[str, dict[tuple, tuple]] = {}
        self.origins: dict[str, str] = {}   # instance -> where it ran (a streaming query's micro-batch)
        self._prefixes: dict[str, set[tuple]] = {}
        self._open_paths: set[tuple[str, tuple]] = set()
        self._cursor: tuple[str, tuple] | None = None
        self._note = ""

    def compose(self) -> ComposeResult:
        tree: Tree[Slot] = Tree("state", id="state-tree")
        tree.show_root = False
        tree.auto_expand = True
        yield tree
        yield Static("", id="state-detail")

    @property
    def tree(self) -> Tree[Slot]:
        return self.query_one("#state-tree", Tree)

    # --- data ---------------------------------------------------------------------------------

    def show(self, op: str | None, states: dict[str, Any], changes: dict[str, dict[tuple, tuple]],
             note: str = "") -> None:
        """Show `op`'s instance states; `changes` are {instance: {path: (old, new)}}."""
        tree = self.tree
        old_states, old_changes, old_prefixes = self.states, self.changes, self._prefixes
        if (op == self.op and states and set(states) == set(old_states) and tree.root.children
                and self._patch(states, changes, note, old_states, old_changes, old_prefixes)):
            return
        if op != self.op:  # a new operator: open its instances, and its fields that are small
            self._open_paths = {(inst, ()) for inst in states}
            for inst, state in states.items():
                if isinstance(state, dict):
                    self._open_paths.update((inst, (k,)) for k, v in state.items()
                                            if _container(v) and len(v) <= OPEN_UP_TO)
            self._cursor = None
        else:
            self._remember()
        self._set(op, states, changes, note)
        for inst, ch in changes.items():  # open the way down to what changed
            for path in list(ch)[:20]:
                for n in range(len(path)):
                    self._open_paths.add((inst, path[:n]))
        tree.clear()
        tree.root.data = None
        if not states:
            tree.root.add_leaf(Text(note or f"{op}: no state to show", style="dim"))
            self._update_detail(None)
            return
        cursor_node = None
        for inst, state in states.items():
            node = tree.root.add(self._label(inst, (), inst, state), data=Slot(inst, ()),
                                 allow_expand=_container(state))
            found = self._fill_expanded(node, inst, (), state)
            cursor_node = cursor_node or found
            if self._cursor == (inst, ()):
                cursor_node = node
        if cursor_node is not None:
            self.call_after_refresh(tree.move_cursor, cursor_node)
        self.call_after_refresh(self._update_detail, cursor_node)

    def _set(self, op: str | None, states: dict, changes: dict, note: str) -> None:
        self.op, self.states, self.changes, self._note = op, states, changes, note
        self._prefixes = {inst: state_paths.changed_prefixes(ch) for inst, ch in changes.items()}

    def _patch(self, states: dict, changes: dict, note: str, old_states: dict, old_changes: dict,
               old_prefixes: dict) -> bool:
        """Bring the tree from the old states to the new ones in place; False if it must be rebuilt."""
        self._set(self.op, states, changes, note)
        tree = self.tree
        try:
            for node in list(tree.root.children):
                slot = node.data
                if slot is None:
                    return False
                touched = old_prefixes.get(slot.instance, set()) | self._prefixes.get(slot.instance, set())
                self._reconcile(node, slot.instance, (), slot.instance, old_states[slot.instance],
                                states[slot.instance], touched)
            for inst, ch in changes.items():
                for path in list(ch)[:20]:
                    self._open_way(inst, path)
        except _Rebuild:
            return False
        cur = tree.cursor_node
        self.call_after_refresh(self._update_detail, cur if cur is not None and cur.tree is tree else None)
        return True

    def _reconcile(self, node: TreeNode[Slot], inst: str, path: tuple, key: Any, old: Any, new: Any,
                   touched: set[tuple]) -> None:
        same = old is new
        if same and path not in touched:
            return  # nothing under this node changed, not even its highlight
        changes = self.changes.get(inst, {})
        if new == MISSING:
            if path in changes:
                node.set_label(self._removed_label(key, changes[path][0]))
                node.remove_children()
                node.allow_expand = False
            else:
                node.remove()
            return
        if old != MISSING and _container(old) != _container(new):
            raise _Rebuild
        node.set_label(self._label(key, path, inst, new))
        if not _container(new):
            node.allow_expand = False
            return
        node.allow_expand = True
        if not node.children:
            return
        if not node.is_expanded:  # stale children: filled again when opened
            node.remove_children()
            return
        more = None
        for child in list(node.children):
            cs = child.data
            if cs is None:
                continue
            if cs.more:
                more = child
                continue
            k = cs.path[-1]
            self._reconcile(child, inst, cs.path, k, _at(old, k), _at(new, k), touched)
        shown = {c.data.path[-1] for c in node.children if c.data is not None and not c.data.more}
        first = next(iter(node.children), None)
        for p in changes:  # newly changed entries go on top, as a rebuild would put them
            if len(p) == len(path) + 1 and p[:-1] == path and p[-1] not in shown:
                k = p[-1]
                v = _at(new, k)
                if v == MISSING:
                    label, leaf = self._removed_label(k, changes[p][0]), True
                else:
                    label, leaf = self._label(k, p, inst, v), not _container(v)
                added = node.add(label, data=Slot(inst, p), before=first, allow_expand=not leaf)
                shown.add(k)
                first = first or added
        self._more_line(node, inst, path, new, shown, more)

    def _more_line(self, node: TreeNode[Slot], inst: str, path: tuple, value: Any, shown: set,
                   more: TreeNode[Slot] | None) -> None:
        left = len(value) - sum(1 for k in shown if _has(value, k))
        if left <= 0:
            if more is not None:
                more.remove()
            return
        shows = "it" if left == 1 else "them" if left <= CHILD_LIMIT else f"{CHILD_LIMIT} more"
        label = Text(f"… {left:,} more (Enter shows {shows})", style="italic dim")
        if more is None:
            node.add_leaf(label, data=Slot(inst, path, more=True))
        else:
            more.set_label(label)

    def _open_way(self, inst: str, path: tuple) -> None:
        """Expand the nodes down to `path` (they exist after `_reconcile`, or are added here)."""
        node = next((c for c in self.tree.root.children if c.data is not None and c.data.instance == inst), None)
        if node is None:
            raise _Rebuild
        state = self.states.get(inst)
        for depth in range(len(path)):
            value = state_paths.lookup(state, path[:depth])
            if not _container(value):
                return
            if not node.children:
                self._populate(node, inst, path[:depth], value)
            if not node.is_expanded:
                node.expand()
            nxt = next((c for c in node.children if c.data is not None and not c.data.more
                        and c.data.path == path[:depth + 1]), None)
            if nxt is None:
                return  # removed, or a change without its own line: the parent shows it
            node = nxt

    def _remember(self) -> None:
        tree = self.tree
        expanded = set()

        def walk(node: TreeNode[Slot]) -> None:
            for child in node.children:
                if child.data is not None and child.is_expanded and not child.data.more:
                    expanded.add((child.data.instance, child.data.path))
                    walk(child)
        walk(tree.root)
        if expanded:
            self._open_paths = expanded
        cur = tree.cursor_node
        if cur is not None and cur.data is not None:
            self._cursor = (cur.data.instance, cur.data.path)

    def _fill_expanded(self, node: TreeNode[Slot], inst: str, path: tuple, value: Any) -> TreeNode | None:
        """Populate `node` if it was expanded before; return the node the cursor was on, if met."""
        found = None
        if (inst, path) in self._open_paths and _container(value):
            self._populate(node, inst, path, value)
            node.expand()
            for child in node.children:
                if child.data is None or child.data.more:
                    continue
                if (child.data.instance, child.data.path) == self._cursor:
                    found = child
                f = self._fill_expanded(child, inst, child.data.path, state_paths.lookup(value, child.data.path[-1:]))
                found = found or f
        return found

    def _populate(self, node: TreeNode[Slot], inst: str, path: tuple, value: Any, shown: frozenset = frozenset()) -> None:
        """Add up to CHILD_LIMIT children of `value` not `shown` yet: changed entries first, then the rest in order.

        Never walks more of the container than it shows (and skips): millions of entries cost what is shown."""
        changes = self.changes.get(inst, {})
        prefixes = self._prefixes.get(inst, set())
        depth = len(path) + 1
        changed = []
        seen = set()
        for p in prefixes:  # the keys under `path` that changed (or contain a change)
            if len(p) == depth and p[:-1] == path and p[-1] not in seen:
                seen.add(p[-1])
                changed.append(p[-1])
        changed.sort(key=lambda k: (not isinstance(k, int), k if isinstance(k, int) else str(k)))
        present = [k for k in changed if _has(value, k)]
        if not shown:
            for k in changed:
                if not _has(value, k) and path + (k,) in changes:
                    node.add_leaf(self._removed_label(k, changes[path + (k,)][0]), data=Slot(inst, path + (k,)))
        first = set(present)
        shown_changed = [k for k in present if k not in shown][:CHILD_LIMIT]
        room = CHILD_LIMIT - len(shown_changed)
        rest = itertools.islice(((k, v) for k, v in _iter_items(value) if k not in first and k not in shown), room)
        entries = [(k, _get(value, k)) for k in shown_changed] + list(rest)
        for k, v in entries:
            p = path + (k,)
            if _container(v):
                node.add(self._label(k, p, inst, v), data=Slot(inst, p))
            else:
                node.add_leaf(self._label(k, p, inst, v), data=Slot(inst, p))
        self._more_line(node, inst, path, value, set(shown) | {k for k, _ in entries}, None)

    def _label(self, key: Any, path: tuple, inst: str, value: Any) -> Text:
        changes = self.changes.get(inst, {})
        prefixes = self._prefixes.get(inst, set())
        name = str(key)
        if path == ():
            t = Text(name, style="bold")
            if inst in self.origins:
                t.append(f" ({self.origins[inst]})", style="italic")
            if _container(value):
                t.append(f"  {short(value)}", style="dim")
            else:
                t.append(f" = {short(value)}")
            if path in prefixes and changes:
                t.append("  changed", style="yellow")
            return t
        t = Text()
        if _container(value):
            t.append(name, style="bold yellow" if path in prefixes else "bold")
            t.append(f"  {short(value)}", style="dim")
            if path in changes:
                t.append(_was(changes[path][0]), style="dim")
            return t
        style = "bold yellow" if path in changes else ""
        t.append(f"{name}: ", style="yellow" if path in changes else "")
        t.append(short(value), style=style)
        if path in changes:
            t.append(_was(changes[path][0]), style="dim")
        return t

    def _removed_label(self, key: Any, old: Any) -> Text:
        if key == "…":  # the session lists at most 50 changed keys per field; this is the count of the rest
            return Text(f"… {old if isinstance(old, str) else 'more keys changed'} (not listed)", style="dim italic")
        t = Text(f"{key}: {short(old)}", style="strike red")
        t.append("  removed", style="red")
        return t

    # --- events ---------------------------------------------------------------------------------

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[Slot]) -> None:
        node = event.node
        slot = node.data
        if slot is None or slot.more or node.children:
            return
        value = state_paths.lookup(self.states.get(slot.instance), slot.path)
        if _container(value):
            self._populate(node, slot.instance, slot.path, value)

    def on_tree_node_selected(self, event: Tree.NodeSelected[Slot]) -> None:
        node = event.node
        slot = node.data
        if slot is None or not slot.more:
            return
        parent = node.parent
        value = state_paths.lookup(self.states.get(slot.instance), slot.path)
        node.remove()
        if parent is not None and _container(value):
            shown = frozenset(c.data.path[-1] for c in parent.children if c.data is not None and not c.data.more)
            self._populate(parent, slot.instance, slot.path, value, shown)

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[Slot]) -> None:
        self._update_detail(event.node)

    def _update_detail(self, node: TreeNode[Slot] | None) -> None:
        detail = self.query_one("#state-detail", Static)
        if node is None or node.data is None or node.data.more or node.data.path[-1:] == ("…",):
            detail.update(Text(self._note, style="italic") if self._note else "")
            return
        slot = node.data
        value = state_paths.lookup(self.states.get(slot.instance), slot.path)
        where = " › ".join([slot.instance, *map(str, slot.path)])
        t = Text(where, style="bold")
        t.append(f" = {_whole_if_small(value, 200)}")
        change = self.changes.get(slot.instance, {}).get(slot.path)
        if change is not None:
            t.append("   new since the last position" if change[0] == MISSING else f"   was {short(change[0], 120)}",
                     style="yellow")
        detail.update(t)

    # --- search ---------------------------------------------------------------------------------

    def search(self, text: str) -> bool:
        """Move to the next key or value containing `text` (after the cursor, wrapping); False if none."""
        order = []
        for inst, state in self.states.items():
            order.extend((inst, p) for p in state_paths.find_paths(state, text))
        if not order:
            return False
        cur = self.tree.cursor_node
        here = (cur.data.instance, cur.data.path) if cur is not None and cur.data is not None else None
        target = order[0]
        if here in order:
            target = order[(order.index(here) + 1) % len(order)]
        elif here is not None:
            insts = list(self.states)
            after = [o for o in order if (insts.index(o[0]), o[1]) > (insts.index(here[0]), here[1])]
            target = after[0] if after else order[0]
        self.reveal(*target)
        return True

    def reveal(self, inst: str, path: tuple) -> None:
        tree = self.tree
        node = next((c for c in tree.root.children if c.data is not None and c.data.instance == inst), None)
        if node is None:
            return
        for depth in range(len(path)):
            if not node.is_expanded:
                node.expand()
            if not node.children:
                value = state_paths.lookup(self.states.get(inst), path[:depth])
                self._populate(node, inst, path[:depth], value)
            nxt = next((c for c in node.children if c.data is not None and not c.data.more
                        and c.data.path == path[:depth + 1]), None)
            if nxt is None:  # beyond the first CHILD_LIMIT entries: add it explicitly
                value = state_paths.lookup(self.states.get(inst), path[:depth + 1])
                nxt = (node.add if _container(value) else node.add_leaf)(
                    self._label(path[depth], path[:depth + 1], inst, value), data=Slot(inst, path[:depth + 1]))
            node = nxt
        self._cursor = (inst, path)
        self.call_after_refresh(tree.move_cursor, node)
        self.call_after_refresh(self._update_detail, node)

    def visible_text(self) -> str:
        """Every label in the tree (expanded parts), as plain text (tests, the tmux smoke test)."""
        out = []

        def walk(node: TreeNode[Slot], depth: int) -> None:
            for child in node.children:
                out.append("  " * depth + child.label.plain)
                if child.is_expanded:
                    walk(child, depth + 1)
        walk(self.tree.root, 0)
        return "\n".join(out)

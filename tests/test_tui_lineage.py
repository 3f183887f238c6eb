"""`w` in `tt debug` (issue 16): why is this here, beside the state, driven through the real app.

The oracle is `Lineage` itself on a second session (what `tt lineage` prints is tested against
data the job carries in tests/test_lineage.py); here the question is whether the app shows that
tree for what is selected, and whether Enter on a leaf takes the user to just before it is consumed.
"""

from __future__ import annotations

import pytest

from test_tui import answer, condition_k, drive, keys, message, record_fraud, until
from tt.replay.lineage import Lineage
from tt.replay.session import DebugSession
from tt.tui.app import DebuggerApp
from tt.tui.widgets.dag_view import DagView
from tt.tui.widgets.lineage_tree import LineageTree
from tt.tui.widgets.log_browser import LogBrowser
from tt.tui.widgets.pending_tuples import PendingTuples
from tt.tui.widgets.state_inspector import StateInspector
from tt.tui.widgets.watch_list import WatchList

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fraud_run(spark, tmp_path_factory):
    return record_fraud(spark, tmp_path_factory.mktemp("tui-why") / "fraud.db")


def bobs_blacklist(run) -> tuple[int, str, list[str]]:
    """(the interaction right after the ¥ payment, the FD instance holding Bob, the labels of the
    calls that wrote blacklist['Bob'] there: the oracle)."""
    k = condition_k(run)
    session = DebugSession(run)
    try:
        assert session.jump(k).ok
        fd = session.reader.operator("FD")
        [i] = [i for i in range(fd.instances) if "Bob" in session.engine.instances[(fd.id, i)].state()["blacklist"]]
        at = session.engine.instances[(fd.id, i)].count
        lineage = Lineage(session)
        root = lineage.state_value(f"FD:{i}", "blacklist.Bob", at=at)
        (tree,) = lineage.trees([root], back=True)
        writers = [lineage.label(link.to) for link in tree.links if link.src == root]
        return k, f"FD:{i}", writers
    finally:
        session.reader.close()


def test_w_on_a_state_field_shows_who_wrote_it_and_enter_jumps_before_it(fraud_run):
    k, fd, writers = bobs_blacklist(fraud_run)
    assert len(writers) == 1
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, str(k))
        app.query_one(DagView).focus()
        await keys(pilot, "right")
        await until(pilot, lambda: app.shown.op == "FD", what="FD's state")
        state = app.query_one(StateInspector)
        await until(pilot, lambda: any(n.data is not None and n.data.instance == fd and n.data.path == ("blacklist",)
                                       for n in _nodes(state.tree)), what="FD's blacklist in the state tree")
        blacklist = next(n for n in _nodes(state.tree) if n.data is not None and n.data.instance == fd
                         and n.data.path == ("blacklist",))
        blacklist.expand()
        await until(pilot, lambda: any(n.data is not None and n.data.path == ("blacklist", "Bob")
                                       for n in blacklist.children), what="Bob under the blacklist")
        bob = next(n for n in blacklist.children if n.data is not None and n.data.path == ("blacklist", "Bob"))
        state.tree.focus()
        state.tree.move_cursor(bob)
        await keys(pilot, "w")
        why = app.query_one(LineageTree)
        assert why.display and why.has_focus
        lines = why.lines
        assert lines[0].startswith(f"{fd} blacklist['Bob']"), lines[:3]
        assert any(f"by {writers[0]}" in line and "¥5000" in line for line in lines), lines
        assert message(app).startswith(f"why {fd} blacklist['Bob']: ")
        n, word = message(app).split(": ")[1].split(";")[0].split()
        assert word == ("tuple" if n == "1" else "tuples"), message(app)
        # the ¥5000 payment entered G(θ) at FE, θ: Enter on it goes to just before it is consumed --
        # the last interaction before it, then FE's instance alone up to it -- and selects it there
        leaf = next(n for n in _nodes(why) if n.data is not None)
        entered = leaf.data
        why.move_cursor(leaf)
        await keys(pilot, "enter")
        label = f"FE:{entered.instance}"
        assert app.shown.position[label] == entered.position, (app.shown.position, entered)
        assert app.selected_ref == entered and app.shown.selected == entered
        assert message(app).startswith(f"{label}:{entered.position} waits at {label}: interaction "), message(app)
        k_before = int(message(app).split("interaction ")[1].split(",")[0])
        assert k_before < k and app.shown.position["FD:0"] + app.shown.position["FD:1"] < sum(
            p for lbl, p in _positions_at(fraud_run, k).items() if lbl.startswith("FD:"))
        await keys(pilot, "w")
        assert not why.display, "w again closes the tree"
    drive(app, script, size=(160, 48))


def test_enter_on_a_leaf_of_the_operator_shown_shows_its_state_there(fraud_run):
    """Enter on a lineage leaf goes to just before it is consumed. Where the leaf is an input of
    the operator already shown, its state tree kept the values of where the user was (the move
    is a jump, which lists no changes, and the tree was patched with none): FE:2's highest said
    120.95 for a customer FE had not seen there. The tree shows the state where it now stands."""
    k, _, _ = bobs_blacklist(fraud_run)
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, str(k))
        assert app.shown.op == "FE"
        state = app.query_one(StateInspector)
        field = next(n for n in _nodes(state.tree) if n.data is not None and len(n.data.path) == 1
                     and n.allow_expand and n.data.path[0] != "locals")
        field.expand()
        await until(pilot, lambda: any(c.data is not None and not c.data.more for c in field.children),
                    what="the field's entries")
        entry = next(c for c in field.children if c.data is not None and not c.data.more)
        state.tree.focus()
        state.tree.move_cursor(entry)
        await keys(pilot, "w")
        why = app.query_one(LineageTree)
        leaf = next(n for n in _nodes(why) if n.data is not None)
        why.move_cursor(leaf)
        await keys(pilot, "enter")
        assert app.shown.op == "FE" and app.shown.position[f"FE:{leaf.data.instance}"] == leaf.data.position
        now = app.model.call(lambda s: {s.label(key): s.instance_state(key) for key in s.engine.instances
                                        if s.label(key).startswith("FE:")})
        assert state.states == now, "the state tree shows another position's values"
    drive(app, script, size=(160, 48))


def test_w_on_a_waiting_tuple_and_the_watch_keys_moved(fraud_run):
    """`w` with the waiting tuples focused traces the selected tuple; watching is now `+` and `-`."""
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        pending = app.query_one(PendingTuples)
        pending.focus()
        ref = app.selected_ref or app.shown.default
        assert ref is not None
        await keys(pilot, "w")
        why = app.query_one(LineageTree)
        assert why.display and why.lines[0].startswith(app.model.call(lambda s: s.label(ref)))
        await keys(pilot, "w")
        assert not why.display
        await keys(pilot, "plus")
        await answer(pilot, "len(FD.blacklist)")
        assert message(app) == "watching len(FD.blacklist)"
        assert app.query_one(WatchList).display
        await keys(pilot, "minus")
        assert message(app) == "no longer watching len(FD.blacklist)"
    drive(app, script, size=(160, 48))


def test_enter_on_a_why_tree_of_one_tuple_goes_before_it(fraud_run):
    """A θ input's why tree is the tuple alone, which entered G(θ) there: the message said
    "Enter on a leaf (←) goes to just before it is consumed", and Enter did nothing."""
    k, _, _ = bobs_blacklist(fraud_run)
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, str(k))
        pending = app.query_one(PendingTuples)
        pending.focus()
        ref = app.shown.selected
        assert ref is not None and app.shown.op == "FE"
        await keys(pilot, "w")
        why = app.query_one(LineageTree)
        assert why.lines == why.lines[:1] and why.root.data == ref, why.lines
        why.move_cursor(why.root)
        await keys(pilot, "enter")
        label = f"FE:{ref.instance}"
        assert app.shown.position[label] == ref.position and app.shown.selected == ref
        assert message(app).startswith(f"{label}:{ref.position} waits at {label}: interaction "), message(app)
    drive(app, script, size=(160, 48))


def test_w_on_a_sink_row_and_on_a_recorded_tuple_in_the_logs_view(fraud_run):
    """A sink's rows are its Input log: `w` on one opens, in the debug view, its tree; the sink
    row's source is the payment with the row's own id (the job carries ids end to end; the
    oracle is the row's value, not tt's links). On a recorded tuple, `w` traces the tuple it
    was consumed as: a leaf that entered θ. On an interaction, it says what it can trace."""
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "4")
        logs = app.query_one(LogBrowser)
        await until(pilot, lambda: logs.base is not None and logs.lines.total > 0, what="the interactions log")
        logs.lines.focus()
        await keys(pilot, "w")
        assert message(app).startswith("nothing to trace in this row"), message(app)

        logs.open_source("in:S:1")
        await until(pilot, lambda: logs.base is not None and logs.base.key == "in:S:1", what="S:1's Input log")
        logs.lines.focus()
        for _ in range(7):
            await pilot.press("down")
        await until(pilot, lambda: logs.lines.cursor == 7, what="row 7")
        await keys(pilot, "w")
        why = app.query_one(LineageTree)
        assert app.view == "debug" and why.display and why.has_focus
        assert why.border_title == "why S:1:7" and message(app).startswith("why S:1:7: "), message(app)
        root = why.lines[0]
        assert root.startswith("S:1:7  {"), why.lines[:2]
        row_id = int(root.split("id: ")[1].split(",")[0])
        entered = [line for line in why.lines if "entered G(θ) at FE" in line]
        assert len(entered) == 1 and f"{{id: {row_id}," in entered[0], why.lines
        await keys(pilot, "4")   # the tree stays open in the debug view; `w` in the logs view traces a row
        logs.open_source("tuples:FE:0")
        await until(pilot, lambda: logs.base is not None and logs.base.key == "tuples:FE:0", what="FE:0's tuples")
        logs.lines.focus()
        await until(pilot, lambda: logs.lines.row_cells(0) is not None, what="the first recorded tuple")
        first = logs.lines.row_cells(0)[2]
        await keys(pilot, "w")
        assert why.display and why.border_title.startswith("why FE:0:"), why.border_title
        assert len(why.lines) == 1 and "entered G(θ) at FE (θ's input) from source U" in why.lines[0]
        assert first.split(",")[0] in why.lines[0], (first, why.lines)
    drive(app, script, size=(160, 48))


def _positions_at(run, k: int) -> dict[str, int]:
    from tt.store.reader import RunReader

    r = RunReader(run)
    try:
        return {f"{r.operators[op].name}:{i}": a.position for (op, i), a in r.instances_at(k).items()}
    finally:
        r.close()


def _nodes(tree):
    stack = [tree.root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)

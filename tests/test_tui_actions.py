"""The debugger's table of actions, its layout decision and its worker reports, without Spark.

The footer, the key handler, the command palette and the help screen all read
`tui/actions.py`; these tests check that the table is consistent and that
nothing bypasses it, that `layout.arrange` picks the panes a size calls for, and
that a worker's report not yet handled keeps the app from looking idle (the
TUI tests wait on `is_idle` before they look at the screen).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from tt.tui import actions, layout
from tt.tui.actions import ACTIONS, When
from tt.tui.app import DebuggerApp, LiveJob
from tt.tui.help_screen import SECTIONS
from tt.tui.messages import ActionDone, Say, SessionFailed
from tt.tui.engine_thread import EngineClosed, EngineThread
from tt.tui.widgets.dag_view import DagEdge, DagNode, DagView
from tt.tui.widgets.message_line import MessageLine


def test_the_table_has_no_duplicate_keys_or_ids():
    keys = [key for a in ACTIONS for key in a.keys]
    ids = [a.id for a in ACTIONS] + [id_ for a in ACTIONS for id_ in a.other_keys.values()]
    assert len(keys) == len(set(keys)), keys
    assert len(ids) == len(set(ids)), ids
    palette = [a.palette for a in ACTIONS if a.palette]
    assert len(palette) == len(set(palette)), palette


def test_every_binding_comes_from_the_table():
    table = {(key, a.binding_action) for a in ACTIONS for key in a.keys}
    bound = [(b.key, b.action) for b in DebuggerApp.BINDINGS]
    assert set(bound) == table and len(bound) == len(table)
    assert [b.key for b in DebuggerApp.BINDINGS if b.show] == [a.key for a in ACTIONS if a.footer]


def test_every_action_has_a_method_and_one_when():
    for a in ACTIONS:
        assert callable(getattr(DebuggerApp, f"action_{a.name}", None)), a.name
        assert actions.WHEN[a.name] is a.when, f"{a.name}: every entry of a name is available alike"
    steps = {a.when.step for a in ACTIONS if a.when.step}
    assert steps == {"over", "into", "out", "back"}


def test_the_palette_help_fills_in_only_what_the_app_knows():
    for a in ACTIONS:
        a.palette_help.format(target="FE:0:1", watch="len(FD.blacklist)", busy="jump to 3")
        assert (a.palette is None) == (a.palette_help == ""), a.name


def test_the_help_lists_every_key():
    cells = [keys.split() for _, rows in SECTIONS for keys, _ in rows]
    for a in ACTIONS:
        assert any(set(a.keys_on_help.split()) <= set(cell) for cell in cells), a.name
    for _, rows in SECTIONS:
        for keys, what in rows:
            assert keys and what, (keys, what)


def test_the_help_writes_keys_as_before():
    rows = dict(row for _, section in SECTIONS for row in section)
    assert rows["N  S  F"].startswith("step back: ")
    assert rows["[  ]"] == "previous / next interaction"
    assert rows["+  -"].startswith("watch an expression")
    assert rows["w"].startswith("why: the lineage")
    assert rows["1 … 5"].startswith("views: ")
    assert rows["Esc"].startswith("cancel a running jump")
    assert "?" in rows and "/" in rows


def test_key_lookup():
    assert actions.BY_KEY["n"].name == "step_over" and actions.BY_KEY["n"].when is When.OVER
    assert {actions.BY_KEY[k].name for k in "NSF"} == {"step_back"}
    assert actions.BY_KEY["left_square_bracket"].name == "prev_interaction"
    assert actions.BY_KEY["4"].binding_action == "view('logs')"


DEBUG_PANES = ("#col-run", "#dag", "#timeline", "#col-tuples", "#pending", "#avail", "#scope", "#col-state")


@pytest.mark.parametrize("width,height,wide", [(80, 24, False), (140, 40, True), (160, 48, True),
                                               (100, 30, False), (139, 48, False), (160, 39, False)])
def test_the_layout_at_each_size(width, height, wide):
    arrangement = layout.arrange(width, height, "debug")
    assert arrangement.wide is wide and arrangement.view == "debug"
    assert arrangement.display["#debug-area"] and not arrangement.display["#logs"] and not arrangement.display["#plots"]
    assert arrangement.classes["#main"]["-wide"] is wide and arrangement.classes["#main"]["-narrow"] is not wide
    assert arrangement.classes["#main"]["-view-debug"] and arrangement.classes["#plots"]["-wide"] is wide
    if wide:
        assert all(arrangement.display[p] for p in DEBUG_PANES)
        assert arrangement.views == ["debug", "logs", "plots"]
    else:
        shown = {p for p in DEBUG_PANES if arrangement.display[p]}
        assert shown == {"#col-run", "#dag", "#col-tuples", "#pending", "#avail", "#col-state"}
        assert arrangement.views == ["debug", "timeline", "scope", "logs", "plots"]


def test_the_layout_of_each_narrow_view():
    timeline = layout.arrange(80, 24, "timeline")
    assert timeline.view == "timeline" and timeline.display["#timeline"] and timeline.display["#col-run"]
    assert not timeline.display["#col-tuples"] and not timeline.display["#col-state"]
    scope = layout.arrange(80, 24, "scope")
    assert scope.display["#scope"] and scope.display["#col-tuples"] and not scope.display["#pending"]
    assert not scope.display["#col-run"]
    logs = layout.arrange(80, 24, "logs")
    assert logs.display["#logs"] and not logs.display["#debug-area"] and logs.classes["#main"]["-view-logs"]


def test_the_wide_debug_view_holds_the_timeline_and_the_scope():
    for view in ("timeline", "scope"):
        arrangement = layout.arrange(160, 48, view)
        assert arrangement.view == "debug" and arrangement.classes["#main"]["-view-debug"]
        assert not arrangement.classes["#main"][f"-view-{view}"]
    assert layout.arrange(160, 48, "plots").display["#plots"]


def _run(app: DebuggerApp, script) -> None:
    async def run():
        async with app.run_test(size=(80, 24)) as pilot:
            await script(pilot)
    asyncio.run(run())


def test_a_report_keeps_the_app_busy_until_it_is_handled(tmp_path):
    app = DebuggerApp(tmp_path / "missing.db", live=LiveJob())   # (a run file to come: loading until then)

    async def script(pilot):
        await pilot.pause()
        assert app.model is None and not app.is_idle, "no engine and no error: still loading"
        app._report(SessionFailed("no run file"))
        assert not app.is_idle, "the failure is posted, not yet handled"
        await pilot.pause()
        assert app.session_error == "no run file" and app.is_idle

        app._report(Say("hello"))
        assert not app.is_idle
        await pilot.pause()
        assert app.is_idle and app.query_one(MessageLine).plain == "hello"

        app.busy = "jump to 1"                            # as `_start` does
        app._busy_timer = app.set_timer(60, lambda: None)
        app._report(ActionDone(None, "jump to 1: cancelled", "warning"))
        assert not app.is_idle
        await pilot.pause()
        assert app.busy is None and app.is_idle
        assert app.query_one(MessageLine).plain == "jump to 1: cancelled"
    _run(app, script)


def test_callbacks_that_fire_as_the_app_shuts_down_do_nothing(tmp_path):
    """The live poll's timer, the busy bar's timer and the recorder's "job finished" can each fire
    after the app has begun to shut down and its widgets are going (CI saw the poll fail on a
    ProgressLine whose children were gone). `_shutdown` stops the app running before it prunes the
    widgets; once it has run there are no widgets at all, so each must first ask whether the app runs."""
    app = DebuggerApp(tmp_path / "missing.db", live=LiveJob())

    async def script(pilot):
        await pilot.pause()
        assert app.is_running and app.model is None
    _run(app, script)
    assert not app.is_running
    app._poll()
    app.busy = "jump to 1"
    app._show_busy("jump to 1", True)
    app.job_finished("complete")
    assert app.live.finished and app.live.outcome == "complete"


def _narrow_dataflow_pane():
    """An app holding a DagView as the narrow debug view's pane holds it: 7 lines, its title one
    of them (tui/debugger.tcss), so two rows of operators; and a graph of three rows (three
    sources joined), to set once it runs."""
    from textual.app import App

    class Pane(App):
        CSS = "DagView { height: auto; max-height: 7; overflow-y: auto; border-top: heavy white; }"

        def compose(self):
            yield DagView()

    sources = [DagNode(i, f"S{i}", "source", False, False, 1) for i in range(3)]
    return Pane(), [*sources, DagNode(3, "J", "join", True, True, 1)], [DagEdge(i, 3, False) for i in range(3)]


def test_the_dataflow_pane_scrolls_to_the_operator_the_arrows_select():
    """A third source's row was cut in the narrow pane, and the down arrow selected it out of sight."""
    app, nodes, edges = _narrow_dataflow_pane()

    async def script(pilot):
        dag = app.query_one(DagView)
        dag.set_graph(nodes, edges)
        dag.focus()
        await pilot.press("left")            # from θ (J) to the sources' layer
        for _ in range(2):
            await pilot.press("down")
        await pilot.pause()
        shown = dag.content_region.height

        def visible() -> list[str]:
            return dag.render().plain.splitlines()[:shown]
        assert dag.selected_name == "S2" and shown == 6 and len(dag.render_text().splitlines()) == 8
        assert any("S2" in line for line in visible()), visible()
        x0, _, y = dag._dag_boxes[1]            # a click on S1, where the pane shows it now (below its title)
        await pilot.click(DagView, offset=(x0 + 1, 1 + y - dag._top))
        assert dag.selected_name == "S1"
        await pilot.press("up")
        await pilot.pause()
        assert dag.selected_name == "S0" and any("S0" in line for line in visible()), visible()
    asyncio.run(_pilot(app, script))


def test_the_dataflow_pane_counts_the_operators_out_of_sight_and_the_wheel_moves_it():
    """In the narrow pane, a row of operators below (or above) the lines shown is said at the
    pane's right edge, and the mouse wheel moves the drawing: before, nothing said a third row was
    there, and the wheel did nothing."""
    from textual.events import MouseScrollDown, MouseScrollUp

    app, nodes, edges = _narrow_dataflow_pane()

    async def script(pilot):
        dag = app.query_one(DagView)
        dag.set_graph(nodes, edges)
        await pilot.pause()

        def shown() -> list[str]:
            return dag.render().plain.splitlines()
        assert dag.selected_name == "J" and dag._top == 0
        assert shown()[-1].endswith("▼ 1 more") and not any("▲" in line for line in shown()), shown()
        assert not any("S2" in line for line in shown())
        for _ in range(3):   # the third turn finds the drawing's end and stays (Pilot's helper: it has no wheel)
            await pilot._post_mouse_events([MouseScrollDown], DagView, offset=(2, 2))
        assert dag._top == 2 and any("S2" in line for line in shown()), shown()
        assert shown()[0].endswith("▲ 2 more") and not any("▼" in line for line in shown()), shown()   # S0 and J
        await pilot._post_mouse_events([MouseScrollUp], DagView, offset=(2, 2))
        await pilot._post_mouse_events([MouseScrollUp], DagView, offset=(2, 2))
        assert dag._top == 0 and shown()[-1].endswith("▼ 1 more") and not any("▲" in line for line in shown())
    asyncio.run(_pilot(app, script))


async def _pilot(app, script) -> None:
    async with app.run_test(size=(80, 24)) as pilot:
        await script(pilot)


def test_the_engine_thread_runs_every_call_and_lets_waiting_callers_go_when_closed():
    """One thread for every call (greenlets cannot change threads); a call from that thread runs at once;
    exceptions reach the caller; closing lets a caller still waiting go, and the thread ends after its call."""
    engine = EngineThread()
    assert engine.thread is None, "started by the first call, not by building the app"
    ran_on = engine.call(threading.current_thread)
    assert ran_on is engine.thread and ran_on is not threading.main_thread() and ran_on.daemon
    assert engine.call(lambda: engine.call(threading.current_thread)) is ran_on, "reentrant, no deadlock"
    with pytest.raises(KeyError):
        engine.call(lambda: {}["missing"])
    assert engine.call(threading.current_thread) is ran_on, "an exception does not end the thread"

    running, release = threading.Event(), threading.Event()
    outcome: list = []

    def caller() -> None:
        try:
            engine.call(lambda: (running.set(), release.wait()))
            outcome.append("returned")
        except EngineClosed:
            outcome.append("let go")
    waiting = threading.Thread(target=caller)
    waiting.start()
    assert running.wait(30)
    engine.close()
    waiting.join(30)
    assert outcome == ["let go"], "the caller does not wait for a call that may never end"
    with pytest.raises(EngineClosed):
        engine.call(threading.current_thread)
    assert ran_on.is_alive(), "it finishes the call it runs"
    release.set()
    ran_on.join(30)
    assert not ran_on.is_alive()


def test_every_key_the_readme_lists_is_an_action_of_the_app():
    """The README's table of keys is what the app binds (a key moved, as watch did, moves there too)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = readme.index("| key | does | key | does |")
    table = readme[start:readme.index("\n\n", start)]
    bound = {a.key_display or a.key for a in ACTIONS} | {k for a in ACTIONS for k in a.other_keys}
    named = {"Esc": "escape", "Ctrl+P": None}   # the palette is Textual's, not an action
    cells = [cell for line in table.splitlines()[2:] for i, cell in enumerate(line.split("|")[1:-1]) if i % 2 == 0]
    listed = {k for cell in cells for k in re.findall(r"`([^`]+)`", cell)}
    assert {"n", "+", "-", "w", "Esc", "1"} <= listed, listed
    for key in listed:
        key = named.get(key, key)
        if key is not None:
            assert key in bound, f"the README lists `{key}`, which the app does not bind"

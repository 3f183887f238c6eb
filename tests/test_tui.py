"""`tt debug` driven through Textual's Pilot over real recorded runs (fraud and keywords samples).

Every test presses the keys a user would and asserts on what the widgets show:
the DAG's counts, the timeline's marker, the position line, the state tree and
its highlighted changes, the pending tuples and why a step is refused, the
scope, the log browser's rows, and a recording followed live.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
import re
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import workloads

from tt.cli.main import main
from tt.recorder.session import RecordingSession
from tt.replay import facts, logview
from tt.store.reader import RunReader
from tt.tui import actions
from tt.tui.app import DebuggerApp, HelpScreen, LiveJob, PromptScreen
from tt.tui.widgets.availability_line import AvailabilityLine
from tt.tui.widgets.dag_view import DagView
from tt.tui.widgets.lineage_tree import LineageTree
from tt.tui.widgets.log_browser import LogBrowser
from tt.tui.widgets.message_line import MessageLine
from tt.tui.widgets.pending_tuples import PendingTuples
from tt.tui.widgets.plots import RunPlots
from tt.tui.widgets.progress_line import ProgressLine
from tt.tui.widgets.scope_view import ScopeView
from tt.tui.widgets.state_inspector import StateInspector
from tt.tui.widgets.timeline import InteractionTimeline
from tt.tui.widgets.view_bar import ViewBar

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
FRAUD_ROWS = 20_000


def _generate(path: Path, rows: int) -> Path:
    spec = importlib.util.spec_from_file_location("fraud_generate", ROOT / "sample_runs" / "fraud" / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen.write(rows, path)


def record_fraud(spark, out: Path, *, partitions: int = 2, rows: int = FRAUD_ROWS, every=None) -> Path:
    fraud = workloads.load_sample("fraud")
    data = _generate(out.parent / f"payments-{rows}.parquet", rows)
    s = RecordingSession(out, Path(fraud.__file__), [], watch="FE", every=every,
                         when="row['amount'].startswith('¥')")
    with s:
        fraud.build(spark, str(data), partitions).run()
    s.close()
    return out


@pytest.fixture(scope="module")
def fraud_run(spark, tmp_path_factory):
    return record_fraud(spark, tmp_path_factory.mktemp("tui-fraud") / "fraud.db")


@pytest.fixture(scope="module")
def keywords_run(spark, tmp_path_factory):
    keywords = workloads.load_sample("keywords")
    out = tmp_path_factory.mktemp("tui-keywords") / "keywords.db"
    s = RecordingSession(out, Path(keywords.__file__), [], watch="Clean",
                         when="row['id'] % 1000 == 999")
    with s:
        keywords.build(spark, 6000, 2).run()
    s.close()
    return out


# --- driving the app ------------------------------------------------------------------------------

def drive(app: DebuggerApp, script, size=(80, 24)):
    async def run():
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.model is not None or app.session_error is not None)
            await idle(pilot)
            return await script(pilot)
    return asyncio.run(run())


async def until(pilot, cond, timeout: float = 120.0, what: str = "condition"):
    """Wait for `cond` on the app's state, letting the app run between looks (the timeout only bounds a failure)."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause()


async def idle(pilot):
    """Wait until the app says nothing is under way (`DebuggerApp.is_idle`: no action, no pending
    answer, no worker), then until what it scheduled on screen has been drawn."""
    app = pilot.app
    await pilot.pause()
    await until(pilot, lambda: app.is_idle, what="the app to be idle")
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


async def select_waiting(pilot, pending, ref):
    """Move the waiting list's cursor to `ref` with the arrows, down or up as it lies, a row at a
    time, the app's answer to each move awaited. Where the cursor starts depends on the
    recording's timing: a loop that only pressed down ran until pytest's timeout in a loaded run
    (2026-12-08), likely from below `ref` (a jump leaves the cursor on the tuple marked next)."""
    assert ref in pending.refs, (ref, pending.labels)
    for _ in range(len(pending.refs)):
        if pending.selected_ref == ref:
            break
        await pilot.press("down" if pending.refs.index(ref) > pending.cursor_row else "up")
        await idle(pilot)
    assert pending.selected_ref == ref, (pending.cursor_row, pending.refs.index(ref), pending.labels)


async def keys(pilot, *names: str):
    for k in names:
        await pilot.press(k)
    await idle(pilot)


async def answer(pilot, text: str):
    """Type into the open prompt and press Enter."""
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the prompt")
    inp = app.screen.query_one("Input")
    inp.value = ""
    for ch in text:
        await pilot.press(ch)
    assert inp.value == text
    await pilot.press("enter")
    await idle(pilot)


def message(app) -> str:
    return app.query_one(MessageLine).plain


def position(app) -> str:
    return app.query_one(ProgressLine).text


def state_text(app) -> str:
    return app.query_one(StateInspector).visible_text()


def avail_text(app) -> str:
    content = app.query_one(AvailabilityLine).content
    return content.plain if hasattr(content, "plain") else str(content)


def condition_k(path: Path) -> int:
    r = RunReader(path)
    try:
        return next(i.k for i in r.interactions() if i.trigger == "condition")
    finally:
        r.close()


# --- tests -----------------------------------------------------------------------------------------

def test_first_screen_shows_the_run_then_jump_finds_bobs_blacklisting(fraud_run):
    k = condition_k(fraud_run)
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        dag = app.query_one(DagView).render_text()
        assert "[FE θ×2]" in dag and "[FD×2]" in dag and "╌" in dag, dag   # θ marked, the shuffle dashed
        timeline = app.query_one(InteractionTimeline)
        assert [r["trigger"] for r in timeline.rows_data][:1] == ["start"]
        assert "condition" in [r["trigger"] for r in timeline.rows_data]
        assert position(app).startswith("at interaction 0 · 0 of ")
        assert "n over ✓" in avail_text(app) and "f out ✗" in avail_text(app)

        await keys(pilot, "j")
        await answer(pilot, str(k))
        assert position(app).startswith(f"at interaction {k} ·"), position(app)
        assert timeline.current == k
        assert f"✓ jump {k}" in message(app)
        fe_counts = app.query_one(DagView).counts
        assert fe_counts["FE"] > 0 and fe_counts["FD"] > 0
        # FE's state: Bob's highest is now 5000.0 -- the ¥ read as dollars -- and highlighted as changed
        text = state_text(app)
        assert "Bob: 5000.0" in text and "(new)" in text, text
        changed = app.query_one(StateInspector).changes
        assert any(("highest", "Bob") in paths for paths in changed.values())

        # select FD in the DAG: its state shows the blacklisting (tuple consistency across the shuffle)
        app.query_one(DagView).focus()
        await keys(pilot, "right")
        await until(pilot, lambda: app.shown.op == "FD", what="FD's state")
        await idle(pilot)
        text = state_text(app)
        assert "blacklist" in text and "Bob" in text, text
        assert app.query_one("#state").border_title.startswith("state of FD")
    drive(app, script)


def test_steps_and_step_back(fraud_run):
    k = condition_k(fraud_run)
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, str(k))
        start = dict(app.shown.position)
        first = app.shown.selected_label
        assert first.startswith("FE:")

        await keys(pilot, "n")                      # step over: the tuple and its whole scope
        assert message(app).startswith(f"✓ step over {first}"), message(app)
        assert sum(app.shown.position.values()) > sum(start.values())
        assert position(app).startswith(f"after interaction {k}")
        after_over = dict(app.shown.position)

        await keys(pilot, "s")                      # step into θ's next tuple
        stepped = app.shown.result.target
        assert message(app).startswith(f"✓ step into {stepped}")
        assert app.shown.scope_stack == [stepped] and f"inside {stepped}" in position(app)
        assert app.shown.selected_label.startswith("FD:"), "the next tuple inside the scope is selected"
        assert "f out ✓" in avail_text(app)
        pending = app.query_one(PendingTuples)
        assert app.shown.selected_label in pending.labels

        await keys(pilot, "f")                      # step out: finish that scope
        assert message(app).startswith(f"✓ step out {stepped}"), message(app)
        assert app.shown.scope_stack == []
        after_out = dict(app.shown.position)

        await keys(pilot, "F")                      # back to before the step out
        assert message(app).startswith(f"✓ stepped back out of {stepped}"), message(app)
        assert "step_out" not in message(app)
        assert app.shown.scope_stack == [stepped]
        await keys(pilot, "S")                      # back to before the step into
        assert app.shown.position == after_over
        await keys(pilot, "N")                      # back to before the step over
        assert app.shown.position == start
        assert position(app).startswith(f"at interaction {k}")
        await keys(pilot, "n", "s", "f")
        assert app.shown.position == after_out
    drive(app, script)


def _noting_thread(fn, threads: set):
    """`fn`, adding the thread each call runs on to `threads`."""
    @functools.wraps(fn)
    def noted(*args, **kwargs):
        threads.add(threading.current_thread())
        return fn(*args, **kwargs)
    return noted


def test_every_call_into_the_session_runs_on_one_engine_thread(fraud_run, monkeypatch):
    """A greenlet belongs to the thread that made it (`core/pulled.py`): loading the session, every
    action, every look at a position and every consume run on the app's one engine thread, never on
    a worker's or the UI's; the thread ends when the app does."""
    from tt.replay.session import DebugSession

    calls: set[threading.Thread] = set()      # threads that called a method of the session
    consumes: set[threading.Thread] = set()   # threads that consumed a logged input
    for name, fn in list(vars(DebugSession).items()):
        if inspect.isfunction(fn):
            monkeypatch.setattr(DebugSession, name, _noting_thread(fn, calls))
    k = condition_k(fraud_run)
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        with app.model.session.engine.hooks(on_consume=lambda inst, pos, channel:
                                            consumes.add(threading.current_thread())):
            await keys(pilot, "j")
            await answer(pilot, str(k))
            assert position(app).startswith(f"at interaction {k} ·"), position(app)
            start = dict(app.shown.position)
            await keys(pilot, "n")
            assert message(app).startswith("✓ step over"), message(app)
            await keys(pilot, "s")
            assert message(app).startswith("✓ step into"), message(app)
            await keys(pilot, "N")
            assert message(app).startswith("✓ stepped back"), message(app)
            await keys(pilot, "N")
            assert app.shown.position == start
            await keys(pilot, "e")
            await answer(pilot, "len(FD.blacklist)")
            assert message(app).startswith("len(FD.blacklist) = "), message(app)
            await keys(pilot, "plus")
            await answer(pilot, "FE[1].highest.get('Bob')")
            assert message(app) == "watching FE[1].highest.get('Bob')"
            app.query_one(DagView).focus()
            await keys(pilot, "right")               # another operator: a selection, no action
            await until(pilot, lambda: app.shown.op == "FD", what="FD's state")
            await idle(pilot)
    drive(app, script)

    assert len(calls) == 1, calls
    engine = next(iter(calls))
    assert engine is app.engine_thread.thread and engine is not threading.main_thread()
    assert engine.name == "tt-engine" and engine.daemon
    assert consumes == calls, consumes
    engine.join(60)   # (returns at once: the app closed the engine thread when it exited)
    assert not engine.is_alive()


def _tree_labels(inspector: StateInspector) -> dict:
    out = {}

    def walk(node):
        for child in node.children:
            if child.data is not None and not child.data.more:
                out[(child.data.instance, child.data.path)] = child.label.plain
                walk(child)
    walk(inspector.tree.root)
    return out


def test_the_state_tree_patched_after_each_step_equals_a_rebuilt_one(fraud_run):
    """Steps patch the tree in place; every line must read as a tree built from scratch would."""
    k = condition_k(fraud_run)
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, str(k))
        inspector = app.query_one(StateInspector)
        highlighted = 0
        for op in ("FE", "FD"):
            if app.shown.op != op:
                app.query_one(DagView).focus()
                await keys(pilot, "right")
                await until(pilot, lambda: app.shown.op == op, what=f"{op}'s state")
                await idle(pilot)
            for _ in range(6):
                before = inspector.tree.root.children[0]
                await keys(pilot, "n")
                assert inspector.tree.root.children[0] is before, "the tree was rebuilt, not patched"
                patched = _tree_labels(inspector)
                highlighted += sum("(was " in line or "(new)" in line for line in patched.values())
                for inst, changes in inspector.changes.items():
                    for path in list(changes)[:20]:
                        assert (inst, path) in patched or (inst, path[:-1]) not in patched, (inst, path)
                shown = app.shown
                inspector.op = None                     # force a rebuild from the same Shown
                inspector.show(shown.op, shown.states, shown.changes)
                await pilot.wait_for_scheduled_animations()
                rebuilt = _tree_labels(inspector)
                common = patched.keys() & rebuilt.keys()
                assert len(common) >= len(rebuilt) // 2, (len(common), len(rebuilt))
                assert {p: patched[p] for p in common} == {p: rebuilt[p] for p in common}
        assert highlighted >= 6, "the steps changed values the tree shows"
    drive(app, script)


def test_run_until_then_last_change_show_the_bug(fraud_run):
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "c")
        await answer(pilot, "'Bob' in FD.blacklist")
        assert "stopped after FD:" in message(app), message(app)
        assert app.shown.op == "FD", "the inspector shows the operator that met the condition"
        text = state_text(app)
        assert "Bob: " in text and "(new)" in text, text
        hit = next(inst for inst, paths in app.shown.changes.items() if ("blacklist", "Bob") in paths)
        # the FE row that caused it: Bob's ¥5000, read as $5000
        await keys(pilot, "C")
        await answer(pilot, f"{hit}.blacklist.Bob")
        assert "last changed at" in message(app) and "you are just before it" in message(app), message(app)
        text = state_text(app)
        assert "removed" in text, text                       # Bob is not blacklisted yet here
        pending = app.shown.pending
        nxt = next(p for p in pending if p.label.startswith(hit + ":") and p.next)
        assert nxt.row["customer"] == "Bob" and nxt.row["amount"] == "¥5000" and nxt.row["usd"] == 5000.0
        await keys(pilot, "N")
        assert "Bob" in state_text(app) and "removed" not in state_text(app)
    drive(app, script)


def test_brackets_in_a_condition_and_in_a_prompts_hint_are_shown_as_typed(fraud_run):
    """The message line and the prompts took their text for Textual markup: `run until
    any(... FD.blacklist[k] ...)` was shown without its `[k]`, and `e`'s hint said "OP.field
    is each instance, OP.field one" for "OP[i].field one". What the screen draws is checked."""
    app = DebuggerApp(fraud_run)
    condition = "any(FD.blacklist[k] > 0 for k in FD.blacklist) or [k for k in FD.blacklist]"

    async def script(pilot):
        await keys(pilot, "e")
        await until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the prompt")
        hint = app.screen.query_one("#prompt-hint").render().plain
        assert "OP[i].field one" in hint, hint
        await pilot.press("escape")
        await idle(pilot)
        await keys(pilot, "e")
        await answer(pilot, condition)
        drawn = app.query_one(MessageLine).render().plain
        assert drawn.startswith(f"{condition} = "), drawn
    drive(app, script)


def test_search_the_state_tree(fraud_run):
    k = condition_k(fraud_run)
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, str(k))
        await keys(pilot, "slash")
        await answer(pilot, "Bob")
        assert "found 'Bob'" in message(app)
        node = app.query_one(StateInspector).tree.cursor_node
        assert node is not None and node.data.path == ("highest", "Bob"), node
        await keys(pilot, "slash")
        await answer(pilot, "nobody-has-this-name")
        assert "is not in the state" in message(app)
    drive(app, script)


def test_disabled_steps_say_why_and_overlaps_are_marked(keywords_run):
    app = DebuggerApp(keywords_run)

    async def script(pilot):
        await until(pilot, lambda: app.shown is not None and app.shown.overlaps is not None, what="overlaps")
        await idle(pilot)
        overlaps = app.shown.overlaps
        assert overlaps, "the keywords sample has overlapping scopes"
        assert app.check_action("step_out", ()) is None and app.check_action("step_back", ()) is None
        await keys(pilot, "f")   # (out and back act on what was done last: the selected tuple is not named)
        assert message(app).startswith("✗ step out: not inside a tuple's scope"), message(app)
        await keys(pilot, "N")
        assert message(app).startswith("✗ step back: at the start of the run: nothing to step back over"), \
            message(app)

        # step over θ's next tuples (n, on the default ▶ tuple) until an overlap's root is next
        session = app.model.session
        root = overlaps[0].root
        name = session.graph.nodes[root.op].name
        while app.shown.position[f"{name}:{root.instance}"] < root.position:
            await keys(pilot, "n")
            assert message(app).startswith("✓ step over"), message(app)
        pending = app.query_one(PendingTuples)
        label = session.label(root)
        assert label in pending.labels, pending.labels
        pending.focus()
        await pilot.pause()
        await select_waiting(pilot, pending, root)
        await until(pilot, lambda: app.shown.selected == root, what="the selection")
        await idle(pilot)
        assert "n over ✗" in avail_text(app), avail_text(app)
        assert "overlaps" in avail_text(app)
        assert app.check_action("step_over", ()) is None
        await pilot.press("n")
        await until(pilot, lambda: message(app).startswith("✗ step over"), what="the refusal")
        assert message(app).startswith(f"✗ step over {label}") and "overlaps" in message(app), message(app)
        await keys(pilot, "3")
        scope = app.query_one(ScopeView).text()
        assert f"scope of {label}" in scope and "⚠" in scope, scope
        assert f"{len(overlaps)} θ inputs without step-over" in scope
        titles = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert "unavailable" in titles["Step over"] and "overlaps" in titles["Step over"]
        assert {"Step into", "Step out", "Step back", "Run until…", "Last change…", "Jump to interaction…",
                "Previous interaction", "Next interaction", "Search", "Help"} <= set(titles)
        assert "Cancel" not in titles, "nothing runs: nothing to cancel"
        await keys(pilot, "o")   # computed already: `o` says what it found
        assert message(app) == (f"{len(overlaps):,} θ inputs without a step-over in this run: their scopes "
                                f"overlap a later one's (3 shows a tuple's scope)"), message(app)
    drive(app, script)


def test_neighbour_interactions_timeline_enter_help_and_plots(keywords_run):
    r = RunReader(keywords_run)
    ks = [i.k for i in r.interactions()]
    r.close()
    app = DebuggerApp(keywords_run)

    async def script(pilot):
        await keys(pilot, "right_square_bracket")
        assert position(app).startswith(f"at interaction {ks[1]} ·"), position(app)
        await keys(pilot, "right_square_bracket")
        assert position(app).startswith(f"at interaction {ks[2]} ·")
        await keys(pilot, "left_square_bracket")
        assert position(app).startswith(f"at interaction {ks[1]} ·")

        await keys(pilot, "2")                         # the timeline view; Enter jumps to the highlighted row
        timeline = app.query_one(InteractionTimeline)
        assert timeline.display and app.query_one(ViewBar).current == "timeline"
        timeline.focus()
        timeline.highlight(ks[-1])
        await keys(pilot, "enter")
        assert position(app).startswith(f"at interaction {ks[-1]} ·") and timeline.current == ks[-1]
        assert "100.0%" in position(app)

        await keys(pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await keys(pilot, "escape")
        assert not isinstance(app.screen, HelpScreen)

        await keys(pilot, "5")
        plots = app.query_one(RunPlots)
        await until(pilot, lambda: len(plots.series) == len(ks), what="the plots")
        assert plots.series[-1]["tuples"] > plots.series[0]["tuples"]
        assert plots.series[-1]["state_bytes"] > 0
    drive(app, script)


def test_log_browser_pages_searches_and_filters(fraud_run):
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "4")
        logs = app.query_one(LogBrowser)
        await until(pilot, lambda: logs.base is not None and logs.lines.total > 0, what="the interactions log")
        await until(pilot, lambda: all(r is not None for r in logs.lines.visible_rows()), what="rows")
        rows = logs.lines.visible_rows()
        assert rows[0][2] == "start" and any(r[2] == "condition" and "¥5000" in r[3] for r in rows)

        logs.open_source("tuples:FE:0")
        await until(pilot, lambda: logs.base is not None and logs.base.key == "tuples:FE:0", what="FE:0's tuples")
        total = logs.lines.total
        assert total > 5000 and logs.lines.size.height < 30   # a virtual list: rows drawn on demand
        await keys(pilot, "slash")
        assert app.focused is logs.query_one("#log-search")
        for ch in "Bob":
            await pilot.press(ch)
        assert logs.query_one("#log-search").value == "Bob"
        logs.query_one("#log-search").value = "¥5000"   # Pilot cannot type "¥"; a terminal can
        await pilot.press("enter")
        await until(pilot, lambda: "found" in logs.status_text or "no more" in logs.status_text, what="the search")
        if "no more" in logs.status_text:       # Bob's payment went to the other partition
            logs.open_source("tuples:FE:1")
            await until(pilot, lambda: logs.base.key == "tuples:FE:1", what="FE:1's tuples")
            logs.search("¥5000")
            await until(pilot, lambda: "found" in logs.status_text, what="the search")
        row = logs.lines.cursor
        await until(pilot, lambda: logs.lines.row_cells(row) is not None, what="the found row")
        assert "'Bob'" in logs.lines.row_cells(row)[2] and "¥5000" in logs.lines.row_cells(row)[2]

        logs.query_one("#log-search").value = "Bob"
        logs.query_one("#log-filter").value = True
        await until(pilot, lambda: "done" in logs.status_text, what="the filter")
        n = logs.lines.total
        assert 0 < n < total
        await until(pilot, lambda: all(r is not None for r in logs.lines.visible_rows()), what="filtered rows")
        assert all("Bob" in r[2] for r in logs.lines.visible_rows())

        logs.query_one("#log-filter").value = False
        logs.open_source("in:FD:0")
        await until(pilot, lambda: logs.base.key == "in:FD:0", what="FD:0's Input log")
        # a filter over a log whose last page is short: its matches are the rows that hold the
        # text, each once (the last page was scanned again and again), read apart from the app
        apart = logview.LogView(fraud_run)
        oracle = apart.source("in:FD:0")
        assert len(oracle) % logview.PAGE
        want = [i for i, row in enumerate(oracle.rows(0, len(oracle))) if logview.matches(row, "fe:1")]
        apart.close()
        logs.query_one("#log-search").value = "FE:1"
        logs.query_one("#log-filter").value = True
        await until(pilot, lambda: isinstance(logs.source, logview.Filter) and logs.source.done, what="the filter")
        await idle(pilot)
        assert 0 < len(want) < len(oracle) and list(logs.source.hits) == want
        assert f"{len(want):,} matching rows (done)" in logs.status_text
        logs.query_one("#log-filter").value = False
        await until(pilot, lambda: logs.source is logs.base, what="the whole log")
        logs.lines.focus()
        await keys(pilot, "end")
        await until(pilot, lambda: logs.lines.row_cells(logs.lines.total - 1) is not None, what="the last row")
        assert logs.lines.row_cells(logs.lines.total - 1)[2] == "end of input"
        assert logs.lines.row_cells(logs.lines.total - 1)[0] == str(logs.lines.total - 1)
    drive(app, script)


def test_escape_cancels_a_long_run_until(fraud_run):
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        before = dict(app.shown.position)
        await keys(pilot, "c")
        await until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the prompt")
        inp = app.screen.query_one("Input")
        inp.value = "len(str(row) * 50000) < 0"  # never true, and slow: would replay the whole run
        await pilot.press("enter")
        await until(pilot, lambda: app.busy is not None, what="the run to start")
        await until(pilot, lambda: " tuples · " in position(app), what="the progress line")
        # where the replay stands, in tuples of the run, never more than the run has
        m = re.search(r"([\d,]+) of ([\d,]+) tuples · (\d+)%", position(app))
        assert m, position(app)
        done, total, pct = (int(g.replace(",", "")) for g in m.groups())
        assert 0 <= done <= total and total == app.shown.progress["total"] and 0 <= pct <= 100, position(app)
        assert "Esc cancels" in position(app)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert "Cancel" in titles, "a run-until runs: the palette offers to cancel it"
        await pilot.press("escape")
        await idle(pilot)
        assert "cancelled; the position is where it was" in message(app), message(app)
        assert app.shown.position == before
    drive(app, script)


def test_live_follow_and_user_interaction(spark, tmp_path):
    """A run still being recorded: new interactions show up, `i` takes one, the end is announced."""
    out = tmp_path / "live.db"
    live = LiveJob()
    session_box: dict = {}
    started = threading.Event()
    errors: list = []

    def build(spark_):
        flow = workloads.tt.Dataflow("live")
        src = flow.source("U", workloads.payments_df(spark_, n=2500, partitions=2))
        src.process(workloads.Slow(0.004), name="Slow").key_by(lambda r: r["customer"], partitions=2) \
            .process(workloads.Detect(), name="FD").collect("S")
        return flow

    def record():
        try:
            s = RecordingSession(out, Path(__file__), [], watch="Slow", every=0.5)
            session_box["s"] = s
            live.coordinator = lambda: s.coordinator
            started.set()
            with s:
                build(spark).run()
            s.close()
        except BaseException as e:  # pragma: no cover - surfaced below
            errors.append(e)
        finally:
            live.finished = True
            started.set()

    t = threading.Thread(target=record, daemon=True)
    t.start()
    assert started.wait(60)
    app = DebuggerApp(out, live=live, poll_seconds=0.25)

    async def run():
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app._facts_loaded and app.status == "recording", timeout=120,
                        what="the dataflow to start")
            assert "● live" in str(app.query_one(ViewBar).content)
            await until(pilot, lambda: live.coordinator() is not None and len(app.interactions) >= 2
                        and app.model is not None, timeout=120, what="periodic interactions and the engine")
            seen = len(app.interactions)
            await pilot.press("i")
            await until(pilot, lambda: "interaction requested" in message(app), what="the answer to i")
            assert "interaction requested" in message(app)
            await until(pilot, lambda: any(r["trigger"] == "user" for r in app.interactions), timeout=60,
                        what="the user interaction in the timeline")
            assert len(app.interactions) > seen
            timeline = app.query_one(InteractionTimeline)
            assert any(r["trigger"] == "user" for r in timeline.rows_data)
            await until(pilot, lambda: app.status == "complete", timeout=180, what="the end of the recording")
            await until(pilot, lambda: "the recording finished" in message(app), what="the announcement")
            assert timeline.rows_data[-1]["trigger"] == "end" and timeline.rows_data[-1]["complete"]
            await until(pilot, lambda: app.model is not None, what="the engine")
            user = next(r["k"] for r in app.interactions if r["trigger"] == "user" and r["complete"])
            await keys(pilot, "j")
            await answer(pilot, str(user))
            assert position(app).startswith(f"at interaction {user} ·"), position(app)
    asyncio.run(run())
    t.join(120)
    assert not errors, errors


def test_a_run_whose_dataflow_never_started_says_so_and_waits_for_nothing(spark, tmp_path):
    """A job that failed before its dataflow started: opened afterwards, or followed live until
    its end is announced, the app says why, stops looking for the dataflow, and is idle."""
    job = tmp_path / "job.py"
    job.write_text("import tt\nraise ValueError('no input configured')\n")
    out = tmp_path / "never.db"
    assert main(["record", str(job), "-o", str(out)]) != 0

    app = DebuggerApp(out, timings=False)

    async def opened(pilot):
        assert "the dataflow never started" in app.session_error
        assert "the dataflow never started" in message(app)
        await keys(pilot, "n", "4", "5", "1")   # greyed, and views with nothing to show
        assert app.is_running and "the dataflow never started" in message(app)
        assert "nothing to replay" in position(app)
    drive(app, opened)

    live = LiveJob()
    app = DebuggerApp(out, live=live, poll_seconds=0.25)

    async def followed():
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: "waiting for the job" in position(app),
                        what="the wait for the dataflow")
            assert not app.is_idle and app._poll_timer is not None
            app.job_finished("failed", "ValueError: no input configured")
            await idle(pilot)
            assert "the job finished (failed: ValueError: no input configured)" in message(app)
            assert "nothing to replay" in position(app) and app._poll_timer is None
    asyncio.run(followed())


def _copy(src: Path, dst: Path) -> Path:
    shutil.copy(src, dst)
    for s in ("-wal", "-shm"):
        if Path(str(src) + s).exists():
            shutil.copy(str(src) + s, str(dst) + s)
    return dst


def test_bad_run_files_get_one_clear_line(fraud_run, tmp_path, capsys, monkeypatch):
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\x13" * 4000)
    foreign = tmp_path / "foreign.db"
    c = sqlite3.connect(foreign)
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    newer = _copy(fraud_run, tmp_path / "newer.db")
    c = sqlite3.connect(newer)
    c.execute("PRAGMA user_version=99")
    c.commit()
    c.close()
    cases = [(tmp_path / "missing.db", "no such file"), (corrupt, "not a tt run file"),
             (foreign, "not a tt run file"), (newer, "newer tt")]
    for path, needle in cases:
        capsys.readouterr()
        assert main(["debug", str(path)]) != 0
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and err[0].startswith("tt: error:") and needle in err[0], err
    monkeypatch.setenv("TT_KEY_FILE", str(tmp_path / "someone-else-key"))
    assert main(["debug", str(fraud_run)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--trust" in err[0] and f"tt debug {fraud_run} --trust" in err[0], err


def test_an_untrusted_run_still_shows_its_facts(fraud_run, tmp_path, monkeypatch):
    """Opened in the app without --trust, a foreign run shows the DAG and timeline and says why it cannot replay."""
    monkeypatch.setenv("TT_KEY_FILE", str(tmp_path / "someone-else-key"))
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await until(pilot, lambda: app.session_error is not None, what="the refusal")
        assert "--trust" in message(app) and "cannot replay" in message(app)
        assert "[FE θ×2]" in app.query_one(DagView).render_text()
        assert len(app.query_one(InteractionTimeline).rows_data) >= 3
        await pilot.press("n")
        await until(pilot, lambda: "no replay" in message(app), what="the refusal")
        assert "no replay" in message(app)
        for key in ("c", "w"):   # (keys that need the replay said nothing)
            app.query_one(MessageLine).say("")
            await pilot.press(key)
            await until(pilot, lambda: "no replay" in message(app), what=f"{key}'s refusal")
            assert not isinstance(app.screen, PromptScreen)   # (c asks for no condition it cannot run)
        # a jump shows what the recording stored at the interaction (it stayed on interaction 0)
        reader = RunReader(fraud_run)
        ks = [i.k for i in reader.interactions()]
        for keys_pressed, k in (("]", ks[1]), ("]", ks[2]), ("[", ks[1])):
            await pilot.press(keys_pressed)
            await until(pilot, lambda: f"stored state at interaction {k}: no replay here" in message(app),
                        what=f"interaction {k}'s stored state")
            inspector = app.query_one(StateInspector)
            assert inspector.states == {label: v["state"] for label, v in facts.states_at(reader, k, app.selected_op).items()}
            assert inspector.states != {label: v["state"] for label, v in facts.states_at(reader, 0, app.selected_op).items()}
        reader.close()
    drive(app, script)


def test_timeline_marks_checkpointed_interactions(fraud_run, tmp_path):
    run = _copy(fraud_run, tmp_path / "checkpointed.db")
    if main(["checkpoint", str(run), "--tau", "0.05s"]) != 0:
        pytest.skip("`tt checkpoint` could not plan checkpoints for this run")
    r = RunReader(run)
    marked = r.checkpointed()
    r.close()
    assert marked
    app = DebuggerApp(run)

    async def script(pilot):
        timeline = app.query_one(InteractionTimeline)
        cells = {k: str(timeline.get_cell(str(k), "ckpt")) for k in timeline._keys}
        assert {k for k, c in cells.items() if c == "◆"} == marked, cells
    drive(app, script)


# --- issue 11: the README's session, every time ------------------------------------------------------

def screen_text(app) -> str:
    """What the terminal shows, line by line (from the app's own screenshot)."""
    import html

    rows: dict[float, list[tuple[float, str]]] = {}
    for m in re.finditer(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', app.export_screenshot()):
        rows.setdefault(float(m.group(2)), []).append((float(m.group(1)), html.unescape(m.group(3))))
    out = []
    for y in sorted(rows):
        line = ""
        for x, t in sorted(rows[y]):
            line = line.ljust(int(round(x / 12.2))) + t
        out.append(line.rstrip())
    return "\n".join(out)


async def type_keys(pilot, text: str):
    """Type `text` key by key, as a terminal sends it."""
    names = {" ": "space", "'": "apostrophe", ".": "full_stop", "/": "slash"}
    for ch in text:
        await pilot.press(names.get(ch, ch))


async def readme_sequence(pilot):
    """`c` 'Bob' in FD.blacklist Enter, `/` Bob Enter, `w`, `w`, `C` Enter: exactly the README's keys."""
    app = pilot.app
    await keys(pilot, "c")
    assert isinstance(app.screen, PromptScreen)
    await type_keys(pilot, "'Bob' in FD.blacklist")
    assert app.screen.query_one("Input").value == "'Bob' in FD.blacklist"
    await keys(pilot, "enter")
    assert "stopped after FD:" in message(app), message(app)
    await keys(pilot, "slash")
    await type_keys(pilot, "Bob")
    await keys(pilot, "enter")
    assert "found 'Bob'" in message(app), message(app)
    node = app.query_one(StateInspector).tree.cursor_node
    assert node.data.path == ("blacklist", "Bob"), node.data
    await keys(pilot, "w")                   # why is he there: the call that wrote blacklist['Bob']
    why = app.query_one(LineageTree)
    assert why.display and why.lines[0].startswith(f"{node.data.instance} blacklist['Bob']"), why.lines[:2]
    first, inst = why.lines[1].strip(), node.data.instance
    assert first.startswith(f"through {inst} blacklist['Bob'], by {inst}:") and "¥5000" in first, why.lines[:3]
    await keys(pilot, "w")
    assert not why.display and app.query_one(StateInspector).tree.cursor_node is node
    await keys(pilot, "C")
    assert isinstance(app.screen, PromptScreen)
    assert app.screen.query_one("Input").value == f"{node.data.instance}.blacklist.Bob"   # from the cursor
    await keys(pilot, "enter")
    assert app.return_code is None, "the app crashed"
    assert "you are just before it" in message(app), message(app)
    return node.data.instance


def test_readme_last_change_from_the_state_trees_cursor(fraud_run):
    """Issue 11 item 1: `C` with the cursor on a node crashed (Slot has no `more_from`)."""
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        hit = await readme_sequence(pilot)
        nxt = next(p for p in app.shown.pending if p.label.startswith(hit + ":") and p.next)
        assert nxt.row["customer"] == "Bob" and nxt.row["amount"] == "¥5000"
        assert app.shown.selected == nxt.ref, "the tuple that redoes the change is selected"
        # `/ highest Enter C` on FE, cursor on a field node: the prompt is filled from it, no crash
        await keys(pilot, "j")
        await answer(pilot, str(condition_k(fraud_run)))
        app.query_one(DagView).focus()
        await keys(pilot, "left")
        await until(pilot, lambda: app.shown.op == "FE", what="FE's state")
        await idle(pilot)
        await keys(pilot, "slash")
        await answer(pilot, "highest")
        node = app.query_one(StateInspector).tree.cursor_node
        assert node.data.path == ("highest",), node.data
        await keys(pilot, "C")
        assert app.screen.query_one("Input").value == f"{node.data.instance}.highest"
        await keys(pilot, "enter")
        assert app.return_code is None and "last change" in message(app), message(app)
    drive(app, script)


def test_enter_shows_the_whole_tuple_at_80x24(fraud_run):
    """Issue 11 item 2: the waiting row is cut off at 80 columns; Enter shows it whole, Esc returns."""
    from tt.tui.tuple_screen import TupleScreen

    app = DebuggerApp(fraud_run)

    async def script(pilot):
        hit = await readme_sequence(pilot)
        pending = app.query_one(PendingTuples)
        bob = app.shown.pending[[p.ref for p in app.shown.pending].index(app.shown.selected)].row
        assert str(bob["ts"]) not in screen_text(app), "the row is cut off at 80×24 (else this test proves nothing)"
        pending.focus()
        await keys(pilot, "enter")
        assert isinstance(app.screen, TupleScreen)
        shown = screen_text(app)
        assert "'¥5000'" in shown and "'Bob'" in shown and str(bob["ts"]) in shown, shown
        assert re.search(r"amount\s+'¥5000'\s+'¥5000'", shown), shown       # FE's input beside its output
        rows = app.screen.text.splitlines()
        assert rows[0].startswith("usd: — | 5000.0"), rows                    # the field FE added, first
        assert "amount: '¥5000' | '¥5000'" in rows
        await keys(pilot, "escape")
        assert not isinstance(app.screen, TupleScreen) and app.focused is pending

        # after a step into Bob's tuple at FD, its output waits at FF: Enter shows FD's input beside it
        await keys(pilot, "s")
        assert app.shown.selected_label.startswith("FF:"), app.shown.selected_label
        pending.focus()
        await keys(pilot, "enter")
        assert isinstance(app.screen, TupleScreen)
        assert f"processing {hit}:" in app.screen.title_text
        rows = app.screen.text.splitlines()
        assert rows[0].startswith("label: — | 'Fraud'"), rows                 # FD added the label
        assert "amount: '¥5000' | '¥5000'" in rows
        await keys(pilot, "escape")

        # a tuple of the scope (view 3): Enter on it shows it too
        await keys(pilot, "3")
        tree = app.query_one("#scope-tree")
        assert app.focused is tree
        tree.move_cursor(tree.root.children[0])
        await keys(pilot, "enter")
        assert isinstance(app.screen, TupleScreen) and "'¥5000'" in screen_text(app)
        await keys(pilot, "escape")
        assert not isinstance(app.screen, TupleScreen)
    drive(app, script)


def test_layout_follows_each_resize_at_once(fraud_run):
    """Issue 11 item 6: the layout followed the size before the last resize."""
    from tt.tui import layout

    assert not layout.is_wide(80, 24) and not layout.is_wide(100, 30) and not layout.is_wide(139, 48)
    assert layout.is_wide(140, 40) and layout.is_wide(160, 48)
    assert layout.shown_view("timeline", True) == "debug" and layout.shown_view("timeline", False) == "timeline"
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        assert not app.wide and app.query_one("#main").has_class("-narrow")
        await pilot.resize_terminal(160, 48)
        await idle(pilot)
        assert app.wide and app.query_one("#main").has_class("-wide")
        assert app.query_one("#timeline").display and app.query_one("#scope").display
        assert app.query_one(ViewBar).views == ["debug", "logs", "plots"]
        # 2 and 3 focus the timeline and the scope panes of the wide debug view
        await keys(pilot, "2")
        assert app.focused is app.query_one(InteractionTimeline)
        assert message(app) == "at this size the timeline is the interactions pane of the debug view (1): it has the focus"
        await keys(pilot, "3")
        assert app.focused is app.query_one("#scope-tree")
        assert message(app).startswith("at this size the scope is the scope pane"), message(app)
        await keys(pilot, "1")
        assert app.focused is app.query_one(PendingTuples)
        await pilot.resize_terminal(100, 30)
        await idle(pilot)
        assert not app.wide and app.query_one("#main").has_class("-narrow")
        assert not app.query_one("#timeline").display
        assert app.query_one(ViewBar).views == ["debug", "timeline", "scope", "logs", "plots"]
        await pilot.resize_terminal(140, 40)
        await idle(pilot)
        assert app.wide
    drive(app, script)


def test_logs_escape_leaves_search_and_enter_shows_the_row(fraud_run):
    """Issue 11 item 7."""
    from tt.tui.tuple_screen import TupleScreen

    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "4")
        logs = app.query_one(LogBrowser)
        await until(pilot, lambda: logs.base is not None and logs.lines.total > 0, what="the interactions log")
        search = logs.query_one("#log-search")
        await keys(pilot, "slash")
        assert app.focused is search
        await keys(pilot, "escape")
        assert app.focused is logs.lines, app.focused
        await keys(pilot, "5")                                  # a view key again, not typed into the box
        assert search.value == "" and app.query_one(ViewBar).current == "plots"
        await keys(pilot, "4")

        # the filter box says whether it is on
        box = logs.query_one("#log-filter")
        assert box._button.plain == "[ ]"
        box.value = True
        assert box._button.plain == "[✓]"
        box.value = False

        logs.open_source("tuples:FE:0")
        await until(pilot, lambda: logs.base is not None and logs.base.key == "tuples:FE:0", what="FE:0's tuples")
        logs.search("Bob")
        await until(pilot, lambda: "found 'Bob'" in logs.status_text, what="the search")
        row = logs.lines.cursor
        await until(pilot, lambda: logs.lines.row_cells(row) is not None, what="the found row")
        cells = logs.lines.row_cells(row)
        assert f"at row {row:,}" in logs.status_text and f"row {row:,} (0…" in logs.status_text, logs.status_text
        assert cells[0] == str(row), "one numbering: the status's row is the first column's"
        logs.lines.focus()
        await keys(pilot, "enter")
        assert isinstance(app.screen, TupleScreen)
        assert f"tuple: {cells[2]}" in app.screen.text                       # the whole row, not cut off
        await keys(pilot, "escape")
        assert not isinstance(app.screen, TupleScreen)

        logs.open_source("in:FD:0")                             # another log: the old search result goes
        await until(pilot, lambda: logs.base.key == "in:FD:0", what="FD:0's Input log")
        assert "found" not in logs.status_text, logs.status_text
    drive(app, script)


def test_small_things(fraud_run):
    """Issue 11 item 10: i on a finished run, messages in words, the selection kept after a step back,
    the legend, the '… more keys changed' note, whole-number plot ticks."""
    from tt.tui.help_screen import SECTIONS
    from tt.tui.widgets.plots import _int_ticks

    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "i")
        assert message(app) == "the run is finished; interactions can only be taken while recording"
        await keys(pilot, "exclamation_mark")   # a run without warnings: said, no screen to close
        assert app.reader.warnings() == [] and message(app) == "the recording made no warnings"
        assert app.screen is app.screen_stack[0]
        assert app.model.call(lambda s: s.overlaps()) == []
        await keys(pilot, "o")
        assert message(app) == "no scopes overlap in this run: every θ input can be stepped over"
        # the waiting list shows each instance's first tuples and says how many more it has to come
        pending = app.query_one(PendingTuples)
        fe = app.reader.operator("FE")
        logged = sum(n for _, _, n in app.reader.input_runs(fe.id, 0))   # FE:0's inputs, its END step among them
        listed = [label for label in pending.labels if label.startswith("FE:0:")]
        assert f"{logged - len(listed):,} more at FE:0" in pending.labels, pending.labels
        more = pending.labels.index(f"{logged - len(listed):,} more at FE:0")
        assert pending.refs[more] is None and pending.labels[more - 1] == listed[-1]
        pending.focus()
        pending.move_cursor(row=more)
        await pilot.press("enter")   # a count, not a tuple: nothing to show
        await idle(pilot)
        assert app.screen is app.screen_stack[0]
        assert "▶" in app.query_one("#pending").border_title and "•" in app.query_one("#pending").border_title
        assert any("▶" in what and "•" in what for _, rows in SECTIONS for _, what in rows)

        # from the start, run until the blacklisting; FE's state then lists many changed keys
        await keys(pilot, "c")
        await answer(pilot, "'Bob' in FD.blacklist")
        assert app.shown.op == "FD"
        app.query_one(DagView).focus()
        await keys(pilot, "left")
        await until(pilot, lambda: app.shown.op == "FE", what="FE's state")
        await idle(pilot)
        text = state_text(app)
        assert re.search(r"… \d+ more keys changed \(not listed\)", text), text   # a dim note, not a key
        assert not re.search(r"…: .*removed", text), text
        # at the start every θ instance's first tuple waits and can be stepped into (at a later
        # interaction some instances may have finished: how far depends on the recording's timing)
        await keys(pilot, "j")
        await answer(pilot, "0")
        pending = app.query_one(PendingTuples)
        default = app.shown.default
        pending.focus()
        session = app.model.session
        others = [p.ref for p in app.shown.pending if p.next and p.ref != default and not p.end
                  and session.can_step_into(p.ref).ok]
        assert others, (app.shown.op, app.shown.interaction, default,
                        [(p.ref, p.next, p.end, session.can_step_into(p.ref)) for p in app.shown.pending])
        other = others[0]
        await select_waiting(pilot, pending, other)
        await until(pilot, lambda: app.shown.selected == other, what="the selection")
        await idle(pilot)
        label = app.shown.selected_label
        await keys(pilot, "s")
        assert message(app).startswith(f"✓ step into {label}"), message(app)
        await keys(pilot, "S")
        assert message(app).startswith(f"✓ stepped back into {label}"), message(app)
        assert "step_into" not in message(app)
        assert app.shown.selected == other, "the selection is the one the step back undid"

    drive(app, script)
    assert _int_ticks(0, 799617) == [0, 200000, 400000, 600000, 800000]
    assert all(isinstance(t, int) for t in _int_ticks(0.5, 12.3))


def test_a_crash_in_the_debugger_exits_non_zero(fraud_run, monkeypatch, capsys):
    """Issue 11 item 1: after an unhandled exception (its traceback printed) `tt debug` exited 0.

    Textual ends an app whose handler raised with return code 1; `tt debug` must pass it on."""
    import sys as _sys

    def crashed_run(self) -> None:
        self._return_code = 1          # what App._handle_exception leaves after printing the traceback

    monkeypatch.setattr(DebuggerApp, "run", crashed_run)
    monkeypatch.setattr(_sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(_sys.stdout, "isatty", lambda: True)
    assert main(["debug", str(fraud_run)]) == 1
    assert "the debugger crashed" in capsys.readouterr().err
    monkeypatch.setattr(DebuggerApp, "run", lambda self: None)   # a normal quit: return code None
    assert main(["debug", str(fraud_run)]) == 0


def test_a_jump_selects_the_tuple_marked_next_and_the_header_says_which_interaction_it_is_past(fraud_run):
    """A tuple picked at one position may be waiting at the position a jump lands on too (an
    instance that had not started): the selection stayed on it while ▶ marked another, and `n`
    stepped the one the user no longer saw marked (found in a streaming run: `]` then `[`
    stepped the next micro-batch's key at the earlier interaction). A jump now selects ▶'s
    tuple. And the header's "after interaction K" is the last interaction every instance is
    past, not the last whose summed positions are below the replay's."""
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, "0")
        default = app.shown.default
        other = next(p.ref for p in app.shown.pending if p.next and p.ref != default and not p.end)
        pending = app.query_one(PendingTuples)
        pending.focus()
        await pilot.pause()
        await select_waiting(pilot, pending, other)
        await until(pilot, lambda: app.shown.selected == other, what="the selection")
        await idle(pilot)
        await keys(pilot, "j")
        await answer(pilot, "0")
        assert app.shown.selected == app.shown.default == default
        label = app.shown.selected_label
        await keys(pilot, "n")
        assert message(app).startswith(f"✓ step over {label}"), message(app)

        # one instance far ahead, the others where they started: past interaction 0 alone
        assert app._last_interaction(dict(app.shown.position)) == 0
        later = next(r for r in app.interactions if r["complete"] and all(r["positions"].values()))
        first = next(iter(later["positions"]))
        ahead = {lb: 10 ** 6 if lb == first else 0 for lb in later["positions"]}
        assert sum(ahead.values()) > sum(later["positions"].values())   # (which the sums took for past it)
        assert app._last_interaction(ahead) == 0
        assert app._last_interaction(later["positions"]) >= later["k"]
    drive(app, script)


def test_evaluate_watch_and_step_back_after_a_jump(fraud_run):
    """Issue 11 (Also): `e` evaluates an expression once, `+` watches it after every action, `-`
    removes it; `N` at a fresh position (after a jump) steps back over θ's previous input."""
    from tt.replay.session import DebugSession
    from tt.core.scopes import TupleRef
    from tt.tui.widgets.watch_list import WatchList

    k = condition_k(fraud_run)
    oracle = DebugSession(fraud_run)   # a second session: what the app shows must be what it computes
    oracle.jump(k)
    expected = {label: v for label, v in oracle.evaluate("len(FD.blacklist)")}
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, str(k))
        await keys(pilot, "e")
        await answer(pilot, "len(FD.blacklist)")
        assert message(app) == "len(FD.blacklist) = " + " · ".join(f"{w}: {v}" for w, v in expected.items())
        await keys(pilot, "e")
        await answer(pilot, "FD.nosuch")
        assert "unknown field 'nosuch' of FD" in message(app), message(app)

        await keys(pilot, "plus")
        await answer(pilot, "FE[1].highest.get('Bob')")
        watch = app.query_one(WatchList)
        assert message(app) == "watching FE[1].highest.get('Bob')"
        assert watch.display and watch.lines == ["FE[1].highest.get('Bob') = 5000.0"], watch.lines
        await keys(pilot, "plus")
        await answer(pilot, "FD.nosuch")                 # refused, not added
        assert "unknown field" in message(app) and len(watch.lines) == 1

        # N after the jump: back over θ's previous input, the ¥ payment that set Bob's highest
        theta = oracle.reader.theta.id
        prev = max((TupleRef(theta, i, inst.count - 1) for (op, i), inst in oracle.engine.instances.items()
                    if op == theta and inst.count > 0), key=oracle.provenance.rank)
        await keys(pilot, "N")
        assert message(app).startswith(f"✓ stepped back over {oracle.label(prev)}"), message(app)
        oracle.step_back()
        assert app.shown.position == oracle.position
        bob = oracle.evaluate("FE[1].highest.get('Bob')")[0][1]
        assert watch.lines == [f"FE[1].highest.get('Bob') = {bob}"], watch.lines
        await keys(pilot, "minus")
        assert message(app) == "no longer watching FE[1].highest.get('Bob')"
        assert not watch.display and watch.lines == []
    drive(app, script)


# keys a user may press at any time (every key of the app's actions but quit, and the keys that
# move between and within widgets), and answers to any prompt: the app's own, mistyped, or absurd
_ANY_KEY = [k for k in actions.BY_KEY if k != "q"] + ["enter", "tab", "shift+tab", "up", "down", "left", "right",
                                                      "pagedown", "end", "home", "space"]
_ANY_ANSWER = ["0", "1", "3", "-1", "9" * 25, "", "abc", "True", "1/0", "x ==", "Bob", "FD", "FD:0:0", "FE:1:3/0",
               "FD.blacklist", "FD.nosuch", "len(FD.blacklist)", "FE[1].highest.get('Bob')", "__import__('os')"]


@pytest.mark.parametrize("seed", [1, 2])
def test_random_keys_never_end_in_an_internal_error(fraud_run, seed):
    """Keys and prompt answers chosen at random (a fixed seed, so a failure can be replayed):
    whatever they ask, the app answers with a position, a refusal or an error it explains,
    never "internal error", and it is ready for the next key. (Keys pressed this way with other
    seeds found a jump to interaction 999…9 ending in an internal error and a filter that never
    finished; tests of their own check those.)"""
    import random

    rnd = random.Random(seed)
    app = DebuggerApp(fraud_run)

    async def script(pilot):
        pressed = []
        for _ in range(80):
            if isinstance(app.screen, PromptScreen):
                said = rnd.choice(_ANY_ANSWER)
                pressed.append(f"<{said}>")
                app.screen.query_one("Input").value = said
                await pilot.press("enter")
            else:
                pressed.append(rnd.choice(_ANY_KEY))
                await pilot.press(pressed[-1])
            await idle(pilot)
            assert "internal error" not in message(app), (pressed[-8:], message(app))
        assert app.session_error is None and app.model is not None
        return pressed
    assert len(drive(app, script)) == 80

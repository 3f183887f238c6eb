"""One numbering of tuples and interactions in every view (issue 11, item 9).

A tuple is `OP:INSTANCE:INPUT#` (INPUT# from 0) everywhere: the tuple that met a
`--when` condition is named in the timeline as the waiting list, the message
line, `tt inspect RUN scope` and `tt replay --json` name it, with the same row. An
interaction is its number k everywhere: `j N` and Enter on the timeline's row
for N land on N, and the position line, the timeline's ▶ and cursor and the
message line all say N, also where several interactions share one position
(their states are the same; the one jumped to is the one named). The DAG counts
tuples, not the end-of-input step each instance takes last.

The app is driven through Textual's Pilot and the CLI run as a user runs it; every
wait is on the app's state (`idle`, `until`), never on time.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import workloads
from test_tui import FRAUD_ROWS, _generate, answer, drive, fraud_run, idle, keys, message, position  # noqa: F401

from tt.recorder.session import RecordingSession
from tt.store.reader import RunReader
from tt.tui.app import DebuggerApp, PromptScreen
from tt.tui.widgets.dag_view import DagView
from tt.tui.widgets.pending_tuples import PendingTuples
from tt.tui.widgets.timeline import InteractionTimeline

pytestmark = pytest.mark.slow

YEN = "row['amount'].startswith('¥')"
REF = re.compile(r"[A-Z]+:\d+:\d+")


# --- helpers ---------------------------------------------------------------------------------------

def tt(*args: str) -> str:
    """Run the `tt` command as a user would; its stdout (a failure shows stderr)."""
    proc = subprocess.run([sys.executable, "-m", "tt", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"tt {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


def replay_steps(out: str) -> list[dict]:
    """The steps `tt replay --json` printed, whether as one JSON document or one object per line."""
    try:
        docs = [json.loads(out)]
    except json.JSONDecodeError:
        docs = [json.loads(line) for line in out.splitlines() if line.strip()]
    steps: list[dict] = []

    def walk(v) -> None:
        if isinstance(v, dict) and "action" in v and "target" in v:
            steps.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(docs)
    return steps


def named_tuples(v) -> dict[str, dict]:
    """Every {"tuple": NAME, "row": ...} inside `v` (a step's waiting tuples), by name."""
    out = {}
    if isinstance(v, dict):
        if isinstance(v.get("tuple"), str):
            out[v["tuple"]] = v.get("row")
        for x in v.values():
            out.update(named_tuples(x))
    elif isinstance(v, list):
        for x in v:
            out.update(named_tuples(x))
    return out


def interactions(path: Path) -> list:
    r = RunReader(path)
    try:
        return r.interactions()
    finally:
        r.close()


def row_k(timeline: InteractionTimeline, row: int) -> int:
    """The interaction number the timeline shows in its k column on `row`."""
    return int(timeline.get_row_at(row)[1].plain)


def at_interaction(app, k: int) -> None:
    """Every view of the position names interaction k."""
    timeline = app.query_one(InteractionTimeline)
    assert position(app).startswith(f"at interaction {k} ·"), position(app)
    assert app.shown.interaction == k
    assert timeline.current == k, timeline.current
    marked = [r for r in range(timeline.row_count) if timeline.get_row_at(r)[0].plain == "▶"]
    assert [row_k(timeline, r) for r in marked] == [k], "exactly one ▶, on k's row"
    assert timeline.highlighted_k == k and row_k(timeline, timeline.cursor_row) == k


async def jump(pilot, k: int) -> None:
    """`j`, type k, Enter: what the user types, whatever pane has the focus."""
    await keys(pilot, "j")
    assert isinstance(pilot.app.screen, PromptScreen), "j always asks which interaction"
    await answer(pilot, str(k))


@pytest.fixture(scope="module")
def shared_run(spark, tmp_path_factory) -> Path:
    """The fraud sample with two user interactions requested before any tuple is read: interactions
    0, 1 and 2 are all at position 0 (as periodic ones are while Spark starts); then the ¥ condition
    and the end."""
    fraud = workloads.load_sample("fraud")
    out = tmp_path_factory.mktemp("numbering") / "shared.db"
    data = _generate(out.parent / "payments.parquet", FRAUD_ROWS)
    session: RecordingSession | None = None

    def on_event(kind: str, info: dict) -> None:
        if kind == "begin":
            for _ in range(2):
                session.coordinator.interaction("user", {"via": "test"})

    session = RecordingSession(out, Path(fraud.__file__), [], watch="FE", when=YEN, on_event=on_event)
    with session:
        fraud.build(spark, str(data), 2).run()
    session.close()
    return out


# --- tests -----------------------------------------------------------------------------------------

def test_the_tuple_that_met_the_condition_has_one_name_everywhere(fraud_run):
    condition = next(i for i in interactions(fraud_run) if i.trigger == "condition")
    k = condition.k
    app = DebuggerApp(fraud_run, timings=False)

    async def script(pilot):
        timeline = app.query_one(InteractionTimeline)
        detail = timeline.get_cell(str(k), "detail").plain
        name = detail.split()[0]
        assert REF.fullmatch(name), detail
        assert "#" not in detail and "Bob" in detail and "¥5000" in detail, detail
        instance = name.rsplit(":", 1)[0]

        # the waiting list: just before the change the tuple made, it waits at θ, selected, with its row
        await jump(pilot, k)
        at_interaction(app, k)
        assert name not in app.query_one(PendingTuples).labels, "at k the tuple has been consumed"
        await keys(pilot, "C")
        await answer(pilot, f"{instance}.highest.Bob")
        pending = app.query_one(PendingTuples)
        assert name in pending.labels, (name, pending.labels)
        assert app.shown.selected_label == name
        row = next(p.row for p in app.shown.pending if p.label == name)
        assert row["customer"] == "Bob" and row["amount"] == "¥5000", row
        assert f"last changed at {name}" in message(app), message(app)

        await keys(pilot, "s")                                # step into it: the same name again
        assert message(app).startswith(f"✓ step into {name}"), message(app)
        assert app.shown.result.consumed == [name]
        return name

    name = drive(app, script)
    instance = name.rsplit(":", 1)[0]

    scope = json.loads(tt("inspect", str(fraud_run), "scope", name, "--json"))
    assert scope["tuple"] == name
    assert scope["row"]["customer"] == "Bob" and scope["row"]["amount"] == "¥5000", scope["row"]

    steps = replay_steps(tt("replay", str(fraud_run), "--to", str(k), "--last-change", f"{instance}.highest.Bob",
                            "--step-into", name, "--states", "none", "--json"))
    assert [s["action"] for s in steps] == ["jump", "last_change", "step_into"], steps
    waiting = named_tuples(steps[1]["pending"])
    assert name in waiting, waiting.keys()
    assert waiting[name]["customer"] == "Bob" and waiting[name]["amount"] == "¥5000"
    assert steps[2]["ok"] and steps[2]["target"] == name and steps[2]["consumed"] == [name]


def test_j_n_and_enter_on_a_row_land_on_the_interaction_shown(fraud_run):
    ks = [i.k for i in interactions(fraud_run)]
    app = DebuggerApp(fraud_run, timings=False)

    async def script(pilot):
        at_interaction(app, ks[0])
        for k in [*reversed(ks), *ks]:
            await jump(pilot, k)
            at_interaction(app, k)
            assert message(app).startswith(f"✓ jump {k} → at interaction {k}"), message(app)

        await keys(pilot, "2")                                 # the timeline view (80×24), focused
        timeline = app.query_one(InteractionTimeline)
        assert timeline.display and app.focused is timeline
        for row in [1, 0, *range(timeline.row_count)]:
            timeline.move_cursor(row=row, animate=False)
            await idle(pilot)
            k = row_k(timeline, row)
            await keys(pilot, "enter")
            at_interaction(app, k)
        # `j 0` typed in the timeline lands on 0, not on the highlighted row
        timeline.move_cursor(row=timeline.row_count - 1, animate=False)
        await idle(pilot)
        await jump(pilot, ks[0])
        at_interaction(app, ks[0])
    drive(app, script)


def test_the_dag_counts_tuples_not_the_end_of_input(fraud_run):
    end = interactions(fraud_run)[-1].k
    app = DebuggerApp(fraud_run, timings=False)

    async def script(pilot):
        await jump(pilot, end)
        at_interaction(app, end)
        dag = app.query_one(DagView)
        # every instance has taken its END step; θ consumed exactly the job's rows
        assert dag.counts["FE"] == FRAUD_ROWS and dag.counts["FD"] == FRAUD_ROWS, dag.counts
        assert 0 < dag.counts["S"] <= FRAUD_ROWS
        assert f"{FRAUD_ROWS:,}" in dag.render_text()
        assert f"{FRAUD_ROWS + 1:,}" not in dag.render_text() and f"{FRAUD_ROWS + 2:,}" not in dag.render_text()
    drive(app, script)


def test_interactions_sharing_a_position_keep_their_own_numbers(shared_run):
    inters = interactions(shared_run)
    ks = [i.k for i in inters]
    r = RunReader(shared_run)
    try:
        at = {k: {key: a.position for key, a in r.instances_at(k).items()} for k in ks}
    finally:
        r.close()
    shared = [k for k in ks if at[k] == at[ks[0]]]
    assert shared == [0, 1, 2], "the recording took 1 and 2 before any tuple"
    app = DebuggerApp(shared_run, timings=False)

    async def script(pilot):
        at_interaction(app, 0)                                  # the first screen: interaction 0, not 2
        for k in [1, 0, 2, 1, ks[-1], 0]:
            await jump(pilot, k)
            at_interaction(app, k)
            assert message(app).startswith(f"✓ jump {k} → at interaction {k}"), message(app)

        await keys(pilot, "right_square_bracket")              # ] and [ walk the numbers one by one
        at_interaction(app, 1)
        await keys(pilot, "right_square_bracket")
        at_interaction(app, 2)
        await keys(pilot, "left_square_bracket")
        at_interaction(app, 1)

        await keys(pilot, "n")                                  # a step and its undo come back to 1
        assert position(app).startswith("after interaction"), position(app)
        await keys(pilot, "N")
        at_interaction(app, 1)

        await keys(pilot, "2")                                  # Enter on the timeline's second row: 1
        timeline = app.query_one(InteractionTimeline)
        for row in [2, 1, 0]:
            timeline.move_cursor(row=row, animate=False)
            await idle(pilot)
            assert row_k(timeline, row) == ks[row]
            await keys(pilot, "enter")
            at_interaction(app, ks[row])
            assert message(app).startswith(f"✓ jump {ks[row]} → at interaction {ks[row]}"), message(app)
    drive(app, script)


def test_tt_replay_names_interactions_sharing_a_position_as_jumped_to(shared_run):
    """The session names the interaction jumped to (not the last one at that position), so
    `tt replay --to K` reports K, as the debugger does."""
    for k in (0, 1, 2):
        steps = replay_steps(tt("replay", str(shared_run), "--to", str(k), "--json"))
        assert steps[0]["interaction"] == k, steps[0]

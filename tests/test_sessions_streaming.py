"""The streaming sessions sample (`sample_runs/sessions_streaming/`), recorded unchanged.

The sample writes five files of clicks, one a step, and a Structured Streaming query
(`processingTime` trigger, watermark) reads each one in a micro-batch of its own through
`SessionProcessor` (`transformWithState`, event-time timers). Its planted bug registers
each session's timer in seconds where Spark wants milliseconds. Here the recording is
checked against the job's output with recording off, `tt verify`, and an oracle computed
with pandas from the click files the job wrote (none of tt's logs): what the job prints,
and what the processor's store holds at each user's end in each micro-batch and at each
micro-batch's end. Then the debugger is driven with the README's condition: it stops
where Alice's first timer is registered, a thousand times smaller than her click.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import each_step, printed_on_and_off

from tt.core import values
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "sample_runs" / "sessions_streaming" / "job.py"
GAP = pd.Timedelta(minutes=30)      # the job's inactivity gap
DELAY = pd.Timedelta(minutes=10)    # its watermark delay
CONDITION = "'alice' in SessionProcessor.timers"


@pytest.fixture(scope="module")
def sample(spark, tmp_path_factory):
    """(run file, what the job printed recorded, with recording off, the clicks it wrote)."""
    d = tmp_path_factory.mktemp("sessions_streaming")
    on, off = printed_on_and_off(JOB, ["--out", str(d / "out")], d / "run.db", spark)
    return d / "run.db", on, off, clicks(d / "out" / "clicks")


# --- the oracle: pandas over the click files ---------------------------------------------------

def clicks(folder: Path) -> pd.DataFrame:
    """Every click the query read, with the step (file) it came in and its time in epoch ms."""
    frames = []
    for f in folder.glob("step-*.json"):
        pdf = pd.read_json(f, lines=True, dtype={"ts": str})
        pdf["step"] = int(f.stem.split("-")[1])
        frames.append(pdf)
    pdf = pd.concat(frames, ignore_index=True)
    pdf["ts"] = pd.to_datetime(pdf["ts"], utc=True)
    pdf["ms"] = (pdf["ts"] - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    return pdf.sort_values(["user", "ts"], ignore_index=True)


def sessions(pdf: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Sessions per `by`: a click more than GAP after the previous one starts a new one."""
    pdf = pdf.sort_values([*by, "ts"])
    gap = pdf.groupby(by)["ts"].diff()
    pdf = pdf.assign(session=(gap.isna() | (gap > GAP)).cumsum())
    return (pdf.groupby("session").agg(user=("user", "first"), start=("ms", "min"), last=("ms", "max"),
                                        clicks=("ms", "size"), step=("step", "max"))
            .sort_values(["user", "start"], ignore_index=True))


def buggy(pdf: pd.DataFrame) -> pd.DataFrame:
    """What the job does: its timers (in seconds, so in January 1970 to Spark) fire at the end
    of the micro-batch after the one that set them, or of that one once the watermark has
    moved: every session ends with its step's file."""
    return sessions(pdf, ["user", "step"])


def intended(pdf: pd.DataFrame) -> pd.DataFrame:
    """What it should do: sessions over the whole stream, closed once the last watermark
    (the latest click less DELAY) has passed their last click plus GAP."""
    s = sessions(pdf, ["user"])
    watermark = (pdf["ts"].max() - DELAY - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    return s[s["last"] + GAP // pd.Timedelta(milliseconds=1) <= watermark]


def hhmm(ms: int) -> str:
    return pd.Timestamp(ms, unit="ms", tz="UTC").strftime("%H:%M")


def printed(s: pd.DataFrame) -> list[str]:
    """The job's lines for these closed sessions."""
    lines = [f"  {r.user:6} {hhmm(r.start)}–{hhmm(r.last)}  {r.clicks} click{'s' if r.clicks != 1 else ''}"
             for r in s.itertuples()]
    per_user = ", ".join(f"{u} {n}" for u, n in sorted(s["user"].value_counts().items()))
    return [*lines, f"sessions closed: {len(s)} ({per_user})"]


def timer(last_ms: int) -> int:
    """The timer the job registers for a session whose last click is at `last_ms`: in seconds."""
    return last_ms // 1000 + GAP // pd.Timedelta(seconds=1)


def detail(inspector) -> str:
    """The line under the state tree: the value at its cursor."""
    content = inspector.query_one("#state-detail").content
    return content.plain if hasattr(content, "plain") else str(content)


# --- the tests ---------------------------------------------------------------------------------

def test_recording_does_not_change_what_the_job_prints(sample):
    _, on, off, pdf = sample
    want = printed(buggy(pdf))
    assert off.splitlines() == want
    assert [line for line in on.splitlines() if line in want] == want


def test_the_printed_sessions_show_the_bug_the_job_describes(sample):
    """10 sessions where 6 are due, Alice's visit split in two: the job's docstring says so."""
    pdf = sample[3]
    wrong, right = printed(buggy(pdf))[-1], printed(intended(pdf))[-1]
    assert wrong == "sessions closed: 10 (alice 3, bob 3, carol 3, dave 1)"
    assert right == "sessions closed: 6 (alice 2, bob 2, carol 2)"
    doc = JOB.read_text()
    assert wrong in doc and "should have 2" in doc and "(6 in all" in doc


def test_verify_replays_the_streaming_processor(sample, capsys):
    from tt.cli.main import main

    assert main(["verify", str(sample[0])]) == 0
    n = len(RunReader(sample[0]).interactions())
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out


def test_its_timers_agree_with_sparks_store_as_they_are_set_and_fire(sample, capsys):
    """`tt verify --statestore` compares the replay's timers with Spark's store: after step 0
    (watermark 0) each user's one timer, in seconds, is kept; later micro-batches fire them
    (PySpark deletes a fired timer itself), and the store must no longer hold them."""
    import json

    from tt.cli.main import main
    from tt.recorder.statestore import StateStore

    run, _, _, pdf = sample
    (query,) = RunReader(run).plan["queries"].values()
    store = StateStore(query["checkpoint"])
    (op,) = store.operators()
    last = pdf[pdf.step == 0].groupby("user")["ms"].max()
    assert store.timers(op["id"], 0) == {u: [int(ms) // 1000 + int(GAP.total_seconds())] for u, ms in last.items()}
    assert main(["verify", "--statestore", str(run), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["statestore"]
    assert result["ok"] and result["timers"] >= len(pdf.groupby(["step", "user"])), result


def test_the_store_at_every_users_end_and_micro_batch_end_equals_the_pandas_oracle(sample):
    """Step every instance (a micro-batch's task) through its units in a replay without Spark.
    When a user's rows in a micro-batch end, `session` holds the user's open session of that
    step and `timers` its end in seconds; at the task's end, what is still open is what pandas
    says: step 0's sessions (the first micro-batch's watermark is 0, before January 1970),
    nothing after a later step (the watermark is past the timers) or after the micro-batch
    without data that fired step 0's timers."""
    run, _, _, pdf = sample
    pieces = buggy(pdf)
    due = {(r.user, (r.start, r.last, r.clicks), timer(r.last)) for r in pieces.itertuples()}
    step_of = {(r.user, r.ms): r.step for r in pdf.itertuples()}
    session = DebugSession(run)
    seen, ends, steps, user = set(), {}, {}, None
    for i, unit, state in each_step(session, "SessionProcessor"):
        ends[i] = state
        steps.setdefault(i, set())
        if unit is None:
            continue
        if unit[0] in ("rows", "one_row"):   # a user's clicks, or (one_row) a user's one click
            user = unit[1][0]
        if unit[0] in ("row", "one_row"):
            steps[i].add(step_of[(user, int(unit[-1].ts.timestamp() * 1000))])
        if unit[0] in ("rows_end", "one_row"):
            held = state["session"][user]
            assert state["timers"][user] == [timer(held[1])], state
            seen.add((user, held, timer(held[1])))
    session.reader.close()
    assert all(len(s) <= 1 for s in steps.values()), f"an instance read more than one file: {steps}"
    ends = {(min(steps[i]) if steps[i] else None): state for i, state in ends.items()}
    assert seen == due
    assert len(steps) == pdf["step"].max() + 2, "one micro-batch a file, one firing step 0's timers"
    first = pieces[pieces["step"] == 0]
    assert ends.pop(0) == {"session": {r.user: (r.start, r.last, r.clicks) for r in first.itertuples()},
                           "timers": {r.user: [timer(r.last)] for r in first.itertuples()}}
    assert set(ends) == {*range(1, pdf["step"].max() + 1), None}, "one micro-batch a file, one firing step 0's"
    assert all(state == {"session": {}} for state in ends.values()), ends


def test_each_micro_batch_end_is_an_interaction(sample):
    reader = RunReader(sample[0])
    slots = reader.plan["micro_batches"]["SessionProcessor"]
    ends = [i.detail["batch"] for i in reader.interactions() if i.trigger == "micro-batch"]
    assert ends == sorted({b for b, _ in slots}) and len(ends) == reader.operator("SessionProcessor").instances
    reader.close()


def test_tt_debug_stops_where_alices_timer_is_set_in_seconds_and_steps_back(sample):
    """`c` with the README's condition stops after Alice's first click: the state panel shows
    her session in milliseconds and the timer just registered for it in seconds, which is
    before the click itself; `N` goes back to before it."""
    from test_tui import answer, drive, keys, message, state_text, until
    from tt.tui.app import DebuggerApp
    from tt.tui.widgets.state_inspector import StateInspector
    from tt.tui.widgets.timeline import InteractionTimeline

    reader = RunReader(sample[0])
    batches = [i.detail["batch"] for i in reader.interactions() if i.trigger == "micro-batch"]
    reader.close()
    assert batches
    app = DebuggerApp(sample[0])
    first = buggy(sample[3]).iloc[0]
    assert first.user == "alice"

    def alice() -> list:
        shown = [values.decode(s) for label, s in app.shown.states.items() if label.startswith("SessionProcessor:")]
        return [(s["session"].get("alice"), s.get("timers", {}).get("alice")) for s in shown
                if isinstance(s.get("session"), dict)]

    async def script(pilot):
        assert not any(t for _, t in alice()), alice()
        # the timeline names each micro-batch's end by its batch (a 9-wide trigger column cut "micro-batch")
        timeline = app.query_one(InteractionTimeline)
        shown = [(str(timeline.get_row(str(r["k"]))[3]), str(timeline.get_row(str(r["k"]))[5]))
                 for r in timeline.rows_data if r["trigger"] == "micro-batch"]
        assert shown == [("batch", f"micro-batch {b} ended") for b in batches], shown
        await keys(pilot, "c")
        await answer(pilot, CONDITION)
        assert "stopped after SessionProcessor:" in message(app), message(app)
        [(held, timers)] = [(h, t) for h, t in alice() if t]
        assert held == (first.start, first.start, 1) and timers == [timer(first.start)], (held, timers)
        assert timers[0] < held[1], "the timer is in seconds: to Spark, long before the click it follows"
        # `/ alice` Enter, then again: the state tree's cursor on her session, then on her timers
        # (the line under the tree shows each), which Enter opens
        inspector = app.query_one(StateInspector)
        for path in (("session", "alice"), ("timers", "alice")):
            await keys(pilot, "slash")
            await answer(pilot, "alice")
            assert "found 'alice'" in message(app), message(app)
            assert inspector.tree.cursor_node.data.path == path
            await until(pilot, lambda: " › ".join(path) in detail(inspector), what="the cursor's value")
            held_or_timer = held[1] if path[0] == "session" else timers[0]   # a one-timer list is shown whole
            assert str(held_or_timer) in detail(inspector), detail(inspector)
        await keys(pilot, "enter")
        assert str(timers[0]) in state_text(app) and str(held[1]) in state_text(app), state_text(app)
        await keys(pilot, "N")
        assert not any(t for _, t in alice()), alice()
    drive(app, script, size=(160, 45))

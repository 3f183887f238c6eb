"""Post-mortem debugging: a run whose operator raised is stepped up to, and into, the failing tuple.

FE raises ZeroDivisionError on one row (after updating its state for it); Spark
retries the task and gives up. The run file must hold the failing tuple, say
once that it failed (with the attempt count), open just before that tuple, and
re-raise the exception when it is stepped into, without changing the state.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import orjson
import pytest

import workloads
from tt.cli.main import main
from tt.core.errors import JobError
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

README = Path(__file__).resolve().parent.parent / "README.md"


def _record_failing(spark, out: Path, watch: str) -> Path:
    """`workloads.build_failing` recorded into `out` with θ = `watch`: the run fails (FE raises)."""
    from tt.recorder.session import RecordingSession

    session = RecordingSession(out, Path(__file__), [], watch=watch)
    with pytest.raises(JobError, match="ZeroDivisionError"):
        try:
            with session:
                workloads.build_failing(spark).run()
        finally:
            session.close()
    return out


@pytest.fixture(scope="module")
def failed_run(spark, tmp_path_factory):
    """Recorded once for the module (a failing job costs Spark four task attempts)."""
    return _record_failing(spark, tmp_path_factory.mktemp("postmortem") / "run.db", "FE")


def _oracle_before_failure(spark) -> tuple[int, int, dict]:
    """(instance, position, FE's state before the failing row) from the source partitions
    as Spark reads them, in plain Python (not from the run file)."""
    parts = workloads.failing_df(spark).rdd.glom().collect()
    for i, rows in enumerate(parts):
        ids = [r["id"] for r in rows]
        if workloads.FAILING_ID in ids:
            n = ids.index(workloads.FAILING_ID)
            highest: dict = {}
            for r in rows[:n]:
                highest[r["customer"]] = max(highest.get(r["customer"], 0.0), r["amount"])
            return i, n, {"highest": highest, "seen": n}
    raise AssertionError("the failing row is in no partition")


def _plain(state):
    """A stored (JSON-encoded) state as plain Python, for comparing with the oracle."""
    return orjson.loads(orjson.dumps(state))


@pytest.mark.slow
def test_failed_run_is_listed_once_with_its_attempts(failed_run, capsys):
    reader = RunReader(failed_run)
    assert reader.status == "failed"
    failures = reader.failures()
    assert len(failures) == 1, failures
    f = failures[0]
    assert (f["op"], f["instance"], f["position"]) == ("FE", 1, 999)
    assert f["error"] == "ZeroDivisionError: division by zero" and f["attempts"] == 4 and f["visible"]
    assert "1 / 0" in f["traceback"] and str(workloads.FAILING_ID) in f["row"]
    # the traceback starts at the operator's own code: tt's and PySpark's calls above it are left out
    assert f["traceback"].splitlines()[1].startswith(f'  File "{workloads.__file__}", line '), f["traceback"]
    reader.close()
    assert main(["inspect", str(failed_run), "failures"]) == 0
    out = capsys.readouterr().out
    assert out.count("raised") == 1
    assert "FE:1 input #999 raised ZeroDivisionError: division by zero (4 attempts)" in out


@pytest.mark.slow
def test_session_opens_just_before_the_failing_tuple(spark, failed_run):
    instance, position, oracle = _oracle_before_failure(spark)
    assert (instance, position) == (1, 999)
    s = DebugSession(failed_run)
    assert s.failure is not None and s.failure.steppable and s.failure.label == "FE:1:999"
    result = s.goto_failure()
    assert result.ok and "FE:1:999" in result.note
    assert s.position["FE:1"] == position
    waiting = [p for p in s.pending("FE:1", limit=1) if p.next]
    assert [p.label for p in waiting] == ["FE:1:999"] and waiting[0].row["id"] == workloads.FAILING_ID
    assert _plain(s.state("FE:1")) == oracle
    assert s.can_step_into("FE:1:999") and s.can_step_over("FE:1:999")
    ref = s.parse_ref("FE:1:999")
    assert s.payloads({ref})[ref]["id"] == workloads.FAILING_ID  # (`tt inspect RUN scope` reads it so)


@pytest.mark.slow
def test_step_into_the_failing_tuple_re_raises_and_keeps_the_state(failed_run):
    s = DebugSession(failed_run)
    s.goto_failure()
    before_states, before_position, history = s.states(), s.position, len(s.history)
    for step in (s.step_into, s.step_over):
        result = step("FE:1:999")
        assert not result.ok
        assert result.note.startswith("FE:1:999 raised ZeroDivisionError: division by zero (as in the recording)")
        assert result.raised["error"] == "ZeroDivisionError" and "1 / 0" in result.raised["traceback"]
        assert result.consumed == [] and result.changed == {}
        assert s.position == before_position and s.states() == before_states
        waiting = [p.label for p in s.pending("FE:1", limit=1) if p.next]
        assert waiting == ["FE:1:999"], "the failing tuple still waits"
    assert not s.scope_stack and len(s.history) == history, "a step that re-raised is not one to step back from"
    # the engine is intact: it still replays the recorded prefix exactly (interaction 0, then back)
    assert s.jump(0).ok and s.position["FE:1"] == 0
    assert s.goto_failure().ok and s.states() == before_states


@pytest.mark.slow
def test_run_until_stops_where_the_run_failed(failed_run):
    s = DebugSession(failed_run)
    result = s.run_until("FE.seen > 5000")
    assert not result.ok and "FE:1:999" in result.note and result.raised["error"] == "ZeroDivisionError"
    assert s.position["FE:1"] == 999


@pytest.mark.slow
def test_a_result_says_whether_its_changes_are_a_diff(failed_run, capsys):
    """A jump lists no changes: its states are shown whole, not patched with none. Going to the
    failure is a jump under its own name, and `diffed` says so, where the TUI read the name."""
    s = DebugSession(failed_run)
    first = s.jump(0)
    assert first.ok and not first.diffed and first.changed == {}
    step = s.step_over(next(p.label for p in s.pending("FE:1", limit=1) if p.next))
    assert step.ok and step.diffed and step.changed["FE:1"], step
    failure = s.goto_failure()
    assert failure.ok and failure.action == "goto_failure" and not failure.diffed and failure.changed == {}
    assert main(["replay", str(failed_run), "--to", "0", "--json", "--step-over", "FE:0:0"]) == 0
    went, stepped = orjson.loads(capsys.readouterr().out)
    assert (went["action"], went["diffed"], stepped["action"], stepped["diffed"]) == \
        ("jump", False, "step_over", True)


def _readme_block() -> list[str]:
    """The commands of the README's paragraph on failed runs."""
    text = README.read_text()
    para = text[text.index("**A run stopped early**"):]
    block = re.search(r"```sh\n(.*?)```", para, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


@pytest.mark.slow
def test_the_readme_commands(failed_run, monkeypatch, capsys):
    monkeypatch.chdir(failed_run.parent)
    commands = _readme_block()
    assert [c.split()[:2] for c in commands] == [["tt", "inspect"], ["tt", "replay"], ["tt", "verify"], ["tt", "debug"]]
    inspect_cmd, replay_cmd, verify_cmd, _ = commands
    assert main(shlex.split(inspect_cmd)[1:]) == 0
    # where the operator raised: the line of the test's workload that divides by zero (its text, not tt's logs)
    line = next(n for n, text in enumerate(Path(workloads.__file__).read_text().splitlines(), 1) if "1 / 0" in text)
    assert (f"FE:1 input #999 raised ZeroDivisionError: division by zero (4 attempts)\n"
            f"  at workloads.py line {line}, in process\n") in capsys.readouterr().out
    assert main(shlex.split(replay_cmd)[1:]) == 1  # the step re-raised: see `tt replay --help`
    out = capsys.readouterr().out
    assert f"division by zero (as in the recording), at workloads.py line {line}, in process" in out
    assert "the run failed here: FE:1:999 raised ZeroDivisionError: division by zero at workloads.py line" in out
    assert "goto_failure FE:1:999: ok" in out
    assert "step_into FE:1:999: re-raised" in out
    assert "FE:1:999 raised ZeroDivisionError: division by zero (as in the recording)" in out
    assert main(shlex.split(verify_cmd)[1:]) == 0
    assert ("run.db: the recorded failure reproduces: FE:1:999 raises ZeroDivisionError: division by zero in "
            "replay too") in capsys.readouterr().out


@pytest.mark.slow
def test_verify_says_whether_the_failure_reproduces(spark, failed_run, tmp_path, capsys):
    """`tt verify` of a failed run replays on from its last interaction to the failing tuple and
    feeds it; where the failing operator is outside G(θ) it says why that tuple was not replayed."""
    from tt.replay.verify import verify

    assert main(["verify", str(failed_run)]) == 0
    assert (f"{failed_run}: the recorded failure reproduces: FE:1:999 raises ZeroDivisionError: division by zero "
            f"in replay too") in capsys.readouterr().out
    reader, steps, failure = RunReader(failed_run), [], {}
    verify(reader, progress=lambda done, total: steps.append((done, total)), failure=failure)
    n = len(reader.interactions())
    reader.close()
    assert failure["checked"] and steps == [(i, n + 1) for i in range(1, n + 2)], steps   # the failure: one step more
    out = _record_failing(spark, tmp_path / "fd.db", "FD")
    assert main(["verify", str(out)]) == 0
    assert (f"{out}: the recorded failure (FE:1:999 raised ZeroDivisionError: division by zero) was not replayed: "
            f"FE is not in G(θ) (θ = FD): record with --watch FE to replay it") in capsys.readouterr().out


@pytest.mark.slow
def test_tt_debug_opens_before_the_failing_tuple_and_s_re_raises(failed_run):
    import asyncio
    import time

    from tt.tui.app import DebuggerApp
    from tt.tui.widgets.message_line import MessageLine

    app = DebuggerApp(failed_run, timings=False)

    async def until(pilot, cond, what):
        t0 = time.monotonic()
        while not cond():
            assert time.monotonic() - t0 < 60, f"timed out waiting for {what}"
            await pilot.pause(0.02)

    async def script():
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.model is not None or app.session_error is not None, "the session")
            assert app.session_error is None
            text = app.query_one(MessageLine).plain
            assert "the run failed at FE:1:999: ZeroDivisionError: division by zero" in text and "s re-raises" in text
            session = app.model.session
            assert session.position["FE:1"] == 999 and app.shown.selected_label == "FE:1:999"
            before = session.states()
            await pilot.press("s")
            await until(pilot, lambda: "(as in the recording)" in app.query_one(MessageLine).plain, "the step")
            await app.workers.wait_for_complete()
            assert "FE:1:999 raised ZeroDivisionError: division by zero" in app.query_one(MessageLine).plain
            assert session.position["FE:1"] == 999 and session.states() == before
            assert app.shown.selected_label == "FE:1:999", "the failing tuple still waits, selected"

    asyncio.run(script())


@pytest.mark.slow
def test_a_failure_after_a_shuffle(spark, tmp_path, capsys):
    """FD (fed by a shuffle) raises: its failing tuple is logged and re-raised the same way."""
    from tt.recorder.session import RecordingSession

    bad = 777
    out = tmp_path / "down.db"
    session = RecordingSession(out, Path(__file__), [], watch="FE")
    with pytest.raises(JobError, match="KeyError"):
        try:
            with session:
                workloads.build_failing_downstream(spark, bad).run()
        finally:
            session.close()
    [f] = RunReader(out).failures()
    assert f["op"] == "FD" and f["attempts"] == 4 and f["visible"]
    label = f"FD:{f['instance']}:{f['position']}"
    s = DebugSession(out)
    assert s.failure.label == label and s.failure.steppable
    assert s.goto_failure().ok
    waiting = [p for p in s.pending(label.rsplit(":", 1)[0], limit=1) if p.next]
    assert [p.label for p in waiting] == [label] and waiting[0].row["id"] == bad
    # every FE instance finished (its task committed); FD consumed exactly the inputs before
    assert all(s.position[f"FE:{i}"] == 1001 for i in (0, 1))
    before = s.states()
    assert before[f"FD:{f['instance']}"]["scored"] == f["position"]
    ref = s.parse_ref(label)
    assert s.payloads({ref})[ref]["id"] == bad
    result = s.step_into(label)
    assert not result.ok and result.note.startswith(f"{label} raised KeyError: 'no score for {bad}' (as in the recording)")
    assert s.states() == before
    s.reader.close()
    assert main(["verify", str(out)]) == 0   # FE's tasks replayed whole, FD fed through the shuffle up to it
    assert (f"{out}: the recorded failure reproduces: {label} raises KeyError: 'no score for {bad}' in replay too"
            in capsys.readouterr().out)


@pytest.mark.slow
def test_goto_before_a_tuple_is_the_state_just_before_it(spark, failed_run):
    """`goto_before` (Enter on a lineage leaf in tt debug): the last interaction before the tuple,
    then its instance alone up to it; FE's state there is the oracle's, from the source partitions
    in plain Python, and every other instance stands where that interaction had it."""
    instance, position, oracle = _oracle_before_failure(spark)
    s = DebugSession(failed_run)
    label = f"FE:{instance}:{position - 5}"
    result = s.goto_before(label)
    assert result.ok and result.note.startswith(f"{label} waits at FE:{instance}: interaction "), result.note
    k = int(result.note.split("interaction ")[1].split(",")[0])
    assert s.position[f"FE:{instance}"] == position - 5
    at_k = s.reader.instances_at(k)
    assert all(s.engine.instances[key].count == a.position for key, a in at_k.items()
               if key != (s.reader.operator("FE").id, instance))
    assert [p.label for p in s.pending(f"FE:{instance}", limit=1) if p.next] == [label]
    assert s.step_over(label).ok and s.step_over(f"FE:{instance}:{position - 4}").ok
    for n in range(position - 3, position):
        assert s.step_into(f"FE:{instance}:{n}").ok
    assert _plain(s.state(f"FE:{instance}")) == oracle
    assert s.step_back().ok and s.position[f"FE:{instance}"] == position - 1


@pytest.mark.slow
def test_tt_replay_goto_before(spark, failed_run, capsys):
    """`tt replay RUN --to 0 --goto-before FE:1:999 --states all`: the state printed is the oracle's."""
    instance, position, oracle = _oracle_before_failure(spark)
    label = f"FE:{instance}:{position}"
    assert main(["replay", str(failed_run), "--to", "0", "--goto-before", label, "--states", "all", "--json"]) == 0
    jump, goto = orjson.loads(capsys.readouterr().out)
    assert jump["action"] == "jump" and goto["action"] == "goto_before" and goto["ok"], goto
    assert goto["note"].startswith(f"{label} waits at FE:{instance}: interaction 0, then"), goto["note"]
    assert _plain(goto["states"][f"FE:{instance}"]) == oracle
    assert goto["pending"][f"FE:{instance}"]["tuple"] == label, goto["pending"]
    assert goto["stopped_at"] == {"tuple": label, "where": "before", "from": label}, goto.get("stopped_at")

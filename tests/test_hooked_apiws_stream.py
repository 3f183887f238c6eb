"""`applyInPandasWithState` in a Structured Streaming query, recorded through the hooks.

`tests/jobs/hooked_apiws_stream.py` streams three files of click events, one per
micro-batch, through `sessions`, a session-window function keeping a GroupState per user
with an event-time timeout. Spark runs each micro-batch's keys with data in one Python
worker and its timed-out keys in another: each run is an instance, each micro-batch end an
interaction. The oracles read none of tt's logs: pandas over the events the job writes,
and PySpark's own `GroupState` for tt's replay stand-in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hooked_apiws_stream import events   # tests/jobs/: what the job writes
from plain_jobs import each_step, post_mortem, run_plain

from tt.core import values
from tt.core.group_state import GroupState, snapshot
from tt.recorder.job import record_job
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_apiws_stream.py"
GAP_MS = 60_000


def _events() -> pd.DataFrame:
    frames = [events(f).assign(file=f) for f in range(3)]
    pdf = pd.concat(frames, ignore_index=True)
    pdf["ms"] = pd.to_datetime(pdf["ts"]).astype("int64") // 1_000_000
    return pdf


def sessions_after(files: int) -> dict:
    """Each user's (clicks, total, last event ms) once the first `files` files are in."""
    pdf = _events()
    pdf = pdf[pdf["file"] < files]
    return {u: (len(g), int(g["value"].sum()), int(g["ms"].max())) for u, g in pdf.groupby("user")}


def expected_rows() -> list:
    """The job's output: every user's session after each file it clicked in ("open"), and
    once closed: u0 clicks in every file and never times out; the others do."""
    pdf, rows = _events(), []
    for f in range(3):
        state = sessions_after(f + 1)
        rows += [[u, c, t, "open"] for u, (c, t, _) in state.items() if u in set(pdf[pdf["file"] == f]["user"])]
    rows += [[u, c, t, "closed"] for u, (c, t, _) in sessions_after(3).items() if u != "u0"]
    return sorted(rows)


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, output recorded, output with recording off)."""
    where = tmp_path_factory.mktemp("hooked_apiws_stream")
    off, on, run = where / "off.json", where / "on.json", where / "run.db"
    run_plain(JOB, [str(off), str(where / "in_off"), str(where / "ck_off")])
    outcome = record_job(JOB, [str(on), str(where / "in_on"), str(where / "ck_on")], run)
    assert outcome.status == "complete", outcome.error
    return run, json.loads(on.read_text()), json.loads(off.read_text())


def test_recording_does_not_change_the_querys_output(recorded):
    _, on, off = recorded
    assert on == off
    assert on["rows"] == expected_rows()


def test_each_python_run_of_a_micro_batch_task_is_an_instance(recorded, capsys):
    """The keys with data and the timed-out keys of one task are two instances; every
    micro-batch end is an interaction; `tt inspect` says where each instance ran."""
    reader = RunReader(recorded[0])
    assert reader.operator("sessions").kind == "applyInPandasWithState"
    slots = reader.plan["micro_batches"]["sessions"]
    batches = recorded[1]["batches"]
    timeouts = [s for s in slots if len(s) == 3]
    assert timeouts and all(s[2] == 1 for s in timeouts)
    assert {s[0] for s in slots} == set(range(batches))
    ends = [i for i in reader.interactions() if i.trigger == "micro-batch"]
    assert [i.detail["batch"] for i in ends] == list(range(batches))
    last = reader.interactions()[-1].k
    reader.close()
    from tt.cli.main import main

    assert main(["inspect", str(recorded[0]), "state", "--at", str(last)]) == 0
    shown = capsys.readouterr().out
    b, p, _ = timeouts[0]
    assert f"sessions:{slots.index(timeouts[0])}  (micro-batch {b}, partition {p}, timed-out keys; after" in shown


def test_every_group_state_equals_the_pandas_oracle(recorded):
    """At the end, the instances of the keys with data of micro-batch b hold every user who
    clicked in file b with the session pandas computes over files 0..b, its timeout 60 s
    after the last click; the timed-out keys' instances hold nothing (the state removed)."""
    reader = RunReader(recorded[0])
    slots = reader.plan["micro_batches"]["sessions"]
    op = reader.operator("sessions")
    at = reader.instances_at(reader.interactions()[-1].k)
    pdf = _events()
    by_batch: dict = {}
    for i, slot in enumerate(slots):
        state = values.decode(reader.state(at[(op.id, i)].state))
        if len(slot) == 3:
            assert state["state"] == {} and "timeouts" not in state
            continue
        got = by_batch.setdefault(slot[0], {"state": {}, "timeouts": {}})
        got["state"].update(state["state"])
        got["timeouts"].update(state.get("timeouts", {}))
    assert sorted(by_batch) == [0, 1, 2]   # batch 3 only closes u1
    for b, got in by_batch.items():
        want = {u: s for u, s in sessions_after(b + 1).items() if u in set(pdf[pdf["file"] == b]["user"])}
        assert got["state"] == want
        assert got["timeouts"] == {u: last + GAP_MS for u, (_, _, last) in want.items()}
    reader.close()


def test_each_call_leaves_the_pandas_oracles_session_in_replay(recorded):
    """Step over every unit of every instance, with no Spark: when a call for a user ends, the
    user's session is what pandas computes over the files so far, and a timed-out user's is
    gone. A user whose clicks come as one DataFrame is one step, `one_chunk`, as a timed-out
    user is (PySpark hands it one empty DataFrame); the others start, take DataFrames and end.
    (Spark cuts a task's rows into batches of 16 across users: which of file 0's users of ten
    clicks get one DataFrame is its choice; the twenty and forty of later files take several.)"""
    session = DebugSession(recorded[0])
    slots = session.reader.plan["micro_batches"]["sessions"]
    kinds, user, timed_out = {}, None, False
    for i, unit, state in each_step(session, "sessions"):
        if unit is None:
            continue
        if unit[0] in ("key", "one_chunk"):
            user, timed_out = unit[1][0], unit[2]["props"]["hasTimedOut"]
            kinds[(slots[i][0], user, timed_out)] = unit[0]
        if unit[0] in ("key_end", "one_chunk"):
            if timed_out:
                assert user not in state["state"]
            else:
                assert tuple(state["state"][user]) == sessions_after(slots[i][0] + 1)[user]
    session.reader.close()
    assert set(kinds) == {*((0, u, False) for u in ("u0", "u1", "u2", "u3")), (1, "u0", False), (1, "u1", False),
                          (2, "u0", False), (2, "u2", True), (2, "u3", True), (3, "u1", True)}
    assert {kinds[(b, u, False)] for b, u in ((1, "u0"), (1, "u1"), (2, "u0"))} == {"key"}
    assert "one_chunk" in {kinds[(0, u, False)] for u in ("u0", "u1", "u2", "u3")}
    assert {k for k, v in kinds.items() if k[2]} == {k for k, v in kinds.items() if k[2] and v == "one_chunk"}


def test_a_steps_changes_start_from_what_earlier_micro_batches_left(recorded):
    """A task of a later micro-batch starts with nothing of its own: its first call of a user
    showed `state.u0: (absent) → …`, and a timed-out user's call, which removes the session,
    showed no change at all. A step's changes now read the partition's store: a call that
    ends changes the user's session from what pandas computes over the files before to what
    it computes with this one; a timed-out call removes the session the store held; starting
    a call changes no session."""
    session = DebugSession(recorded[0])
    slots = session.reader.plan["micro_batches"]["sessions"]
    seen = set()
    for i, unit, _ in each_step(session, "sessions"):
        if unit is None or slots[i][0] == 0:
            continue
        changed = session.last_result.changed.get(f"sessions:{i}", {})
        sessions = {p.split(".", 1)[1]: (old, new) for p, (old, new) in changed.items() if p.startswith("state.")}
        batch, what = slots[i][0], unit[0]
        user, timed_out = (unit[1][0], unit[2]["props"]["hasTimedOut"]) if what in ("key", "one_chunk") else (user, timed_out)
        if what == "key":
            assert sessions == {}, (i, unit, changed)
        if what in ("key_end", "one_chunk"):
            before = sessions_after(batch)[user]
            old, new = sessions[user]
            assert tuple(values.decode(old)) == before, (i, user, changed)
            if timed_out:
                assert new == "<missing>", (i, user, changed)
            else:
                assert tuple(values.decode(new)) == sessions_after(batch + 1)[user], (i, user, changed)
            seen.add((batch, user, timed_out))
    session.reader.close()
    assert seen == {(1, "u0", False), (1, "u1", False), (2, "u0", False), (2, "u2", True), (2, "u3", True),
                    (3, "u1", True)}


def test_store_changes_name_keys_of_any_type_as_the_tracker_does():
    """Spark-free: a store keyed by ints or tuples (encoded as `$dict` whole) is compared key by
    key, each change at `field.key` with the key as it is, as a task's own changes are named."""
    from tt.replay.partition_store import store_changes
    from tt.replay.session import _keyed

    before = _keyed({"state": {1: (2, 3), 5: (1, 1), ("a", 1): 7}, "timeouts": {1: 100}})
    after = _keyed({"state": {1: (4, 3), 5: (1, 1), 9: (0, 1)}, "timeouts": {1: 200}})
    own = {"attempts": [1, 2], "state.1": ["<missing>", {"$tuple": [4, 3]}]}
    assert store_changes(own, before, after) == {
        "attempts": [1, 2],   # (a field of the task's own, not the store's: as the tracker said)
        "state.1": [{"$tuple": [2, 3]}, {"$tuple": [4, 3]}],
        "state.('a', 1)": [7, "<missing>"],
        "state.9": ["<missing>", {"$tuple": [0, 1]}],
        "timeouts.1": [100, 200]}


def test_a_partitions_store_over_its_micro_batches_equals_the_pandas_oracle(recorded):
    """At every micro-batch end, each partition's latest task shows `(partition store)`: the
    GroupStates its partition's tasks so far left, a key's last call's standing, a removed one
    gone. Together they hold every user still open with the session pandas computes: u2 and u3
    carried through micro-batch 1, where no call was for them, gone once timed out in 2; u1 gone
    in 3. (A partition's first task shows its own keys alone: its own state is the store.)"""
    from tt.replay.partition_store import FIELD

    closed = {"u2": 2, "u3": 2, "u1": 3}   # the micro-batch whose timed-out run removes the user
    session = DebugSession(recorded[0])
    slots = session.reader.plan["micro_batches"]["sessions"]
    ends = [i for i in session.reader.interactions() if i.trigger == "micro-batch"]
    carried = set()
    for end in ends:
        batch = end.detail["batch"]
        session.jump(end.k)
        latest: dict = {}   # partition -> its last task so far (the timed-out run after the data run)
        for i, slot in enumerate(slots):
            if slot[0] <= batch and (slot[1] not in latest or (slot[0], slot[2:]) > _order(slots[latest[slot[1]]])):
                latest[slot[1]] = i
        together: dict = {"state": {}, "timeouts": {}}
        for i in latest.values():
            state = session.state(f"sessions:{i}")
            store = values.decode(state[FIELD] if FIELD in state   # (GroupState values are shown encoded)
                                  else {"state": state["state"], "timeouts": state.get("timeouts", {})})
            assert not together["state"].keys() & store["state"].keys(), "a user is in one partition"
            together["state"].update(store["state"])
            together["timeouts"].update(store.get("timeouts", {}))
            carried |= store["state"].keys() - state["state"].keys()   # (keys are users' names)
        sessions = sessions_after(min(batch, 2) + 1)
        want = {u: s for u, s in sessions.items() if closed.get(u, batch + 1) > batch}
        assert together["state"] == want, batch
        assert together["timeouts"] == {u: last + GAP_MS for u, (_, _, last) in want.items()}
    assert {"u2", "u3"} <= carried   # shown from micro-batch 0 by a later task that had no call for them
    session.reader.close()


def _order(slot: list) -> tuple:
    return slot[0], slot[2:]


def test_verify_and_run_until_without_spark(recorded, capsys):
    from tt.cli.main import main

    assert main(["verify", str(recorded[0])]) == 0
    n = len(RunReader(recorded[0]).interactions())
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out
    session = DebugSession(recorded[0])
    result = session.run_until("sessions.state.get('u1', (0,))[0] >= 30")
    assert result.ok, result
    slot = session.reader.plan["micro_batches"]["sessions"][result.stopped_at.instance]
    assert slot[0] == 1   # u1's 30th click is in the second file
    session.reader.close()


def test_tt_verify_statestore_compares_each_group_state_with_sparks(recorded, tmp_path, capsys):
    """Spark's own store, read from the query's checkpoint, as a second oracle: at each
    micro-batch end each key a task's calls were for has the GroupState (value, timeout) the
    replay left, or none where the call removed it. Against the checkpoint of the same job
    whose clicks are each worth one more, the first difference is named."""
    from tt.cli.main import main

    run = str(recorded[0])
    assert main(["verify", "--statestore", run, "--json"]) == 0
    store = json.loads(capsys.readouterr().out)["statestore"]
    # micro-batch 0: four users; 1: u0, u1; 2: u0 and the timeouts of u2, u3; 3 (no data): u1's timeout
    assert store["ok"] and (store["keys"], store["micro_batches"]) == (10, 4), store
    # the change feed: the ten GroupStates micro-batches 0 to 3 wrote (six sessions, four removed)
    assert (store["change_feed"]["batches"], store["change_feed"]["writes"]) == (4, 10), store["change_feed"]
    other = tmp_path / "ck_plus"
    run_plain(JOB, [str(tmp_path / "plus.json"), str(tmp_path / "in_plus"), str(other), "-", "1"])
    assert main(["verify", "--statestore", run, "--checkpoint", str(other), "--json"]) == 1
    diffs = json.loads(capsys.readouterr().out)["statestore"]["differences"]
    first = diffs[0]
    user = values.decode(first["key"])
    clicks, total, last = sessions_after(1)[user]
    assert (first["batch"], first["variable"]) == (0, "state")
    assert values.decode(first["replayed"]) == [(clicks, total, last), last + GAP_MS]
    assert values.decode(first["store"]) == [(clicks, total + clicks, last), last + GAP_MS]
    assert main(["verify", "--statestore", run, "--checkpoint", str(other)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if ": statestore: " in x)
    assert f"the GroupState of {user!r} is ({clicks}, {total}, {last}) (timeout {last + GAP_MS})" in line, line


def test_tt_verify_statestore_names_a_group_state_only_sparks_change_feed_wrote(recorded, tmp_path, capsys):
    """Against the checkpoint of the job whose file 1 has one click of u2 more (early enough
    that u2 still times out in micro-batch 2), every key the replay's calls were for ends each
    micro-batch as in Spark's store; only the change feed shows that micro-batch 1 wrote u2's
    GroupState, which no call of the replay did."""
    from hooked_apiws_stream import BASE, EXTRA_SECOND, EXTRA_VALUE

    from tt.cli.main import main

    other = tmp_path / "ck_extra"
    run_plain(JOB, [str(tmp_path / "extra.json"), str(tmp_path / "in_extra"), str(other), "-", "0", "u2"])
    run = str(recorded[0])
    assert main(["verify", "--statestore", run, "--checkpoint", str(other), "--json"]) == 1
    diffs = json.loads(capsys.readouterr().out)["statestore"]["differences"]
    clicks, total, _ = sessions_after(1)["u2"]
    last = (BASE + 100 + EXTRA_SECOND) * 1000
    assert len(diffs) == 1, diffs
    (diff,) = diffs
    assert (diff["batch"], diff["change_feed"], values.decode(diff["key"]), diff["replayed"]) == (1, True, "u2", None)
    assert values.decode(diff["store"]) == ["update", (clicks + 1, total + EXTRA_VALUE, last), last + GAP_MS]
    assert main(["verify", "--statestore", run, "--checkpoint", str(other)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if ": statestore: " in x)
    assert (f"micro-batch 1: sessions: the replay wrote no GroupState for 'u2', but Spark's change feed says it "
            f"wrote the GroupState ({clicks + 1}, {total + EXTRA_VALUE}, {last}) (timeout {last + GAP_MS})") in line, line


def test_step_back_puts_the_group_state_back(recorded):
    """Step into u0's first call in micro-batch 0, one unit at a time, then back."""
    session = DebugSession(recorded[0])
    reader = session.reader
    op = reader.operator("sessions")
    i = next(i for i, s in enumerate(reader.plan["micro_batches"]["sessions"]) if s == [0, 1] or s == [0, 0])
    inst = session.engine.instances[(op.id, i)]
    before = session.engine.states()[(op.id, i)]
    steps = 0
    while inst.peek() is not None and inst.peek()[0] not in ("key_end", "one_chunk"):   # (one_chunk: a whole call)
        session.step_over(session.parse_ref(f"sessions:{i}:{inst.count}"))
        steps += 1
    session.step_over(session.parse_ref(f"sessions:{i}:{inst.count}"))
    after = values.decode(session.engine.states()[(op.id, i)])
    assert after["state"] != {}
    for _ in range(steps + 1):
        session.step_back()
    assert session.engine.states()[(op.id, i)] == before
    reader.close()


def test_a_function_raising_on_a_timeout_is_debuggable_post_mortem(spark, tmp_path):
    """`sessions` raises when u1's session times out (micro-batch 3): the replay stops just
    before that call, with u1's state as Spark handed it, and step-into re-raises."""
    session = post_mortem(JOB, [str(tmp_path / "o.json"), str(tmp_path / "in"), str(tmp_path / "ck"), "u1"],
                          tmp_path / "failed.db", "cannot close u1's session", "operator sessions:")
    op, i = session.reader.operator("sessions"), int(session.failure.label.split(":")[1])
    assert session.reader.plan["micro_batches"]["sessions"][i][2:] == [1]   # the timed-out keys' run
    unit = session.engine.instances[(op.id, i)].peek()
    assert unit[0] == "one_chunk" and unit[1][0] == "u1" and unit[2]["props"]["hasTimedOut"]
    assert len(unit[3]) == 0   # PySpark hands a timed-out key one empty DataFrame: one unit
    assert tuple(unit[2]["value"]) == sessions_after(3)["u1"]
    result = session.step_into(session.parse_ref(session.failure.label))
    assert result.raised is not None and result.raised["message"] == "cannot close u1's session"
    session.reader.close()


# --- tt's GroupState against PySpark's own --------------------------------------------------------

SCENARIOS = [
    ("EventTimeTimeout", None, [("update", (1, 2.5, "x")), ("setTimeoutTimestamp", 5000)]),
    ("EventTimeTimeout", (3, 1.0, "y"), [("get",), ("remove",), ("getOption",)]),
    ("EventTimeTimeout", (3, 1.0, "y"), [("setTimeoutTimestamp", 10)]),              # before the watermark
    ("EventTimeTimeout", None, [("setTimeoutDuration", 10)]),                          # wrong timeout kind
    ("ProcessingTimeTimeout", None, [("setTimeoutDuration", 250), ("update", (1, 1.0, "z"))]),
    ("ProcessingTimeTimeout", None, [("setTimeoutDuration", 0)]),
    ("ProcessingTimeTimeout", None, [("get",)]),                                       # no state
    ("NoTimeout", (1, 2.0, "a"), [("update", None)]),
    ("NoTimeout", None, [("getCurrentWatermarkMs",)]),                                 # no watermark
]


def _run(state, calls) -> list:
    seen = []
    for name, *args in calls:
        try:
            attr = getattr(state, name)
            seen.append(("ok", attr(*args) if callable(attr) else attr))
        except Exception as e:  # noqa: BLE001  both must raise alike
            seen.append(("raised", [c.__name__ for c in type(e).__mro__ if c.__name__ in
                                    ("ValueError", "TypeError", "RuntimeError")]))
    return seen + [("after", snapshot(state))]


@pytest.mark.parametrize("conf,value,calls", SCENARIOS)
def test_tts_group_state_behaves_as_pysparks(conf, value, calls):
    """Replay hands the function tt's GroupState: every read, write and refusal must be
    PySpark's. PySpark's own class (pure Python, no JVM needed) is the oracle."""
    from pyspark.sql import Row
    from pyspark.sql.streaming.state import GroupState as SparkGroupState
    from pyspark.sql.types import StructType

    props = {"batchProcessingTimeMs": 1000, "eventTimeWatermarkMs": 2000, "timeoutConf": conf,
             "hasTimedOut": False, "watermarkPresent": conf == "EventTimeTimeout", "defined": value is not None,
             "updated": False, "removed": False, "timeoutTimestamp": -1}
    spark_state = SparkGroupState(optionalValue=Row(*value) if value else None, keyAsUnsafe=b"",
                                  valueSchema=StructType(), **props)
    ours = GroupState(snapshot(spark_state))
    assert snapshot(ours) == snapshot(spark_state)
    assert _run(ours, calls) == _run(spark_state, calls)


def test_the_debugger_says_where_each_instance_ran(recorded):
    """The state panel labels each instance with its micro-batch and partition, and the
    timed-out keys' run as such; `c` stops where u1's session reaches 30 clicks."""
    from test_tui import answer, drive, keys, message, state_text
    from tt.tui.app import DebuggerApp

    app = DebuggerApp(recorded[0])

    async def script(pilot):
        shown = state_text(app)
        assert "sessions:0 (micro-batch 0, partition " in shown, shown
        assert "timed-out keys)" in shown, shown
        await keys(pilot, "c")
        await answer(pilot, "sessions.state.get('u1', (0,))[0] >= 30")
        assert "stopped after sessions:" in message(app), message(app)
        held = [values.decode(s)["state"].get("u1") for s in app.shown.states.values()]
        assert any(u1 and u1[0] == 30 for u1 in held), held
    drive(app, script, size=(160, 60))


def test_a_condition_on_timeouts_before_any_is_set_reads_none(recorded):
    """`timeouts` is shown only once a key has one; a condition reads it as empty before, with
    no error (and the first instance's first call sets u1's)."""
    from tt.core.errors import UsageError

    session = DebugSession(recorded[0])
    with pytest.raises(UsageError, match=r"unknown field 'nosuch' of sessions \(fields: state, timeouts\)"):
        session.run_until("sessions.nosuch")   # (the fields a condition may read, timeouts too)
    result = session.run_until("'u1' in sessions.timeouts")
    assert result.ok and "raised" not in result.note, result
    session.reader.close()


def test_lineage_through_a_group_state_stays_with_its_key(recorded):
    """Row lineage sees each key's GroupState apart (core/group_state.py `watch_state_calls`):
    no row of a micro-batch's task links to another user's call of that task through state,
    and a user's state at the end was written by that user's call. (A key's state from an
    earlier micro-batch comes from Spark's store: lineage does not link across instances.)"""
    from tt.replay.lineage import Lineage

    session = DebugSession(recorded[0])
    try:
        lin = Lineage(session)
        rows = lin.rows_of("sessions", "True")
        assert len(rows) == len(recorded[1]["rows"])

        def user_of(call: str) -> str:   # "sessions:I:N": the key of the call that unit N belongs to
            op_i, n = call.rsplit(":", 1)
            for q in range(int(n), -1, -1):
                ref = lin.parse_ref(f"{op_i}:{q}")
                unit = values.decode(lin.back(ref, depth=0).rows[ref])
                if unit[0] in ("key", "one_chunk"):
                    return unit[1][0]
            raise AssertionError(f"no key unit before {call}")

        for root in rows:   # (a row is the DataFrame a call yielded: its user is its call's key)
            tree = lin.back(root, depth=1)
            (call,) = [lin.label(link.to) for link in tree.links if link.kind == "emitted"]
            states = [link.state for link in tree.links if link.kind == "state"]
            assert all(s.endswith(f"[{user_of(call)!r}]") for s in states), (lin.label(root), states)
        op = session.reader.operator("sessions")
        at = session.reader.instances_at(session.reader.interactions()[-1].k)
        holding = [i for i in range(op.instances)
                   if "u0" in values.decode(session.reader.state(at[(op.id, i)].state))["state"]]
        assert holding
        for i in holding:
            tree = lin.back(lin.state_value(f"sessions:{i}", "state.u0"), depth=1)
            (writer,) = [link.to for link in tree.links if link.kind == "state"]
            assert lin.label(writer).startswith(f"sessions:{i}:")
            unit = values.decode(tree.rows[writer])
            assert unit[0] == "key_end" or unit[:2] == ("one_chunk", ("u0",)), unit
    finally:
        session.reader.close()


def test_the_change_feed_comparison_of_group_states_key_by_key():
    """`_compare_group_writes` on its own: an equal write is counted; a removal Spark did not
    write is none where the store had no state for the key (the default store writes a removal
    only of a key it holds), and a difference where it had one; a write only one side made, or
    made otherwise, is a difference."""
    from tt.replay.verify import _compare_group_writes

    session = ("update", (3, 12, 1790000049000), 1790000109000)
    feed, diffs = {"writes": 0}, []
    reads = []
    _compare_group_writes(2, "sessions", {"u0": session}, {"u0": session, "u8": ("delete",), "u9": ("delete",)},
                          lambda: reads.append(1) or {"u0": (None, -1)}, feed, diffs)
    assert (feed["writes"], diffs) == (1, [])
    assert reads == [1], "the store's earlier GroupStates are read once for the micro-batch's removals"
    _compare_group_writes(2, "sessions", {}, {"u9": ("delete",)}, lambda: {"u9": ((1, 1, 1), 5)}, feed, diffs)
    assert [d["key"] for d in diffs] == ["u9"] and "the replay removed the GroupState" in diffs[0]["error"]
    diffs.clear()
    other = ("update", (3, 13, 1790000049000), 1790000109000)
    _compare_group_writes(2, "sessions", {"u0": other, "u1": session}, {"u0": session}, lambda: None, feed, diffs)
    assert [(d["key"], d["replayed"] is None, d["store"] is None) for d in diffs] == [("u0", False, False),
                                                                                     ("u1", True, False)]
    assert "the replay wrote no GroupState for 'u1'" in diffs[1]["error"]


def test_tt_verify_statestore_with_no_timeout_and_against_a_checkpoint_another_query_took(spark, tmp_path, capsys):
    """A query with `NoTimeout` stores the GroupState alone (no `timeoutTimestamp` beside it):
    `--statestore` failed on it ("Spark cannot read the GroupStates ...: timeoutTimestamp").
    And a job run again after deleting its checkpoint writes another query's state into the
    same place, which `--statestore` compared as the recorded query's and blamed the replay."""
    import shutil

    from tt.cli.main import main

    out, in_dir, ckpt, run = tmp_path / "on.json", tmp_path / "in", tmp_path / "ck", tmp_path / "run.db"
    outcome = record_job(JOB, [str(out), str(in_dir), str(ckpt), "-", "0", "-", "none"], run)
    assert outcome.status == "complete", outcome.error
    rows = json.loads(out.read_text())["rows"]
    assert {status for *_, status in rows} == {"open"}   # no session closes without a timeout
    assert main(["verify", "--statestore", str(run), "--json"]) == 0
    store = json.loads(capsys.readouterr().out)["statestore"]
    # the users' GroupStates after each micro-batch: 4 + 2 + 1, each as pandas computes it
    assert store["ok"] and (store["keys"], store["micro_batches"]) == (7, 3), store

    shutil.rmtree(ckpt)
    shutil.rmtree(in_dir)
    run_plain(JOB, [str(tmp_path / "again.json"), str(in_dir), str(ckpt), "-", "0", "-", "none"])
    assert main(["verify", "--statestore", str(run)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "now holds another query's state" in err[0] and "record again" in err[0], err


"""A StatefulProcessor in a Structured Streaming query, recorded through the hooks.

`tests/jobs/hooked_tws_stream.py` streams three files, one per micro-batch, through a
`transformWithStateInPandas` processor (and, in one test, the Row-based
`transformWithState`). Each micro-batch's task on a partition is an instance of its own;
every micro-batch end is an interaction. Two oracles read none of tt's logs: pandas over
the files' definition, and Spark's own state store read back from the query's
checkpoint (the `statestore` source).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import run_plain

from tt.core import values
from tt.recorder.job import record_job
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_tws_stream.py"
FILES, PER_FILE = 3, 40


def payments(files: int = FILES, sparse: bool = False) -> pd.DataFrame:
    pdf = pd.DataFrame({"id": range(files * PER_FILE)})
    pdf["customer"] = "c" + (pdf["id"] % 4).astype(str)
    if sparse:   # after the first file, c2 and c3 pay no more
        later = pdf["id"] >= PER_FILE
        pdf.loc[later, "customer"] = "c" + (pdf.loc[later, "id"] % 2).astype(str)
    pdf["amount"] = ((pdf["id"] * 37) % 101).astype(float)
    pdf["kind"] = ["card" if i % 3 == 0 else "cash" for i in pdf["id"]]
    return pdf


def oracle(files: int, sparse: bool = False) -> dict:
    """Each customer's balance and kinds once the first `files` files are in."""
    by = payments(files, sparse).groupby("customer")
    return {"balance": {c: (float(g["amount"].sum()), len(g)) for c, g in by},
            "by_kind": {c: g["kind"].value_counts().to_dict() for c, g in by}}


def _record(where: Path, mode: str = "pandas"):
    off, on, run = where / "off.json", where / "on.json", where / "run.db"
    run_plain(JOB, [str(off), str(where / "in_off"), str(where / "ck_off"), str(FILES), str(PER_FILE), mode])
    outcome = record_job(JOB, [str(on), str(where / "in_on"), str(where / "ck_on"), str(FILES), str(PER_FILE), mode],
                         run)
    assert outcome.status == "complete", outcome.error
    return run, json.loads(on.read_text()), json.loads(off.read_text()), where / "ck_on"


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, output recorded, output with recording off, the recorded query's checkpoint)."""
    return _record(tmp_path_factory.mktemp("hooked_tws_stream"))


def _latest(reader: RunReader, k: int) -> dict:
    """Per state variable and key, the value held by the latest micro-batch's instance that
    touched the key, at interaction k."""
    slots = reader.plan["micro_batches"]["Balance"]
    op = reader.operator("Balance")
    out: dict = {"balance": {}, "by_kind": {}}
    at = reader.instances_at(k)
    for i in sorted(range(op.instances), key=lambda i: slots[i][0]):
        state = values.decode(reader.state(at[(op.id, i)].state))
        for var in out:
            out[var].update(state.get(var, {}))
    return out


def test_recording_does_not_change_the_querys_output(recorded):
    _, on, off, _ = recorded
    assert on == off and on["batches"] == FILES
    want = [[c, a, n] for f in range(1, FILES + 1) for c, (a, n) in oracle(f)["balance"].items()]
    assert on["balances"] == sorted(want)


def test_each_micro_batch_task_is_an_instance_and_each_end_an_interaction(recorded):
    reader = RunReader(recorded[0])
    slots = reader.plan["micro_batches"]["Balance"]
    assert sorted(b for b, _ in slots) == sorted([b for b in range(FILES) for _ in range(2)])
    ends = [i for i in reader.interactions() if i.trigger == "micro-batch"]
    assert [i.detail["batch"] for i in ends] == list(range(FILES))
    reader.close()


def test_the_state_at_every_micro_batch_end_equals_the_pandas_oracle(recorded):
    reader = RunReader(recorded[0])
    ends = [i for i in reader.interactions() if i.trigger == "micro-batch"]
    for i in ends:
        assert _latest(reader, i.k) == oracle(i.detail["batch"] + 1), i
    reader.close()


def test_a_steps_changes_start_from_what_earlier_micro_batches_left(recorded):
    """A later micro-batch's task knows nothing of its own before its first call of a key, so a
    step read `balance.c0: (absent) → …`. A step's changes now read the partition's store: each
    key's balance goes from what pandas computes over the files before to what it computes with
    this one, and each kind's count likewise."""
    from plain_jobs import each_step

    session = DebugSession(recorded[0])
    slots = session.reader.plan["micro_batches"]["Balance"]
    seen = set()
    for i, unit, _ in each_step(session, "Balance"):
        batch = slots[i][0]
        changed = session.last_result.changed.get(f"Balance:{i}", {})
        for path, (old, new) in changed.items():
            var, _, customer = path.partition(".")
            if var not in ("balance", "by_kind") or batch == 0:
                continue
            want_old = oracle(batch)[var].get(customer)
            old, new = (None if x == "<missing>" else values.decode(x) if var == "by_kind" else tuple(values.decode(x))
                        for x in (old, new))   # (a map's entries by kind; a balance (amount, n))
            assert old == (tuple(want_old) if var == "balance" and want_old else want_old), (i, path, changed)
            want_new = oracle(batch + 1)[var][customer]
            assert new == (tuple(want_new) if var == "balance" else want_new), (i, path, changed)
            seen.add((batch, var, customer))
    session.reader.close()
    assert {(b, v) for b, v, _ in seen} == {(b, v) for b in range(1, FILES) for v in ("balance", "by_kind")}


def test_the_end_state_equals_sparks_own_state_store(recorded):
    """The second oracle: what Spark committed to its state store, read from the checkpoint."""
    from pyspark.sql import SparkSession

    reader = RunReader(recorded[0])
    ours = _latest(reader, reader.interactions()[-1].k)
    reader.close()
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    store = spark.read.format("statestore").option("stateVarName", "balance").load(str(recorded[3]))
    theirs = {r["key"][0]: (r["value"][0], r["value"][1]) for r in store.collect()}
    kinds = spark.read.format("statestore").option("stateVarName", "by_kind").load(str(recorded[3]))
    their_kinds: dict = {}
    for r in kinds.collect():
        their_kinds.setdefault(r["key"][0], {})[r["user_map_key"][0]] = r["user_map_value"][0]
    assert ours["balance"] == theirs
    assert ours["by_kind"] == their_kinds


def test_verify_and_replay_without_spark(recorded, capsys):
    from tt.cli.main import main

    assert main(["verify", str(recorded[0])]) == 0
    n = len(RunReader(recorded[0]).interactions())
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out
    session = DebugSession(recorded[0])
    result = session.run_until("Balance.balance.get('c1', (0, 0))[1] >= 20")
    assert result.ok, result
    batch = session.reader.plan["micro_batches"]["Balance"][result.stopped_at.instance][0]
    assert batch == 1   # c1's 20th payment is in the second file
    session.reader.close()


def test_the_row_based_processor_records_the_same_query(spark, tmp_path, recorded):
    run, on, off, ckpt = _record(tmp_path, mode="row")
    assert on == off == recorded[1]
    reader = RunReader(run)
    assert reader.operator("RowBalance").kind == "transformWithState"
    reader.close()
    from tt.cli.main import main

    assert main(["verify", str(run)]) == 0


def test_each_task_shows_its_partitions_store_over_the_micro_batches_so_far(spark, tmp_path):
    """After the first file only c0 and c1 pay: a micro-batch's task holds their keys alone,
    and the debugger shows beside it the partition's store over every micro-batch so far
    (`(partition store)`, replay/partition_store.py), which still holds c2's and c3's state from
    the first. At every micro-batch end, the stores of each partition's latest task hold
    together what pandas computes from the files, and at the end what Spark's own state store
    holds; the recorded states, each task's own calls, still verify."""
    from tt.cli.main import main
    from tt.replay.partition_store import FIELD

    run, on, off, ckpt = _record(tmp_path, mode="sparse")
    assert on == off
    session = DebugSession(run)
    slots = session.reader.plan["micro_batches"]["Balance"]
    ends = [i for i in session.reader.interactions() if i.trigger == "micro-batch"]
    assert [i.detail["batch"] for i in ends] == list(range(FILES))
    for end in ends:
        batch = end.detail["batch"]
        session.jump(end.k)
        latest: dict = {}   # partition -> the task of its latest micro-batch so far
        for i, (b, part) in enumerate(slots):
            if b <= batch and (part not in latest or b > slots[latest[part]][0]):
                latest[part] = i
        together: dict = {"balance": {}, "by_kind": {}}
        carried = set()   # keys a task shows from an earlier micro-batch only
        for i in latest.values():
            state = session.state(f"Balance:{i}")
            store = state.get(FIELD, {k: state[k] for k in together})   # (a partition's first micro-batch: its own)
            for var in together:
                assert not together[var].keys() & store[var].keys(), "a key is in one partition"
                together[var].update(store[var])
            carried |= store["balance"].keys() - state["balance"].keys()
            if slots[i][0] > 0:
                assert not {"c2", "c3"} & state["balance"].keys(), "the task's own calls: c2 and c3 paid no more"
        if batch == FILES - 1:
            assert carried & {"c2", "c3"}, "a partition of c0 or c1 holds c2 or c3 too: shown from micro-batch 0"
        want = oracle(batch + 1, sparse=True)
        assert values.decode(together["balance"]) == {c: tuple(v) for c, v in want["balance"].items()}, batch
        assert together["by_kind"] == want["by_kind"], batch

    store = spark.read.format("statestore").option("stateVarName", "balance").load(str(ckpt))
    assert {r["key"][0]: (r["value"][0], r["value"][1]) for r in store.collect()} == \
        values.decode(together["balance"])
    session.reader.close()
    assert main(["verify", str(run)]) == 0
    _the_debugger_shows_the_partitions_store(run, ends[-1].k)


def _the_debugger_shows_the_partitions_store(run: Path, k: int) -> None:
    """In `tt debug`, after `j` to the last micro-batch's end, the state tree holds the field;
    `C` and `w` on it say that it is put together for reading (it was never written as such)."""
    from test_tui import answer, drive, keys, message
    from test_tui_lineage import _nodes
    from tt.replay.partition_store import FIELD
    from tt.tui.app import DebuggerApp
    from tt.tui.widgets.state_inspector import StateInspector

    app = DebuggerApp(run)

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, str(k))
        assert app.shown.op == "Balance" and any(FIELD in s for s in app.shown.states.values()), app.shown.states
        tree = app.query_one(StateInspector).tree
        node = next(n for n in _nodes(tree) if n.data is not None and n.data.path == (FIELD,))
        tree.focus()
        tree.move_cursor(node)
        await keys(pilot, "w")
        assert "is put together from its partition's micro-batches for reading" in message(app), message(app)
        await keys(pilot, "C")
        await answer(pilot, f"{node.data.instance}.{FIELD}.balance")
        assert "is put together from the views of the partition's micro-batches" in message(app), message(app)
    drive(app, script, size=(160, 45))

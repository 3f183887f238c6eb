"""Grouped functions of an unmodified PySpark job (`applyInPandas`, `applyInArrow`,
cogroup), recorded through the hooks: one group per step, the key known.

`tests/jobs/hooked_grouped.py` is recorded as `tt record` does it, then checked against
its output with recording off, `tt verify`, and an oracle computed with pandas from
the data's definition, which reads none of tt's logs. Which partition a group lands
in is Spark's choice, so the oracle compares what the instances hold together.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import post_mortem, record_on_and_off

from tt.core import values
from tt.recorder.job import record_job
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_grouped.py"
ROWS = 300


def payments() -> pd.DataFrame:
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["customer"] = "c" + (pdf["id"] % 7).astype(str)
    pdf["amount"] = ((pdf["id"] * 37) % 101).astype(float)
    return pdf


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, the job's output recorded, its output with recording off, tt's events)."""
    events: list = []
    run, on, off = record_on_and_off(JOB, tmp_path_factory.mktemp("hooked_grouped"),
                                     on_event=lambda kind, info: events.append((kind, info)))
    return run, on, off, events


def test_recording_does_not_change_the_jobs_output(recorded):
    _, on, off, _ = recorded
    assert on == off
    expected = payments().groupby("customer")["amount"].sum()
    assert on["totals"] == [[c, a] for c, a in expected.items()]
    assert on["batched"] == ROWS
    counts = payments()["customer"].value_counts()
    assert max(n for c, n in on["running"] if c == "c0") == counts["c0"]   # the last batch's running count
    assert on["arrow_running"] == on["running"]


def test_every_grouped_call_site_is_an_operator_stepping_by_group(recorded):
    reader = RunReader(recorded[0])
    ops = {o.name: o.kind for o in reader.operators if o.in_g}
    assert ops == {"summary": "applyInPandas", "above_mean": "applyInPandas",
                   "merge": "cogroup.applyInPandas", "sizes": "applyInArrow",
                   "batches_of": "applyInPandas.iter", "running": "applyInPandas.iter",
                   "arrow_rows": "applyInArrow.iter"}
    assert {n["name"]: n["unit"] for n in reader.plan["nodes"] if "unit" in n and n["name"] in ops} == {
        "summary": "group", "above_mean": "group", "merge": "group", "sizes": "group",
        "batches_of": "batch", "running": "batch", "arrow_rows": "batch"}
    reader.close()


def test_an_iterator_form_function_is_recorded_batch_by_batch(recorded, capsys):
    """`batches_of`, `running` and `arrow_rows` ask for PySpark's iterator form: each is an
    operator whose steps are a group's start, its batches and its end; over the instances,
    `running`'s and `arrow_rows`' closures counted every customer's rows (the pandas oracle),
    and `tt inspect` lists nothing as unrecorded."""
    from tt.cli.main import main

    warnings = [info["message"] for kind, info in recorded[3] if kind == "warning"]
    assert not any("runs unrecorded" in m for m in warnings), warnings
    reader = RunReader(recorded[0])
    try:
        running, arrow = reader.operator("running"), reader.operator("arrow_rows")
        end = reader.instances_at(reader.interactions()[-1].k)
        rows: dict = {}
        arrow_rows: dict = {}
        for (op, _), at in end.items():
            if op in (running.id, arrow.id):
                (rows if op == running.id else arrow_rows).update(reader.state(at.state)["closure"]["rows"])
        steps = sum(at.position for (op, _), at in end.items() if op == running.id)
    finally:
        reader.close()
    counts = payments()["customer"].value_counts().to_dict()
    assert rows == arrow_rows == counts
    batches = sum(-(-n // 20) for n in counts.values())   # twenty rows a batch
    assert steps >= 2 * len(counts) + batches   # a start and an end per group, and each batch
    assert main(["inspect", str(recorded[0])]) == 0
    out = capsys.readouterr().out
    assert "unrecorded" not in out and "running" in out


def test_the_end_states_equal_the_pandas_oracle(recorded):
    """Over all instances: every group seen once, with its rows; the closure's counts."""
    reader = RunReader(recorded[0])
    names = {o.id: o.name for o in reader.operators}
    end = reader.instances_at(reader.interactions()[-1].k)
    by_name: dict[str, list] = {}
    for (op, i), at in end.items():
        by_name.setdefault(names[op], []).append(reader.state(at.state))
    reader.close()
    counts = payments()["customer"].value_counts().to_dict()
    summaries = [s["closure"]["stats"] for s in by_name["summary"]]
    assert len(summaries) == 6 and any(s["groups"] == 0 for s in summaries)  # empty partitions too
    assert sum(s["groups"] for s in summaries) == len(counts)
    assert sum(s["rows"] for s in summaries) == ROWS
    seen: dict = {}
    for s in by_name["sizes"]:
        seen.update(s["closure"]["seen"])
    assert seen == counts
    assert all(s == {} for s in by_name["above_mean"] + by_name["merge"])


def test_a_coalesce_after_a_grouped_function_records_every_group(spark, tmp_path):
    """`coalesce(2)` after `summary`: Spark calls it for three shuffle partitions in each of two
    tasks, each call under the task's partition id. Every call is recorded, the later ones as
    instances of their own: over the instances, its closure saw every group once and every row
    (the pandas oracle), where the first call's groups alone were recorded before; the run
    verifies."""
    from tt.replay.verify import verify

    events: list = []
    run, on, off = record_on_and_off(JOB, tmp_path, [str(ROWS), "-", "0", "2"],
                                     on_event=lambda kind, info: events.append((kind, info)))
    assert on == off
    assert "summary ran several of its input partitions in one Spark task (a coalesce after it?): tt recorded " \
           "each as an instance of its own, numbered after the task's partitions" in \
           {info["message"] for kind, info in events if kind == "warning"}
    reader = RunReader(run)
    try:
        summary = reader.operator("summary")
        end = reader.instances_at(reader.interactions()[-1].k)
        stats = [reader.state(at.state)["closure"]["stats"] for (op, _), at in end.items() if op == summary.id]
        assert summary.instances == len(stats) > 2
        assert sum(s["groups"] for s in stats) == payments()["customer"].nunique()
        assert sum(s["rows"] for s in stats) == ROWS
        results = verify(reader)
        assert results and all(r["ok"] for r in results), results
    finally:
        reader.close()


def test_verify_replays_every_interaction(recorded, capsys):
    from tt.cli.main import main

    assert main(["verify", str(recorded[0])]) == 0
    n = len(RunReader(recorded[0]).interactions())
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out


def test_a_step_is_one_group_and_step_back_undoes_it(recorded):
    """From the start, step over summary's first group: the key and rows it records are that
    customer's, as pandas counts them; step back returns to the initial state."""
    session = DebugSession(recorded[0])
    theta = session.reader.theta.id
    before = session.engine.states()
    session.step_over(session.parse_ref("summary:0:0"))
    state = session.engine.states()[(theta, 0)]["closure"]["stats"]
    counts = payments()["customer"].value_counts().to_dict()
    assert state["groups"] == 1 and state["rows"] == counts[state["last"]]
    session.step_back()
    assert session.engine.states() == before
    session.reader.close()


def test_a_step_of_the_iterator_form_is_one_batch_and_step_back_undoes_it(recorded):
    """`running`'s steps: its first group's start (nothing counted yet), then each batch, which
    adds its rows to the customer's count (at most twenty); at the group's end the count is the
    customer's rows, as pandas counts them. Step back undoes a batch."""
    session = DebugSession(recorded[0])
    try:
        op = session.reader.operator("running").id

        def rows() -> dict:
            return session.engine.states()[(op, 0)]["closure"]["rows"]
        session.step_over(session.parse_ref("running:0:0"))   # ("group", key)
        assert rows() == {}
        session.step_over(session.parse_ref("running:0:1"))   # its first batch
        (customer, first), = rows().items()
        assert 0 < first <= 20
        before = session.engine.states()
        session.step_over(session.parse_ref("running:0:2"))
        assert session.engine.states() != before
        session.step_back()
        assert session.engine.states() == before
        position = 2
        while rows().get(customer) != payments()["customer"].value_counts()[customer]:
            session.step_over(session.parse_ref(f"running:0:{position}"))
            position += 1
            assert position < 20, rows()
    finally:
        session.reader.close()


def test_the_grouped_methods_are_pysparks_own_after_the_job(recorded):
    from pyspark.sql.group import GroupedData
    from pyspark.sql.pandas.group_ops import PandasCogroupedOps, PandasGroupedOpsMixin

    assert "applyInPandas" not in GroupedData.__dict__ and "applyInArrow" not in GroupedData.__dict__
    assert GroupedData.applyInPandas is PandasGroupedOpsMixin.applyInPandas
    assert not hasattr(PandasCogroupedOps.applyInPandas, "__wrapped__")


def test_a_raising_group_function_fails_the_run_and_replay_stops_before_its_group(spark, tmp_path):
    """Post-mortem: the run names the operator, partition and group; replay stops before it."""
    session = post_mortem(JOB, [str(tmp_path / "o.json"), str(ROWS), "c4"], tmp_path / "failed.db",
                          "raised ValueError: bad customer c4", "operator summary:")
    failure = session.failure
    assert failure.label.startswith("summary:")
    op, i, position = failure.label.split(":")
    state = session.engine.states()[(session.reader.theta.id, int(i))]["closure"]["stats"]
    assert state["groups"] == int(position)   # every group before the failing one, none after
    counts = payments()["customer"].value_counts().to_dict()
    assert state["last"] != "c4" and (state["last"] is None or state["rows"] >= counts[state["last"]])
    session.reader.close()


def test_a_retried_grouped_task_leaves_the_log_of_a_failure_free_run(recorded, tmp_path, capsys):
    """summary raises on c3 in its task's first attempt; Spark retries the task. Only the
    retry is kept: the same output, the same end states, and verify passes."""
    from tt.cli.main import main

    out = tmp_path / "retried.db"
    outcome = record_job(JOB, [str(tmp_path / "o.json"), str(ROWS), "-", "1"], out)
    assert outcome.status == "complete", outcome.error
    assert json.loads((tmp_path / "o.json").read_text()) == recorded[2]
    reader = RunReader(out)
    statuses = [s for (s,) in reader.conn.execute("SELECT status FROM attempts WHERE stage = 0")]
    assert statuses.count("failed") == 1, statuses
    theta = reader.theta.id
    retried = {i: reader.state(at.state)["closure"]["stats"] for (op, i), at in reader.instances_at(reader.interactions()[-1].k).items()
               if op == theta}
    reader.close()
    first = RunReader(recorded[0])
    clean = {i: first.state(at.state)["closure"]["stats"] for (op, i), at in first.instances_at(first.interactions()[-1].k).items()
             if op == first.theta.id}
    first.close()
    assert retried == clean
    assert main(["verify", str(out)]) == 0
    assert "every replayed state equals the recorded one" in capsys.readouterr().out


def seen_recorded_and_replayed(run: Path) -> tuple[dict, dict]:
    """`{function: what its closure's `seen` holds}` at the run's last interaction, as recorded
    and as a replay to it has it (the jobs' functions note there what they were handed)."""
    reader = RunReader(run)
    last = reader.interactions()[-1].k
    recorded: dict = {}
    for (op, i), at in reader.instances_at(last).items():
        state = reader.state(at.state)
        if state is not None:
            recorded.setdefault(reader.operators[op].name, {}).update(values.decode(state)["closure"]["seen"])
    reader.close()
    session = DebugSession(run)
    session.jump(last)
    replayed: dict = {}
    for label, state in session.states().items():
        replayed.setdefault(label.split(":")[0], {}).update(values.decode(state).get("closure", {}).get("seen", {}))
    session.reader.close()
    return recorded, replayed


def test_a_replayed_grouped_function_is_handed_the_key_pyspark_handed_it(spark, tmp_path):
    """`tests/jobs/hooked_key_types.py` groups by an int, a long, a double, a boolean and a
    string column, by temporal ones (a timestamp, a date, a decimal, an interval) and by nullable
    ones (a null timestamp key, `pd.NaT`, stopped the recorded job); each
    function keeps the types of the key it was handed. Recorded, they are
    PySpark's (numpy scalars of each column's type for pandas, Arrow scalars of each column's
    type for Arrow); the replay hands every function the same, so its states equal the recorded
    ones and `tt verify` passes (a key rebuilt as one pandas row made the int and the long
    floats: `(1.0, 0.0, 0.5, ...)`; a timestamp came back in microseconds where PySpark hands
    nanoseconds)."""
    from tt.cli.main import main

    run, on, off = record_on_and_off(JOB.parent / "hooked_key_types.py", tmp_path)
    assert on == off
    recorded, replayed = seen_recorded_and_replayed(run)
    numpy_key = ["numpy.int32", "numpy.int64", "numpy.float64", "numpy.bool", "builtins.str"]
    assert recorded["pandas_keys"] and all(t == numpy_key for t in recorded["pandas_keys"].values()), recorded
    assert recorded["cogrouped_keys"] and all(t == numpy_key for t in recorded["cogrouped_keys"].values())
    assert recorded["arrow_keys"] and all(t == ["int32", "int64", "double", "bool", "string"]
                                          for t in recorded["arrow_keys"].values()), recorded
    temporal = ["pandas._libs.tslibs.timestamps.Timestamp:ns"] * 2 + [
        "datetime.date:", "decimal.Decimal:", "pandas._libs.tslibs.timedeltas.Timedelta:ns"]
    assert recorded["temporal_keys"] and all(t == temporal for t in recorded["temporal_keys"].values()), recorded
    assert ["numpy.float64", "builtins.NoneType", "pandas._libs.tslibs.nattype.NaTType", "builtins.NoneType"] in \
        recorded["null_keys"].values(), recorded["null_keys"]
    assert {name: replayed[name] for name in recorded} == recorded
    assert main(["verify", str(run)]) == 0


def test_pandas_functions_are_handed_map_and_struct_columns_as_pyspark_handed_them(spark, tmp_path):
    """`tests/jobs/hooked_nested_frames.py` hands applyInPandas, a cogroup and mapInPandas
    frames with map columns (string and long keys, their rows with keys of their own), arrays
    of maps and structs (one holding a map): PySpark gives them as dicts. Recording them as
    Arrow made a map a struct with every row's keys (`{'a': 0, 'b': None, 'c': None}` replayed
    for `{'a': 0}`), and a map with long keys stopped the job (Arrow wants string field names);
    an array of longs with a null came back floats: such a frame is recorded pickled. The job's
    output is the same recorded; each recorded state holds the dicts and arrays PySpark gave,
    the replayed states equal them, `tt verify` passes."""
    from tt.cli.main import main

    run, on, off = record_on_and_off(JOB.parent / "hooked_nested_frames.py", tmp_path)
    assert on == off and off["grouped"] == [6, 6] and sum(off["mapped"]) == 12
    recorded, replayed = seen_recorded_and_replayed(run)
    assert set(recorded) == {"grouped_nested", "cogrouped_nested", "mapped_nested", "arrays_only"}
    maps = [v for frame in recorded["grouped_nested"].values() for v in frame["m"]]
    assert "dict:{'a': 0}" in maps and "dict:{'b': 1, 'c': 1}" in maps, maps
    assert "dict:{0: 'v0'}" in recorded["grouped_nested"]["(np.int64(0),)"]["m_long"]
    for name in ("grouped_nested", "arrays_only"):
        assert "ndarray:array([0, None], dtype=object)" in recorded[name]["(np.int64(0),)"]["arr_null"]
    assert all(len(frame["m"]) for frame in recorded["mapped_nested"].values())
    assert {name: replayed[name] for name in recorded} == recorded
    assert main(["verify", str(run)]) == 0


def test_map_columns_read_by_reference_replay_and_tt_pack_refuses_them(spark, tmp_path, capsys):
    """The same frames read from Parquet by mapInPandas are recorded by reference and rebuilt
    as PySpark builds them: the replay equals the recording. `tt pack` cannot copy them (their
    copy would be pickled, which only the recorder seals): one line, and the run still verifies."""
    from tt.cli.main import main

    data = tmp_path / "nested.parquet"
    run, on, off = record_on_and_off(JOB.parent / "hooked_nested_frames.py", tmp_path, [str(data)])
    assert on == off and sum(on["mapped"]) == 12
    reader = RunReader(run)
    codecs = {codec for (codec,) in reader.conn.execute("SELECT DISTINCT codec FROM entry_chunks")}
    reader.close()
    assert "ref-pandas" in codecs, codecs
    assert main(["verify", str(run)]) == 0
    capsys.readouterr()
    assert main(["pack", str(run), "-o", str(tmp_path / "packed.db")]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "holds arrays, maps or structs that tt pack cannot copy" in err[0], err
    assert main(["verify", str(run)]) == 0

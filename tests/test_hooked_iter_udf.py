"""Iterator UDFs (`@pandas_udf` and `@arrow_udf` over an iterator of batches), recorded
through the hooks (`tests/jobs/hooked_iter_udf.py`).

PySpark calls an iterator UDF once per task with the task's batches, and its generator keeps
what it likes between them. `tt record` knew no UDF: a job whose state lived in one ran
unrecorded, and `tt record` failed with "called no PySpark method tt records". Each is now
an operator of the run, one step a batch. The oracle is pandas over the rows' definition.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import each_step, record_on_and_off, record_streaming_on_and_off, verified

from tt.core import values
from tt.replay.session import DebugSession

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_iter_udf.py"
ROWS, BATCH = 200, 25


def _partition(p: int) -> pd.DataFrame:
    """Partition p's rows, in the order its task sees them."""
    ids = range(p * ROWS // 2, (p + 1) * ROWS // 2)
    return pd.DataFrame({"id": ids, "amount": [float((i * 37) % 101) for i in ids]})


def _line(text: str) -> int:
    """The job's first line that holds `text`."""
    return next(n for n, line in enumerate(JOB.read_text().splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    return record_on_and_off(JOB, tmp_path_factory.mktemp("hooked_iter_udf"), [str(ROWS), str(BATCH)])


def test_the_output_is_the_same_recorded_and_not_and_as_pandas_computes(recorded):
    _, on, off = recorded
    expected, doubled = [], []
    for p in range(2):
        rows = _partition(p)
        expected += [[i, t, b] for i, t, b in zip(rows["id"], rows["amount"].cumsum(), (rows["amount"] >= 50).cumsum())]
        doubled += [[i, t] for i, t in zip(rows["id"], (2 * rows["amount"]).cumsum())]
    assert on == off == {"rows": sorted(expected), "doubled": sorted(doubled)}


def test_each_use_of_a_udf_is_an_operator_of_the_run_named_where_it_is_used(recorded, capsys):
    """A use in a query is named at its line (a second use, of the same UDF, is an operator of its
    own: PySpark runs both through one function, whose tasks tt would number alike); a UDF
    registered for SQL, at the line that defines it (as Python numbers a decorated function)."""
    from tt.cli.main import main

    run, *_ = recorded
    capsys.readouterr()
    assert main(["inspect", str(run), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    ops = {o["name"]: (o["kind"], o["site"], o["instances"], o["in_g"]) for o in summary["operators"] if o["site"]}
    use = _line('running_total("amount")')
    assert ops == {"running_total": ("pandas_udf.iter", f"hooked_iter_udf.py:{use}", 2, True),
                   "big_so_far": ("arrow_udf.iter", f"hooked_iter_udf.py:{_line('def big_so_far(') - 1}", 2, True),
                   "running_total_2": ("pandas_udf.iter", f"hooked_iter_udf.py:{_line('doubled.select(')}", 2, True)}


@pytest.mark.parametrize("op, field, of", [("running_total", "total", lambda rows: rows["amount"].sum()),
                                           ("big_so_far", "big", lambda rows: int((rows["amount"] >= 50).sum())),
                                           ("running_total_2", "total", lambda rows: 2 * rows["amount"].sum())])
def test_a_replay_steps_through_the_batches_with_the_state_pandas_computes(recorded, op, field, of):
    """After each batch, the generator's running figure is what pandas computes over the
    partition's rows up to that batch's last; after the END step, the generator is over."""
    run, *_ = recorded
    steps = list(each_step(DebugSession(run), op))
    per_instance = ROWS // 2 // BATCH
    assert [(i, unit is None) for i, unit, _ in steps] == [
        (i, n == per_instance) for i in range(2) for n in range(per_instance + 1)]
    kept: dict[int, int] = {}   # instance -> batches stepped over
    for i, unit, state in steps:
        if unit is None:
            assert state == {}   # (its generator returned: no frame, no locals)
            continue
        kept[i] = kept.get(i, 0) + 1
        assert state["locals"][field] == pytest.approx(of(_partition(i)[: kept[i] * BATCH])), (i, kept[i], state)


def test_tt_verify_replays_both_and_finds_every_state(recorded, capsys):
    run, *_ = recorded
    verified(run, capsys)


def test_interactions_inside_a_task_hold_the_running_figure_pandas_computes(spark, tmp_path, capsys):
    """`--when` on θ's unit (a batch: a pandas Series) takes interactions between batches; the
    state recorded at each is the total of the batches its task had stepped over by then."""
    from tt.recorder.job import record_job
    from tt.store.reader import RunReader

    run = tmp_path / "run.db"
    outcome = record_job(JOB, [str(tmp_path / "on.json"), str(ROWS), str(BATCH)], run,
                         when="bool((row >= 99).any())")
    assert outcome.status == "complete", outcome.error
    reader = RunReader(run)
    try:
        op = reader.operator("running_total")
        inside = []
        for interaction in reader.interactions():
            for (o, i), at in reader.instances_at(interaction.k).items():
                if o == op.id and 0 < at.position < ROWS // 2 // BATCH:
                    inside.append((at.position, values.decode(reader.state(at.state))["locals"]["total"],
                                   float(_partition(i)["amount"][: at.position * BATCH].sum())))
    finally:
        reader.close()
    assert inside and all(total == want for _, total, want in inside), inside
    verified(run, capsys)


def test_over_a_stream_each_micro_batch_is_an_instance_with_its_own_total(spark, tmp_path, capsys):
    """Over a Structured Streaming query, each micro-batch runs the UDF in fresh tasks: each is
    an instance of its own, and each micro-batch end an interaction (as for `mapInPandas`)."""
    from tt.store.reader import RunReader

    files, per_file = 3, 20
    run, on, off = record_streaming_on_and_off(JOB, tmp_path, before=["stream"], after=[str(files), str(per_file)])
    assert on == off
    frames = [pd.DataFrame({"id": range(f * per_file, (f + 1) * per_file)}) for f in range(files)]
    for frame in frames:
        frame["amount"] = [float((i * 37) % 101) for i in frame["id"]]
    assert on == sorted([i, t] for frame in frames for i, t in zip(frame["id"], frame["amount"].cumsum()))
    reader = RunReader(run)
    try:
        op = reader.operator("running_total")
        interactions = reader.interactions()
        assert op.instances == files
        assert [i.trigger for i in interactions] == ["start"] + ["micro-batch"] * files + ["end"]
        totals = sorted(values.decode(reader.state(at.state)) == {} for (o, _), at in
                        reader.instances_at(interactions[-1].k).items() if o == op.id)
    finally:
        reader.close()
    assert totals == [True] * files   # every micro-batch's generator ran to its end
    verified(run, capsys)


def test_a_udf_called_per_row_that_keeps_state_in_globals_is_said_unrecorded(spark, tmp_path):
    """A `@udf` PySpark calls once per row is not hooked; one that writes a module global keeps
    state no log sees, and the recording says so, naming it (a stateless one is not named)."""
    from tt.recorder.job import record_job
    from tt.store.reader import RunReader

    job = tmp_path / "rows.py"
    job.write_text(
        "from pyspark.sql import SparkSession\n"
        "from pyspark.sql.functions import udf\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "SEEN = set()\n"
        "@udf('boolean')\n"
        "def first_time(k):\n"
        "    new = k not in SEEN\n"
        "    SEEN.add(k)\n"
        "    return new\n"
        "@udf('long')\n"
        "def doubled(k):\n"
        "    return 2 * k\n"
        "class Numbering:\n"
        "    def __init__(self):\n"
        "        self.n = 0\n"
        "    def __call__(self, k):\n"
        "        self.n += 1\n"
        "        return self.n\n"
        "number = udf(Numbering(), 'long')\n"
        "spark.range(20, numPartitions=1).selectExpr('id % 3 AS k').select(first_time('k'), doubled('k'), number('k'))"
        ".collect()\n")
    events = []
    outcome = record_job(job, [], tmp_path / "rows.db", on_event=lambda kind, info: events.append((kind, info)))
    assert outcome.status == "failed" and "called no PySpark method tt records" in outcome.error
    said = [info["message"] for kind, info in events if kind == "warning"]
    tail = ("which tt does not record: PySpark calls it once per row; an iterator UDF (@pandas_udf over "
            "Iterator[pd.Series]) or mapInPandas keeps it where tt records it")
    assert said == [f"first_time (a UDF at rows.py:5) keeps state in SEEN, {tail}",
                    f"Numbering (a UDF at rows.py:13) keeps state in self.n, {tail}"]
    reader = RunReader(tmp_path / "rows.db")
    try:
        assert reader.warnings() == said
    finally:
        reader.close()


@pytest.mark.parametrize("condition", ["running_total.locals['total'] > 3000",
                                       "running_total.locals.get('total', 0) > 3000"])
def test_run_until_reads_the_generators_locals_from_a_fresh_replay(recorded, condition):
    """A generator's `locals` exist only once it runs: a condition on them was refused at the
    start of a replay as an unknown field ("its state is empty"). It stops after the batch
    whose total first passes 3000, as pandas computes it, with that total."""
    run, *_ = recorded
    session = DebugSession(run)
    result = session.run_until(condition)
    assert result.ok, result
    where, op = result.stopped_at, session.reader.operator("running_total")
    assert where.op == op.id
    cumulative = _partition(where.instance)["amount"].cumsum()
    assert cumulative[(where.position + 1) * BATCH - 1] > 3000 >= cumulative[where.position * BATCH - 1]
    state = values.decode(session.engine.states()[(op.id, where.instance)])
    assert state["locals"]["total"] == cumulative[(where.position + 1) * BATCH - 1]
    session.reader.close()


def test_a_step_says_which_of_the_generators_locals_it_changed(recorded, capsys):
    """`locals` holds the batch, so it is stored whole; a step listed it whole, cut after 60
    characters, before `total` was reached. It lists the locals that changed, each by name."""
    from tt.cli.main import main

    run, *_ = recorded
    capsys.readouterr()
    assert main(["replay", str(run), "--step-over", "running_total:0:0", "--step-over", "running_total:0:1",
                 "--json"]) == 0
    first, second = json.loads(capsys.readouterr().out)[1:]
    cumulative = _partition(0)["amount"].cumsum()
    assert first["changed"]["running_total:0"]["locals"]["new"]["total"] == cumulative[BATCH - 1]   # (it appears: whole)
    assert second["changed"]["running_total:0"]["locals.total"] == {"old": cumulative[BATCH - 1],
                                                                     "new": cumulative[2 * BATCH - 1]}
    assert sorted(second["changed"]["running_total:0"]) == ["locals.batch", "locals.out", "locals.total"]


def test_step_out_after_stepping_into_a_batch_says_its_scope_is_complete(recorded):
    """A hooked operator's outputs go to Spark, which tt does not follow: a batch stepped into
    has a complete scope at once, and `f` said "step into a tuple first" right after one."""
    session = DebugSession(recorded[0])
    assert session.step_into(session.parse_ref("running_total:0:0")).ok
    complete = "not inside a tuple's scope: running_total:0:0's is complete (nothing of it waits downstream)"
    assert session.can_step_out().reason == complete
    assert session.step_out().note == complete
    assert session.step_back().ok   # (back before the step into: no scope was stepped into)
    assert session.can_step_out().reason == "not inside a tuple's scope (step into a tuple first)"
    session.reader.close()

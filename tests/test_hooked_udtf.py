"""Python UDTF classes of an unmodified PySpark job, recorded through the hooks.

`tests/jobs/hooked_udtf.py` registers two UDTF classes and calls them from SQL: one
with a LATERAL join (one handler per task), one on `TABLE(...) PARTITION BY customer`
(one handler per customer, each ended by `terminate`). A step is one handler call:
its making (`__init__`), an `eval`, or a `terminate`. Checked against the job's output
with recording off, `tt verify`, and an oracle computed with pandas from the data's
definition, which reads none of tt's logs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import record_on_and_off

from tt.core import values
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_udtf.py"
ROWS = 120


def text(i: int) -> str:
    """Row i's text, as the job's SQL builds it."""
    return " ".join(["a" * (i % 5 + 1), "b", str(i)])


def words_state(texts: list[str]) -> dict:
    """Words' handler after eval on `texts`."""
    count, longest = 0, ""
    for t in texts:
        for w in t.split():
            count += 1
            longest = w if len(w) > len(longest) else longest
    return {"count": count, "longest": longest}


def payments() -> pd.DataFrame:
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["customer"] = "c" + (pdf["id"] % 7).astype(str)
    pdf["amount"] = ((pdf["id"] * 37) % 101).astype(float)
    return pdf


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, the job's output recorded, its output with recording off)."""
    return record_on_and_off(JOB, tmp_path_factory.mktemp("hooked_udtf"))


def test_recording_does_not_change_the_jobs_output(recorded):
    _, on, off = recorded
    assert on == off
    sums = payments().groupby("customer")["amount"].sum()
    assert on["totals"] == [[c, t] for c, t in sums.items()]
    assert on["ends"] == [3 * ROWS // 2] * 2   # three words a text, half the texts a task


def test_each_udtf_class_is_an_operator_stepping_by_handler_call(recorded):
    reader = RunReader(recorded[0])
    assert {o.name: o.kind for o in reader.operators if o.in_g} == {"Words": "udtf", "Totals": "udtf"}
    assert {n["name"]: n["site"] for n in reader.plan["nodes"] if "site" in n} == {
        "Words": "hooked_udtf.py:20", "Totals": "hooked_udtf.py:37"}
    reader.close()


def test_the_end_states_equal_the_pandas_oracle(recorded):
    reader = RunReader(recorded[0])
    names = {o.id: o.name for o in reader.operators}
    end = reader.instances_at(reader.interactions()[-1].k)
    sums = payments().groupby("customer")["amount"].sum().to_dict()
    words = totals = 0
    for (op, i), at in end.items():
        state = reader.state(at.state)
        if names[op] == "Words":
            assert state == words_state([text(j) for j in range(i * ROWS // 2, (i + 1) * ROWS // 2)])
            assert at.position == 1 + ROWS // 2 + 1 + 1   # init, an eval per text, terminate, END
            words += 1
        elif names[op] == "Totals" and state["customer"] is not None:
            assert state["total"] == sums[state["customer"]]   # the last handler's customer
            totals += 1
    reader.close()
    assert words == 2 and totals >= 1


def test_verify_replays_every_interaction(recorded, capsys):
    from tt.cli.main import main

    assert main(["verify", str(recorded[0])]) == 0
    n = len(RunReader(recorded[0]).interactions())
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out


def test_steps_are_handler_calls_and_step_back_undoes_them(recorded):
    """Step over the handler's making, then its first eval (three words), then back twice."""
    session = DebugSession(recorded[0])
    theta = session.reader.theta.id
    before = session.engine.states()
    session.step_over(session.parse_ref("Words:0:0"))
    assert session.engine.states()[(theta, 0)] == {"count": 0, "longest": ""}
    session.step_over(session.parse_ref("Words:0:1"))
    assert session.engine.states()[(theta, 0)] == words_state([text(0)])
    session.step_over(session.parse_ref("Words:0:2"))
    assert session.engine.states()[(theta, 0)] == words_state([text(0), text(1)])
    session.step_back()
    session.step_back()
    session.step_back()
    assert session.engine.states() == before
    session.reader.close()


def test_a_partition_by_call_replays_every_customers_handler(recorded):
    """Walk Totals' units: after each `terminate`, the handler's total is its customer's sum."""
    session = DebugSession(recorded[0])
    reader = session.reader
    totals = next(o.id for o in reader.operators if o.name == "Totals")
    sums = payments().groupby("customer")["amount"].sum().to_dict()
    end = reader.instances_at(reader.interactions()[-1].k)
    reached, inits = set(), 0
    for (op, i), at in end.items():
        if op != totals:
            continue
        for position in range(at.position - 1):   # every unit but the END step
            session.step_over(session.parse_ref(f"Totals:{i}:{position}"))
            state = session.engine.states()[(totals, i)]
            if state["customer"] is None:
                assert state == {"customer": None, "total": 0.0}   # a fresh handler
                inits += 1
            elif state["total"] == sums[state["customer"]]:
                reached.add(state["customer"])
    reader.close()
    assert reached == set(sums) and inits == len(sums)   # one handler per customer, each ran to its sum


def test_a_condition_on_a_handlers_field_runs_from_the_start(recorded):
    """Before its first `init`, a UDTF has no handler and its state no field: a condition on one
    (`Totals.customer == 'c3'`) was refused there as naming an unknown field, so a user had to
    step once before `--run-until`. It now runs, and stops where the condition first holds."""
    session = DebugSession(recorded[0])
    try:
        result = session.run_until("Totals.customer == 'c3' and Totals.total > 100")
        assert result.ok, result
        totals = session.reader.operator("Totals").id
        held = [s for (op, _), s in session.engine.states().items() if op == totals and s.get("customer") == "c3"]
        assert held and held[0]["total"] > 100
    finally:
        session.reader.close()


def test_a_keys_total_links_back_through_its_handlers_state_to_that_keys_rows_alone(recorded, capsys):
    """With PARTITION BY, PySpark makes a handler per key: its `terminate` reads what that
    handler's `eval`s wrote, since its `init`. Row lineage took every call of the task as reading
    the state the one before wrote, so a customer's total linked back through every earlier
    customer's rows. The `init` now writes the state anew: the writers are the customer's rows
    that changed its total and its handler's making, as many as pandas counts."""
    import json as json_
    from tt.cli.main import main

    rows = payments()
    # (a row by its returnType's names, `customer string, total double`, or by position)
    for customer, where in (("c3", "customer == 'c3'"), ("c6", "row[0] == 'c6'")):
        capsys.readouterr()
        assert main(["lineage", str(recorded[0]), "Totals", "--where", where, "--back",
                     "--depth", "1", "--json"]) == 0
        (doc,) = json_.loads(capsys.readouterr().out)
        rows_of = {t["tuple"]: t["row"] for t in doc["tuples"]}
        writers = sorted({link["to"] for link in doc["links"] if link["kind"] == "state"})   # (through its fields)
        units = [rows_of[w]["$tuple"][0] for w in writers]
        changed = int(((rows["customer"] == customer) & (rows["amount"] != 0)).sum())   # (adding 0 writes nothing)
        assert sorted(units) == ["eval"] * changed + ["init"], (customer, units)
        evals = [rows_of[w]["$tuple"][1]["$tuple"][0] for w in writers if rows_of[w]["$tuple"][0] == "eval"]
        assert {e["customer"] for e in evals} == {customer}


def test_the_udtf_class_is_pysparks_own_after_the_job(recorded):
    from pyspark.sql.udtf import UserDefinedTableFunction

    assert not hasattr(UserDefinedTableFunction._create_judtf, "__wrapped__")


FORMS_JOB = Path(__file__).resolve().parent / "jobs" / "hooked_udtf_forms.py"


@pytest.fixture(scope="module")
def forms_recorded(spark, tmp_path_factory):
    return record_on_and_off(FORMS_JOB, tmp_path_factory.mktemp("hooked_udtf_forms"))


def test_an_arrow_udtf_is_recorded_a_batch_a_step(forms_recorded):
    """`@arrow_udtf` Totals over a table argument: recording does not change its output; a
    handler per partition sees five Arrow batches, each one step; its end state is the
    partition's sums per key, as pandas computes them from the ids (no tt log); a step over
    the first batch adds that batch's rows; the run verifies."""
    from tt.replay.verify import verify

    run, on, off = forms_recorded
    assert on == off
    assert sorted(r for r in on["totals"] if r[0] == -1) == [[-1, 5], [-1, 5]]
    ids = pd.DataFrame({"v": range(1000)})
    ids["k"], ids["part"] = ids["v"] % 5, ids["v"] // 500
    want = {p: g.groupby("k")["v"].sum().to_dict() for p, g in ids.groupby("part")}
    reader = RunReader(run)
    try:
        op = reader.operator("Totals")
        assert op.kind == "udtf" and op.instances == 2
        end = reader.instances_at(reader.interactions()[-1].k)
        got = {i: values.decode(reader.state(at.state)) for (o, i), at in end.items() if o == op.id}
        results = verify(reader)
        assert results and all(r["ok"] for r in results), results
    finally:
        reader.close()
    assert {i: s["batches"] for i, s in got.items()} == {0: 5, 1: 5}
    assert {i: s["sums"] for i, s in got.items()} == want
    session = DebugSession(run)
    try:
        session.step_over(session.parse_ref("Totals:0:0"))   # the handler's making
        session.step_over(session.parse_ref("Totals:0:1"))   # its first batch: ids 0..99
        state = values.decode(session.engine.states()[(op.id, 0)])
        assert state["batches"] == 1
        assert state["sums"] == ids[ids["v"] < 100].groupby("k")["v"].sum().to_dict()
    finally:
        session.reader.close()


def test_a_udtf_with_analyze_gets_its_result_in_init_and_replays(forms_recorded):
    """`Repeat`'s `__init__` takes its `analyze()` result, as PySpark passes it: recording does
    not change its output; each handler's making is a step that keeps the result, and its end
    state counts three rows per id of its partition (20 ids each); the run verifies."""
    from tt.replay.verify import verify

    run, on, off = forms_recorded
    assert on == off
    assert sorted(x for x, _ in on["repeated"]) == sorted(list(range(40)) * 3)
    reader = RunReader(run)
    try:
        op = reader.operator("Repeat")
        end = reader.instances_at(reader.interactions()[-1].k)
        states = [values.decode(reader.state(at.state)) for (o, _), at in end.items() if o == op.id]
        results = verify(reader)
        assert results and all(r["ok"] for r in results), results
    finally:
        reader.close()
    assert states == [{"columns": ["x", "seen"], "seen": 60}] * 2


#: The head of a job (lines 1-11) whose UDTF `Count` adds up the numbers it is handed.
COUNT_JOB = ("import json, sys\n"
             "from pyspark.sql import SparkSession\n"
             "from pyspark.sql.functions import lit, udtf\n"
             "spark = SparkSession.builder.getOrCreate()\n"
             "@udtf(returnType='n int, total int')\n"
             "class Count:\n"
             "    def __init__(self):\n"
             "        self.total = 0\n"
             "    def eval(self, n: int):\n"
             "        self.total += n\n"
             "        yield n, self.total\n")


def _recorded_warnings(job: Path, tmp_path: Path, **options) -> list[str]:
    """Record `job` (its output to tmp_path/on.json, the run to tmp_path/run.db): what it warned of."""
    from tt.recorder.job import record_job

    events = []
    outcome = record_job(job, [str(tmp_path / "on.json")], tmp_path / "run.db",
                         on_event=lambda kind, info: events.append((kind, info)), **options)
    assert outcome.status == "complete", outcome.error
    return [info["message"] for kind, info in events if kind == "warning"]


def test_each_use_of_a_udtf_from_python_is_an_operator_of_its_own(spark, tmp_path, capsys):
    """A UDTF called twice from Python, over other rows: PySpark runs both uses through the one
    JVM function the UDTF makes at its first use, and tt took the second query's task for another
    attempt of the first's, whose units went unrecorded ("1 tasks committed"). Each use is now an
    operator of its own, at its line, its handler's end state what it was handed."""
    from plain_jobs import verified

    job = tmp_path / "twice.py"
    job.write_text(COUNT_JOB +
        "a = Count(lit(1)).collect()\n"
        "b = Count(lit(5)).collect()\n"
        "json.dump([list(a[0]), list(b[0])], open(sys.argv[1], 'w'))\n")
    run, on, off = record_on_and_off(job, tmp_path)
    assert on == off == [[1, 1], [5, 5]]
    reader = RunReader(run)
    try:
        sites = {n["name"]: n["site"] for n in reader.plan["nodes"] if "site" in n}
        names = {n["id"]: n["name"] for n in reader.plan["nodes"] if n["kind"] == "udtf"}
        end = reader.instances_at(reader.interactions()[-1].k)
        totals = {names[o]: values.decode(reader.state(at.state))["total"] for (o, _), at in end.items() if o in names}
    finally:
        reader.close()
    assert sites == {"Count": "twice.py:12", "Count_2": "twice.py:13"}
    assert totals == {"Count": 1, "Count_2": 5}
    verified(run, capsys)


def test_a_udtf_registered_for_sql_and_used_by_two_queries_is_said_recorded_for_the_first(spark, tmp_path):
    """No Python call marks a use in SQL: PySpark runs both queries' tasks through the one
    function it registered, and tt, which numbers a task by its partition, keeps the first
    query's. The recording says so (it said nothing), and a second registration, under another
    name, is an operator of its own."""
    job = tmp_path / "sql.py"
    job.write_text(COUNT_JOB +
        "spark.udtf.register('count_udtf', Count)\n"
        "a = spark.sql('SELECT * FROM count_udtf(1)').collect()\n"
        "b = spark.sql('SELECT * FROM count_udtf(5)').collect()\n"
        "spark.udtf.register('count_again', Count)\n"
        "c = spark.sql('SELECT * FROM count_again(7)').collect()\n"
        "json.dump([list(a[0]), list(b[0]), list(c[0])], open(sys.argv[1], 'w'))\n")
    warned = _recorded_warnings(job, tmp_path)
    assert (tmp_path / "on.json").read_text() == "[[1, 1], [5, 5], [7, 7]]"
    assert warned == [
        "Count (registered for SQL) ran in another query: tt recorded the first query's run of each partition, not "
        "this one's; register it under another name for each query, or call it from Python, to record each"]
    reader = RunReader(tmp_path / "run.db")
    try:
        names = {n["id"]: n["name"] for n in reader.plan["nodes"] if n["kind"] == "udtf"}
        end = reader.instances_at(reader.interactions()[-1].k)
        totals = {names[o]: values.decode(reader.state(at.state))["total"] for (o, _), at in end.items() if o in names}
    finally:
        reader.close()
    assert totals == {"Count": 1, "Count_2": 7}


def test_a_udtf_keeping_state_in_its_class_is_said_shown_and_caught_by_verify(spark, tmp_path, capsys):
    """`rows = {"n": 0}` in the class body, `self.rows["n"] += 1` in `eval`: one dict that every
    handler writes into, and, since cloudpickle makes a job's class once a Python worker, every
    task that worker runs. tt showed only the handler's own attributes: a replay, which runs its
    instances in one process, added both tasks' rows into it, its outputs were not Spark's, and
    `tt verify` said "verified" (found by a user with a class-level total that was never reset
    per key). Now the recording warns, the state shows `rows` beside the handler's own `mine`,
    and verify names it where the replay differs, without blaming an input."""
    from tt.cli.main import main
    job = tmp_path / "shared.py"
    job.write_text("import json, sys\n"
                   "from pyspark.sql import SparkSession\n"
                   "from pyspark.sql.functions import udtf\n"
                   "spark = SparkSession.builder.getOrCreate()\n"
                   "@udtf(returnType='mine int, shared int')\n"
                   "class Tally:\n"
                   "    rows = {'n': 0}\n"
                   "    def __init__(self):\n"
                   "        self.mine = 0\n"
                   "    def eval(self, i: int):\n"
                   "        self.mine += 1\n"
                   "        self.rows['n'] += 1\n"
                   "    def terminate(self):\n"
                   "        yield self.mine, self.rows['n']\n"
                   "spark.udtf.register('tally', Tally)\n"
                   "spark.range(0, 400, numPartitions=2).createOrReplaceTempView('nums')\n"
                   "out = spark.sql('SELECT t.* FROM nums, LATERAL tally(id) t').collect()\n"
                   "json.dump(sorted(list(r) for r in out), open(sys.argv[1], 'w'))\n")
    warned = _recorded_warnings(job, tmp_path, when="row[0] == 'eval' and row[1][0] % 50 == 0")
    assert [w for w in warned if "class" in w] == [
        "Tally (udtf at shared.py:5) keeps state in an attribute of its class (rows), which every instance shares, "
        "and with them every task one Python worker runs: a task starts from what the worker's earlier tasks left "
        "there, and a replay runs its instances in one process, so it may differ from the run (tt verify says "
        "where). Make it the instance's, in __init__, to keep it per handler"]
    mine = [r[0] for r in json.loads((tmp_path / "on.json").read_text())]
    assert sorted(mine) == [200, 200]   # each task's handler counted its own rows
    reader = RunReader(tmp_path / "run.db")
    try:
        op = reader.operator("Tally")
        shown = [values.decode(reader.state(at.state)) for x in reader.interactions()
                 for (o, _), at in reader.instances_at(x.k).items() if o == op.id and at.position > 1]
    finally:
        reader.close()
    assert shown and all(set(s) == {"mine", "rows"} and s["rows"]["n"] >= s["mine"] for s in shown)
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "run.db")]) == 1   # (two tasks' rows in one dict: not as they ran)
    said = capsys.readouterr().out
    assert "differs at interaction" in said and " in rows.n: recorded " in said, said
    assert "rows is an attribute of Tally's class, which its code writes into and every instance shares" in said


def test_a_when_written_for_rows_says_what_a_udtfs_unit_is(spark, tmp_path):
    """`tt record --help`'s `--when "row['amount'] > 1000"` raises on a UDTF's unit, a tuple: the
    warning said only TypeError. It now says what θ hands `--when`, with an example."""
    job = tmp_path / "when.py"
    job.write_text(COUNT_JOB + "json.dump([list(r) for r in Count(lit(3)).collect()], open(sys.argv[1], 'w'))\n")
    warned = [w for w in _recorded_warnings(job, tmp_path, when="row['amount'] > 1000") if "--when" in w]
    assert warned == ["--when \"row['amount'] > 1000\" raised TypeError: tuple indices must be integers or slices, "
                      "not str (such tuples count as false); θ is a udtf, whose unit `row` is ('init',), ('eval', "
                      "args, kwargs) or ('terminate',): e.g. \"row[0] == 'eval' and row[1][0]['amount'] > 1000\""], warned


def test_a_run_until_keeps_the_other_functions_where_the_recording_had_them(spark, tmp_path):
    """The job runs Words' query to its end, then Totals'. A run-until on Words ran Totals, a
    hooked function θ does not feed (its input is logged), to its end before Words' first call,
    and stopped in a state that never was: Words mid-run, Totals done. Between interactions a
    forward run now keeps every instance within its position at the interaction that ends θ's
    epoch: where the condition holds, Totals has not started, as in the recording."""
    from plain_jobs import record_on_and_off

    run, on, off = record_on_and_off(JOB, tmp_path, when="row[0] == 'eval' and row[1][0].endswith('7')")
    assert on == off
    session = DebugSession(run)
    try:
        reader = session.reader
        words, totals = reader.operator("Words").id, reader.operator("Totals").id
        cuts = [reader.instances_at(x.k) for x in reader.interactions()[1:-1]]
        assert len(cuts) >= 2 and all(at.position == 0 for snap in cuts[:2] for (op, _), at in snap.items()
                                      if op == totals), "the recording: Totals had not started"
        result = session.run_until("Words.count > 30")
        assert result.ok, result
        counts = {key: inst.count for key, inst in session.engine.instances.items()}
        assert any(n for (op, _), n in counts.items() if op == words)
        assert all(n == 0 for (op, _), n in counts.items() if op == totals), counts
        session.run_until("Totals.total > 0")   # and it runs on into Totals' query
        assert any(inst.count for (op, _), inst in session.engine.instances.items() if op == totals)
    finally:
        session.reader.close()

"""`tt.hook(spark, "run.db")`: recording the PySpark calls of a notebook or a script.

The same session and hooks as `tt record`, opened and stopped by the user's own code,
in this process, on the suite's SparkSession. The recorded state is checked against
an oracle computed from the data with plain Python, and `tt verify` replays it.
"""

from __future__ import annotations

import pytest

import tt
from tt.core.errors import UsageError
from tt.core.hooked import HOOKED_KINDS
from tt.store.reader import RunReader

ROWS, PARTITIONS = 300, 3


def _counter_class():
    class Counter:   # defined in a function: pickled by value, as a notebook's classes are
        def __init__(self):
            self.rows = 0
            self.total = 0

        def __call__(self, batches):
            for pdf in batches:
                self.rows += len(pdf)
                self.total += int(pdf["id"].sum())
                yield pdf
    return Counter


def test_hook_records_the_calls_until_stop(spark, tmp_path, capsys):
    from pyspark.sql.classic.dataframe import DataFrame

    from tt.cli.main import main

    out = tmp_path / "nb.db"
    rec = tt.hook(spark, out)
    assert hasattr(DataFrame.mapInPandas, "__wrapped__")
    df = spark.range(0, ROWS, numPartitions=PARTITIONS)
    got = df.mapInPandas(_counter_class()(), "id long").count()
    assert rec.stop() == out and rec.stopped
    assert got == ROWS
    assert not hasattr(DataFrame.mapInPandas, "__wrapped__")   # PySpark's own again
    reader = RunReader(out)
    try:
        assert reader.status == "complete" and reader.theta.name == "Counter"
        end = reader.instances_at(reader.interactions()[-1].k)
        for (op, i), at in end.items():
            ids = range(i * ROWS // PARTITIONS, (i + 1) * ROWS // PARTITIONS)
            assert reader.state(at.state) == {"rows": len(ids), "total": sum(ids)}
    finally:
        reader.close()
    assert main(["verify", str(out)]) == 0
    assert "every replayed state equals the recorded one" in capsys.readouterr().out


def test_hook_as_a_context_manager_and_one_recording_at_a_time(spark, tmp_path):
    with tt.hook(spark, tmp_path / "a.db") as rec:
        with pytest.raises(UsageError, match="a recording is already under way"):
            tt.hook(spark, tmp_path / "b.db")
        spark.range(0, 30, numPartitions=1).mapInPandas(_counter_class()(), "id long").collect()
    assert rec.stopped
    with pytest.raises(UsageError, match="exists; pass force=True"):
        tt.hook(spark, tmp_path / "a.db")
    reader = RunReader(tmp_path / "a.db")
    try:
        assert reader.status == "complete"
    finally:
        reader.close()


def test_a_job_that_calls_nothing_tt_records_says_what_it_records(spark, tmp_path, capsys):
    """One line naming what tt hooks; `tt inspect` shows the run without an operator table."""
    from tt.cli.main import main
    from tt.recorder.job import record_job

    job = tmp_path / "plain.py"
    job.write_text("from pyspark.sql import SparkSession\n"
                   "spark = SparkSession.builder.getOrCreate()\n"
                   "spark.range(6).selectExpr('id', 'id % 2 AS k').groupBy('k').count().collect()\n")
    outcome = record_job(job, [], tmp_path / "plain.db")
    assert outcome.status == "failed" and outcome.exit_code == 1
    assert outcome.error.startswith(f"{job} ran no tt dataflow and called no PySpark method tt records (")
    assert "mapInPandas" in outcome.error and "Python and Arrow UDTFs" in outcome.error
    named = {part for kind in HOOKED_KINDS for part in kind.split(".") if part not in ("rdd", "cogroup", "iter")}
    assert [api for api in sorted(named) if api.lower() not in outcome.error.lower()] == []   # every API tt records is named
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "plain.db")]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith(f"{tmp_path / 'plain.db'}: failed — ") and "θ        none: the run has no operator" in shown
    assert not any(line.startswith(("operator ", "edges ")) for line in shown)


def test_a_hooked_function_whose_state_cannot_be_pickled_steps_back_by_replay(spark, tmp_path):
    """A callable that makes a lock in the executor (as a connection would be): its state
    shows the lock by its repr, without the address (a replay's lock lies elsewhere, and
    `tt verify` once took that for a divergence), and a step back puts it back by replaying
    its inputs."""
    from tt.cli.main import main
    from tt.replay.session import DebugSession

    class Tagger:
        def __init__(self):
            self.n = 0

        def __call__(self, x):
            import threading

            if not hasattr(self, "lock"):
                self.lock = threading.Lock()
            with self.lock:
                self.n += 1
            return (x, self.n)

    out = tmp_path / "lock.db"
    with tt.hook(spark, out):
        spark.sparkContext.parallelize(range(20), 2).map(Tagger()).collect()
    session = DebugSession(out)
    try:
        session.step_over(session.parse_ref("Tagger:0:0"))
        session.step_over(session.parse_ref("Tagger:0:1"))
        theta = session.reader.theta.id
        state = session.engine.states()[(theta, 0)]
        assert state["n"] == 2 and state["lock"] == {"$repr": "<unlocked _thread.lock object>"}, state
        session.step_back()
        assert session.engine.states()[(theta, 0)]["n"] == 1
        session.step_back()
        assert session.engine.states()[(theta, 0)] == {"n": 0}
    finally:
        session.reader.close()
    assert main(["verify", str(out)]) == 0   # the end state holds each task's lock


def test_what_spark_did_between_two_hooked_functions_is_read_from_its_plan():
    """The label of an opaque edge: the kinds of plan nodes between the hooked node and the
    call's input, in the order the rows went through them (no Spark needed to read a plan)."""
    from tt.recorder.spark_edges import plan_path_label

    plan = """Project [id#3L, customer#4, customer#6]
+- Join Inner, (id#3L = id#5L)
   :- Filter (id#3L > cast(2 as bigint))
   :  +- MapInPandas FeatureEnrichment(id#0L, customer#1)#2, [id#3L, customer#4], false
   :     +- Project [id#0L, concat(c, cast((id#0L % cast(3 as bigint)) as string)) AS customer#1]
   :        +- Range (0, 10, step=1, splits=Some(1))
   +- Project [id#5L, concat(c, cast((id#5L % cast(3 as bigint)) as string)) AS customer#6]
      +- Range (0, 10, step=1, splits=Some(1))"""
    assert plan_path_label(plan, "FeatureEnrichment") == "filter, join"
    assert plan_path_label(plan, "detect") is None
    assert plan_path_label("MapInPandas Enrich(id#0L)#2, [id#3L], false\n+- Range (0, 1)", "Enrich") == ""
    # rows that reach the root through another hooked function come by that one's edge, not their own
    chain = """FlatMapGroupsInPandas [customer#4], tally(id#3L, customer#4)#9, [customer#10, n#11L]
+- Project [customer#4, id#3L]
   +- MapInPandas Tag(id#0L, customer#1)#2, [id#3L, customer#4], false
      +- Range (0, 10, step=1, splits=Some(1))"""
    assert plan_path_label(chain, "tally", ["Tag"]) == ""
    assert plan_path_label(chain, "Tag", ["tally"]) is None
    assert plan_path_label(chain, "Tag") == "flatmapgroupsinpandas"


def test_an_aggregates_keys_are_read_only_where_each_row_after_it_is_one_group_of_the_functions_rows():
    """`aggregate_keys`: the grouping columns of the one aggregate between a hooked function and
    the call's input, where lineage may link a group to every upstream row with its key
    (replay/spark_links.py `KeyRows`); None wherever that would link a row that did not go in."""
    from tt.recorder.spark_edges import aggregate_keys

    tag = "MapInPandas Tag(id#0L, customer#1, amount#2)#3, [id#4L, customer#5, amount#6], false"

    def plan(*above: str) -> str:
        lines = [*above, tag, "+- Range (0, 100, step=1, splits=Some(1))"]
        return "\n".join("   " * i + ("+- " if i else "") + line.removeprefix("+- ") for i, line in enumerate(lines))

    by_customer = "Aggregate [customer#5], [customer#5, sum(amount#6) AS total#7]"
    assert aggregate_keys(plan(by_customer), "Tag") == ["customer"]
    assert aggregate_keys(plan("Filter (total#7 > 10.0)", by_customer), "Tag") == ["customer"]   # fewer groups
    assert aggregate_keys(plan("Project [customer#5, total#7]", by_customer, "Repartition 3, true",
                               "Project [customer#5, amount#6]"), "Tag") == ["customer"]
    assert aggregate_keys(plan("Aggregate [], [sum(amount#6) AS total#7]"), "Tag") == []   # one group of all
    assert aggregate_keys(plan("Aggregate [customer#5, id#4L], [customer#5, id#4L, count(1) AS n#8L]"),
                          "Tag") == ["customer", "id"]
    # a group that took only some of the rows with its key, or whose key is not a column Tag emitted
    assert aggregate_keys(plan(by_customer, "Filter (amount#6 > 3.0)"), "Tag") is None
    assert aggregate_keys(plan("Aggregate [(id#4L % 2)], [(id#4L % 2) AS k#9L, count(1) AS n#8L]"), "Tag") is None
    assert aggregate_keys(plan("Aggregate [customer#9], [customer#9, sum(amount#6) AS total#7]",
                               "Project [upper(customer#5) AS customer#9, amount#6]"), "Tag") is None
    # a key renamed or dropped above the aggregate, two aggregates, no aggregate, another function
    assert aggregate_keys(plan("Project [customer#5 AS who#10, total#7]", by_customer), "Tag") is None
    assert aggregate_keys(plan("Project [total#7]", by_customer), "Tag") is None
    assert aggregate_keys(plan("Aggregate [], [count(1) AS n#11L]", by_customer), "Tag") is None
    assert aggregate_keys(plan("Project [customer#5]"), "Tag") is None
    assert aggregate_keys(plan(by_customer), "Other") is None


def test_hooked_kinds_never_name_a_dataflow_operator_kind():
    """A tt.Dataflow's built-in `map` and `filter` are not hooked RDD functions: a shared
    kind would make them take barriers and look hooked (the RDD's are `rdd.`-prefixed)."""
    from tt.core import graph

    builtin = {graph.SOURCE, graph.PROCESS, graph.MAP, graph.FILTER, graph.FLAT_MAP, graph.AGGREGATE,
               graph.JOIN, graph.UNION, graph.SINK}
    assert not builtin & HOOKED_KINDS

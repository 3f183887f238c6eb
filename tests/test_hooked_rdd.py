"""RDD functions and `mapInArrow` of an unmodified PySpark job, recorded through the hooks.

`tests/jobs/hooked_rdd.py` chains `mapPartitions` (a generator), `filter` (a callable
class) and `map` (a lambda) on an RDD, then `mapPartitionsWithIndex` and `flatMap`, and
runs a callable class in `mapInArrow`. It
is recorded as `tt record` does it, then checked against its output with recording
off, `tt verify`, and an oracle computed from `range(ROWS)` with plain Python, which
reads none of tt's logs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from plain_jobs import record_on_and_off

from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_rdd.py"
ROWS, PARTITIONS, BATCH = 400, 2, 40
WHEN = "row % 50 == 0"   # the unit of running_total is one element


def elements(i: int) -> list[int]:
    """Partition i of `parallelize(range(ROWS), PARTITIONS)` and of `spark.range`."""
    return list(range(i * ROWS // PARTITIONS, (i + 1) * ROWS // PARTITIONS))


def pairs(i: int) -> list[tuple[int, int]]:
    """What `running_total` yields on partition i: (x, running total) for every x % 5 == 0."""
    out, total = [], 0
    for x in elements(i):
        total += x
        if x % 5 == 0:
            out.append((x, total))
    return out


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, the job's output recorded, its output with recording off)."""
    return record_on_and_off(JOB, tmp_path_factory.mktemp("hooked_rdd"), when=WHEN)


def test_recording_does_not_change_the_jobs_output(recorded):
    _, on, off = recorded
    assert on == off
    assert len(on["kept"]) > 10 and len(on["counts"]) == ROWS // BATCH
    assert on["repeated"] == sum(x % 3 for x in range(ROWS))   # flatMap: x % 3 copies of each


def test_every_hooked_call_site_is_an_operator_with_its_unit(recorded):
    reader = RunReader(recorded[0])
    ops = {o.name: o.kind for o in reader.operators if o.in_g}
    assert ops == {"running_total": "rdd.mapPartitions", "Threshold": "rdd.filter", "map": "rdd.map",
                   "tagged": "rdd.mapPartitionsWithIndex", "flatMap": "rdd.flatMap", "CountBatches": "mapInArrow"}
    units = {n["name"]: n["unit"] for n in reader.plan["nodes"] if "unit" in n}
    assert units == {"running_total": "row", "Threshold": "row", "map": "row", "tagged": "row",
                     "flatMap": "row", "CountBatches": "batch"}
    assert reader.theta.name == "running_total"
    names = {o.id: o.name for o in reader.operators}
    edges = {(names[e["src"]], names[e["dst"]], e["label"]) for e in reader.plan["spark_edges"]}
    assert edges == {("running_total", "Threshold.in", "pipelined"), ("Threshold", "map.in", "pipelined"),
                     ("tagged", "flatMap.in", "pipelined")}   # PySpark chains them in one Python worker
    reader.close()


def test_recorded_states_equal_the_oracle(recorded):
    """At every interaction: the generator's locals, the filter's counters, the Arrow batches' sums."""
    reader = RunReader(recorded[0])
    names = {o.id: o.name for o in reader.operators}
    ks = [i.k for i in reader.interactions()]
    assert len(ks) > 4
    checked = {"running_total": 0, "Threshold": 0, "tagged": 0, "CountBatches": 0}
    for k in ks:
        for (op, i), at in reader.instances_at(k).items():
            name, state, n = names[op], reader.state(at.state), at.position
            if name == "running_total":
                xs = elements(i)
                expected = {"locals": {"total": sum(xs[:n]), "x": xs[n - 1]}} if 0 < n <= len(xs) else {}
                assert state == expected, (k, i, n)
            elif name == "Threshold":
                seen = pairs(i)[:n]
                assert state == {"seen": len(seen), "kept": sum(t % 3 != 0 for _, t in seen)}, (k, i, n)
            elif name == "tagged":   # mapPartitionsWithIndex: the index is the partition
                xs = elements(i)
                expected = {"locals": {"index": i, "n": n, "x": xs[n - 1]}} if 0 < n <= len(xs) else {}
                assert state == expected, (k, i, n)
            elif name == "CountBatches":
                ids = elements(i)[: min(n, len(elements(i)) // BATCH) * BATCH]
                assert state == {"rows": len(ids), "id_sum": sum(ids)}, (k, i, n)
            else:
                continue
            checked[name] += 1
    reader.close()
    assert all(v == len(ks) * PARTITIONS for v in checked.values()), checked


def test_every_interaction_is_a_consistent_cut_of_the_pipelined_functions(recorded):
    """running_total, Threshold and map run pipelined in one Python worker: at an interaction
    Threshold has seen what running_total yielded by its position (all of it, or all but the
    last input's yield when that input triggered the interaction), and map what Threshold
    kept. Each state alone equals the oracle at its own position
    (`test_recorded_states_equal_the_oracle`); this checks the positions agree."""
    reader = RunReader(recorded[0])
    names = {o.id: o.name for o in reader.operators}
    for x in reader.interactions():
        at = {(names[op], i): a for (op, i), a in reader.instances_at(x.k).items()}
        for i in range(PARTITIONS):
            n, xs = at[("running_total", i)].position, elements(i)
            threshold = reader.state(at[("Threshold", i)].state) or {"seen": 0, "kept": 0}
            yielded = sum(v % 5 == 0 for v in xs[:n])   # (n = len(xs) + 1: its END step too)
            in_flight = 0 < n <= len(xs) and xs[n - 1] % 5 == 0
            assert yielded - in_flight <= threshold["seen"] <= yielded, (x.k, i, n, threshold)
            ended = at[("Threshold", i)].position > threshold["seen"]   # (then map took its END step too)
            assert at[("map", i)].position == threshold["kept"] + ended, (x.k, i, at[("map", i)].position, threshold)
    reader.close()


def test_verify_replays_every_interaction(recorded, capsys):
    from tt.cli.main import main

    assert main(["verify", str(recorded[0])]) == 0
    n = len(RunReader(recorded[0]).interactions())
    said = capsys.readouterr().out
    assert f"verified {n} of {n} interactions" in said
    # what "equals" compared of the operators whose state was empty: the stateless `map`, caught
    # inside its tasks by --when, keeps nothing; `tagged` (a generator) and `flatMap` (a function)
    # ran in a later action, whole between two interactions, so --when is what would show tagged's
    # `n` mid-run, and flatMap has nothing to show; and what each emitted was compared
    digested = len(RunReader(recorded[0]).recorded_outputs())
    assert digested > 3 and said.splitlines()[-1].endswith(
        f": what the hooked functions emitted ({digested} instances) is what the replay emits"), said
    lines = {line.split(": ")[1]: line for line in said.splitlines()[1:-1]}
    assert sorted(lines) == ["flatMap", "map", "tagged"], said
    assert "empty at every interaction, inside its tasks too (a function keeping nothing" in lines["map"]
    assert "empty at every interaction (a function keeping nothing between its calls)" in lines["flatMap"]
    assert "no interaction fell inside any of its tasks" in lines["tagged"]
    assert lines["tagged"].endswith("record with --when, which stops at a tuple")
    assert "--when" not in lines["flatMap"] + lines["map"]


def test_steps_over_elements_and_back(recorded):
    """One element per step, in the generator and in the filter; step back restores both
    (the generator by replay from its partition's start, the filter from a saved copy)."""
    session = DebugSession(recorded[0])
    reader = session.reader
    names = {o.name: o.id for o in reader.operators}
    k, n = next((x.k, at.position) for x in reader.interactions()
                for (op, i), at in reader.instances_at(x.k).items()
                if op == names["running_total"] and i == 0 and 0 < at.position < 150)
    session.jump(k)
    before = session.engine.states()
    assert session.step_over(session.parse_ref(f"running_total:0:{n}")).ok
    xs = elements(0)
    assert session.engine.states()[(names["running_total"], 0)] == {
        "locals": {"total": sum(xs[: n + 1]), "x": xs[n]}}
    m = before[(names["Threshold"], 0)]["seen"]
    assert session.step_over(session.parse_ref(f"Threshold:0:{m}")).ok
    seen = pairs(0)[: m + 1]
    assert session.engine.states()[(names["Threshold"], 0)] == {
        "seen": m + 1, "kept": sum(t % 3 != 0 for _, t in seen)}
    session.step_back()
    session.step_back()
    assert session.engine.states() == before
    reader.close()


def test_the_rdd_methods_are_pysparks_own_after_the_job(recorded):
    from pyspark.core.rdd import RDD
    from pyspark.sql.classic.dataframe import DataFrame

    for name in ("mapPartitions", "mapPartitionsWithIndex", "map", "flatMap", "filter"):
        assert not hasattr(getattr(RDD, name), "__wrapped__"), name
    assert not hasattr(DataFrame.mapInArrow, "__wrapped__")

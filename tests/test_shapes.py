"""Record each DAG shape on real Spark; replay must reproduce every stored state.

For every shape: the sink holds the right rows (Spark ran the dataflow
correctly), interactions were taken mid-stream, and `verify` (local replay, no
Spark) finds every replayed state equal to the recorded one.
"""

from __future__ import annotations

import functools

import pytest
import workloads

from tt.replay.verify import verify
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow


def _check(path, *, min_interactions=3):
    reader = RunReader(path)
    assert reader.status == "complete"
    ints = reader.interactions()
    assert len(ints) >= min_interactions
    assert len(ints) == len(reader.interactions_all), "a finished run has every interaction complete"
    results = verify(reader)
    bad = [r for r in results if not r["ok"]]
    assert not bad, bad[0]
    assert len(results) == len(ints)
    return reader


def test_chain(record):
    path = record(workloads.build_chain, watch="A", when="row['amount'] > 200")
    assert sorted(r["id"] for r in record.result["S"]) == workloads.expect_chain()
    reader = _check(path)
    theta_positions = [s[(1, i)].position for s in map(reader.instances_at, [i.k for i in reader.interactions()])
                       for i in range(4) if s is not None]
    assert any(0 < p < 1500 for p in theta_positions), "some interaction fell mid-stream"


def test_keyed_shuffle(record):
    path = record(workloads.build_keyed, watch="FE", when="row['amount'] > 300")
    out = record.result["S"]
    assert 0 < len(out) < workloads.PAYMENTS
    reader = _check(path)
    fd = reader.operator("FD")
    assert fd.stage != reader.operator("FE").stage and fd.instances == 3
    fe = reader.operator("FE")

    def consumed(snap, op, p):  # tuples consumed before the barrier, the END step excluded
        at = snap[(op.id, p)].position
        return at - (1 if at == reader.final(op.id, p).position else 0)

    # tuple consistency across the shuffle: FD processed exactly what FE's prefixes produced
    mid_stream = 0
    for i in reader.interactions():
        snap = reader.instances_at(i.k)
        fe_in = sum(consumed(snap, fe, p) for p in range(fe.instances))
        fd_in = sum(consumed(snap, fd, p) for p in range(fd.instances))
        assert fd_in == fe_in, (i.k, fe_in, fd_in)
        mid_stream += 0 < fe_in < workloads.PAYMENTS
    assert mid_stream >= 3


def test_join_of_two_sources(record):
    path = record(workloads.build_join, watch="E", when="row['amount'] > 300")
    got = sorted((r["id"], r["region"]) for r in record.result["S"])
    assert got == workloads.expect_join()
    reader = _check(path)
    j = reader.operator("J")
    # the customers side enters G(θ) from outside: its tuples are recorded for replay
    assert any(port == 1 for p in range(j.instances) for port, _ in reader.entry_channels(j.id, p))


@pytest.mark.parametrize("unions", [False, True, "asked"])
def test_join_of_sides_in_one_partition_each(record, spark, unions):
    """Both sides of the join come in one partition, which Spark's union of them would share;
    or each source is a union of two such parts, which the job may have asked for its
    partitions before the run: the job runs as planned, recorded or not, and the user's
    setting of it comes back."""
    setting = "spark.sql.unionOutputPartitioning"
    build = functools.partial(workloads.build_join_one_partition, unions=bool(unions), asked=unions == "asked")
    spark.conf.set(setting, "true")
    try:
        flow = build(spark)
        assert sorted((r["id"], r["region"]) for r in flow.run()["S"]) == workloads.expect_join()
        assert spark.conf.get(setting) == "true"
        path = record(build, watch="E", when="row['amount'] > 300")
        assert spark.conf.get(setting) == "true"
    finally:
        spark.conf.unset(setting)
    assert sorted((r["id"], r["region"]) for r in record.result["S"]) == workloads.expect_join()
    reader = _check(path, min_interactions=2 if unions else 3)
    assert reader.operator("J").instances == 1 and reader.operator("E").instances == (2 if unions else 1)


def test_union_across_stages_and_aggregate(record):
    path = record(workloads.build_union, watch="BA", every=0.2)
    assert sorted((r["bucket"], r["n"]) for r in record.result["S"]) == workloads.expect_union()
    reader = _check(path, min_interactions=2)
    un = reader.operator("UN")
    assert un.stage != reader.operator("BA").stage, "a union of two stages is a shuffle"
    runs = [r for p in range(un.instances) for r in reader.input_runs(un.id, p)]
    assert {port for port, _, _ in runs if port >= 0} == {0, 1}


def test_fanout_and_fanin_inside_a_stage(record):
    path = record(workloads.build_fanout, watch="SPLIT", when="row['amount'] > 250")
    assert sorted(r["id"] for r in record.result["S"]) == workloads.expect_fanout()
    reader = _check(path)
    merge = reader.operator("MERGE")
    assert merge.stage == reader.operator("SPLIT").stage
    # the merge logged which branch each tuple came from, interleaved tuple by tuple
    runs = reader.input_runs(merge.id, 0)
    assert len({port for port, _, _ in runs if port >= 0}) == 2 and len(runs) > 10

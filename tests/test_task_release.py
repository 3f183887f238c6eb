"""A finished task lets go of its operators' state (recorder/task.py `_release`).

θ's runner and the control client call back into their task, and the outbox read the task's
epoch from it: task and runners held each other, so a task's state, a join's every row,
outlived the task as cyclic garbage until a full collection walked it (PySpark's worker makes
one after every task: 0.3 to 0.6 s for a join task of TPC-H W2). Here a stage's task runs in
this process, recording off and recording (with a real coordinator and run file), with the
cycle collector off: once the task is over and dropped, reference counting alone must have
freed it and its runners (in an executor the operators, with their state, go with the task's
deserialized function). And while it runs, the collector's full collections come more rarely
(recorder/cycle_collector.py), and the setting is put back after.
"""

from __future__ import annotations

import gc
import weakref

import pytest

import tt
from tt.core import graph as g
from tt.core.hooked import IteratorOperator
from tt.core.operator import Source
from tt.recorder import cycle_collector
from tt.recorder.session import RecordingSession
from tt.recorder.task import StageTask


class Keep(tt.Operator):
    """Keeps every row it saw, as a join keeps its side."""

    def __init__(self):
        self.rows: dict = {}

    def process(self, row, port=0):
        self.rows.setdefault(row % 7, []).append([row])
        yield row


class Seen:
    """What a test holds of a task: weak references only."""

    def __init__(self, task: StageTask):
        self.task = weakref.ref(task)
        self.runners = [weakref.ref(r) for r in task.runners.values()]


def _flow(spark) -> tuple[tt.Dataflow, int]:
    flow = tt.Dataflow("release")
    flow.source("S", spark.sparkContext.parallelize(range(10), 1)).process(Keep(), name="K").collect("out")
    g = flow.graph
    g.cut_stages({0: 1}, 1)
    return flow, g.nodes[0].stage


def _run(task: StageTask) -> Seen:
    seen = Seen(task)
    threshold = gc.get_threshold()
    assert threshold[2] >= cycle_collector.FULL_EVERY   # fewer full collections while it runs
    batches = list(task.run_rows(iter(range(1000))))
    assert batches   # it sent its outputs on
    return seen


@pytest.mark.parametrize("recording", [False, True], ids=["off", "recording"])
def test_a_finished_task_is_freed_without_the_cycle_collector(spark, tmp_path, recording):
    flow, stage = _flow(spark)
    before = gc.get_threshold()
    session = None
    rec = None
    if recording:
        session = RecordingSession(tmp_path / "run.db", tmp_path / "job.py", [], watch="K", every=10.0)
        rec = session.begin(flow.graph, spark, None)
    gc.collect()
    gc.disable()
    try:
        seen = _run(StageTask(flow.graph, stage, 0, rec, {"spark_attempt": 1, "number": 0}))
        assert gc.get_threshold() == before   # put back when the task ended
        assert seen.task() is None, gc.get_referrers(seen.task())
        assert [r() for r in seen.runners] == [None] * len(seen.runners)
    finally:
        gc.enable()
        if session is not None:
            session.end(ok=True)
            session.close()
    assert flow.graph.node("K").op.rows   # the operator ran (its state is the graph's, not the task's)


def running_sums(rows):
    """A generator function as `rdd.mapPartitions` takes it: its state is its frame's locals."""
    seen = {}
    for row in rows:
        seen.setdefault(row % 7, []).append([row])
        yield len(seen)


def test_a_finished_hooked_task_is_freed_without_the_cycle_collector(spark, tmp_path):
    """A hooked call site's task (θ: its generator function), fed one unit at a time, recording."""
    graph = g.Graph()
    src = graph.add_node("S", g.SOURCE, Source())
    node = graph.add_node("sums", "rdd.mapPartitions", IteratorOperator(running_sums, "rdd.mapPartitions"))
    stage = graph.add_hooked(src, node)
    session = RecordingSession(tmp_path / "run.db", tmp_path / "job.py", [], watch="sums", every=10.0)
    rec = session.begin(graph, spark, None)
    gc.collect()
    gc.disable()
    try:
        task = StageTask(graph, stage.id, 0, rec, {"spark_attempt": 1, "number": 0})
        task.open_units()
        seen = Seen(task)
        out = [o for i in range(1000) for o in task.feed_unit(i)]
        out += task.end_units()
        assert out[-1] == 7
        del task
        assert seen.task() is None, gc.get_referrers(seen.task())
        assert [r() for r in seen.runners] == [None] * len(seen.runners)
    finally:
        gc.enable()
        session.end(ok=True)
        session.close()


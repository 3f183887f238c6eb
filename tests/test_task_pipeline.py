"""Hooked functions PySpark chains in one Python worker take each interaction at one cut
(recorder/task.py `_Pipeline`).

`rdd.mapPartitions(f).filter(g)` runs `g` on what `f` yields, in the same thread: only `f`'s
task takes interactions from the coordinator, and `g`'s takes them at that moment. Here the two
tasks run in this process with a real coordinator and run file, fed by hand, so that an
interaction reaches `g`'s task before it joins the chain and another one after, before its
first input: the order the suite's CI met once, where `g`'s task took the second interaction
on its own, before the row `f` had already handed it (`tests/test_hooked_rdd.py`'s
consistent-cut test failed: `map` at position 0 where `filter` had kept a row).
"""

from __future__ import annotations

import threading

from tt.recorder.session import RecordingSession
from tt.recorder.task import StageTask
from tt.store.reader import RunReader


def running_total(elements):
    total = 0
    for x in elements:
        total += x
        yield (x, total)


class Threshold:
    def __init__(self):
        self.seen = 0

    def __call__(self, pair):
        self.seen += 1
        return pair[1] % 3 != 0


def _heard(task: StageTask, k: int, woken: bool = True) -> None:
    """Wait until the task's control channel has received interaction k (its reader thread
    appends it to `pending`) and, for a task its channel still wakes (`woken`), until that
    thread has woken it (`barrier_at` 0: it takes k before its next input)."""
    pause = threading.Event()   # (never set: a pause between two looks)
    for _ in range(60_000):
        if k in task.client.pending and (not woken or task.theta.barrier_at == 0):
            return
        pause.wait(0.001)
    raise AssertionError(f"interaction {k} never reached the task")


def test_a_chained_task_takes_interactions_only_with_the_task_before_it(spark, tmp_path):
    session = RecordingSession(tmp_path / "run.db", tmp_path / "job.py", [], watch="running_total", every=3600.0)
    site, sc = "job.py:1", spark.sparkContext   # the call sites, as the patched PySpark methods hook them
    first = session.hook(running_total, "rdd.mapPartitions", site, sc)
    second = session.hook(Threshold(), "rdd.filter", site, sc, upstream=[("running_total", "pipelined", None)])
    attempt = {"spark_attempt": 7, "number": 0}
    try:
        upstream = StageTask(first.graph, first.stage_id, 0, first.recording, attempt)
        upstream.join_pipeline(7)
        downstream = StageTask(second.graph, second.stage_id, 0, second.recording, attempt)
        assert session.coordinator.interaction("user", {}) == 1   # before `downstream` joins the chain
        _heard(upstream, 1)
        _heard(downstream, 1)
        downstream.join_pipeline(7)
        upstream.open_units()
        downstream.open_units()
        handed = upstream.feed_unit(1)    # it takes interaction 1 before its input #0, `downstream` with it
        assert session.coordinator.interaction("user", {}) == 2   # after: `upstream` takes it before its input #1
        _heard(downstream, 2, woken=False)   # (it joined: its channel no longer wakes it)
        _heard(upstream, 2)
        for row in handed:                # ... but `downstream` is handed (1, 1) first
            downstream.feed_unit(row)
        for x in (2, 3, 4):
            for row in upstream.feed_unit(x):
                downstream.feed_unit(row)
        for row in upstream.end_units():
            downstream.feed_unit(row)
        downstream.end_units()
    finally:
        session.end(ok=True)
        session.close()
    reader = RunReader(tmp_path / "run.db")
    try:
        names = {o.id: o.name for o in reader.operators}
        at = {x.k: {names[op]: a.position for (op, _), a in reader.instances_at(x.k).items()}
              for x in reader.interactions() if x.trigger == "user"}
        # at each interaction `Threshold` has taken every row `running_total` yielded by then
        assert at == {1: {"running_total": 0, "Threshold": 0}, 2: {"running_total": 1, "Threshold": 1}}
    finally:
        reader.close()

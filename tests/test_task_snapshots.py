"""What a recording task stores at an interaction it takes before its first input (recorder/task.py
`_state_hash`): the state whole, without asking the operator which keys it changed, which would
have it count its changes from its first row on. A stage's task runs in this process with a real
coordinator and run file, as in tests/test_task_release.py."""

from __future__ import annotations

import tt
from tt.recorder.session import RecordingSession
from tt.recorder.task import StageTask
from test_task_release import Keep


class Listing(Keep):
    """`Keep` that lists the keys it changed, counting them only once asked (as HashJoin and
    Aggregate do), and notes how many rows it had seen at each time it was asked."""

    def __init__(self):
        super().__init__()
        self._changed: dict | None = None
        self._asked_after: list[int] = []

    def process(self, row, port=0):
        if self._changed is not None:
            self._changed[row % 7] = None
        return super().process(row, port)

    def changed_keys(self) -> dict:
        self._asked_after.append(sum(map(len, self.rows.values())))
        changed, self._changed = self._changed or {}, {}
        return {"rows": changed}


def test_a_snapshot_before_any_input_does_not_start_the_change_counting(spark, tmp_path):
    """A task that starts after an interaction was taken takes it before its first input: its
    state is stored whole, without asking `changed_keys()`, which would have the operator count
    every row from then on (a dict update per row in a join); the first snapshot with inputs is
    whole too, and the run replays to every stored state."""
    from tt.replay.verify import verify
    from tt.store.reader import RunReader

    flow = tt.Dataflow("listing")
    flow.source("S", spark.sparkContext.parallelize(range(10), 1)).process(Listing(), name="K").collect("out")
    graph = flow.graph
    graph.cut_stages({0: 1}, 1)
    session = RecordingSession(tmp_path / "run.db", tmp_path / "job.py", [], watch="K", every=10.0)
    rec = session.begin(graph, spark, None)
    try:
        assert session.coordinator.interaction("user", {}) == 1   # before the task starts
        task = StageTask(graph, graph.nodes[0].stage, 0, rec, {"spark_attempt": 1, "number": 0})
        assert list(task.run_rows(iter(range(1000))))
    finally:
        session.end(ok=True)
        session.close()
    assert graph.node("K").op._asked_after == [1000]   # at the end only, not at the start
    reader = RunReader(tmp_path / "run.db")
    try:
        k_op = reader.operator("K").id
        at = [(i.k, i.trigger, reader.instances_at(i.k)[(k_op, 0)].position) for i in reader.interactions()]
        assert at == [(0, "start", 0), (1, "user", 0), (2, "end", 1001)]   # (the end of input is a step)
        results = verify(reader)
        assert results and all(r["ok"] for r in results), results
    finally:
        reader.close()

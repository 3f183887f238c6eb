"""An operator may change the rows it is given; a replay that goes back over them gives them as recorded.

Replay decodes the tuples entering G(θ) a chunk at a time and keeps the chunk. An operator
that writes into its row (`row["visits"] += 1`, a join's merge) changed the kept objects, so
a jump back replayed it on rows it had changed already: states silently unlike the recording
(replay/entries.py `DecodedChunk`). The same held for a logged result the operator changes
(core/runtime.py `ResultSource`). And while recording, a tuple entering G(θ) from a Python
operator, or a logged result, was kept by reference and packed after the operator changed it:
the run file held the changed row (`logs.kept_apart`). Here the oracle needs no log: every row
arrives once, so every visit count an operator saw is 1, in every replay, however often it
goes back.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tt
from tt.core import values
from tt.replay.session import DebugSession
from tt.replay.verify import verify
from tt.store.reader import RunReader

from plain_jobs import record_on_and_off

pytestmark = pytest.mark.slow
JOB = Path(__file__).resolve().parent / "jobs" / "hooked_mutating.py"   # RDD.map, or mapInPandas with `pandas`

ROWS = [{"id": i, "v": i % 17} for i in range(1200)]


class Stamp(tt.Operator):
    """Counts on the row itself how often it was processed, and on a logged dict how often that was used."""

    def __init__(self):
        self.visits = []
        self.uses = []

    def process(self, row, port=0):
        row["visits"] = row.get("visits", 0) + 1
        self.visits.append(row["visits"])
        got = self.log_result(lambda: {"n": 0})
        got["n"] += 1
        self.uses.append(got["n"])
        yield row


def copied(spark, tmp_path):
    """Rows recorded where they enter G(θ) (an in-memory DataFrame, repartitioned)."""
    flow = tt.Dataflow("stamp_copied", partitions=2)
    flow.source("S", spark.createDataFrame(ROWS, "id long, v long").repartition(2)) \
        .process(Stamp(), name="T").collect("out")
    return flow


def shuffled_by_reference(spark, tmp_path):
    """Rows read back from a Parquet file, through a shuffle (replay/entries.py)."""
    data = tmp_path / "rows"
    if not data.exists():
        data.mkdir()
        pq.write_table(pa.Table.from_pylist(ROWS), data / "part-0.parquet", row_group_size=300)
    flow = tt.Dataflow("stamp_by_reference", partitions=2)
    flow.source("S", spark.read.parquet(str(data))).key_by(lambda r: r["v"]) \
        .process(Stamp(), name="T").collect("out")
    return flow


def captured_after_a_map(spark, tmp_path):
    """Rows a Python operator outside G(θ) hands to θ in the same task: recorded where they enter
    (core/runtime.py `capture_target`), and packed after θ has processed, and changed, them."""
    flow = tt.Dataflow("stamp_captured", partitions=2)
    flow.source("S", spark.createDataFrame(ROWS, "id long, v long")).map(lambda r: dict(r), name="M") \
        .process(Stamp(), name="T").collect("out")
    return flow


@pytest.mark.parametrize("build", [copied, shuffled_by_reference, captured_after_a_map], ids=lambda b: b.__name__)
def test_going_back_replays_rows_and_logged_results_as_recorded(record, tmp_path, build):
    run = record(lambda spark: build(spark, tmp_path), watch="T", when="row['id'] % 150 == 0")
    reader = RunReader(run)
    try:
        session = DebugSession(reader)
        t = reader.operator("T")
        ints = [i.k for i in reader.interactions()]
        rows = [sum(n for port, _, n in reader.input_runs(t.id, i) if port >= 0) for i in range(t.instances)]
        assert len(ints) >= 6
        for k in (ints[-1], ints[2], ints[-1], ints[1], ints[-2]):   # back and forth: rows taken again
            session.jump(k)
            snap = reader.instances_at(k)
            for i in range(t.instances):
                replayed = session.state(f"T:{i}")
                assert replayed == reader.state(snap[(t.id, i)].state), (k, i)
                state = values.decode(replayed)
                assert set(state["visits"]) <= {1} and set(state["uses"]) <= {1}, (k, i)
                assert len(state["visits"]) == min(snap[(t.id, i)].position, rows[i]), "the END step is no row"
        seen = sum(len(values.decode(session.state(f"T:{i}"))["visits"]) for i in range(t.instances))
        assert seen == sum(min(reader.instances_at(ints[-2])[(t.id, i)].position, rows[i]) for i in range(t.instances))

        session.jump(ints[1])
        ref = f"T:0:{reader.instances_at(ints[1])[(t.id, 0)].position}"
        step = session.step_over(ref)
        back = session.step_back()
        again = session.step_over(ref)
        assert step.ok and back.ok and again.ok, (step, back, again)
        for i in range(t.instances):
            assert set(values.decode(session.state(f"T:{i}"))["visits"]) <= {1}

        results = verify(reader)
        assert results and all(r["ok"] for r in results), [r for r in results if not r["ok"]][:1]
    finally:
        reader.close()


def test_a_hooked_function_that_changes_its_rows_replays_as_recorded(spark, tmp_path):
    """The same through the hooks: an unmodified job's `RDD.map` function (a unit of one row,
    recorded before the function runs and packed after it, tests/jobs/hooked_mutating.py)."""
    run, on, off = record_on_and_off(JOB, tmp_path, when="row['id'] % 50 == 0")
    assert on == off == [1] * 400
    _jumps_replay_as_recorded(run, "rdd.map", lambda ks: (ks[-1], ks[2], ks[-1], ks[1]), at_least=6)


def test_a_hooked_pandas_function_that_changes_its_frames_replays_as_recorded(spark, tmp_path):
    """The same for a `mapInPandas` class that writes into the DataFrames it is handed (a unit
    is a DataFrame of 25 rows, packed when it is logged, before the function runs)."""
    run, on, off = record_on_and_off(JOB, tmp_path, ["pandas"], when="bool((row['id'] % 50 == 0).any())")
    assert on == off == [1] * 200
    _jumps_replay_as_recorded(run, "mapInPandas", lambda ks: (ks[-1], ks[1], ks[-1], ks[0]), at_least=4)


def _jumps_replay_as_recorded(run, kind: str, jumps, at_least: int) -> None:
    """Jumps back and forth (`jumps` of the interactions) give the hooked operator's recorded
    state, in which every row was visited once, and `tt verify` passes."""
    reader = RunReader(run)
    try:
        session = DebugSession(reader)
        op = next(o for o in reader.operators if o.kind == kind)
        ints = [i.k for i in reader.interactions()]
        assert len(ints) >= at_least
        for k in jumps(ints):
            session.jump(k)
            snap = reader.instances_at(k)
            for i in range(op.instances):
                replayed = session.state(f"{op.name}:{i}")
                assert replayed == reader.state(snap[(op.id, i)].state), (k, i)
                assert set(values.decode(replayed)["visits"]) <= {1}, (k, i)
        results = verify(reader)
        assert results and all(r["ok"] for r in results), [r for r in results if not r["ok"]][:1]
    finally:
        reader.close()

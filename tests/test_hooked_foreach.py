"""`foreachPartition` and `foreach` (a DataFrame's or an RDD's) are recorded as operators, with
their state (`tests/jobs/hooked_foreach.py`).

PySpark runs them through a `mapPartitions` of its own, which the hook passed unrecorded:
a sink that batches rows, the place where a job writes its result out, ran without a word in
the recording. Checked here: what the sinks wrote, recorded and not, against pandas; that the
recording says which operator wrote a file, which a replay writes again (`tt verify` does); the
operators in the run; and in a replay, after each row, a plain function's locals
(its open batch, the batches it flushed) and a global it writes into, and the accumulators
they add to (what the task added so far), against pandas.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import each_step, record_on_and_off, verified

from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_foreach.py"
ROWS, BATCH = 30, 4


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    return record_on_and_off(JOB, tmp_path_factory.mktemp("foreach"))


def _partitions() -> list[pd.DataFrame]:
    """The job's two partitions of payments (`spark.range(0, 30, numPartitions=2)`)."""
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["customer"] = "c" + (pdf["id"] % 3).astype(str)
    pdf["amount"] = ((pdf["id"] * 7) % 11).astype(float)
    return [pdf.iloc[:ROWS // 2].reset_index(drop=True), pdf.iloc[ROWS // 2:].reset_index(drop=True)]


def test_what_the_sinks_wrote_is_the_same_recorded_and_not(recorded):
    _, on, off = recorded
    assert on == off
    parts = _partitions()
    counts = [part.groupby("customer").cumcount() + 1 for part in parts]
    assert on == {"written": sum(p["amount"].sum() for p in parts),
                  "flushes": sum(-(-len(p) // BATCH) for p in parts),
                  "tallied": int(sum(c.sum() for c in counts))}


def test_the_sinks_are_operators_of_the_run(recorded):
    session = DebugSession(recorded[0])
    try:
        kinds = {session.reader.operator(name).kind for name in ("write_batches", "tally")}
    finally:
        session.reader.close()
    assert kinds == {"rdd.foreachPartition", "rdd.foreach"}


def _flushed_sums() -> list[float]:
    """The sums of the batches `write_batches` writes, a line each, in its partitions' order."""
    return [sum(p["amount"].iloc[i:i + BATCH]) for p in _partitions() for i in range(0, len(p), BATCH)]


def test_the_recording_says_which_operator_wrote_a_file(recorded):
    run, *_ = recorded
    sink = run.parent / "on.json.sink"
    assert sorted(map(float, sink.read_text().split())) == sorted(_flushed_sums())   # (the two tasks' lines mixed)
    reader = RunReader(run)
    try:
        warned = reader.warnings()
    finally:
        reader.close()
    assert [w for w in warned if "wrote" in w] == [
        f"write_batches: a step wrote {sink}; tt does not log what a step writes, and a replay (tt debug, "
        f"tt verify) writes a scratch copy of it instead, which it removes"], warned
    scratch = "a file it opens for writing is then a scratch copy, but what it sends to a database or a service " \
              "is sent again"
    assert [w for w in warned if "sink" in w and "wrote" not in w] == [
        f"write_batches (foreachPartition at hooked_foreach.py:59) is a sink: a replay (tt debug, tt verify) runs it "
        f"again; {scratch}",
        f"tally (foreach at hooked_foreach.py:60) is a sink: a replay (tt debug, tt verify) runs it again; {scratch}"], \
        warned


def test_verify_passes_and_leaves_the_sinks_file_as_the_job_wrote_it(recorded, capsys):
    """A replay's steps append to a scratch copy (core/outside_effects.py `scratch`): a `tt verify`
    appended its lines to the job's output file, doubling them."""
    run, *_ = recorded
    sink = run.parent / "on.json.sink"
    before = sink.read_text()
    verified(run, capsys)
    assert sink.read_text() == before


def test_a_replayed_step_appends_to_a_scratch_copy(recorded):
    """Stepping `write_batches` over its first partition: the lines its flushes append go to a
    copy under the replay's scratch folder, at the sink's path, one line per batch of four."""
    from tt.core import outside_effects

    run, *_ = recorded
    sink = run.parent / "on.json.sink"
    before = sink.read_text()
    session = DebugSession(run)
    try:
        for i, unit, _ in each_step(session, "write_batches"):
            if i == 1:
                break
        scratch = Path(outside_effects.scratch(str(sink), "a"))
        assert scratch != sink and scratch.is_file()
        lines = scratch.read_text().split()
    finally:
        session.reader.close()
    assert sink.read_text() == before
    first = _partitions()[0]["amount"]
    flushed = [sum(first.iloc[i:i + BATCH]) for i in range(0, len(first), BATCH)]
    assert lines[-len(flushed):] == [str(x) for x in flushed]


def test_a_plain_functions_locals_are_its_state_after_each_row(recorded):
    """`write_batches` is not a generator: while it waits for its next row, its frame's locals
    are read from where it waits (`Pulled.frame_of`), and they are the open batch and the count
    of batches flushed so far."""
    session = DebugSession(recorded[0])
    rows = {0: 0, 1: 0}
    for i, unit, state in each_step(session, "write_batches"):
        if unit is None:
            assert "locals" not in state   # (it has returned)
            continue
        rows[i] += 1
        amounts = _partitions()[i]["amount"].iloc[:rows[i]].tolist()
        open_batch = amounts[len(amounts) // BATCH * BATCH:]
        assert (state["locals"]["batch"], state["locals"]["flushed"]) == (open_batch, len(amounts) // BATCH)
        written = sum(amounts[:len(amounts) // BATCH * BATCH])   # (this task's: an accumulator's value in a task)
        assert state["globals"]["WRITTEN"]["value"] == written and state["globals"]["FLUSHES"]["value"] == 0
        assert unit.amount == amounts[-1]
    session.reader.close()
    assert rows == {0: ROWS // 2, 1: ROWS // 2}


def test_a_sinks_clock_read_is_replayed_as_recorded(recorded):
    """`started = time.time()` in `write_batches` is logged as any hooked function's clock read:
    every replay gives the recording's, which fell while the recording ran (a replay that read
    the clock itself would give its own, later, and another each time)."""
    run, *_ = recorded
    reader = RunReader(run)
    try:
        began, ended = reader.interactions()[0].time, reader.interactions()[-1].time
    finally:
        reader.close()
    replays = []
    for _ in range(2):
        session = DebugSession(run)
        replays.append({i: state["locals"]["started"] for i, unit, state in each_step(session, "write_batches")
                        if unit is not None})
        session.reader.close()
    assert replays[0] == replays[1] and all(began <= t <= ended for t in replays[0].values()), (replays, began, ended)


def test_a_global_a_foreach_function_writes_into_is_its_state(recorded):
    session = DebugSession(recorded[0])
    rows = {0: 0, 1: 0}
    for i, unit, state in each_step(session, "tally"):
        if unit is not None:
            rows[i] += 1
            seen = _partitions()[i].iloc[:rows[i]]
            tallied = int((seen.groupby("customer").cumcount() + 1).sum())
            assert state["globals"] == {"SEEN": seen.groupby("customer").size().to_dict(),
                                        "TALLIED": {"id": state["globals"]["TALLIED"]["id"], "value": tallied}}
    session.reader.close()
    assert rows == {0: ROWS // 2, 1: ROWS // 2}


def test_an_accumulator_pickles_as_a_task_gets_it(spark):
    """From the driver, at its zero (whatever earlier jobs added: each task starts from zero);
    from an executor (a checkpoint), with what its task added. Each unpickles as an accumulator of
    its own: PySpark's share one per process, so a replay's instances added to each other's."""
    from pyspark.accumulators import _accumulatorRegistry, _deserialize_accumulator

    from tt.core import code_pickle, values
    from tt.core.shared_variables import RecordedAccumulator

    driver = spark.sparkContext.accumulator(0.0)
    driver.add(7.5)   # (an earlier job's)
    first, second = (code_pickle.loads(code_pickle.dumps(driver), "test") for _ in range(2))
    assert type(first) is RecordedAccumulator and first is not second and first._value == second._value == 0.0
    first += 2.0
    first.add(1.0)
    assert (first._value, second._value) == (3.0, 0.0)
    task = _deserialize_accumulator(driver.aid + 10_000, 0.0, driver.accum_param)   # as a worker unpickles one
    del _accumulatorRegistry[task.aid]   # (this process is the suite's driver)
    task.add(4.0)
    restored = code_pickle.loads(code_pickle.dumps(task), "test")
    assert restored._value == 4.0 and values.encode(restored) == values.encode(task) == {
        "$object": "pyspark.Accumulator", "attrs": {"id": driver.aid + 10_000, "value": 4.0}}
    with pytest.raises(RuntimeError, match="inside tasks"):
        restored.value
    assert repr(restored) == f"<Accumulator {task.aid}: 4.0 (recorded)>"   # (as a unit holding it reads)

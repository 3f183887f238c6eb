"""A barrier stage (`rdd.barrier().mapPartitions`, tests/jobs/hooked_barrier.py) runs unrecorded,
and the recording says so, where it went without a word: its tasks wait for each other, which a
replay of one task alone cannot do. The job's other function is recorded as ever."""

from __future__ import annotations

from pathlib import Path

from plain_jobs import record_on_and_off

from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_barrier.py"


def test_a_barrier_stage_runs_unrecorded_and_is_said(spark, tmp_path):
    events = []
    run, on, off = record_on_and_off(JOB, tmp_path, on_event=lambda kind, info: events.append((kind, info)))
    assert on == off == {"sums": [10, 35], "together": [[0, 10], [1, 35]]}
    line = next(n for n, text in enumerate(JOB.read_text().splitlines(), 1) if ".barrier().mapPartitions(gathered)" in text)
    said = [info["message"] for kind, info in events if kind == "warning" and "barrier" in info["message"]]
    assert said == [f"gathered (barrier().mapPartitions at hooked_barrier.py:{line}) runs unrecorded: tt does not "
                    f"hook barrier stages, whose tasks wait for each other, so its steps and the state it keeps "
                    f"are not in the run"]
    reader = RunReader(run)
    try:
        assert [o.name for o in reader.operators if o.kind.startswith("rdd.")] == ["summed"]
        assert any("barrier().mapPartitions" in w for w in reader.warnings())
    finally:
        reader.close()

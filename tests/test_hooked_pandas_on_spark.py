"""A job's functions that run through pandas-on-Spark (`tests/jobs/hooked_pandas_on_spark.py`).

pandas-on-Spark hands them to PySpark's own `mapInPandas` and `applyInPandas`, which tt leaves
unhooked as PySpark's calls of itself: a job that used only pandas-on-Spark failed to record
with "called no PySpark method tt records", though it had called `apply_batch`, and a job that
mixed it with a hooked call recorded without a word of it. The recording now names each
function of the job's that ran so, where it is defined and the pandas-on-Spark method it went
through (`hooks._say_pandas_on_spark`); pandas-on-Spark's own operations say nothing.
"""

from __future__ import annotations

from pathlib import Path

from plain_jobs import record_on_and_off

from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_pandas_on_spark.py"


def _line(text: str) -> int:
    return next(n for n, line in enumerate(JOB.read_text().splitlines(), 1) if line.startswith(text))


def test_functions_run_through_pandas_on_spark_are_named(spark, tmp_path):
    events = []
    run, on, off = record_on_and_off(JOB, tmp_path, on_event=lambda kind, info: events.append((kind, info)))
    assert on == off
    rows = 60
    assert on == {"doubled": float(2 * sum(range(rows))), "shares": 3.0, "described": [8, 2, 2, 2],
                  "amount": float(sum(range(rows)))}
    tail = ("whose own calls of PySpark tt does not record: its steps and the state it keeps are not in the run; a "
            "DataFrame's mapInPandas, or groupBy(...).applyInPandas, with it records them")
    assert [info["message"] for kind, info in events if kind == "warning" and "pandas-on-Spark" in info["message"]] == [
        f"tag (at hooked_pandas_on_spark.py:{_line('def tag')}) ran through pandas-on-Spark's apply_batch, {tail}",
        f"share (at hooked_pandas_on_spark.py:{_line('def share')}) ran through pandas-on-Spark's apply, {tail}"]
    reader = RunReader(run)
    try:
        assert [(o.name, o.kind) for o in reader.operators if o.kind == "mapInPandas"] == [("running", "mapInPandas")]
    finally:
        reader.close()

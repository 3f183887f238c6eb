"""A replayed traceback shows the job's lines as they ran, from the run file (replay/job_source.py).

The job is written here, recorded as `tt record` does it (it raises on one element),
then edited and finally deleted, as on a laptop that has the run but not the job's
files, or newer ones. The oracle is the source text this test wrote.
"""

from __future__ import annotations

import linecache
from pathlib import Path

import pytest

from plain_jobs import post_mortem

pytestmark = pytest.mark.slow

RAISING = "            raise ValueError(f'element {x} is not allowed')   # the line a traceback must show"

JOB = f'''"""Sums each partition's elements; element 13 is not allowed."""
import sys

from pyspark.sql import SparkSession


def totals(xs):
    total = 0
    for x in xs:
        if x == 13:
{RAISING}
        total += x
    yield total


if __name__ == "__main__":
    spark = SparkSession.builder.getOrCreate()
    print(spark.sparkContext.parallelize(range(40), 2).mapPartitions(totals).collect())
'''


def _traceback(run: Path) -> str:
    session = post_mortem_session(run)
    try:
        ref = session.failure.label
        result = session.step_into(ref)
        assert not result.ok and result.raised["error"] == "ValueError", result.note
        return result.raised["traceback"]
    finally:
        session.reader.close()


def post_mortem_session(run: Path):
    from tt.replay.session import DebugSession

    session = DebugSession(run)
    assert session.failure is not None and session.goto_failure().ok
    return session


def test_a_replayed_traceback_shows_the_recorded_lines_when_the_job_changed_or_is_gone(spark, tmp_path):
    job = tmp_path / "sums.py"
    job.write_text(JOB)
    run = tmp_path / "run.db"
    post_mortem(job, [], run, "element 13 is not allowed").reader.close()

    # the job was edited since: the line that raised is now another one
    job.write_text(JOB.replace(RAISING, "            pass   # fixed").replace("total = 0", "total = 0\n    # moved"))
    linecache.clearcache()
    tb = _traceback(run)
    assert RAISING.strip() in tb and "# fixed" not in tb and "# moved" not in tb, tb
    assert f'File "{job}"' in tb, tb

    # and gone altogether
    job.unlink()
    linecache.clearcache()
    tb = _traceback(run)
    assert RAISING.strip() in tb, tb

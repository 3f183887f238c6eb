"""Running a plain PySpark test job (tests/jobs/hooked_*.py) with recording off and on.

Each job writes what it computed to the JSON file named by its first argument, so a test
can compare the job's output without tt and under `tt record` (in this process, beside
the suite's SparkSession, as `tt record` runs a job).
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

from tt.recorder.job import record_job


def run_plain(job: Path, args: list[str]) -> None:
    """The job as `python job.py ARGS` runs it: nothing patched, nothing recorded."""
    argv = sys.argv[:]
    sys.argv = [str(job), *args]
    try:
        runpy.run_path(str(job), run_name="__main__")
    finally:
        sys.argv = argv


def record_on_and_off(job: Path, where: Path, args: list[str] = (), **options) -> tuple[Path, object, object]:
    """(run file, the job's output recorded, its output with recording off); `options` go to
    `record_job` (when=, watch=, on_event=…)."""
    off, on, run = where / "off.json", where / "on.json", where / "run.db"
    run_plain(job, [str(off), *args])
    outcome = record_job(job, [str(on), *args], run, **options)
    assert outcome.status == "complete", outcome.error
    return run, json.loads(on.read_text()), json.loads(off.read_text())

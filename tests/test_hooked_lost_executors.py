"""Executors lost between two actions (`tests/jobs/hooked_lost_executors.py`, on
`local-cluster`: executor JVMs of their own, as on a standalone cluster).

Spark computes again every map task whose output was lost with its executor. Those runs of a
hooked function are not recorded (tt records each task's first run); they run in shadow, and
until 2026-12-06 nothing compared them with the recorded ones: a function that is not
deterministic gave the second `collect()` other sums than the recording replays, and
`tt verify` said "verified". Each now digests what it emits, and `tt verify` compares that
with what the replay emits (replay/reruns.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_lost_executors.py"
ROWS, PARTITIONS, KEYS = 4000, 4, 4


def _tt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tt", *args], capture_output=True, text=True, timeout=600)


def _record(tmp_path: Path, *mode: str) -> tuple[Path, dict]:
    run, out = tmp_path / "run.db", tmp_path / "out.json"
    proc = _tt("record", str(JOB), "-o", str(run), "--", str(out), *mode)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run, json.loads(out.read_text())


def _reruns(run: Path) -> list[dict]:
    from tt.store.reader import RunReader

    reader = RunReader(run)
    try:
        return reader.reruns()
    finally:
        reader.close()


def test_map_tasks_computed_again_are_compared_and_verify(tmp_path):
    run, out = _record(tmp_path)
    # the oracle, without tt's logs: each key's sum of running totals, computed here
    totals, sums = [0] * PARTITIONS, [0] * KEYS
    per = ROWS // PARTITIONS
    for p in range(PARTITIONS):
        for x in range(p * per, (p + 1) * per):
            totals[p] += x
            sums[x % KEYS] += totals[p]
    assert out["first"] == out["second"] == [[k, sums[k]] for k in range(KEYS)]
    reruns = _reruns(run)
    assert sorted(r["instance"] for r in reruns) == list(range(PARTITIONS))   # every map task, once more
    assert all(r["position"] == per + 1 for r in reruns)   # (its rows and its end)
    proc = _tt("verify", str(run))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 runs that Spark made again of recorded tasks emitted what the replay emits" in proc.stdout


def test_a_function_that_is_not_deterministic_is_found_where_spark_computed_it_again(tmp_path):
    run, out = _record(tmp_path, "random")
    assert out["first"] != out["second"]   # Spark's own answer changed between the two collect()s
    assert len(_reruns(run)) == PARTITIONS
    proc = _tt("verify", str(run))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("noisy:0 ran again in a later Spark stage (another action on the same RDD or DataFrame, or output lost "
            "with an executor) and emitted other rows than the run tt recorded and replays (as many outputs (1,000), "
            "not all the same)") in proc.stdout, proc.stdout

"""Plain PySpark jobs of random shape (tests/jobs/hooked_random.py), recorded through the hooks.

For each seed: the job's output recorded equals its output with recording off; `verify`
passes; and `tt debug`'s session steps and undoes, and steps back, as in
test_random_shapes.py (tests/replay_checks.py). θ is one of the job's hooked functions, drawn
too, with `every`/`when`, `--lineage` and copied sources. The seeds cover a
`transformWithStateInPandas` processor as θ behind a grouped function and a generator, its
source read from Parquet by reference in batches of 7 rows (38); θ after a processor with
`--lineage` and a `when` condition (47); a processor between two `mapInArrow`s with
`--lineage` (62) and behind a filter (110); four hooked steps in one job (23). A scratch run of
50 seeds of this job's first version (its draws in another order) found no failure.
"""

from __future__ import annotations

import random
from pathlib import Path

import hooked_random
import pytest
import replay_checks
from plain_jobs import record_on_and_off

from tt.replay.verify import verify
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow

JOB = Path(__file__).parent / "jobs" / "hooked_random.py"
HOOKED = {"running": "running", "scaled": "scaled", "top": "top", "alternate": "alternate", "counter": "Counter"}


@pytest.mark.parametrize("seed", [23, 38, 47, 62, 110])
def test_a_random_plain_job_records_and_replays(tmp_path, seed):
    rng = random.Random(seed * 31)
    every = rng.choice([None, 0.02, 0.1])
    when = rng.choice([None, "True", "row is not None"]) if every is None or rng.random() < 0.3 else None
    options = {"lineage": rng.random() < 0.3, "copy_sources": rng.random() < 0.2}
    drawn = [kind for kind, _ in hooked_random.draw(seed)["steps"]]
    watch = rng.choice([HOOKED[k] for k in drawn if k in HOOKED])
    what = f"{drawn}, θ = {watch}, every {every}, when {when}, {options}"
    run, on, off = record_on_and_off(JOB, tmp_path, [str(seed), str(tmp_path)], every=every, when=when,
                                     watch=watch, **options)
    assert on == off and on["steps"] == drawn, what
    reader = RunReader(run)
    assert reader.theta.name == watch
    bad = [r for r in verify(reader) if not r["ok"]]
    assert not bad, (what, bad[0])
    replay_checks.steps_undo_and_reverse(run, reader, rng, what)

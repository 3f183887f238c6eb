"""Spark re-running a failed task must leave the log a run without failure leaves.

θ fails on its first attempt after it has taken several barriers; FD fails on
its first attempt on one partition. Spark retries both tasks. The retries take
θ's barriers at the same positions (sticky barriers), the failed attempts'
records stay invisible, and the log equals that of a clean run.
"""

from __future__ import annotations

import pytest
import workloads

from tt.replay.verify import verify
from tt.store import blobs
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow

WHEN = "row['amount'] > 120"


def _log(reader: RunReader) -> dict:
    """Everything a replay depends on, in a comparable form."""
    out = {"interactions": [(i.trigger, i.detail.get("position")) for i in reader.interactions()]}
    for i in reader.interactions():
        out[f"snap{i.k}"] = {key: (at.position, reader.state(at.state))
                             for key, at in sorted(reader.instances_at(i.k).items())}
    for op, inst in reader.g_instances():
        out[(op, inst, "in")] = reader.input_runs(op, inst)
        out[(op, inst, "out")] = list(reader.output_counts(op, inst))
        out[(op, inst, "entry")] = [row for *_, codec, data in reader.entry_chunks(op, inst)
                                    for row in blobs.unpack_tuples(codec, data)]
        for e in reader.plan["edges"]:
            if e["src"] == op and e["shuffle"]:
                out[(op, inst, "dest", e["id"])] = list(reader.dests(op, inst, e["id"]))
    return out


def test_retried_tasks_log_like_a_clean_run(record):
    clean = RunReader(record(lambda s: workloads.build_retry(s, failing=False), watch="FE", when=WHEN,
                             name="clean.db"))
    retried = RunReader(record(lambda s: workloads.build_retry(s, failing=True), watch="FE", when=WHEN,
                               name="retried.db"))
    assert retried.status == "complete"

    attempts = retried.conn.execute("SELECT stage, partition, status FROM attempts ORDER BY id").fetchall()
    failed = [(s, p) for s, p, st in attempts if st == "failed"]
    assert (0, 0) in failed and (1, 1) in failed, attempts
    assert len(retried.failures()) == 2
    sticky = retried.conn.execute(
        "SELECT COUNT(*) FROM barriers b JOIN attempts a ON a.id = b.attempt "
        "WHERE a.status = 'failed' AND a.stage = 0").fetchone()[0]
    assert sticky >= 3, "θ's failed attempt had taken barriers that the retry had to repeat"
    assert all(st == "committed" for _, st in retried.visible.values())

    a, b = _log(clean), _log(retried)
    assert len(a["interactions"]) > 5
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == b[key], key

    results = verify(retried)
    assert results and all(r["ok"] for r in results)

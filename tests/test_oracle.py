"""The stored snapshots against an independent oracle (not the replay engine).

The oracle re-runs the operators sequentially in plain Python: each FE instance
over exactly the tuples it had consumed before barrier k; FE's outputs routed to
FD instances by key, and consumed by each FD instance channel by channel in
barrier order (everything before barrier 1 from every FE instance, then
everything before barrier 2, ...), which is what tuple consistency (Def. 3.3)
requires across a shuffle. It reads only the recorded θ inputs and the barrier
positions from the run file, never FD's logs.
"""

from __future__ import annotations

import orjson
import pytest
import workloads

from tt.core import values
from tt.core.graph import stable_hash
from tt.store import blobs
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow


def _state(op) -> dict:
    return orjson.loads(values.dumps(op.state()))


def test_snapshots_equal_sequential_oracle(record):
    path = record(workloads.build_keyed, watch="FE", when="row['amount'] > 250")
    reader = RunReader(path)
    fe, fd, t = reader.operator("FE"), reader.operator("FD"), reader.operator("T")

    # θ's inputs, per FE instance, as recorded (the Arrow batches Spark handed to FE)
    inputs = {}
    for i in range(fe.instances):
        rows = []
        for port, src, start, n, codec, data in reader.entry_chunks(fe.id, i):
            assert start == len(rows)
            rows.extend(blobs.unpack_tuples(codec, data))
        inputs[i] = rows
    assert sorted(r["id"] for rows in inputs.values() for r in rows) == list(range(workloads.PAYMENTS))

    interactions = [i.k for i in reader.interactions() if i.k > 0]
    barrier = {i: {k: reader.instances_at(k)[(fe.id, i)].position for k in interactions} for i in inputs}
    mid = [k for k in interactions if 0 < sum(min(barrier[i][k], len(inputs[i])) for i in inputs)
           < workloads.PAYMENTS]
    assert len(mid) >= 3, "the test needs interactions taken while FE was running"

    for k in mid[:: max(1, len(mid) // 6)] + [interactions[-1]]:
        snap = reader.instances_at(k)
        # FE: each instance over its prefix before barrier k
        fe_out = {}  # FE instance -> [(epoch, output)]
        for i, rows in inputs.items():
            op = workloads.Enrich()
            cut = min(barrier[i][k], len(rows))
            outs = []
            for n, row in enumerate(rows[:cut]):
                epoch = sum(1 for kk in interactions if kk <= k and barrier[i][kk] <= n)
                outs.extend((epoch, o) for o in op.process(row))
            fe_out[i] = outs
            assert _state(op) == reader.state(snap[(fe.id, i)].state), (k, "FE", i)
        # FD and T: each FD instance takes its share, epoch by epoch, FE instance by FE instance
        for d in range(fd.instances):
            det, tally = workloads.Detect(), workloads.Tally()
            arriving = [(epoch, i, seq, row)
                        for i, outs in fe_out.items()
                        for seq, (epoch, row) in enumerate(outs)
                        if stable_hash(row["customer"]) % fd.instances == d]
            for epoch, i, seq, row in sorted(arriving, key=lambda x: x[:3]):
                for out in det.process(row):
                    if not out["fraud"]:
                        list(tally.process(out))
            assert _state(det) == reader.state(snap[(fd.id, d)].state), (k, "FD", d)
            assert _state(tally) == reader.state(snap[(t.id, d)].state), (k, "T", d)

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


def test_states_that_change_to_equal_but_different_values_are_kept_exactly(record, capsys):
    """`1` → `True` and `0.0` → `-0.0` are changes, though `==` says they are not: the stored
    snapshots (state deltas), the checkpoints that jumps restore (checkpoint deltas) and the
    last-change search keep them.
    The oracle runs Flags over each instance's recorded input in plain Python; states are
    compared as JSON bytes, which tell `true` from `1` and `-0.0` from `0.0`."""
    from tt.cli.main import main
    from tt.core.scopes import TupleRef
    from tt.replay.session import DebugSession
    from tt.replay.verify import verify

    path = record(workloads.build_flags, watch="FL", when="row['id'] % 97 == 0")
    reader = RunReader(path)
    fl = reader.operator("FL")
    inputs = {}
    for i in range(fl.instances):
        rows = []
        for port, src, start, n, codec, data in reader.entry_chunks(fl.id, i):
            rows.extend(blobs.unpack_tuples(codec, data))
        inputs[i] = rows
    interactions = [i.k for i in reader.interactions() if i.k > 0]
    assert len(interactions) >= 10

    def exact(state) -> bytes:
        return orjson.dumps(state, option=orjson.OPT_SORT_KEYS)

    want = {}
    for i, rows in inputs.items():
        for k in interactions:
            op = workloads.Flags()
            for row in rows[:reader.instances_at(k)[(fl.id, i)].position]:
                list(op.process(row))
            want[(k, i)] = _state(op)
            assert exact(reader.state(reader.instances_at(k)[(fl.id, i)].state)) == exact(want[(k, i)]), (k, i)
    flips = {exact(w["flag"]) for w in want.values()}
    assert any(b"true" in f and b":1" in f for f in flips), "some customers at 1 and some at True"
    assert {exact(w["sign"]) for w in want.values()} == {b"0.0", b"-0.0"}, "both signs seen at interactions"
    reader.close()

    # checkpoints at (nearly) every interaction: jumps restore chains of checkpoint deltas
    assert main(["checkpoint", str(path), "--tau", "1ms", "--json"]) == 0
    capsys.readouterr()
    reader = RunReader(path)
    assert {kind for (kind,) in reader.conn.execute("SELECT kind FROM checkpoints")} >= {"full", "delta"}
    assert all(r["ok"] for r in verify(reader))
    reader.close()
    s = DebugSession(path)
    for k in [interactions[-1], *interactions[::-1]]:   # backwards: every jump restores a checkpoint
        s.jump(k)
        for i in inputs:
            assert exact(s.state(f"FL:{i}")) == exact(want[(k, i)]), (k, i)

    # the last change of a flag is its 1 → True (a customer's second payment), of the sign its
    # last flip between 0.0 and -0.0
    rows = inputs[0]
    customer = rows[0]["customer"]
    second = [n for n, r in enumerate(rows) if r["customer"] == customer][1]
    signs = [exact(-0.0 if round(r["amount"] * 100) % 2 else 0.0) for r in rows]
    flip = max(n for n in range(len(rows)) if signs[n] != (signs[n - 1] if n else b"0.0"))
    for field, position in ((f"flag.{customer}", second), ("sign", flip)):
        s.jump(interactions[-1])
        result = s.last_change("FL:0", field)
        assert result.stopped_at == TupleRef(fl.id, 0, position), (field, result)

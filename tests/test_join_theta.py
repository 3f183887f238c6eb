"""θ on either input of a join whose inputs are DataFrame sources (issue 10, item 1).

Spark computes both sources inside the task set that unions them before the
shuffle into the join, the second one's partitions after the first one's: θ on
the second input must still have one instance per partition of its own input,
every interaction must be complete, replay must reproduce every state, and the
end state must be what the input data says (an oracle in plain Python).
"""

from __future__ import annotations

import pytest
import workloads

from tt.cli.main import main as tt_main
from tt.replay.verify import verify
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow

P = 4  # partitions of each source DataFrame


def _merged(reader, snap, name):
    op = reader.operator(name)
    return [reader.state(snap[(op.id, i)].state) for i in range(op.instances)]


def _add(dicts):
    out = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def _check(path, theta, *, self_join=False, instances=P):
    expected = workloads.expect_ledger(self_join=self_join)
    reader = RunReader(path)
    try:
        assert reader.status == "complete"
        assert reader.theta.name == theta
        op = reader.operator(theta)
        assert op.instances == instances, f"θ has {op.instances} instances, its input {instances} partitions"
        assert sorted(p for s, p in reader.visible if s == op.stage) == list(range(instances))
        ints = reader.interactions()
        assert len(ints) >= 3
        assert [i.k for i in ints] == [i.k for i in reader.interactions_all], "every interaction is complete"
        results = verify(reader)
        assert results and all(r["ok"] for r in results), [r for r in results if not r["ok"]][:1]
        assert len(results) == len(ints)

        end = reader.instances_at(ints[-1].k)
        assert ints[-1].trigger == "end"
        post = _merged(reader, end, "POST")
        assert _add(s["balances"] for s in post) == expected["balances"]
        assert sum(s["posted"] for s in post) == expected["posted"]
        if reader.operator("VAL").id in {o for o, _ in end}:
            val = _merged(reader, end, "VAL")
            assert _add(s["per_account"] for s in val) == expected["per_account"]
            assert sum(s["cents"] for s in val) == expected["cents"]
            assert all(s["per_account"] for s in val), "every θ instance consumed its own partition"
        if not self_join and reader.operator("OPEN").id in {o for o, _ in end}:
            assert _add(s["opened"] for s in _merged(reader, end, "OPEN")) == expected["opened"]
    finally:
        reader.close()
    assert tt_main(["verify", str(path)]) == 0
    return expected


def test_theta_on_the_second_input_of_a_join(record):
    path = record(workloads.build_ledger, watch="VAL", when="row['cents'] > 99_000")
    expected = _check(path, "VAL")
    assert sorted(r["tx"] for r in record.result["S"]) == expected["tx_ids"]


def test_theta_on_the_first_input_of_a_join(record):
    path = record(workloads.build_ledger, watch="OPEN", when="row['n'] % 7 == 3")
    expected = _check(path, "OPEN")
    assert sorted(r["tx"] for r in record.result["S"]) == expected["tx_ids"]


def test_theta_on_a_dataframe_joined_with_itself(record):
    path = record(workloads.build_ledger_self_join, watch="VAL", when="row['cents'] > 99_000")
    expected = _check(path, "VAL", self_join=True)
    assert sorted(r["tx"] for r in record.result["S"]) == expected["tx_ids"]


def test_theta_on_a_keyed_stage_feeding_the_second_input(record):
    # the union before the join computes both keyed stages: VAL's 3 partitions follow OPEN's 2
    path = record(workloads.build_ledger_keyed, watch="VAL", when="row['cents'] > 99_000")
    expected = _check(path, "VAL", instances=3)
    assert sorted(r["tx"] for r in record.result["S"]) == expected["tx_ids"]

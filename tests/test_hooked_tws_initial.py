"""StatefulProcessors given an `initialState`, recorded through the hooks (batch, both APIs).

`tests/jobs/hooked_tws_initial.py` starts customers c1..c5 with a balance and adds
payments; `handleInitialState` is a unit of its own (`("initial", key, times, frame)`).
The oracle is pandas over the job's definition of its rows.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import each_step, record_on_and_off

from tt.core import values
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_tws_initial.py"
ROWS = 60


def balances() -> dict:
    """Each customer's (amount, payments) at the end: the initial balance plus the payments."""
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["customer"] = "c" + (pdf["id"] % 5).astype(str)
    pdf["amount"] = (pdf["id"] % 7).astype(float)
    out = {f"c{i}": (100.0 * i, 0) for i in range(1, 6)}
    for c, g in pdf.groupby("customer"):
        start = out.get(c, (0.0, 0))[0]
        out[c] = (start + float(g["amount"].sum()), len(g))
    return out


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    return record_on_and_off(JOB, tmp_path_factory.mktemp("hooked_tws_initial"), [str(ROWS)])


def test_recording_does_not_change_the_output(recorded):
    _, on, off = recorded
    assert on == off
    want = sorted([c, a, n] for c, (a, n) in balances().items() if n)   # c5 has no payments: no row
    assert on["pandas"] == want and on["row"] == want


def test_the_end_states_equal_the_pandas_oracle(recorded):
    reader = RunReader(recorded[0])
    names = {o.id: o.name for o in reader.operators}
    merged: dict = {}
    opened: dict = {}
    for (op, i), at in reader.instances_at(reader.interactions()[-1].k).items():
        if names[op] in ("Opening", "RowOpening"):
            state = values.decode(reader.state(at.state))
            merged.setdefault(names[op], {}).update(state["balance"])
            opened[names[op]] = opened.get(names[op], 0) + state["opened"]
    reader.close()
    assert merged == {"Opening": balances(), "RowOpening": balances()}
    assert opened == {"Opening": 5, "RowOpening": 5}


def test_replay_steps_over_each_initial_state(recorded, capsys):
    """Stepping in a replay without Spark: right after a key's `initial` unit, its balance is
    the initial one; `tt verify` passes."""
    from tt.cli.main import main

    assert main(["verify", str(recorded[0])]) == 0
    assert "every replayed state equals the recorded one" in capsys.readouterr().out
    session = DebugSession(recorded[0])
    seen = []
    for _, unit, state in each_step(session, "Opening"):
        if unit is not None and unit[0] == "initial":
            key = unit[1][0]
            assert state["balance"][key] == (100.0 * int(key[1:]), 0)
            seen.append(key)
    assert sorted(seen) == [f"c{i}" for i in range(1, 6)]
    session.reader.close()

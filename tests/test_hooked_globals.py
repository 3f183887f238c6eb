"""Module globals a hooked function assigns, and the instance of a method bound through
`functools.partial`, are its state (`tests/jobs/hooked_globals.py`).

A function that loads a model once (`global MODEL`) and counts its batches (`global BATCHES`)
showed no state at all: the debugger had nothing to show and `tt verify` nothing to compare.
Checked here: the output recorded and not, and against pandas; `tt verify`; the globals after
each batch in a replay, against the batches the data makes; globals it only reads are not
state; and an operator recorded before shows none (a run's states stay what it recorded).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import each_step, record_on_and_off, verified

from tt.core import hooked
from tt.replay.session import DebugSession

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_globals.py"
ROWS, BATCH = 80, 9
RATES = {"c0": 1.0, "c1": 1.5}


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    return record_on_and_off(JOB, tmp_path_factory.mktemp("globals"))


def test_recording_does_not_change_the_output(recorded):
    _, on, off = recorded
    assert on == off
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["score"] = ((pdf["id"] * 7) % 11) * (pdf["id"] % 2).map({0: RATES["c0"], 1: RATES["c1"]})
    pdf["batch"] = (pdf["id"] % (ROWS // 2)) // BATCH + 1   # two partitions of 40 rows, in batches of 9
    assert on["scores"] == [[i, s, b] for i, s, b in zip(pdf["id"], pdf["score"], pdf["batch"])]
    per_partition = [min(BATCH * n, ROWS // 2) * 10 for n in range(1, -(-(ROWS // 2) // BATCH) + 1)]
    assert on["tallies"] == sorted(per_partition * 2)


def test_verify_passes(recorded, capsys):
    verified(recorded[0], capsys)


def test_the_globals_it_assigns_are_its_state_after_each_batch(recorded):
    session = DebugSession(recorded[0])
    batches: dict[int, int] = {}
    for i, unit, state in each_step(session, "score"):
        if unit is None:
            continue
        batches[i] = batches.get(i, 0) + 1
        assert state["globals"] == {"MODEL": {"weights": RATES, "loaded": 1}, "BATCHES": batches[i]}
    session.reader.close()
    assert sorted(batches.values()) == [-(-(ROWS // 2) // BATCH)] * 2


def test_a_method_bound_through_partial_is_named_and_shows_its_instance(recorded):
    """`mapInPandas(partial(Tally().run, scale=10))`: the operator is `run` (it was `partial`), and
    its state the instance's `rows` (it was `{}`), the rows it has seen, batch after batch."""
    session = DebugSession(recorded[0])
    rows: dict[int, int] = {}
    for i, unit, state in each_step(session, "run"):
        if unit is not None:
            rows[i] = rows.get(i, 0) + len(unit)
            assert state["rows"] == rows[i]
    session.reader.close()
    assert sorted(rows.values()) == [ROWS // 2] * 2


def test_a_function_recorded_before_shows_no_globals():
    def counting(rows):
        global COUNTED
        for r in rows:
            COUNTED = r
            yield r

    op = hooked.operator_for(counting, "mapInPandas", "x.py:1")
    globals()["COUNTED"] = 3
    assert op.state() == {"globals": {"COUNTED": 3}}
    op.state_version = 0   # as an operator pickled by a tt before this one unpickles
    assert op.state() == {}

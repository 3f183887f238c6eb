"""Module globals a hooked function (or a StatefulProcessor's methods) assigns, and the instance
of a method bound through `functools.partial`, are its state (`tests/jobs/hooked_globals.py`).

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


def test_a_processor_shows_the_global_its_methods_assign(recorded):
    """`Largest` keeps the largest amount in `global LARGEST`: after each customer's rows (one
    task: one shuffle partition), the largest of that customer's and the ones before."""
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["customer"] = "c" + (pdf["id"] % 2).astype(str)
    pdf["amount"] = ((pdf["id"] * 7) % 11).astype(float)
    session = DebugSession(recorded[0])
    largest, keys = 0.0, []
    for _, unit, state in each_step(session, "Largest"):
        if unit is not None and unit[0] in ("rows", "one_row"):
            keys.append(unit[1][0])
        if unit is not None and unit[0] in ("rows_end", "one_row"):
            largest = max(largest, float(pdf[pdf["customer"] == keys[-1]]["amount"].max()))
            assert state["globals"] == {"LARGEST": largest}
    session.reader.close()
    assert sorted(keys) == ["c0", "c1"]
    assert recorded[1]["largest"] == sorted([c, float(pdf[pdf["customer"].isin(keys[:keys.index(c) + 1])]["amount"].max())]
                                            for c in keys)


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


def test_the_globals_of_a_class_are_those_its_methods_assign():
    """A UDTF is handed over as its class, a processor or a callable as an instance: every method
    of their classes counts, PySpark's own base classes aside."""
    class Handler:
        def eval(self, row):
            global HANDLED
            HANDLED = row

        def _helper(self):
            global HELPED
            HELPED = 1

    globals().update(HANDLED=7, HELPED=2)
    assert hooked.assigned_globals(Handler) == hooked.assigned_globals(Handler()) == {"HANDLED": 7, "HELPED": 2}
    assert hooked.assigned_globals(Handler().eval) == {"HANDLED": 7}

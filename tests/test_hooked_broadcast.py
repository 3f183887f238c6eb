"""Functions that read a broadcast variable, recorded through the hooks (`tests/jobs/hooked_broadcast.py`).

A replay has no executor to load a broadcast's value from: `tt verify` stopped with PySpark's
"Broadcast variable 0 not loaded". The value now travels with each operator that uses it
(core/shared_variables.py). Checked here: the job's output recorded and not, and against pandas;
`tt verify`; and each operator's state, stepped in a replay without Spark, against what the
rates and the data say.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import each_step, record_on_and_off, verified

from tt.replay.session import DebugSession

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_broadcast.py"
ROWS = 90
RATES = {f"c{i}": 1.0 + i / 4 for i in range(3)}


def payments() -> pd.DataFrame:
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["customer"] = "c" + (pdf["id"] % 3).astype(str)
    pdf["amount"] = ((pdf["id"] * 13) % 29).astype(float)
    pdf["value"] = pdf["amount"] * pdf["customer"].map(RATES)
    return pdf


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    return record_on_and_off(JOB, tmp_path_factory.mktemp("broadcast"))


def test_recording_does_not_change_the_output(recorded):
    _, on, off = recorded
    assert on == off
    pdf = payments()
    assert on["pandas"] == [[i, v] for i, v in zip(pdf["id"], pdf["value"])]
    assert on["processor"] == [[c, v] for c, v in pdf.groupby("customer")["value"].sum().items()]
    halves = [pdf.iloc[:ROWS // 2], pdf.iloc[ROWS // 2:]]   # spark.range's two partitions
    assert on["rdd"] == sorted([i, t] for half in halves for i, t in zip(half["id"], half["value"].cumsum()))


def test_verify_passes(recorded, capsys):
    verified(recorded[0], capsys)


def test_a_replay_reads_the_broadcast_as_the_executors_did(recorded):
    """Step every unit of the generator and of the processor: the generator's running total and
    the processor's ValueState per customer are what the rates make of the data."""
    pdf = payments()
    session = DebugSession(recorded[0])
    totals: dict[int, float] = {}
    for i, unit, state in each_step(session, "rated"):
        if unit is not None:
            totals[i] = totals.get(i, 0.0) + unit.amount * RATES[unit.customer]
            assert state["locals"]["total"] == totals[i]
    assert sorted(totals.values()) == sorted(h["value"].sum() for h in (pdf.iloc[:ROWS // 2], pdf.iloc[ROWS // 2:]))
    want = pdf.groupby("customer")["value"].sum().to_dict()
    seen = set()
    for _, unit, state in each_step(session, "Rated"):
        assert state["rates"] == "<Broadcast>"
        if unit is not None and unit[0] in ("one_row", "rows_end"):
            seen |= {c for c in state["total"]}
            assert all(state["total"][c] == want[c] for c in state["total"])
    assert seen == set(want)
    session.reader.close()


def test_tt_pickles_a_broadcast_with_its_value_on_the_driver_and_by_its_id_in_an_executor(spark, tmp_path):
    """What an operator's pickle holds of a broadcast (core/shared_variables.py): the driver's, its
    value; an executor's (a checkpoint taken there), its id, served from the value an operator
    of the run brought, and one clear line where none did."""
    import pickle

    from pyspark.core.broadcast import Broadcast, _broadcastRegistry

    from tt.core import code_pickle, shared_variables as broadcasts
    from tt.core.errors import RunFileError

    bc = spark.sparkContext.broadcast({"c0": 2.5})
    replayed = code_pickle.loads(code_pickle.dumps(lambda k: bc.value[k]), "a test function")
    assert replayed("c0") == 2.5 and type(replayed.__closure__[0].cell_contents) is broadcasts.RecordedBroadcast

    path = tmp_path / "broadcast"
    path.write_bytes(pickle.dumps({"c1": 4.0}))
    in_executor = Broadcast(path=str(path))   # as PySpark's worker loads one
    _broadcastRegistry[987654] = in_executor
    try:
        data = code_pickle.dumps({"rates": in_executor})
    finally:
        del _broadcastRegistry[987654]
    with pytest.raises(RunFileError, match="broadcast variable 987654 is used by a checkpoint"):
        pickle.loads(data)
    broadcasts.recorded(987654, {"c1": 4.0})   # (what the operator's own pickle does first)
    assert pickle.loads(data)["rates"].value == {"c1": 4.0}

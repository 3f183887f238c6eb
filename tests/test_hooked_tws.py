"""StatefulProcessors of an unmodified PySpark job (`transformWithStateInPandas`,
`transformWithState`) over a batch DataFrame, recorded through the hooks.

`tests/jobs/hooked_tws.py` is recorded as `tt record` does it, then checked against its
output with recording off, `tt verify`, and an oracle computed with pandas from the
data's definition, which reads none of tt's logs: the state variables each processor
holds per key (ValueState, ListState, MapState), the timer it registered, and what the
replay shows at every key's end. Which partition a key lands in is Spark's choice, so
the oracle compares what the instances hold together.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import each_step, post_mortem, record_on_and_off

from tt.core import values
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_tws.py"
ROWS = 120


def payments() -> pd.DataFrame:
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["customer"] = "c" + (pdf["id"] % 5).astype(str)
    pdf.loc[pdf["id"] == 2, "customer"] = "c5"   # one payment: one element for each processor
    pdf["amount"] = ((pdf["id"] * 37) % 101).astype(float)
    pdf["kind"] = ["card" if i % 3 == 0 else "cash" for i in pdf["id"]]
    return pdf


def oracle() -> dict:
    """What each processor's state variables hold per customer once its rows are in."""
    pdf = payments()
    by = pdf.groupby("customer")
    return {
        "total": {c: (float(g["amount"].sum()), len(g)) for c, g in by},
        "recent": {c: sorted(g["id"])[-3:] for c, g in by},
        "by_kind": {c: g["kind"].value_counts().to_dict() for c, g in by},
        "high": {c: int((g["amount"] > 50).sum()) for c, g in by},
    }


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, the job's output recorded, its output with recording off)."""
    return record_on_and_off(JOB, tmp_path_factory.mktemp("hooked_tws"))


def _merged(states: list[dict], field: str) -> dict:
    out: dict = {}
    for s in states:
        out.update(s.get(field, {}))
    return out


def test_recording_does_not_change_the_jobs_output(recorded):
    _, on, off = recorded
    assert on == off
    want = oracle()
    assert on["totals"] == [[c, a, -1] for c, (a, _) in sorted(want["total"].items())]
    pdf = payments()
    high = pdf[(pdf["amount"] > 50) & (pdf["customer"] != "c4")]
    assert on["flags"] == sorted([[-1, "c0", "timer"], [-2, "c4", "skipped"]]
                                 + [[int(i), c, "high"] for i, c in zip(high["id"], high["customer"])])


def test_each_processor_is_an_operator_named_by_its_class(recorded):
    reader = RunReader(recorded[0])
    assert {o.name: o.kind for o in reader.operators if o.in_g} == {
        "Totals": "transformWithStateInPandas", "Flags": "transformWithState"}
    assert {n["name"]: n["unit"] for n in reader.plan["nodes"] if "unit" in n} == {"Totals": "chunk", "Flags": "row"}
    reader.close()


def test_the_end_states_equal_the_pandas_oracle(recorded):
    """The state variables per key, as the processors' calls left them, and their own attributes."""
    reader = RunReader(recorded[0])
    names = {o.id: o.name for o in reader.operators}
    by_name: dict[str, list] = {}
    for (op, i), at in reader.instances_at(reader.interactions()[-1].k).items():
        by_name.setdefault(names[op], []).append(values.decode(reader.state(at.state)))
    reader.close()
    want = oracle()
    totals, flags = by_name["Totals"], by_name["Flags"]
    assert _merged(totals, "total") == want["total"]
    assert _merged(totals, "recent") == want["recent"]
    assert _merged(totals, "by_kind") == want["by_kind"]
    assert _merged(flags, "high") == {c: n for c, n in want["high"].items() if c != "c4"}
    assert sum(s["rows"] for s in flags) == ROWS - ROWS // 5   # c4's rows are left unread
    assert sum(s["chunks"] for s in totals) == sum(-(-n // 2) for n in payments()["customer"].value_counts())
    assert all("timers" not in s for s in flags)   # c0's timer fired, and PySpark deleted it


def test_verify_replays_every_interaction(recorded, capsys):
    from tt.cli.main import main

    assert main(["verify", str(recorded[0])]) == 0
    n = len(RunReader(recorded[0]).interactions())
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out


def test_replay_holds_each_keys_oracle_state_when_its_rows_end(recorded):
    """Step over every unit of every Totals instance, in a replay with no Spark: when a key's
    rows end, its ValueState, ListState and MapState hold what pandas computes for it. A
    key of one chunk (c5) is one unit, `one_row`; the others start, take chunks and end."""
    session = DebugSession(recorded[0])
    want, checked, key, kinds = oracle(), [], None, {}
    for _, unit, state in each_step(session, "Totals"):
        if unit is not None and unit[0] in ("rows", "one_row"):
            key = unit[1][0]
            kinds[key] = unit[0]
        if unit is not None and unit[0] in ("rows_end", "one_row"):
            assert state["total"][key] == want["total"][key]
            assert state["recent"][key] == want["recent"][key]
            assert state["by_kind"][key] == want["by_kind"][key]
            checked.append(key)
    assert sorted(checked) == sorted(want["total"])
    assert kinds == {c: "one_row" if c == "c5" else "rows" for c in want["total"]}
    session.reader.close()


def test_a_timer_is_in_the_state_until_it_fires(recorded):
    """Flags registers a timer for c0 after its rows; it fires in the same task, after every
    key, and PySpark deletes it: the replay shows it between the two, and not after."""
    session = DebugSession(recorded[0])
    result = session.run_until("'c0' in Flags.timers")
    assert result.ok, result
    flags = session.reader.operator("Flags")
    holding = [i for i in range(flags.instances)
               if "timers" in session.engine.states()[(flags.id, i)]]
    assert len(holding) == 1
    timers = session.engine.states()[(flags.id, holding[0])]["timers"]
    assert list(timers) == ["c0"] and len(timers["c0"]) == 1
    session.reader.close()


def test_step_back_restores_the_state_variables(recorded):
    session = DebugSession(recorded[0])
    theta = session.reader.theta.id
    session.step_over(session.parse_ref("Totals:0:0"))   # init: the variables exist, empty
    before = session.engine.states()[(theta, 0)]
    assert values.decode(before)["total"] == {} and values.decode(before)["by_kind"] == {}
    for n in range(1, 4):
        session.step_over(session.parse_ref(f"Totals:0:{n}"))
    assert session.engine.states()[(theta, 0)]["total"] != {}
    for _ in range(3):
        session.step_back()
    assert session.engine.states()[(theta, 0)] == before
    session.reader.close()


def test_lineage_chooses_a_pandas_processors_rows_by_their_columns(recorded, capsys):
    """Totals yields a one-row DataFrame per key: `tt lineage --where` names its columns (a
    DataFrame holds where one of its rows does), and the tree shows its rows, which equal the
    pandas oracle's total for the customer; the call that emitted it ran on that customer's rows."""
    import json

    from tt.cli.main import main

    assert main(["lineage", str(recorded[0]), "Totals", "--where", "customer == 'c1'", "--back", "--depth", "1",
                 "--json"]) == 0
    (tree,) = json.loads(capsys.readouterr().out)
    amount, _ = oracle()["total"]["c1"]
    assert tree["tuples"][0]["row"] == [{"customer": "c1", "amount": amount, "n": -1}], tree["tuples"][0]
    keys = {values.decode(t["row"])[1] for t in tree["tuples"][1:] if values.decode(t["row"])[0] == "rows"}
    assert keys == {("c1",)}, tree["tuples"]
    assert main(["lineage", str(recorded[0]), "Totals", "--where", "kind == 'card'", "--back"]) == 2
    assert "their fields: amount, customer, n" in capsys.readouterr().err


@pytest.mark.parametrize("bad, unit_kind", [("c2", "rows"), ("c5", "one_row")])
def test_a_processor_raising_on_one_key_is_debuggable_post_mortem(spark, tmp_path, bad, unit_kind, capsys):
    """Totals raises on one key in handleInputRows (c2, of many chunks; c5, of one): the run
    fails naming it, and the replay stops just before that key's rows, every earlier key of
    its instance complete."""
    session = post_mortem(JOB, [str(tmp_path / "o.json"), str(ROWS), bad], tmp_path / "failed.db",
                          f"raised ValueError: bad customer {bad}", "operator Totals:")
    failure = session.failure
    assert failure.label.startswith("Totals:")
    _, i, position = failure.label.split(":")
    unit = session.engine.instances[(session.reader.theta.id, int(i))].peek()
    assert unit[0] == unit_kind and unit[1][0] == bad
    state = values.decode(session.engine.states()[(session.reader.theta.id, int(i))])
    want = oracle()
    assert bad not in state["total"]
    assert all(v == want["total"][k] for k, v in state["total"].items())
    result = session.step_into(session.parse_ref(failure.label))
    assert result.raised is not None and result.raised["message"] == f"bad customer {bad}"
    session.reader.close()
    from tt.cli.main import main

    assert main(["verify", str(tmp_path / "failed.db")]) == 0   # and the replay fails there, so
    assert (f"the recorded failure reproduces: {failure.label} raises ValueError: bad customer {bad} in replay too"
            in capsys.readouterr().out)

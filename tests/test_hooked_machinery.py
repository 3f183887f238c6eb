"""Operators that keep the process's machinery beside their state (a logger, a lock, a module)
and objects that lead back to themselves, recorded through the hooks (`tests/jobs/hooked_machinery.py`).

Such a state once made the recording fail (a `RecursionError` while encoding a logger, whose
manager holds every logger, or a parent link), and a lock made `tt verify` report a divergence
(its repr names its address, which a replay's lock never shares). Checked here: the job's output
recorded and not, and against pandas; `tt verify`; and the states as the debugger shows them,
against what the data says, with the machinery shown by name and each loop cut where it closes.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import each_step, record_on_and_off, verified

from tt.cli.main import main
from tt.core import values
from tt.recorder.job import record_job
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_machinery.py"
ROWS = 60


def totals() -> dict[str, float]:
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["customer"] = "c" + (pdf["id"] % 4).astype(str)
    pdf["amount"] = ((pdf["id"] * 37) % 101).astype(float)
    return {c: float(a) for c, a in pdf.groupby("customer")["amount"].sum().items()}


@pytest.fixture(scope="module")
def ledger(spark, tmp_path_factory):
    """(run file, output recorded, output not) with θ = the processor."""
    return record_on_and_off(JOB, tmp_path_factory.mktemp("machinery"), [str(ROWS)], watch="Ledger")


@pytest.fixture(scope="module")
def tally(spark, tmp_path_factory):
    """The same with θ = the generator."""
    return record_on_and_off(JOB, tmp_path_factory.mktemp("machinery_tally"), [str(ROWS)], watch="tally")


def test_recording_does_not_change_the_output(ledger, tally):
    for _, on, off in (ledger, tally):
        assert on == off
        assert on["totals"] == [[c, a] for c, a in sorted(totals().items())]
        assert sum(rows for rows, _ in on["batches"]) == ROWS


@pytest.mark.parametrize("which", ["ledger", "tally"])
def test_verify_passes(which, request, capsys):
    verified(request.getfixturevalue(which)[0], capsys)


def test_the_processors_end_state_shows_its_machinery_by_name_and_cuts_the_books_loop(ledger):
    reader = RunReader(ledger[0])
    ledger_id = reader.operator("Ledger").id
    states = [values.decode(reader.state(at.state))
              for (op, _), at in reader.instances_at(reader.interactions()[-1].k).items() if op == ledger_id]
    reader.close()
    entries = [e for s in states for e in s["book"]["entries"]]
    assert {e["customer"]: e["amount"] for e in entries} == totals()
    assert all(e["book"] == "<cycle: Book>" for e in entries)
    for s in states:
        assert s["log"].startswith("<Logger ") and s["lock"] == "<unlocked _thread.lock object>"
        assert s["codec"] == "<module 'json'>"


def test_the_generators_locals_show_its_chain_to_the_last_batch(tally):
    """Step over each batch in a replay: `node` holds the chain up to the root through its
    parents, as deep as the batches seen, and each parent's children lead back (cut)."""
    session = DebugSession(tally[0])
    seen: dict[int, int] = {}
    for i, unit, state in each_step(session, "tally"):
        if unit is None:
            continue
        seen[i] = seen.get(i, 0) + 1
        local = state["locals"]
        assert local["log"] == "<Logger tally>"
        depth, node = 0, local["node"]
        assert node["children"] == []   # the last batch's
        while node["parent"] is not None:
            assert node["parent"]["children"] == ["<cycle: Node>"]   # its one child: this node, on the path
            depth, node = depth + 1, node["parent"]
        assert depth == seen[i] and node["rows"] == 0
        assert local["root"]["children"][0]["parent"] == "<cycle: Node>"
    session.reader.close()
    assert sum(seen.values()) == len(tally[1]["batches"])


def test_a_watched_name_no_operator_has_names_the_jobs_operators(spark, tmp_path, capsys):
    """`--watch` with a name no hooked operator has is known only at the job's end (hooks name
    operators as the job calls them): the warning lists the names it could have been."""
    events: list[tuple[str, dict]] = []
    outcome = record_job(JOB, [str(tmp_path / "out.json"), str(ROWS)], tmp_path / "run.db", watch="Ledgr",
                         on_event=lambda kind, data: events.append((kind, data)))
    assert outcome.status == "complete", outcome.error
    reader = RunReader(tmp_path / "run.db")
    names = [o.name for o in reader.operators if o.in_g]
    warned = [d["message"] for kind, d in events if kind == "warning" and "Ledgr" in d["message"]]
    assert warned == [f"no hooked operator is named 'Ledgr' (the job's: {', '.join(names)}); "
                      f"watched {reader.theta.name} instead"], events
    assert len(names) > 1
    # every hooked function is in G(θ), whichever is θ: `tt inspect` does not call them its downstream
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "run.db")]) == 0
    assert f"(every hooked function is in G(θ): {', '.join(names)})" in capsys.readouterr().out

"""`take(n)` and `first()` of a hooked RDD function (`tests/jobs/hooked_take.py`).

PySpark pulls a partition's outputs through a generator of its own that stops at n and closes
the rest, so the hooked stage never reached its end: its logs and its end snapshot were lost,
the run's end interaction stayed incomplete ("this is a bug in tt"), and `tt verify` said the
run file was damaged. The task now ends where Spark stopped pulling, without END steps
(`StageTask.cut_units`). Checked here: the output recorded and not, and against plain Python
(the function's `finally` ran in both: PySpark closed it); every interaction complete and
`tt verify`; the tuples each function consumed, and its end state, against what `take` pulls.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from plain_jobs import record_on_and_off, verified

from tt.cli.main import main
from tt.core import values
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_take.py"


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    events = []
    run, on, off = record_on_and_off(JOB, tmp_path_factory.mktemp("take"),
                                     on_event=lambda kind, info: events.append((kind, info)))
    return run, on, off, [info["message"] for kind, info in events if kind == "warning"]


def test_the_output_is_the_same_recorded_and_not(recorded):
    _, on, off, _ = recorded
    assert on == off == {"taken": [[x, x + 1] for x in range(5)], "first": 0, "closed": 1}


def test_every_interaction_is_complete_and_verify_passes(recorded, capsys):
    run, _, _, warned = recorded
    assert not [w for w in warned if "incomplete" in w], warned
    reader = RunReader(run)
    try:
        assert [i.trigger for i in reader.interactions()] == ["start", "end"]
    finally:
        reader.close()
    verified(run, capsys)


def test_each_function_consumed_what_take_pulled_and_ends_there(recorded, capsys):
    """`take(5)` pulled five elements of partition 0 through `numbered`, `first()` one through
    `tripled`; no other task ran. The end states are the generator suspended after its fifth."""
    run, *_ = recorded
    assert main(["inspect", str(run), "--json"]) == 0
    import json

    summary = json.loads(capsys.readouterr().out)
    tuples = {o["name"]: o["tuples"] for o in summary["operators"] if o["in_g"]}
    assert tuples == {"numbered": 5, "tripled": 1}
    reader = RunReader(run)
    try:
        op = reader.operator("numbered")
        end = reader.interactions()[-1].k
        (state,) = [values.decode(reader.state(at.state)) for (o, _), at in reader.instances_at(end).items()
                    if o == op.id]
    finally:
        reader.close()
    assert state["locals"] == {"n": 5, "r": 4}

"""An unmodified PySpark job recorded through the hooks (docs/HOOKS.md), on real Spark.

`tests/jobs/hooked_enrich.py` keeps state in a callable class used by
`mapInPandas` and knows nothing of tt. It is recorded the way `tt record` does it
(in-process, beside the suite's SparkSession), then checked against:
its own output with recording off, `tt verify`, and an oracle that computes the
state with pandas from the job's data definition, without reading tt's logs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import record_on_and_off

from tt.recorder.job import record_job
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_enrich.py"
ROWS, PARTITIONS, BATCH = 600, 3, 50
WHEN = "bool((row['amount'] > 99).any())"   # the unit is a batch: `row` is a pandas DataFrame


def oracle(partition: int, batches: int) -> dict:
    """Enrich's state after `batches` batches of `partition`, from the data's definition."""
    lo, hi = partition * ROWS // PARTITIONS, (partition + 1) * ROWS // PARTITIONS
    pdf = pd.DataFrame({"id": range(lo, hi)})
    pdf["customer"] = "c" + (pdf["id"] % 7).astype(str)
    pdf["amount"] = ((pdf["id"] * 37) % 101).astype(float)
    seen = pdf.iloc[: batches * BATCH]
    seen = seen[seen["amount"] > 0]   # a first amount of 0 is not above the default 0
    return {"batches": batches, "highest": seen.groupby("customer")["amount"].max().to_dict()}


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, the job's output recorded, its output with recording off)."""
    return record_on_and_off(JOB, tmp_path_factory.mktemp("hooked"), when=WHEN)


def test_recording_does_not_change_the_jobs_output(recorded):
    _, on, off = recorded
    assert on == off
    assert len(on) > 0   # the job flags something: the comparison is not of two empty lists


def test_the_dag_has_the_hooked_operator(recorded):
    reader = RunReader(recorded[0])
    ops = {o.name: o for o in reader.operators}
    assert ops["Enrich"].kind == "mapInPandas"
    assert ops["Enrich"].instances == PARTITIONS
    assert ops["Enrich"].in_g and reader.theta.name == "Enrich"
    reader.close()


def test_recorded_states_equal_the_pandas_oracle(recorded):
    reader = RunReader(recorded[0])
    theta = reader.theta.id
    ks = [i.k for i in reader.interactions()]
    assert len(ks) > 3   # --when fired on several batches, and the end
    checked = 0
    for k in ks:
        for (op, i), at in reader.instances_at(k).items():
            if op != theta:
                continue
            batches = min(at.position, ROWS // PARTITIONS // BATCH)  # the END step is not a batch
            state = reader.state(at.state)
            assert {"batches": state["batches"], "highest": state["highest"]} == oracle(i, batches), (k, i)
            checked += 1
    reader.close()
    assert checked == len(ks) * PARTITIONS


def test_verify_replays_every_interaction(recorded, capsys):
    from tt.cli.main import main

    assert main(["verify", str(recorded[0])]) == 0
    n = len(RunReader(recorded[0]).interactions())
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out


def test_steps_and_step_back_replay_the_generator_faithfully(recorded):
    """A suspended generator cannot be saved: step back restores it by replaying from the
    partition's start, and the state it shows must be the recorded one again."""
    session = DebugSession(recorded[0])
    reader = session.reader
    theta = reader.theta.id
    k, i, n = next((x.k, i, at.position) for x in reader.interactions()
                   for (op, i), at in reader.instances_at(x.k).items() if op == theta and 0 < at.position < 4)
    session.jump(k)
    before = session.engine.states()
    session.step_over(session.parse_ref(f"Enrich:{i}:{n}"))
    after = session.engine.states()[(theta, i)]
    assert after["batches"] == n + 1 and after["highest"] == oracle(i, n + 1)["highest"]
    session.step_back()
    assert session.engine.states() == before
    session.step_back()   # over the jump: back to the start, replayed again
    session.jump(k)
    assert session.engine.states() == before
    session.reader.close()


def test_hooks_are_removed_after_the_job(recorded):
    """With recording off, nothing is patched: the job runs on PySpark's own method."""
    from pyspark.sql.classic.dataframe import DataFrame
    from pyspark.sql.pandas.map_ops import PandasMapOpsMixin

    assert DataFrame.mapInPandas.__module__ == "pyspark.sql.classic.dataframe"
    assert not hasattr(DataFrame.mapInPandas, "__wrapped__")
    assert PandasMapOpsMixin.mapInPandas.__module__ == "pyspark.sql.pandas.map_ops"


@pytest.fixture(scope="module")
def failed_run(spark, tmp_path_factory):
    """A recording whose Enrich raises on partition 1's batch #2, and how record_job ended."""
    d = tmp_path_factory.mktemp("hooked_failed")
    fail_at = 1 * ROWS // PARTITIONS + 2 * BATCH + 7
    out = d / "failed.db"
    outcome = record_job(JOB, [str(d / "o.json"), str(ROWS), str(PARTITIONS), str(fail_at)], out)
    return out, outcome


def test_a_raising_function_fails_the_run_and_replay_stops_before_its_batch(failed_run):
    """Post-mortem: the run names the operator, partition and batch; replay re-raises there."""
    out, outcome = failed_run
    assert outcome.status == "failed"
    assert "operator Enrich:1 raised ValueError: bad payment" in outcome.error
    # ... and the line of the job that raised (found in the job's text, not in tt's logs)
    line = next(n for n, text in enumerate(JOB.read_text().splitlines(), 1) if "raise ValueError" in text)
    assert f"on input #2 (hooked_enrich.py line {line}, in __call__)" in outcome.error, outcome.error
    session = DebugSession(out)
    failure = session.failure
    assert failure is not None and failure.label == "Enrich:1:2"
    session.goto_failure()
    theta = session.reader.theta.id
    state = session.engine.states()[(theta, 1)]
    assert state["batches"] == 2 and state["highest"] == oracle(1, 2)["highest"]
    session.reader.close()


def test_checkpoints_put_a_hooked_generator_back_by_replay(recorded, tmp_path, capsys):
    """A checkpoint plan never pickles a running generator; jumps from it stay exact. Every
    jump replays the generator from its start: `tt checkpoint` says so where a jump is over τ,
    and does not tighten its plan against it (a plan per round, each measured, on a 3M-row run
    took over 20 minutes to make no jump faster)."""
    import shutil

    from tt.cli.main import main

    run = tmp_path / "ckpt.db"
    shutil.copy(recorded[0], run)
    assert main(["checkpoint", str(run), "--tau", "1ms"]) == 0
    said = capsys.readouterr().out
    assert ("of that jump replays Enrich from the start, as every jump does: no checkpoint holds a generator's "
            "state") in said, said
    assert "plan 2" not in said, said
    reader = RunReader(run)
    theta = reader.theta.id
    assert reader.active_plan()["info"]["replayed"] == [f"{theta}:{i}" for i in range(PARTITIONS)]
    assert main(["verify", str(run)]) == 0
    n = len(RunReader(run).interactions())
    assert f"again from the checkpoints for {n}" in capsys.readouterr().out


def test_a_retried_task_leaves_the_log_of_a_failure_free_run(recorded, tmp_path, capsys):
    """Partition 1's first attempt raises after two batches; Spark retries it. Only the
    retry is kept: same output, states as the oracle's, and verify passes."""
    from tt.cli.main import main

    out = tmp_path / "retried.db"
    outcome = record_job(JOB, [str(tmp_path / "o.json"), str(ROWS), str(PARTITIONS), "-1", "1"], out)
    assert outcome.status == "complete", outcome.error
    assert json.loads((tmp_path / "o.json").read_text()) == recorded[2]
    reader = RunReader(out)
    attempts = reader.conn.execute("SELECT partition, status FROM attempts ORDER BY id").fetchall()
    assert sorted(attempts) == [(0, "committed"), (1, "committed"), (1, "failed"), (2, "committed")]
    end = reader.instances_at(reader.interactions()[-1].k)
    for (op, i), at in end.items():
        state = reader.state(at.state)
        assert {"batches": state["batches"], "highest": state["highest"]} == oracle(i, 4)
    reader.close()
    assert main(["verify", str(out)]) == 0
    assert "every replayed state equals the recorded one" in capsys.readouterr().out


def test_tt_debug_steps_through_the_hooked_batches(recorded):
    """The real app on the hooked run: step over a batch, step into the next, step back twice;
    the state tree shows the oracle's state each time (greenlets on the one engine thread)."""
    from test_tui import answer, drive, keys, message

    from tt.tui.app import DebuggerApp

    reader = RunReader(recorded[0])
    theta = reader.theta.id
    k, i, n = next((x.k, i, at.position) for x in reader.interactions()
                   for (op, i), at in reader.instances_at(x.k).items() if op == theta and at.position == 1)
    reader.close()
    app = DebuggerApp(recorded[0])

    def shown_state() -> dict:
        state = app.shown.states[f"Enrich:{i}"]
        return {"batches": state["batches"], "highest": state["highest"]}

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, str(k))
        assert shown_state() == oracle(i, 1)
        ref = f"Enrich:{i}:1"
        app.selected_ref = app.model.call(lambda s: s.parse_ref(ref))
        await keys(pilot, "n")
        assert message(app).startswith(f"✓ step over {ref}"), message(app)
        assert shown_state() == oracle(i, 2)
        await keys(pilot, "N")
        assert shown_state() == oracle(i, 1)
        # after a jump, N steps back over θ's previous input in the recorded order, which
        # may be any partition's (they ran side by side): one input less, each state exact
        before = app.model.call(lambda s: dict(s.position))
        await keys(pilot, "N")
        after = app.model.call(lambda s: dict(s.position))
        assert sum(before.values()) - sum(after.values()) == 1, (before, after)
        for label, position in after.items():
            state = app.shown.states[label]
            shown = {"batches": state["batches"], "highest": state["highest"]}
            assert shown == oracle(int(label.split(":")[1]), position), label
    drive(app, script, size=(160, 45))


def test_tt_debug_opens_a_failed_hooked_run_before_its_failing_batch(failed_run):
    """The real app, post-mortem on a hooked run: it opens just before the batch that raised,
    with the oracle's state, and `s` re-raises the function's own error there."""
    from test_tui import drive, keys, message

    from tt.tui.app import DebuggerApp

    app = DebuggerApp(failed_run[0])

    async def script(pilot):
        assert "the run failed at Enrich:1:2: ValueError: bad payment" in message(app), message(app)
        assert app.shown.selected_label == "Enrich:1:2"
        state = app.shown.states["Enrich:1"]
        assert {"batches": state["batches"], "highest": state["highest"]} == oracle(1, 2)
        before = app.model.call(lambda s: s.states())
        await keys(pilot, "s")
        assert "Enrich:1:2 raised ValueError: bad payment" in message(app), message(app)
        assert app.model.call(lambda s: s.states()) == before
    drive(app, script, size=(160, 45))


def test_lineage_of_a_field_of_the_hooked_objects_state(recorded, capsys):
    """`Enrich:0.highest.c3 --back`: a hooked function's state was one slot, 'state()', which no
    field could name ("Enrich:0 has no field 'highest'"). Each field is a slot now, a key of one
    traced as the whole field: its writers are the batches that changed `highest`, as the oracle
    computes it from the data, and `batches`' are every batch."""
    from tt.cli.main import main

    run = recorded[0]
    batches = ROWS // PARTITIONS // BATCH
    changed = [b for b in range(batches) if oracle(0, b + 1)["highest"] != oracle(0, b)["highest"]]
    for path, want in (("highest.c3", changed), ("batches", list(range(batches)))):
        capsys.readouterr()
        assert main(["lineage", str(run), f"Enrich:0.{path}", "--back", "--depth", "1", "--json"]) == 0
        (doc,) = json.loads(capsys.readouterr().out)
        got = sorted(int(link["to"].rsplit(":", 1)[1]) for link in doc["links"] if link["kind"] == "state")
        assert got == want, (path, got, want)
        assert {link["state"] for link in doc["links"]} == {f"Enrich:0 {path.split('.')[0]}"}

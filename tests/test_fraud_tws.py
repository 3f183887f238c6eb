"""The StatefulProcessor fraud sample (`sample_runs/fraud_tws/`), recorded unchanged.

The README's section on stateful processors runs this sample from the command line
(tests/test_readme.py); here the same recording is checked against the job's output
with recording off, and the debugger is driven with the README's condition: the state
panel shows the processor's MapState per customer, replayed without Spark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from plain_jobs import printed_on_and_off


ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "sample_runs" / "fraud_tws" / "job.py"
ROWS = 20_000
BOB_YEN_ID = ROWS // 3   # generate.py puts Bob's ¥5000 a third of the way in
CONDITION = "'Bob' in FraudDetector.blacklist"


@pytest.fixture(scope="module")
def sample(spark, tmp_path_factory):
    """(run file, what the job printed recorded, what it printed with recording off)."""
    d = tmp_path_factory.mktemp("fraud_tws")
    args = ["--data", str(d / "payments.parquet"), "--rows", str(ROWS)]
    on, off = printed_on_and_off(JOB, args, d / "run.db", spark)
    return d / "run.db", on, off


def test_recording_does_not_change_what_the_job_prints(sample):
    _, on, off = sample
    line = next(x for x in off.splitlines() if x.startswith("approved "))
    assert line in on.splitlines() and "Bob has" in line


def test_tt_debug_runs_until_bob_is_blacklisted_and_back(sample):
    """`c` with the README's condition stops after Bob's ¥5000 payment, whose id the
    MapState now holds under his key; `N` goes back before it."""
    from test_tui import answer, drive, keys, message
    from tt.tui.app import DebuggerApp

    app = DebuggerApp(sample[0])

    def bob() -> list:
        return [s["blacklist"].get("Bob") for label, s in app.shown.states.items()
                if label.startswith("FraudDetector:") and isinstance(s.get("blacklist"), dict)]

    async def script(pilot):
        assert not any(bob()), bob()
        await keys(pilot, "c")
        await answer(pilot, CONDITION)
        assert "stopped after FraudDetector:" in message(app), message(app)
        assert any(b and BOB_YEN_ID in b.values() for b in bob()), bob()
        await keys(pilot, "N")
        assert not any(bob()), bob()
    drive(app, script, size=(160, 45))


def test_verify_replays_the_processor(sample, capsys):
    from tt.cli.main import main

    assert main(["verify", str(sample[0])]) == 0
    assert "every replayed state equals the recorded one" in capsys.readouterr().out


def test_lineage_chooses_the_processors_rows_by_their_fields(sample, capsys):
    """The processor yields `Row(id=..., customer=..., ...)`: --where names their fields (as it
    does a dict row's), and the tree shows them by name, its input rows too. Bob's first
    "Fraud" row is his ¥5000 payment (generate.py puts it a third of the way in), made from
    that payment's row."""
    import json

    from tt.cli.main import main

    where = "customer == 'Bob' and label == 'Fraud'"
    assert main(["lineage", str(sample[0]), "FraudDetector", "--where", where, "--back", "--limit", "1",
                 "--depth", "1", "--json"]) == 0
    (tree,) = json.loads(capsys.readouterr().out)
    rows = [t["row"] for t in tree["tuples"]]
    assert rows[0]["customer"] == "Bob" and rows[0]["label"] == "Fraud" and rows[0]["id"] == BOB_YEN_ID, rows[0]
    units = [r["$tuple"] for r in rows[1:] if isinstance(r, dict) and "$tuple" in r]
    payments = [u[1] for u in units if u[0] == "row"]   # ("row", Row(...)): one row a step
    assert {"id": BOB_YEN_ID, "customer": "Bob", "amount": "¥5000"} in [
        {k: p.get(k) for k in ("id", "customer", "amount")} for p in payments], units

    assert main(["lineage", str(sample[0]), "FraudDetector", "--where", "merchant == 'm1'", "--back"]) == 2
    err = capsys.readouterr().err
    assert "their fields: amount, customer, id, label, usd" in err, err


def test_replay_shows_the_rows_handed_to_the_processor_by_their_fields(sample, capsys):
    """The processor is handed a `Row` per payment: `tt replay` (as the debugger) shows it by
    its fields, not as a bare tuple."""
    from tt.cli.main import main

    assert main(["replay", str(sample[0]), "--run-until", CONDITION]) == 0
    out = capsys.readouterr().out
    assert f"('row', {{id: {BOB_YEN_ID}, customer: 'Bob', amount: '¥5000', merchant: " in out, out


def test_the_when_example_for_a_processor_takes_bobs_steps(spark, tmp_path):
    """`tt record --help`'s `row['amount'] > 1000` is a Dataflow's row: a StatefulProcessor's
    `--when` sees a key's step. The example its warning gives (`WHEN_ROWS`) takes an interaction
    after each of Bob's steps and of no one else's."""
    from tt.core.hooked import WHEN_ROWS
    from tt.recorder.job import record_job
    from tt.store.reader import RunReader

    example = WHEN_ROWS["transformWithState"].rsplit("e.g. ", 1)[1].strip('"')
    assert example == "row[0] in ('one_row', 'rows') and row[1] == ('Bob',)"
    run = tmp_path / "when.db"
    args = ["--data", str(tmp_path / "payments.parquet"), "--rows", "2000"]
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        outcome = record_job(JOB, args, run, when=example)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    assert outcome.status == "complete", outcome.error
    reader = RunReader(run)
    try:
        taken = [i.detail["row"] for i in reader.interactions() if i.trigger == "condition"]
    finally:
        reader.close()
    assert taken and all(row.startswith(("('one_row', ('Bob',)", "('rows', ('Bob',)")) for row in taken), taken

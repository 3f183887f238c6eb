"""The plain PySpark fraud sample (`sample_runs/fraud_pyspark/`), recorded unchanged.

The README's section on plain PySpark jobs runs this sample from the command line
(tests/test_readme.py); here the same recording is checked against the job's output
with recording off, and the debugger is driven with the README's condition.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from plain_jobs import printed_on_and_off


ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "sample_runs" / "fraud_pyspark" / "job.py"
ROWS = 20_000
CONDITION = "FeatureEnrichment.highest.get('Bob', 0) > 2000"


@pytest.fixture(scope="module")
def sample(spark, tmp_path_factory):
    """(run file, what the job printed recorded, what it printed with recording off)."""
    d = tmp_path_factory.mktemp("fraud_pyspark")
    args = ["--data", str(d / "payments.parquet"), "--rows", str(ROWS)]
    on, off = printed_on_and_off(JOB, args, d / "run.db", spark)
    return d / "run.db", on, off


def test_recording_does_not_change_what_the_job_prints(sample):
    _, on, off = sample
    line = next(x for x in off.splitlines() if x.startswith("approved "))
    assert line in on.splitlines()
    assert "Bob has" in line


def test_tt_debug_runs_until_the_enrichment_reads_the_yen_as_dollars(sample):
    """The README's story in the real app: `c` with its condition stops after the batch in
    which FeatureEnrichment read Bob's ¥5000 as $5,000; `N` goes back before it."""
    from test_tui import answer, drive, keys, message

    from tt.tui.app import DebuggerApp

    app = DebuggerApp(sample[0])

    def bob() -> list:
        return [s["highest"].get("Bob") for label, s in app.shown.states.items()
                if label.startswith("FeatureEnrichment:")]

    async def script(pilot):
        assert all(v is None for v in bob())
        await keys(pilot, "c")
        await answer(pilot, CONDITION)
        assert "stopped after FeatureEnrichment:" in message(app), message(app)
        assert 5000.0 in bob(), bob()
        await keys(pilot, "N")
        assert 5000.0 not in bob(), bob()
    drive(app, script, size=(160, 45))


def test_the_dag_shows_what_spark_does_between_the_two_functions(sample):
    """An opaque edge from FeatureEnrichment to detect's input, labelled from Spark's plan
    (groupBy("customer") shuffles), in the run file, `tt inspect` and the debugger's DAG."""
    from test_tui import drive

    from tt.cli.main import main
    from tt.store.reader import RunReader
    from tt.tui.widgets.dag_view import DagView

    reader = RunReader(sample[0])
    names = {o.id: o.name for o in reader.operators}
    edges = [(names[e["src"]], names[e["dst"]], e["label"]) for e in reader.plan["spark_edges"]]
    reader.close()
    assert edges == [("FeatureEnrichment", "detect.in", "shuffle by customer")]

    from tt.tui.app import DebuggerApp

    app = DebuggerApp(sample[0])

    async def script(pilot):
        text = app.query_one(DagView).render_text()
        assert "[FeatureEnrichment θ]╌╌▶ detect.in" in text and "Spark: shuffle by customer" in text, text
    drive(app, script, size=(160, 45))
    assert main(["inspect", str(sample[0])]) == 0

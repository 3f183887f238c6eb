"""A hooked function that Spark runs again over a partition it already ran
(`tests/jobs/hooked_rerun.py`: a second action on the same RDD, without `persist()`).

tt records the first run of each partition, and a later one runs in shadow. A later run that
differed (its input file rewritten, `take(3)` before a `collect()`, random draws, which tt logs
only in the run it records) was not said: the collected rows came from a run that `tt debug`
does not replay, and `tt verify` said "verified". Now a shadow hashes its states at the
recorded run's barriers and its end, and the recorder says where it ended elsewhere
(`Coordinator._compare_rerun`); it digests what it emits (core/output_digest.py), and
`tt verify` compares that with what the replay emits (replay/reruns.py) and exits 1 where they
differ. A later run that does what the first did says nothing, and verify says it compared it.
A later run that goes further than a first one `take()` cut is recorded in its place.
"""

from __future__ import annotations

import json
from pathlib import Path

from plain_jobs import record_on_and_off, replayed_outputs

from tt.cli.main import main
from tt.recorder.job import record_job
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_rerun.py"
AGAIN = "ran again in a later Spark stage (another action on the same RDD or DataFrame, or output lost with an executor)"
ENDED_ELSEWHERE = f"{AGAIN} and ended in another state"
EMITTED_OTHER = f"{AGAIN} and emitted other rows than the run tt"


def _record(mode: str, where: Path, status: str = "complete") -> tuple[Path, list[str], dict | None]:
    """(run file, the recording's warnings, what the job wrote, if it did)."""
    run, events = where / "run.db", []
    outcome = record_job(JOB, [str(where / "on.json"), mode, str(where / "in")], run,
                         on_event=lambda kind, info: events.append((kind, info)))
    assert outcome.status == status, outcome.error
    out = where / "on.json"
    return (run, [info["message"] for kind, info in events if kind == "warning"],
            json.loads(out.read_text()) if out.exists() else None)


def _verify(run: Path, capsys) -> tuple[int, str]:
    code = main(["verify", str(run)])
    return code, capsys.readouterr().out


def test_a_rerun_that_does_what_the_recorded_run_did_says_nothing(spark, tmp_path, capsys):
    run, on, off = record_on_and_off(JOB, tmp_path, ["same", str(tmp_path / "in")])
    assert on == off
    # the oracle, read from no log of tt's: what collect() returned is what the replay emits
    assert replayed_outputs(run) == on["rows"]
    reader = RunReader(run)
    try:
        assert not [w for w in reader.warnings() if "ran again" in w]
        assert len(reader.reruns()) == 2   # count() ran both partitions, collect() again
    finally:
        reader.close()
    code, said = _verify(run, capsys)
    assert code == 0, said
    assert "verified 2 of 2 interactions" in said
    assert "2 runs that Spark made again of recorded tasks emitted what the replay emits" in said
    # `tt verify` digests them in its own pass (replay/outputs.py `watch`): no second replay, the same answer
    from tt.replay.reruns import verify_reruns
    from tt.replay.verify import verify

    reader = RunReader(run)
    try:
        digested: dict = {}
        assert all(r["ok"] for r in verify(reader, outputs=digested))
        assert sorted(i for _, i in digested) == [0, 1]
        assert verify_reruns(reader, digested=digested) == verify_reruns(reader) == {"compared": 2, "differ": []}
    finally:
        reader.close()


def test_a_rerun_over_a_rewritten_file_is_said(spark, tmp_path, capsys):
    run, warned, on = _record("changed", tmp_path)
    (said,) = [w for w in warned if "ran again" in w]
    assert said.startswith("running:") and ENDED_ELSEWHERE in said and "persist() the RDD" in said
    # the recording is count()'s run, over the numbers as first written; collect() read them doubled
    # (split into Spark's partitions where the first file was)
    replayed = replayed_outputs(run)
    assert sorted(x for x, _ in replayed) == list(range(100))
    assert replayed != on["rows"] and {x % 2 for x, _ in on["rows"]} == {0}
    code, out = _verify(run, capsys)
    assert code == 1 and EMITTED_OTHER in out, out


def test_a_run_that_goes_further_than_a_take_replaces_it(spark, tmp_path, capsys):
    """`take(3)` stopped the first run of partition 0 after 3 rows (`StageTask.cut_units`); the
    `collect()` after it ran the partition whole. That run is recorded in place of the cut one
    (`Coordinator._end`), taking the interactions the cut run had taken where it had taken them:
    the debugger shows the rows `collect()` returned, not three of them."""
    run, warned, on = _record("take", tmp_path)
    assert not [w for w in warned if "ran again" in w], warned
    assert len(on["first"]) == 3 and len(on["rows"]) == 100
    assert replayed_outputs(run) == on["rows"]
    reader = RunReader(run)
    try:
        statuses = sorted(st for (st,) in reader.conn.execute("SELECT status FROM attempts"))
        assert statuses == ["committed", "committed", "superseded"]
        assert not reader.reruns()
    finally:
        reader.close()
    code, out = _verify(run, capsys)
    assert code == 0 and "verified 2 of 2 interactions" in out, out


def test_a_rerun_that_draws_other_random_numbers_is_found_by_verify(spark, tmp_path, capsys):
    """`noisy` is a generator: it ends with an empty state after as many inputs, so the recorder
    cannot tell; what it emitted can."""
    run, warned, on = _record("random", tmp_path)
    assert not [w for w in warned if "ran again" in w]
    assert replayed_outputs(run) != on["rows"]
    code, out = _verify(run, capsys)
    assert code == 1 and "noisy:" in out and EMITTED_OTHER in out and "not all the same" in out, out


def test_a_rerun_that_raises_is_said_and_listed_not_replayed(spark, tmp_path, capsys):
    """The job fails with collect()'s ValueError on "thirty", raised in a run tt did not record:
    the post-mortem had nothing to show, and `tt inspect failures` said "no operator failed".
    The shadow now reports its failure (`StageTask._send_failure`), which the run keeps under
    its attempt, never replayed, and says."""
    run, warned, _ = _record("raise", tmp_path, status="failed")
    (said,) = [w for w in warned if "raised" in w]
    assert said.startswith("running:0 raised ValueError: invalid literal for int() with base 10: 'thirty' on its "
                           f"input #30 in a run Spark made again {AGAIN[len('ran again '):]}, which tt did not "
                           "record: the run it recorded did not raise there"), said
    assert main(["inspect", str(run), "failures", "--json"]) == 0
    (failure,) = json.loads(capsys.readouterr().out)
    assert (failure["op"], failure["instance"], failure["position"], failure["row"]) == ("running", 0, 30, "'thirty'")
    assert failure["unrecorded"] and not failure["visible"]
    reader = RunReader(run)
    try:
        assert reader.failure_points() == []   # (nothing for a post-mortem replay to stop at)
    finally:
        reader.close()

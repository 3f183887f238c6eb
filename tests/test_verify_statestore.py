"""`tt verify --statestore`: a streaming run's replayed processor state against Spark's own store.

The streaming job of `tests/test_hooked_tws_stream.py` (`tests/jobs/hooked_tws_stream.py`:
`Balance`, a ValueState and a MapState per customer, one file per micro-batch) is recorded
once; its run notes where the query's checkpoint is, and `tt verify --statestore` reads
Spark's state store there (`statestore` source, with its change feed) and compares it with
the replay at every micro-batch end. The store is made to disagree honestly: `--checkpoint`
points at the checkpoint of another run of the same job on other input (a file holds one
payment more), so every micro-batch's balances differ; tt's logs are never edited.
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from job_settings import spark_settings
from plain_jobs import run_plain
from test_hooked_tws_stream import FILES, JOB, PER_FILE, _record

from tt.cli.main import main
from tt.core import values
from tt.recorder.job import record_job
from tt.recorder.statestore import local_path
from tt.store.reader import RunReader

CUSTOMERS = 4


def balances(batch: int, per_file: int) -> dict:
    """Each customer's (sum, count) once micro-batch `batch` is in, the job's input defined
    as the job defines it (payment i: customer c{i % 4}, amount (i * 37) % 101)."""
    out: dict = {}
    for i in range((batch + 1) * per_file):
        amount, n = out.get(f"c{i % 4}", (0.0, 0))
        out[f"c{i % 4}"] = (amount + float((i * 37) % 101), n + 1)
    return out


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, output recorded, output with recording off, the recorded query's checkpoint)."""
    return _record(tmp_path_factory.mktemp("verify_statestore"))


@pytest.fixture(scope="module")
def other_checkpoint(spark, tmp_path_factory):
    """The checkpoint of the same job run without tt on other input: PER_FILE + 1 payments a file."""
    where = tmp_path_factory.mktemp("verify_statestore_other")
    ckpt = where / "ck_other"
    run_plain(JOB, [str(where / "other.json"), str(where / "in_other"), str(ckpt), str(FILES), str(PER_FILE + 1)])
    assert json.loads((where / "other.json").read_text())["batches"] == FILES
    return ckpt


def _err_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_the_run_notes_where_its_querys_checkpoint_is(recorded):
    run, _, _, ckpt = recorded
    queries = RunReader(run).plan["queries"]
    assert len(queries) == 1
    (query,) = queries.values()
    assert local_path(query["checkpoint"]) == ckpt
    assert query["operators"] == ["Balance"] and query["name"] == f"balances_{ckpt.name}"


def test_it_passes_on_a_good_recording_and_names_the_counts(recorded, capsys):
    run = recorded[0]
    assert main(["verify", "--statestore", str(run)]) == 0
    out = capsys.readouterr().out
    # at each micro-batch end, the batch's two tasks show the four customers between them
    assert f"checked {FILES * CUSTOMERS} keys over {FILES} micro-batches" in out, out
    assert "every replayed value equals the store's" in out
    assert f"its change feed names the keys the replay wrote in each of {FILES} micro-batches" in out
    assert main(["verify", "--statestore", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    store = data["statestore"]
    assert data["ok"] and store["ok"] and store["compared"]
    assert (store["keys"], store["micro_batches"], store["values"]) == (FILES * CUSTOMERS, FILES, 2 * FILES * CUSTOMERS)
    assert store["differences"] == [] and store["change_feed"]["variables"] == 2
    assert store["queries"][0]["operator_ids"] == {"Balance": 0}


def test_a_moved_checkpoint_is_found_with_the_checkpoint_option(recorded, tmp_path, capsys):
    moved = tmp_path / "moved"
    shutil.copytree(recorded[3], moved)
    assert main(["verify", "--statestore", str(recorded[0]), "--checkpoint", str(moved)]) == 0
    assert f"checked {FILES * CUSTOMERS} keys over {FILES} micro-batches" in capsys.readouterr().out


def test_it_fails_naming_the_key_when_the_store_disagrees(recorded, other_checkpoint, capsys):
    run = str(recorded[0])
    assert main(["verify", "--statestore", run, "--checkpoint", str(other_checkpoint), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert not data["ok"] and data["checked"] == data["recorded"]   # the replay itself equals the recording
    first = data["statestore"]["differences"][0]
    key = values.decode(first["key"])
    assert (first["batch"], first["operator"], first["variable"]) == (0, "Balance", "balance")
    assert tuple(values.decode(first["replayed"])) == balances(0, PER_FILE)[key]
    assert tuple(values.decode(first["store"])) == balances(0, PER_FILE + 1)[key]
    assert main(["verify", "--statestore", run, "--checkpoint", str(other_checkpoint)]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if ": statestore: " in line)
    replayed, stored = balances(0, PER_FILE)[key], balances(0, PER_FILE + 1)[key]
    for needle in ("micro-batch 0", "Balance:", f"balance[{key!r}]", f"({replayed[0]}, {replayed[1]})",
                   f"({stored[0]}, {stored[1]})", "Spark's state store has"):
        assert needle in line, (needle, line)


@pytest.fixture(scope="module")
def timed(spark, tmp_path_factory):
    """The job with event-time timers (MODE=timers), recorded, and the checkpoint of the same
    job on the same input run without tt, its timers set a day later: the same balances, other
    timers."""
    where = tmp_path_factory.mktemp("verify_statestore_timers")
    run, on, off, ckpt = _record(where, mode="timers")
    assert on == off
    run_plain(JOB, [str(where / "again.json"), str(where / "in_again"), str(where / "ck_again"), str(FILES),
                    str(PER_FILE), "timers-later"])
    assert json.loads((where / "again.json").read_text()) == on
    return run, ckpt, where / "ck_again"


def test_timers_are_compared_with_the_stores(timed, capsys):
    from tt.recorder.statestore import StateStore

    run, ckpt, _ = timed
    store = StateStore(str(ckpt))
    (op,) = store.operators()
    last = store.timers(op["id"], FILES - 1)   # what the job does, as Spark kept it
    assert sorted(last) == [f"c{c}" for c in range(CUSTOMERS)]
    assert [len(last[f"c{c}"]) for c in range(CUSTOMERS)] == [1, 1, FILES, FILES]
    assert main(["verify", "--statestore", str(run), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["statestore"]
    # each micro-batch's tasks set a timer for each of the four customers: all compared
    assert result["ok"] and (result["timers"], result["micro_batches"]) == (FILES * CUSTOMERS, FILES), result
    assert main(["verify", "--statestore", str(run)]) == 0
    assert f"the timers of {FILES * CUSTOMERS} keys) against Spark's state store" in capsys.readouterr().out


def test_a_store_whose_timers_differ_fails_naming_them(timed, capsys):
    """The other run's balances are the same; its timers are a day later."""
    run, ckpt, other = timed
    assert main(["verify", "--statestore", str(run), "--checkpoint", str(other), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["checked"] == data["recorded"]   # the replay itself equals the recording
    diffs = data["statestore"]["differences"]
    assert diffs and {d["variable"] for d in diffs} == {"timers"}, diffs
    assert {values.decode(d["key"]) for d in diffs if d["batch"] == 0} == {f"c{c}" for c in range(CUSTOMERS)}
    first = diffs[0]
    assert first["replayed"] and first["store"] and not set(first["replayed"]) & set(first["store"])
    assert main(["verify", "--statestore", str(run), "--checkpoint", str(other)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if ": statestore: " in x)
    assert "micro-batch 0" in line and "the timers of " in line and str(first["store"]) in line, line


def test_a_missing_checkpoint_is_one_line(recorded, tmp_path, capsys):
    gone = tmp_path / "gone"
    assert main(["verify", "--statestore", str(recorded[0]), "--checkpoint", str(gone)]) == 1
    lines = _err_lines(capsys)
    assert len(lines) == 1 and str(gone) in lines[0] and "does not exist" in lines[0], lines
    (tmp_path / "empty").mkdir()
    assert main(["verify", "--statestore", str(recorded[0]), "--checkpoint", str(tmp_path / "empty")]) == 1
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "holds no state store" in lines[0], lines
    assert main(["verify", str(recorded[0]), "--checkpoint", str(gone)]) == 2   # --checkpoint needs --statestore
    assert len(_err_lines(capsys)) == 1


def test_without_java_or_pyspark_it_is_one_line(recorded, tmp_path, monkeypatch, capsys):
    from pyspark import SparkContext

    with monkeypatch.context() as m:   # as in a process with no Spark running and no Java installed
        m.setattr(SparkContext, "_active_spark_context", None)
        m.setenv("PATH", str(tmp_path))
        m.delenv("JAVA_HOME", raising=False)
        assert main(["verify", "--statestore", str(recorded[0])]) == 1
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "needs Java" in lines[0], lines
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "pyspark", None)
        assert main(["verify", "--statestore", str(recorded[0])]) == 1
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "needs pyspark" in lines[0], lines


def test_a_batch_run_has_no_streaming_query_to_compare(record, capsys):
    import workloads

    run = record(workloads.build_chain)
    assert main(["verify", "--statestore", str(run)]) == 2
    lines = _err_lines(capsys)
    assert len(lines) == 1 and "no streaming query to compare" in lines[0], lines


def test_the_checkpoint_set_for_the_session_is_found(spark, tmp_path, capsys):
    """A query without its own checkpointLocation keeps its state under
    `spark.sql.streaming.checkpointLocation`/its name: the run notes that root."""
    text = JOB.read_text()
    job = tmp_path / "session_checkpoint_job.py"
    job.write_text(text.replace('.option("checkpointLocation", ckpt)', ""))
    assert job.read_text() != text
    root = tmp_path / "root"
    with spark_settings(spark, {"spark.sql.streaming.checkpointLocation": str(root)}):
        outcome = record_job(job, [str(tmp_path / "on.json"), str(tmp_path / "in"), str(tmp_path / "q"),
                                   str(FILES), str(PER_FILE)], tmp_path / "run.db")
    assert outcome.status == "complete", outcome.error
    (query,) = RunReader(tmp_path / "run.db").plan["queries"].values()
    assert local_path(query["checkpoint"]) == root / "balances_q"
    assert main(["verify", "--statestore", str(tmp_path / "run.db")]) == 0
    assert f"checked {FILES * CUSTOMERS} keys over {FILES} micro-batches" in capsys.readouterr().out


def test_the_statestore_reader_gives_the_views_shape(recorded):
    """recorder/statestore.py on its own: one-column keys and values unwrapped, a map as a dict."""
    from tt.recorder.statestore import StateStore

    store = StateStore(str(recorded[3]))
    (op,) = store.operators()
    assert op["variables"] == {"balance": {"kind": "value", "ttl": False}, "by_kind": {"kind": "map", "ttl": False}}
    assert store.read(op["id"], "balance", FILES - 1, "value") == balances(FILES - 1, PER_FILE)
    kinds = store.read(op["id"], "by_kind", 0, "map")
    assert kinds["c0"] == {"card": 4, "cash": 6}   # payments 0, 4, …, 36: card when i % 3 == 0
    changed = store.changes(op["id"], "balance", 0, FILES - 1)
    assert changed == {b: {f"c{c}" for c in range(CUSTOMERS)} for b in range(FILES)}

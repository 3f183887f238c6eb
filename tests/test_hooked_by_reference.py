"""A hooked `mapInArrow` over a Parquet scan, recorded by reference (issue 15, blobs.REF_BATCH).

`tests/jobs/hooked_parquet.py` is a plain PySpark job: a callable class keeps running
totals per group over the Arrow batches of a filtered Parquet scan. It is recorded twice
over the same files: by reference (each unit stored as its rows' positions) and with
`copy_sources` (the batches Spark handed the function, as before). The copied run is the
oracle for the units: every batch read back through the positions must equal the one
Spark gave, schema and values. The final totals are checked against the files themselves
(pyarrow, no tt log); both runs verify; `tt pack` copies the very batches in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from plain_jobs import record_on_and_off
from test_sources_by_reference import EXACT, ONE_TASK, SPLIT, codecs, verified, write_files
from tt.cli.main import main
from tt.core import values
from tt.recorder.job import record_job
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_parquet.py"
LAYOUTS = {   # name: (files, the job's arguments after DATA_DIR, the job's filter as pyarrow computes it)
    "positions, files split across tasks": (2, SPLIT, lambda t: pa.array(t["id"].to_numpy() % 5 != 0)),
    "counted, several files per task": (3, [EXACT, *ONE_TASK], lambda t: pc.and_(pc.and_(
        pc.not_equal(t["g"], 3), pc.not_equal(t["s"], "")),
        pc.or_(pc.greater_equal(t["id"], 1000), pc.is_in(t["id"], pa.array([7, 70, 700]))))),
}


@pytest.fixture(scope="module", params=list(LAYOUTS))
def pair(request, spark, tmp_path_factory):
    files, args, _ = LAYOUTS[request.param]
    d = tmp_path_factory.mktemp("hooked_by_ref")
    data = write_files(d / "data", files)
    run, on, off = record_on_and_off(JOB, d, [str(data), *args])
    (d / "copied").mkdir()
    copied = d / "copied" / "run.db"
    outcome = record_job(JOB, [str(d / "copied.json"), str(data), *args], copied, copy_sources=True)
    assert outcome.status == "complete", outcome.error
    return request.param, data, run, copied, on, off, json.loads((d / "copied.json").read_text())


def units(run: Path) -> dict:
    """Every unit handed to the hooked function, per (op, instance) channel in order."""
    reader = RunReader(run)
    try:
        out = {}
        for op in reader.operators:
            for i in range(op.instances):
                for rowid, port, src, start, n, codec in reader.entry_index(op.id, i):
                    assert n == 1
                    out.setdefault((op.id, i, port, src), []).extend(reader.entry_tuples(codec, rowid))
        return out
    finally:
        reader.close()


def kept_rows(pair) -> pa.Table:
    """The rows the job's scan keeps, read from the files with pyarrow (no tt code)."""
    name, data, *_ = pair
    table = pq.read_table(data)
    return table.filter(LAYOUTS[name][2](table))


def test_recording_by_reference_changes_nothing_the_job_computes(pair):
    *_, on, off, copied = pair
    assert on == off == copied
    assert len(on) == kept_rows(pair).num_rows


def test_every_unit_read_back_equals_the_batch_spark_gave(pair):
    name, _, run, copied, *_ = pair
    assert codecs(run) == {"ref-batch"} and codecs(copied) == {"arrow-batch"}
    by_ref, oracle = units(run), units(copied)
    assert by_ref.keys() == oracle.keys() and oracle
    for ch, batches in oracle.items():
        assert len(by_ref[ch]) == len(batches) > 0
        for got, want in zip(by_ref[ch], batches):
            assert isinstance(got, pa.RecordBatch)
            assert got.schema.equals(want.schema, check_metadata=True), (name, ch, got.schema, want.schema)
            assert got.equals(want), f"{name}: a unit of channel {ch} differs"
    rows = sum(b.num_rows for bs in by_ref.values() for b in bs)
    assert rows == kept_rows(pair).num_rows


def test_the_final_totals_are_the_files_sums(pair):
    """The replayed state at the last interaction, per group over the instances, against pyarrow's sums."""
    _, _, run, *_ = pair
    reader = RunReader(run)
    try:
        last = reader.interactions()[-1].k
        names = {o.id: o.name for o in reader.operators}
        totals: dict[int, int] = {}
        for (op, i), at in reader.instances_at(last).items():
            if names[op] == "RunningTotals":
                for g, t in values.decode(reader.state(at.state))["totals"].items():
                    totals[g] = totals.get(g, 0) + t
    finally:
        reader.close()
    sums = kept_rows(pair).group_by("g").aggregate([("v", "sum")]).to_pylist()
    assert totals == {r["g"]: r["v_sum"] for r in sums}


def test_both_runs_verify(pair):
    _, _, run, copied, *_ = pair
    for r in (run, copied):
        results = verified(r)
        assert results and all(x["ok"] for x in results), results


def test_the_positions_are_a_small_fraction_of_the_copied_units(pair):
    _, _, run, copied, *_ = pair
    a, b = RunReader(run), RunReader(copied)
    try:
        ref, copy = a.sizes(), b.sizes()
    finally:
        a.close()
        b.close()
    assert ref["recorded_tuples"] == 0 and ref["referenced_rows"] == kept_rows(pair).num_rows
    assert 0 < ref["row_references"] < copy["recorded_tuples"] / 20, (ref, copy)


def test_tt_pack_copies_the_very_batches_in(pair, tmp_path, capsys):
    _, _, run, copied, *_ = pair
    packed = tmp_path / "packed.db"
    assert main(["pack", str(run), "-o", str(packed)]) == 0
    assert f"packed {kept_rows(pair).num_rows:,} rows" in capsys.readouterr().out
    assert codecs(packed) == {"arrow-batch"}
    got, want = units(packed), units(copied)
    assert got.keys() == want.keys()
    assert all(a.equals(b) for ch in want for a, b in zip(got[ch], want[ch], strict=True))
    results = verified(packed)
    assert results and all(x["ok"] for x in results), results


def test_a_coalesce_after_the_function_is_said_not_hidden(spark, tmp_path):
    """Spark runs a coalesced task's input partitions one after the other in one Python worker,
    each a call of the hooked function: tt records the first and says that it did not record the
    others (they are not retries, whose logs a committed attempt makes redundant)."""
    data = write_files(tmp_path / "data", 2)
    events = []
    outcome = record_job(JOB, [str(tmp_path / "out.json"), str(data), *SPLIT, "coalesce=1"], tmp_path / "run.db",
                         on_event=lambda kind, info: events.append((kind, info)))
    assert outcome.status == "complete", outcome.error
    warned = [info["message"] for kind, info in events if kind == "warning"]
    assert warned == ["RunningTotals ran several of its input partitions in one Spark task (a coalesce after it?): "
                      "tt recorded the first one's units, the others ran unrecorded"]
    results = verified(tmp_path / "run.db")
    assert results and all(x["ok"] for x in results), results

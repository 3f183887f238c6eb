"""A hooked `mapInArrow` or `mapInPandas` over a Parquet scan, recorded by reference (issue 15).

`tests/jobs/hooked_parquet.py` is a plain PySpark job: a callable class keeps running
totals per group over the Arrow batches (or pandas DataFrames) of a filtered Parquet scan.
It is recorded twice over the same files: by reference (each unit stored as its rows'
positions, `blobs.REF_BATCH`, `REF_PANDAS`) and with `copy_sources` (the units Spark handed
the function, as before). The copied run is the oracle for the units: every batch read back
through the positions must equal the one Spark gave, schema and values, and every DataFrame
rebuilt by PySpark's conversion the one PySpark built, dtypes and values. The final totals
are checked against the files themselves (pyarrow, no tt log); both runs verify; `tt pack`
copies the very units in. A DataFrame rebuilt otherwise than recorded stops replay.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from plain_jobs import record_on_and_off
from test_sources_by_reference import (EXACT, ONE_TASK, SPLIT, codecs, entry_tuples, verified, write_files,
                                       write_partitioned)
from tt.cli.main import main
from tt.core import values
from tt.recorder.job import record_job
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_parquet.py"


def mod5(t: pa.Table) -> pa.Array:
    """The job's own filter, `id % 5 != 0` (its units keep positions), as pyarrow computes it."""
    return pa.array(t["id"].to_numpy() % 5 != 0)


def exact_rows(t: pa.Table) -> pa.Array:
    """EXACT's filter (its units are counted), as pyarrow computes it."""
    return pc.and_(pc.and_(pc.not_equal(t["g"], 3), pc.not_equal(t["s"], "")),
                   pc.or_(pc.greater_equal(t["id"], 1000), pc.is_in(t["id"], pa.array([7, 70, 700]))))


LAYOUTS = {   # name: (files, the job's arguments after DATA_DIR, the rows its scan keeps)
    "mapInArrow, positions, files split across tasks": (2, SPLIT, mod5),
    "mapInArrow, counted, several files per task": (3, [EXACT, *ONE_TASK], exact_rows),
    "mapInPandas, positions, files split across tasks": (2, ["api=pandas", *SPLIT], mod5),
    "mapInPandas, counted, several files per task": (3, ["api=pandas", "spark.sql.session.timeZone=America/New_York",
                                                         EXACT, *ONE_TASK], exact_rows),
    # `g` read from the directories (`g=3/part-0.parquet`), in the batches Spark hands the function
    "mapInPandas, positions, partitioned by directory": (2, ["api=pandas", *ONE_TASK], mod5),
    "mapInArrow, counted, partitioned by directory": (2, ["filter=v > 20"], lambda t: pc.greater(t["v"], 20)),
}


@pytest.fixture(scope="module", params=list(LAYOUTS))
def pair(request, spark, tmp_path_factory):
    files, args, _ = LAYOUTS[request.param]
    d = tmp_path_factory.mktemp("hooked_by_ref")
    data = (write_partitioned if "partitioned" in request.param else write_files)(d / "data", files)
    run, on, off = record_on_and_off(JOB, d, [str(data), *args])
    (d / "copied").mkdir()
    copied = d / "copied" / "run.db"
    outcome = record_job(JOB, [str(d / "copied.json"), str(data), *args], copied, copy_sources=True)
    assert outcome.status == "complete", outcome.error
    return request.param, data, run, copied, on, off, json.loads((d / "copied.json").read_text())


def units(run: Path) -> dict:
    """Every unit handed to the hooked function, per (op, instance) channel in order, as it is."""
    return entry_tuples(run, as_value=lambda unit: unit)


def kept_rows(pair) -> pa.Table:
    """The rows the job's scan keeps, read from the files with pyarrow (no tt code)."""
    name, data, *_ = pair
    table = pq.read_table(data)
    return table.filter(LAYOUTS[name][2](table))


def test_recording_by_reference_changes_nothing_the_job_computes(pair):
    *_, on, off, copied = pair
    assert on == off == copied
    assert len(on) == kept_rows(pair).num_rows


def test_every_unit_read_back_equals_the_one_spark_gave(pair):
    name, _, run, copied, *_ = pair
    pandas = name.startswith("mapInPandas")
    assert codecs(run) == {"ref-pandas" if pandas else "ref-batch"}
    assert codecs(copied) == {"pandas" if pandas else "arrow-batch"}
    reader = RunReader(run)
    try:   # a unit is one tuple of its operator, however many rows it holds
        assert {n for (n,) in reader.conn.execute("SELECT DISTINCT n FROM entry_chunks")} == {1}
    finally:
        reader.close()
    by_ref, oracle = units(run), units(copied)
    assert by_ref.keys() == oracle.keys() and oracle
    for ch, wanted in oracle.items():
        assert len(by_ref[ch]) == len(wanted) > 0
        for got, want in zip(by_ref[ch], wanted):
            if pandas:   # dtypes and all: nullable ints, zone-less timestamps, decimals and dates as objects
                assert list(got.dtypes) == list(want.dtypes), (name, ch, got.dtypes, want.dtypes)
                pd.testing.assert_frame_equal(got, want, check_exact=True)
            else:
                assert isinstance(got, pa.RecordBatch)
                assert got.schema.equals(want.schema, check_metadata=True), (name, ch, got.schema, want.schema)
                assert got.equals(want), f"{name}: a unit of channel {ch} differs"
    rows = sum(len(u) for us in by_ref.values() for u in us)
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
            if names[op] in ("RunningTotals", "PandasRunningTotals"):
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


def test_tt_pack_copies_the_very_units_in(pair, tmp_path, capsys):
    _, _, run, copied, *_ = pair
    packed = tmp_path / "packed.db"
    assert main(["pack", str(run), "-o", str(packed)]) == 0
    assert f"packed {kept_rows(pair).num_rows:,} rows" in capsys.readouterr().out
    assert codecs(packed) == codecs(copied)
    got, want = units(packed), units(copied)
    assert got.keys() == want.keys()
    assert all(a.equals(b) for ch in want for a, b in zip(got[ch], want[ch], strict=True))   # (frames: dtypes too)
    results = verified(packed)
    assert results and all(x["ok"] for x in results), results


def test_a_coalesce_after_the_function_records_every_input_partition(spark, tmp_path, capsys):
    """Spark runs a coalesced task's input partitions one after the other, each a call of the
    hooked function under the task's partition id: tt records every call, the later ones as
    instances of their own (it used to keep the first call's units and run the others
    unrecorded). A call's partition is not the one its number names in the scan: a task reads
    its first unit back, finds other rows, and copies its units. Against the files (pyarrow, no
    tt log): the recorded units hold every row the scan kept, once, and the replayed end states'
    totals are the files' sums; Spark's own count of the scan's partitions is the instances'."""
    import sys

    sys.path.insert(0, str(JOB.parent))
    from job_settings import spark_settings

    data = write_files(tmp_path / "data", 2)
    events = []
    outcome = record_job(JOB, [str(tmp_path / "out.json"), str(data), *SPLIT, "coalesce=3"], tmp_path / "run.db",
                         on_event=lambda kind, info: events.append((kind, info)))
    assert outcome.status == "complete", outcome.error
    warned = {info["message"] for kind, info in events if kind == "warning"}
    assert warned == {
        "RunningTotals ran several of its input partitions in one Spark task (a coalesce after it?): tt recorded "
        "each as an instance of its own, numbered after the task's partitions",
        "RunningTotals: the rows of a task of its scan were not where the task's partition says (a union or a "
        "coalesce after the call?): that task's units are copied into the run file"}
    assert "arrow-batch" in codecs(tmp_path / "run.db") <= {"ref-batch", "arrow-batch"}
    with spark_settings(spark, dict(a.split("=", 1) for a in SPLIT)):
        scan_partitions = spark.read.parquet(str(data)).filter("id % 5 != 0").rdd.getNumPartitions()
    assert scan_partitions > 3   # (else nothing is coalesced)

    table = pq.read_table(data)
    kept = table.filter(mod5(table))
    recorded = units(tmp_path / "run.db")
    assert len({i for _, i, _, _ in recorded}) == scan_partitions
    ids = [i for us in recorded.values() for u in us for i in u.column("id").to_pylist()]
    assert sorted(ids) == sorted(kept["id"].to_pylist())   # every row the scan kept, once
    reader = RunReader(tmp_path / "run.db")
    try:
        op = reader.operator("RunningTotals")
        assert op.instances == scan_partitions
        totals: dict[int, int] = {}
        for (o, _), at in reader.instances_at(reader.interactions()[-1].k).items():
            if o == op.id:
                for g, t in values.decode(reader.state(at.state))["totals"].items():
                    totals[g] = totals.get(g, 0) + t
    finally:
        reader.close()
    assert totals == {r["g"]: r["v_sum"] for r in kept.group_by("g").aggregate([("v", "sum")]).to_pylist()}
    results = verified(tmp_path / "run.db")
    assert results and all(x["ok"] for x in results), results
    assert results[-1]["instances"] >= scan_partitions   # (the end: every instance compared)
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "run.db")]) == 0   # what it verified, and what it could not
    assert sorted(capsys.readouterr().out.splitlines()[1:]) == sorted(
        [f"{tmp_path / 'run.db'}: the recording warned: {w}" for w in warned]
        + [f"{tmp_path / 'run.db'}: what the hooked functions emitted ({scan_partitions} instances) is what the "
           f"replay emits"])
    assert main(["inspect", str(tmp_path / "run.db")]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert all(f"warning  {w}" in shown for w in warned)


def test_a_union_of_two_hooked_calls_records_both_and_replays(spark, tmp_path):
    """The job's output as the union of two calls over the same files (the rows its filter keeps,
    and those it leaves out): Spark numbers the second call's tasks after the first's, so its
    scan has no partition of their numbers. Their units are copied, and the recording says so
    (it copied them silently); the first call's stay references. Both calls are recorded, the
    run verifies, and recording does not change the output."""
    data = write_files(tmp_path / "data", 2)
    events = []
    run, on, off = record_on_and_off(JOB, tmp_path, [str(data), *SPLIT, "union=1"],
                                     on_event=lambda kind, info: events.append((kind, info)))
    assert on == off
    table = pq.read_table(data)
    assert sorted(r["id"] for r in on) == sorted(table["id"].to_pylist())   # every row, once
    reader = RunReader(run)
    ops = [o for o in reader.operators if o.kind == "mapInArrow"]
    assert len(ops) == 2, [(o.name, o.kind) for o in reader.operators]
    reader.close()
    results = verified(run)
    assert results and all(x["ok"] for x in results), results
    # the second call's tasks are numbered after the first's: their scan has no such partitions
    assert {info["message"] for kind, info in events if kind == "warning"} == {
        "RunningTotals_2: the rows of a task of its scan were not where the task's partition says (a union or a "
        "coalesce after the call?): that task's units are copied into the run file"}
    assert codecs(run) == {"ref-batch", "arrow-batch"}
    # tt inspect says which source's units are copied, and that none of its rows are referenced
    from tt.replay.facts import sources
    reader = RunReader(run)
    kept = {s["source"]: (s["rows"], s["copied_units"]) for s in sources(reader)}
    reader.close()
    assert kept["RunningTotals.in"][0] > 0 and kept["RunningTotals.in"][1] == 0, kept
    assert kept["RunningTotals_2.in"][0] == 0 and kept["RunningTotals_2.in"][1] > 0, kept
    # no row of the second call's scan is a reference: its files are not needed, and tt pack did not copy it
    from tt.cli.main import main
    packed = tmp_path / "packed.db"
    assert main(["pack", str(run), "-o", str(packed)]) == 0
    for when, path in (("recorded", run), ("packed", packed)):
        reader = RunReader(path)
        stored = {s["source"]: s["stored"] for s in sources(reader)}
        reader.close()
        assert stored == {"RunningTotals.in": "referenced" if when == "recorded" else "packed",
                          "RunningTotals_2.in": "copied"}, (when, stored)


def test_a_dataframe_rebuilt_otherwise_stops_replay_with_one_line(pair, tmp_path, capsys):
    """The recording task digests each DataFrame PySpark built; one that a replay builds
    otherwise (here: in another session time zone, so other zone-less timestamps) is refused."""
    import shutil
    import sqlite3

    import orjson

    from tt.core.errors import SourceFileError

    name, _, run, *_ = pair
    if not name.startswith("mapInPandas"):
        pytest.skip("a batch is not rebuilt: it is read back as Spark sent it")
    altered = tmp_path / "altered.db"
    shutil.copy(run, altered)
    conn = sqlite3.connect(altered)
    source, info = conn.execute("SELECT source, info FROM source_scans").fetchone()
    info = orjson.loads(info)
    info["pandas"]["timezone"] = "Asia/Tokyo"
    conn.execute("UPDATE source_scans SET info=? WHERE source=?", (orjson.dumps(info).decode(), source))
    conn.commit()
    conn.close()
    refused = ("the DataFrame rebuilt from the rows read back at the recorded positions of .* differs from the "
               "one the recording's task handed the mapInPandas function; its values changed in place")
    with pytest.raises(SourceFileError, match=refused):
        units(altered)
    capsys.readouterr()
    assert main(["verify", str(altered)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(refused, err) and "part-" in err, err


def test_lineage_names_the_file_rows_a_unit_read_by_reference_came_from(pair, capsys):
    """Back from a row the function emitted, the unit it was handed entered G(θ) from the files:
    lineage said it was 'copied into the run file'. It now names the file and rows of each unit
    (`spans`), and those rows, read with pyarrow and kept by the job's filter, are the unit's."""
    name, data, run, copied, *_ = pair
    op = "PandasRunningTotals" if name.startswith("mapInPandas") else "RunningTotals"
    capsys.readouterr()
    assert main(["lineage", str(run), f"{op}:0:0/0", "--back", "--depth", "1", "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    (entered,) = [t["entered"] for t in doc["tuples"] if t["tuple"] == f"{op}:0:0"]
    assert entered["as"] == "theta input" and entered["spans"], entered
    reader = RunReader(copied)
    try:
        op_id = reader.operator(op).id
    finally:
        reader.close()
    unit = next(us[0] for (o, i, *_), us in units(copied).items() if (o, i) == (op_id, 0))
    ids = [int(x) for x in (unit["id"].tolist() if hasattr(unit, "iloc") else unit.column("id").to_pylist())]
    named = []
    for span in entered["spans"]:
        table = pq.read_table(span["file"].removeprefix("file:"))
        if "g" not in table.column_names:   # (partitioned by directory: `g` is in the path)
            table = table.append_column("g", pa.array([int(span["file"].split("g=")[1].split("/")[0])] * len(table)))
        rows = table.slice(span["first"], span["last"] - span["first"] + 1)
        kept = rows.filter(LAYOUTS[name][2](rows))
        assert kept.num_rows == span["rows"], (span, kept.num_rows)
        named += kept.column("id").to_pylist()
    assert named == ids, name
    capsys.readouterr()
    assert main(["lineage", str(run), f"{op}:0:0/0", "--back", "--depth", "1"]) == 0
    text = capsys.readouterr().out
    assert "copied into the run file" not in text and f" rows {entered['spans'][0]['first']}–" in text, text


def test_every_missing_file_is_counted_in_the_one_line(pair, capsys):
    """With the data moved away, `tt verify` named the first file only: a user restoring it met the
    next one at the next try. The one line now names the first and how many more."""
    name, data, run, *_ = pair
    files = sorted(p for p in data.rglob("*.parquet"))
    away = data.parent / "data-away"
    data.rename(away)
    try:
        capsys.readouterr()
        assert main(["verify", str(run)]) == 1
        err = capsys.readouterr().err.strip()
    finally:
        away.rename(data)
    assert len(err.splitlines()) == 1 and "cannot be read from here (it is missing)" in err, err
    assert len(files) > 1 and f"({len(files) - 1} more file{'s' if len(files) > 2 else ''} too: " in err, err
    assert main(["verify", str(run)]) == 0

"""Parquet sources recorded by reference (issue 15): positions in, the very rows back out.

The same job is recorded twice over the same files: by reference (file positions) and
with `copy_sources` (the Arrow batches Spark handed the task, as before). The copied run
is the oracle: it never reads tt's positions. Every recorded tuple read back through the
positions must equal the copied one, in order, for one file per task, several files per
task (per-row file ids) and files split across tasks; both runs verify; the job's output
is the same recorded or not. Then the ways it can go wrong for a user: a file changed or
missing (one line naming it and `tt pack`), and `tt pack` making the run travel.
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from job_settings import spark_settings   # tests/jobs is on the path
from plain_jobs import record_on_and_off
from tt.cli.main import main
from tt.core import values
from tt.core.errors import SourceFileError
from tt.recorder.job import record_job
from tt.replay.verify import verify
from tt.store import positions, row_digest
from tt.store.sources import identity
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "parquet_totals.py"
ROWS = 20_000   # per file


def write_files(d: Path, files: int, **parquet) -> Path:
    d.mkdir(parents=True)
    for f in range(files):
        ids = range(f * ROWS, (f + 1) * ROWS)
        base = datetime.datetime(2024, 3, 9, 12, 0, tzinfo=datetime.timezone.utc)  # spans New York's DST change
        pq.write_table(pa.table({
            "id": pa.array(ids, pa.int64()), "g": [i % 7 for i in ids], "v": [i * 3 % 101 for i in ids],
            "s": [f"ü{i}" if i % 11 else "" for i in ids],
            "ts": pa.array([base + datetime.timedelta(minutes=i) for i in ids], pa.timestamp("us", tz="UTC")),
            "d": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(15, 2))}),
            d / f"part-{f}.parquet", row_group_size=3_000, **parquet)
    return d


def write_partitioned(d: Path, files: int) -> Path:
    """`write_files`' rows as a table partitioned by directory on `g` (`g=3/part-0.parquet`):
    the files hold the other columns, Spark reads `g` from the directory names."""
    flat = write_files(d.with_name(d.name + "-flat"), files)
    for f in sorted(flat.iterdir()):
        table = pq.read_table(f)
        for g in range(7):
            part = table.filter(pc.equal(table["g"], g)).drop_columns(["g"])
            (d / f"g={g}").mkdir(parents=True, exist_ok=True)
            pq.write_table(part, d / f"g={g}" / f.name, row_group_size=1_000)
    shutil.rmtree(flat)
    return d


def entry_tuples(run: Path, as_value: Callable[[Any], Any] = values.encode) -> dict:
    """Every recorded tuple, per (op, instance, port, src) channel in order, as values (`as_value`)."""
    reader = RunReader(run)
    try:
        out = {}
        for op in reader.operators:
            for i in range(op.instances):
                for rowid, port, src, start, n, codec in reader.entry_index(op.id, i):
                    out.setdefault((op.id, i, port, src), []).extend(
                        as_value(r) for r in reader.entry_tuples(codec, rowid))
        return out
    finally:
        reader.close()


def codecs(run: Path) -> set[str]:
    reader = RunReader(run)
    try:
        return {r[0] for r in reader.conn.execute("SELECT DISTINCT codec FROM entry_chunks")}
    finally:
        reader.close()


def verified(run: Path) -> list[dict]:
    reader = RunReader(run)
    try:
        return verify(reader)
    finally:
        reader.close()


ONE_TASK = ["spark.sql.files.openCostInBytes=1024", "spark.sql.files.minPartitionNum=1"]
SPLIT = ["spark.sql.files.maxPartitionBytes=100k"]
#: a filter pyarrow evaluates as Spark does: the chunks are counted (no position column)
EXACT = "filter=g <> 3 and s <> '' and (id >= 1000 or id in (7, 70, 700))"
LAYOUTS = {   # name: (files, Spark settings that shape the tasks, the rows the job's filter keeps)
    "one file per task": (1, ["spark.sql.session.timeZone=UTC"], lambda i: i % 5),
    "several files per task": (3, ["spark.sql.session.timeZone=America/New_York", *ONE_TASK], lambda i: i % 5),
    "files split across tasks": (2, SPLIT, lambda i: i % 5),
    "counted, no filter, one file per task": (1, ["filter="], lambda i: True),
    "counted, several files per task": (3, [EXACT, *ONE_TASK], lambda i: i % 7 != 3 and i % 11 and (i >= 1000 or i in (7, 70, 700))),
    "counted, files split across tasks": (2, [EXACT, "spark.sql.session.timeZone=America/New_York", *SPLIT],
                                          lambda i: i % 7 != 3 and i % 11 and (i >= 1000 or i in (7, 70, 700))),
    # `g` from the directories, in the middle of the job's columns; its filter on `g` prunes g=3's
    # files and is no filter pyarrow could evaluate on the files' columns: positions are listed
    "partitioned by directory": (2, [EXACT, *ONE_TASK], lambda i: i % 7 != 3 and i % 11 and (i >= 1000 or i in (7, 70, 700))),
    "partitioned by directory, counted": (2, ["filter=v > 20"], lambda i: i * 3 % 101 > 20),
}


@pytest.fixture(scope="module", params=list(LAYOUTS))
def pair(request, spark, tmp_path_factory):
    files, settings, _ = LAYOUTS[request.param]
    d = tmp_path_factory.mktemp("by_ref")
    data = (write_partitioned if "partitioned" in request.param else write_files)(d / "data", files)
    args = [str(data), *settings]
    run, on, off = record_on_and_off(JOB, d, args)
    (d / "copied").mkdir()
    copied = d / "copied" / "run.db"
    outcome = record_job(JOB, [str(d / "copied.json"), *args], copied, copy_sources=True)
    assert outcome.status == "complete", outcome.error
    return request.param, run, copied, on, off, json.loads((d / "copied.json").read_text())


def test_recording_by_reference_changes_nothing_the_job_computes(pair):
    _, _, _, on, off, copied = pair
    files, _, kept = LAYOUTS[pair[0]]
    assert on == off == copied
    assert len(on) == sum(1 for i in range(files * ROWS) if kept(i))


def test_every_tuple_read_back_equals_the_one_spark_gave(pair):
    name, run, copied, *_ = pair
    assert codecs(run) == {"ref"} and codecs(copied) == {"arrow"}
    by_ref, oracle = entry_tuples(run), entry_tuples(copied)
    assert by_ref.keys() == oracle.keys()
    for ch in oracle:
        assert len(by_ref[ch]) == len(oracle[ch]) > 0
        assert by_ref[ch] == oracle[ch], f"{name}: channel {ch} differs"


def test_rows_read_at_once_are_the_rows_spark_gave(pair):
    """`RunReader.entry_rows` (lineage's leaves: their row groups read in one call per file)
    gives each (chunk, offset) asked for, in any order and with repeats, the row the copied run
    holds, and the row `entry_tuple` reads alone."""
    name, run, copied, *_ = pair
    oracle = entry_tuples(copied)
    reader = RunReader(run)
    try:
        wanted, want = [], []
        for op in reader.operators:
            for i in range(op.instances):
                for rowid, port, src, start, n, codec in reader.entry_index(op.id, i):
                    for k in sorted({0, n // 2, n - 1}):
                        wanted.append((rowid, k))
                        want.append(oracle[(op.id, i, port, src)][start + k])
        order = list(range(len(wanted)))[::-1] + [0, len(wanted) // 2]   # backwards, then two again
        got = reader.entry_rows([wanted[j] for j in order])
        alone = [reader.entry_tuple("ref", *wanted[j]) for j in order]
    finally:
        reader.close()
    assert len(wanted) > 3 and len(got) == len(order)
    assert [values.encode(r) for r in got] == [want[j] for j in order] == [values.encode(r) for r in alone], name


def test_both_runs_verify(pair):
    _, run, copied, *_ = pair
    for r in (run, copied):
        results = verified(r)
        assert results and all(x["ok"] for x in results), results


def test_tt_pack_copies_the_very_rows_spark_gave(pair, tmp_path, capsys):
    """`tt pack` reads every chunk back (a counted one through its task's splits and filter)
    and copies the rows in: the packed run holds the copied run's tuples."""
    name, run, copied, *_ = pair
    packed = tmp_path / "packed.db"
    assert main(["pack", str(run), "-o", str(packed)]) == 0
    assert "packed" in capsys.readouterr().out
    assert "ref" not in codecs(packed)
    assert entry_tuples(packed) == entry_tuples(copied), name


def test_positions_are_a_small_fraction_of_the_copied_rows(pair):
    _, run, copied, *_ = pair
    a, b = RunReader(run), RunReader(copied)
    try:
        ref, copy = a.sizes(), b.sizes()
        assert ref["recorded_tuples"] == 0 and ref["referenced_rows"] == copy_rows(b)
        assert 0 < ref["row_references"] < copy["recorded_tuples"] / 20, (ref, copy)
    finally:
        a.close()
        b.close()


def tasks_of(run: Path) -> int:
    reader = RunReader(run)
    try:
        return reader.conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
    finally:
        reader.close()


def copy_rows(reader: RunReader) -> int:
    return reader.conn.execute("SELECT SUM(n) FROM entry_chunks").fetchone()[0]


def test_several_files_per_task_use_per_row_file_ids(pair):
    """The layouts do what their names say (else the test above proves less than it claims)."""
    name, run, *_ = pair
    reader = RunReader(run)
    try:
        from tt.store import blobs
        sources = reader.sources()
        chunks = [blobs.decompress(data) for (data,) in reader.conn.execute("SELECT data FROM entry_chunks")]
        files_per_chunk = [{fid for fid, _ in sources.parts(c)[1]} for c in chunks]
        counted = [positions.counted(c) is not None for c in chunks]
        tasks = reader.conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
        files = len(reader.source_scans()[0]["files"])
        info = reader.source_scans()[0]["info"]
    finally:
        reader.close()
    assert all(counted) == ("counted" in name) and any(counted) == all(counted)
    assert ("counted" in info) == ("counted" in name)
    if "partitioned" in name:   # 7 directories (g=3's files pruned when the filter is on g), 2 files each
        assert info["partitioned"]["columns"] == ["g"]
        assert files == (12 if "g <> 3" in LAYOUTS[name][1][0] else 14) == len(info["partitioned"]["values"])
        assert sorted({v for [v] in info["partitioned"]["values"].values()}) == [
            g for g in range(7) if g != 3 or files == 14]
    elif "several files per task" in name:
        assert files == 3 and tasks == 1 and any(len(f) > 1 for f in files_per_chunk)
    elif "files split across tasks" in name:
        assert files == 2 and tasks > 2
    else:
        assert files == 1 and all(len(f) == 1 for f in files_per_chunk)


# --- a user's ways out --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def referenced(spark, tmp_path_factory) -> Path:
    """One run that reads one Parquet file by reference."""
    d = tmp_path_factory.mktemp("ways_out")
    data = write_files(d / "data", 1)
    run, _, _ = record_on_and_off(JOB, d, [str(data)])
    return run


@pytest.fixture
def moved(referenced, tmp_path):
    """A copy of the referenced run, and its data directory (renamed away by a test, put back after)."""
    copy = tmp_path / "run.db"
    shutil.copy(referenced, copy)
    data = referenced.parent / "data"
    away = referenced.parent / "data-away"
    yield copy, data, away
    if away.exists():
        away.rename(data)


def test_a_changed_file_stops_replay_with_one_line(moved, capsys):
    """A file written again (here with other row groups: its size and footer differ) is not the
    one recorded: one line names it and what changed, and the way out."""
    run, data, _ = moved
    f = data / "part-0.parquet"
    raw, st = f.read_bytes(), f.stat()
    pq.write_table(pq.read_table(f), f, row_group_size=1_000)
    try:
        assert main(["verify", str(run)]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert "part-0.parquet by reference and it changed since the recording (size " in err
        assert f"tt pack {run.name}" in err
    finally:
        f.write_bytes(raw)
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main(["verify", str(run)]) == 0


def test_a_copy_of_the_files_with_new_times_replays(moved, capsys):
    """`cp` without `-p`, `scp` and uploads stamp a copy with the time it was made: a file of the
    recorded size and footer whose time alone differs is the one recorded, and its rows are
    proved by the chunks' digests as they are read. (A byte-identical copy made `tt verify` and
    `tt pack` refuse the run: "it changed since the recording (modified …)".)"""
    run, data, _ = moved
    f = data / "part-0.parquet"
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    try:
        assert main(["inspect", str(run)]) == 0
        assert ("here, copied since the recording (their times differ, not their sizes or footers: replay "
                "checks their rows by digest)") in capsys.readouterr().out
        assert main(["verify", str(run)]) == 0
        assert "every replayed state equals the recorded one" in capsys.readouterr().out
        assert main(["pack", str(run), "-o", str(run.with_name("packed.db"))]) == 0
        assert "packed 16,000 rows from 1 file" in capsys.readouterr().out
    finally:
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_missing_file_is_named_and_tt_pack_makes_the_run_travel(moved, capsys, tmp_path):
    run, data, away = moved
    packed = tmp_path / "packed.db"
    assert main(["pack", str(run), "-o", str(packed)]) == 0
    assert "packed 16,000 rows from 1 file" in capsys.readouterr().out
    data.rename(away)
    assert main(["inspect", str(run)]) == 0
    assert "part-0.parquet unreadable: it is missing" in capsys.readouterr().out
    with pytest.raises(SourceFileError, match="cannot be read from here \\(it is missing\\)"):
        verified(run)
    assert main(["pack", str(run)]) == 1   # nothing to pack from: the run is left as it was
    assert "it is missing" in capsys.readouterr().err
    assert codecs(run) == {"ref"}
    results = verified(packed)      # the packed run replays without the files
    assert results and all(r["ok"] for r in results)
    assert main(["inspect", str(packed)]) == 0
    assert "copied into the run file by `tt pack`" in capsys.readouterr().out


def test_a_value_rewritten_in_place_is_found_by_the_chunks_digest(spark, tmp_path, capsys):
    """A file whose size, modification time and footer are the recorded ones can still hold other
    values (docs/SOURCES.md §8: an rsync or `touch -r` rewrite): one string rewritten in place, in a
    file written without statistics or compression, so that its footer stays byte for byte. The
    rows read back are checked against the digest the recording task took of what Spark gave it:
    `tt verify` stops with one line naming the file, and passes again once the file is restored."""
    data = write_files(tmp_path / "data", 1, compression="NONE", use_dictionary=False, write_statistics=False)
    run, _, _ = record_on_and_off(JOB, tmp_path, [str(data)])
    f = data / "part-0.parquet"
    was, now = "ü12346".encode(), "ü98765".encode()   # row 12,346 is read (id % 5 != 0)
    raw = f.read_bytes()
    at = raw.index(len(was).to_bytes(4, "little") + was) + 4
    assert raw.count(was) == 1
    st = f.stat()
    f.write_bytes(raw[:at] + now + raw[at + len(was):])
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    reader = RunReader(run)
    try:
        assert [identity(rec)[0] for rec in reader.sources().files.values()] == [None], \
            "size, time and footer as recorded: only the values tell"
    finally:
        reader.close()
    assert main(["verify", str(run)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "part-0.parquet by reference and it changed since the recording" in err
    assert "read back at the recorded positions hold other values" in err and f"tt pack {run.name}" in err
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))   # ... and as a copy would be, later
    assert main(["verify", str(run)]) == 1
    assert "read back at the recorded positions hold other values" in capsys.readouterr().err
    f.write_bytes(raw)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main(["verify", str(run)]) == 0


def test_a_chunks_digest_is_of_its_values_not_of_their_layout():
    """The task digests Spark's batch, replay the table it read back and took rows from: the same
    values laid out otherwise (sliced, in chunks, other bytes under a null, a view type, a
    dictionary) give the same digest; any one value changed, a float's sign, a null, does not."""
    base = pa.table({
        "i": pa.array([1, 2, None, 4, 5], pa.int64()),
        "f": pa.array([0.0, 1.5, 2.5, None, 3.5], pa.float64()),
        "s": pa.array(["a", "", None, "ü", "long string"], pa.string()),
        "d": pa.array([decimal.Decimal("1.10"), None, decimal.Decimal("-2.00"), decimal.Decimal("0"),
                       decimal.Decimal("9.99")], pa.decimal128(15, 2)),
        "b": pa.array([True, False, None, True, False]),
        "t": pa.array([datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)] * 5, pa.timestamp("us", tz="UTC")),
        "l": pa.array([[1], [], None, [2, 3], [4]], pa.list_(pa.int64())),
    })
    d = row_digest.digest(base)
    wider = pa.concat_tables([base.slice(0, 1), base.slice(0, 1), base])
    assert row_digest.digest(wider.slice(2)) == d, "an offset into the buffers"
    assert row_digest.digest(pa.concat_tables([base.slice(0, 2), base.slice(2)])) == d, "two chunks"
    assert row_digest.digest(base.combine_chunks().to_batches()[0]) == d, "a batch"
    garbage = pa.Array.from_buffers(pa.int64(), 5, [base["i"].chunk(0).buffers()[0],
                                                    pa.py_buffer(np.array([1, 2, 777, 4, 5], np.int64).tobytes())])
    assert row_digest.digest(base.set_column(0, "i", garbage)) == d, "another value under a null"
    as_view = base.set_column(2, "s", base["s"].cast(pa.string_view()))
    assert row_digest.digest(as_view) == d
    as_dict = base.set_column(2, "s", base["s"].dictionary_encode())
    assert row_digest.digest(as_dict) == d

    def changed(column: int, i: int, value) -> bytes:
        items = base.column(column).to_pylist()
        items[i] = value
        return row_digest.digest(base.set_column(column, base.schema.field(column), pa.array(items, base.schema.field(column).type)))

    for column, i, value in [(0, 0, 9), (0, 2, 0), (1, 0, -0.0), (1, 3, 0.0), (2, 1, None), (2, 4, "long strinG"),
                             (3, 0, decimal.Decimal("1.11")), (4, 0, False), (4, 2, False), (6, 1, None),
                             (6, 3, [3, 2])]:
        assert changed(column, i, value) != d, (base.schema.field(column).name, i, value)
    assert row_digest.digest(base.slice(1)) != d and row_digest.digest(base.drop_columns(["l"])) != d


def test_a_source_that_is_not_a_plain_scan_is_copied_and_says_why(spark, record, tmp_path, capsys):
    import tt
    from parquet_totals import Totals   # tests/jobs is on the path

    data = write_files(tmp_path / "data", 1)

    def build(spark):
        flow = tt.Dataflow("repartitioned")
        df = spark.read.parquet(str(data)).repartition(2)
        flow.source("U", df).process(Totals(), name="T").collect("out")
        return flow

    run = record(build)
    assert codecs(run) == {"arrow"}
    assert main(["inspect", str(run)]) == 0
    assert "source   U: rows copied into the run file (its plan has a Repartition" in capsys.readouterr().out


def first_column_counter():
    """θ of the jobs below: rows seen per value of their first column (any tt.Operator would do).
    A class of the function's own: pickled by value, as the workers cannot import this module."""
    import tt

    class FirstColumnCounter(tt.Operator):
        def __init__(self):
            self.seen = {}

        def process(self, row, port=0):
            first = next(iter(row.values()))
            self.seen[first] = self.seen.get(first, 0) + 1
            yield row
    return FirstColumnCounter()


def scan_flow(make_df):
    """A tt.Dataflow over the source `make_df(spark)`: θ counts its rows (`first_column_counter`), a sink."""
    import tt

    def flow(spark):
        f = tt.Dataflow("scan")
        f.source("U", make_df(spark)).process(first_column_counter(), name="R").collect("out")
        return f
    return flow


def read_back(spark, record, make_df, name: str, settings: dict | None = None) -> tuple[Path, list, list]:
    """Record a flow over `make_df(spark)` into `name`: (the run, every row read back through its
    positions, the rows Spark's `collect()` gives), both in `id` order."""
    with spark_settings(spark, settings or {}):
        run = record(scan_flow(make_df), name=name)
    assert codecs(run) == {"ref"}
    rows = [r for chunk in entry_tuples(run, lambda r: r).values() for r in chunk]
    oracle = [r.asDict() for r in make_df(spark).collect()]
    return run, sorted(rows, key=lambda r: r["id"]), sorted(oracle, key=lambda r: r["id"])


def test_a_table_partitioned_by_directory_is_read_back_with_its_directories_values(spark, record, tmp_path, capsys):
    """Written by Spark itself, partitioned by a string (a space, a slash, an `=`, a null), a
    date and an int: every row read back through the positions, its directory's values put back
    in their place, equals the row Spark hands over (the oracle: `collect()`, not tt's logs);
    the run verifies; a table partitioned by a double is copied and says why."""
    from pyspark.sql import functions as F

    regions = ["North America", "Zürich/Genève", "a=b:c", None]
    rows = [(i, i * 7 % 13, regions[i % 4], datetime.date(2024, 1, 1 + i % 3), i % 2) for i in range(3_000)]
    (spark.createDataFrame(rows, "id long, v int, region string, day date, n int")
     .withColumn("x", (F.col("n") + F.lit(0.5))).repartition(2)
     .write.partitionBy("region", "day", "n").parquet(str(tmp_path / "t")))
    (spark.read.parquet(str(tmp_path / "t")).write.partitionBy("x").parquet(str(tmp_path / "by_double")))
    columns = ["region", "id", "day", "v", "n"]
    # a filter pyarrow evaluates (row counts), and one it does not (positions, a file id per row: one task)
    for condition, kept in [("v > 2", "row counts"), ("v % 3 != 0", "positions")]:
        run, got, oracle = read_back(spark, record,
                                     lambda spark: spark.read.parquet(str(tmp_path / "t")).where(condition).select(*columns),
                                     f"partitioned-{kept[:3]}.db",
                                     dict(s.split("=") for s in ONE_TASK) if kept == "positions" else {})
        if kept == "positions":   # the task's rows name their files by a hash of their paths' URIs
            assert tasks_of(run) == 1
        assert got == oracle and 0 < len(oracle) < len(rows)
        assert {r["region"] for r in oracle} == set(regions) and {type(r["day"]) for r in oracle} == {datetime.date}
        assert all(x["ok"] for x in verified(run))
        assert main(["inspect", str(run)]) == 0
        assert (f"of {kept} in 24 Parquet files (partitioned by region, day, n), all here and unchanged"
                in capsys.readouterr().out)
        # lineage names the file a row came from by the path `ls` shows (the directory's own `%2F`)
        assert main(["lineage", str(run), "R", "--where", "id == 1", "--back", "--depth", "1"]) == 0
        where = capsys.readouterr().out.splitlines()[1]
        assert f"from source U: file:{tmp_path}/t/region=Zürich%2FGenève/day=2024-01-02/n=1/part-" in where, where
        assert Path(where.split("file:")[1].split(" row ")[0]).exists()

    assert "rows copied into the run file (it is partitioned by x, a double column" in copied_why(
        record, lambda spark: spark.read.parquet(str(tmp_path / "by_double")).select("region", "x", "id"),
        "by-double.db", capsys)


def test_renamed_columns_are_read_from_the_columns_they_rename(spark, record, tmp_path, capsys):
    """`alias`, `withColumnRenamed`, `selectExpr("a AS b")`, two columns swapping names, a
    filter on a new name: the rows read back equal Spark's (`collect()`); a filter pyarrow
    evaluates stays counted, on the file's names; a column read twice is copied and says why."""
    from pyspark.sql import functions as F

    data = write_files(tmp_path / "data", 1)
    cases = {   # name: (the DataFrame, the positions its chunks keep)
        "alias": (lambda s: s.read.parquet(str(data)).select(F.col("g").alias("grp"), "id", F.col("v").alias("value"))
                  .where("value % 3 != 0"), False),
        "swapped": (lambda s: s.read.parquet(str(data)).selectExpr("id", "g AS v", "v AS g", "s"), True),
        "renamed, counted": (lambda s: s.read.parquet(str(data)).withColumnRenamed("g", "grp")
                             .where("grp <> 3 and id >= 100").select("s", "grp", "id"), True),
    }
    for name, (make, counted) in cases.items():
        run, got, oracle = read_back(spark, record, make, f"{name.replace(', ', '-')}.db")
        assert got == oracle and 0 < len(oracle), name
        if name == "swapped":   # the file's g (id % 7) as v, its v (id * 3 % 101) as g
            assert all(r["v"] == r["id"] % 7 and r["g"] == r["id"] * 3 % 101 for r in got)
        reader = RunReader(run)
        try:
            info = reader.source_scans()[0]["info"]
        finally:
            reader.close()
        assert ("counted" in info) == counted, name
        assert all(x["ok"] for x in verified(run)), name
    assert list(got[0]) == ["s", "grp", "id"] and {r["grp"] for r in got} == {0, 1, 2, 4, 5, 6}

    assert "rows copied into the run file (it reads a column of the file twice)" in copied_why(
        record, lambda spark: spark.read.parquet(str(data)).select("id", F.col("id").alias("id2")), "twice.db", capsys)


def copied_why(record, make_df, name: str, capsys) -> str:
    """Record a flow over `make_df(spark)`, whose rows must be copied: what `tt inspect` says of it."""
    run = record(scan_flow(make_df), name=name)
    assert codecs(run) == {"arrow"}
    assert main(["inspect", str(run)]) == 0
    return capsys.readouterr().out


def test_a_partition_value_becomes_the_column_pyarrow_would_make():
    """Every type a partition column may have (recorder/sources.py `_PARTITION_TYPES`), as
    `_partition_values` keeps it (a date as days), against `pa.array` of the same values."""
    from tt.store.sources import _constant

    day = datetime.date(2024, 1, 2)
    for kind, value, as_arrow in [(pa.int8(), -3, -3), (pa.int16(), 300, 300), (pa.int32(), 7, 7),
                                  (pa.int64(), 2 ** 40, 2 ** 40), (pa.date32(), (day - datetime.date(1970, 1, 1)).days, day),
                                  (pa.bool_(), True, True), (pa.bool_(), False, False), (pa.string(), "Zürich/Genève", "Zürich/Genève"),
                                  (pa.large_string(), "", ""), (pa.string(), None, None), (pa.date32(), None, None)]:
        for n in (0, 1, 9):
            got = _constant(value, kind, n)
            assert got.type == kind and got.equals(pa.array([as_arrow] * n, kind)), (kind, value, n)


# --- counted chunks: the scan's filter, evaluated again by pyarrow -------------------------------

#: conditions pyarrow evaluates to the very rows Spark keeps: nulls in every column
COUNTED = ["n > 3", "n <= 3 or n is null", "not (s = 'b')", "s in ('a', 'ü') and dt >= date'2024-01-03'",
           "b = true or n = 2", "not b", "(n < 2 or s > 'a') and not (dt < date'2024-01-02')", "s is not null and n <> 1",
           "5 > n", "true"]
#: conditions it would not (a double's NaN, arithmetic, NOT IN, a collation): their positions are listed
LISTED = ["x > 1.0", "n % 2 = 0", "not (s in ('a', 'b'))", "collate(s, 'UNICODE_CI') = 'A'", "length(s) = 1"]


def test_a_counted_sources_filter_keeps_the_rows_spark_keeps(spark, tmp_path):
    """The oracle is Spark itself: the `_metadata.row_index` of the rows its filter keeps."""
    from pyspark.sql import functions as F

    from tt.recorder import sources
    from tt.store.sources import evaluate

    n = 400
    rng = np.random.default_rng(3)
    pick = lambda options: [options[int(k)] for k in rng.integers(0, len(options), n)]   # noqa: E731
    table = pa.table({
        "n": pa.array(pick([None, 0, 1, 2, 3, 4, 5]), pa.int32()),
        "s": pa.array(pick([None, "a", "b", "ü", "A", ""]), pa.string()),
        "dt": pa.array(pick([None, *(datetime.date(2024, 1, d) for d in (1, 2, 3))]), pa.date32()),
        "b": pa.array(pick([None, True, False]), pa.bool_()),
        "x": pa.array(pick([None, 0.5, 1.5, float("nan")]), pa.float64())})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=64)
    for condition in COUNTED + LISTED:
        df = spark.read.parquet(str(path)).where(condition).select("n", "s")
        ref, why = sources.reference(df)
        assert ref is not None, (condition, why)
        assert ref.counted == (condition in COUNTED), condition
        if not ref.counted:
            continue
        oracle = [r[0] for r in df.select(F.col("_metadata.row_index")).collect()]
        names = ["n", "s", "dt", "b", "x"]
        kept = np.arange(n) if ref.row_filter is None else \
            np.flatnonzero(evaluate(ref.row_filter, table.select(names)).fill_null(False).to_numpy(zero_copy_only=False))
        assert list(kept) == oracle and (condition == "true" or 0 < len(oracle) < n), (condition, ref.row_filter)


def test_positions_round_trip():
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(0, 400))
        rows = np.sort(rng.choice(10_000, size=n, replace=False)).astype(np.int64)
        files = np.sort(rng.integers(1, 4, size=n))
        parts = positions.segments(rows, files)
        source, back = positions.unpack(positions.pack(5, parts))
        assert source == 5
        assert [(f, list(r)) for f, r in back] == [(f, list(r)) for f, r in parts]


def test_positions_keep_wide_gaps_and_read_format_1():
    """Gaps and lengths go in the narrowest ints that hold them (a gap past 2**32 too); a run
    file written before, with (gap, length) pairs of int64, still reads."""
    import struct

    rows = np.array([0, 1, 2, 7, 300, 301, 70_000, 5_000_000_000, 5_000_000_001], np.int64)
    parts = [(2, rows), (3, np.arange(10, 20, dtype=np.int64)), (4, np.empty(0, np.int64))]
    packed = positions.pack(9, parts)
    source, back = positions.unpack(packed)
    assert source == 9 and [(f, list(r)) for f, r in back] == [(f, list(r)) for f, r in parts]

    every_fourth = np.arange(0, 400_000, 4, dtype=np.int64)
    assert len(positions.pack(1, [(1, every_fourth)])) < 200_100, "one byte per gap and per length, 100,000 runs"
    old = [struct.pack("<IIq", 1, 9, 1), struct.pack("<qq", 2, 4),
           np.array([[0, 3], [4, 1], [292, 2], [69_698, 1]], "<i8").tobytes()]
    assert [list(r) for _, r in positions.unpack(b"".join(old))[1]] == [[0, 1, 2, 7, 300, 301, 70_000]]


# --- a source shuffled into G(θ) -------------------------------------------------------------------

ORDERS_JOB = Path(__file__).resolve().parent / "jobs" / "lineage_orders.py"


@pytest.fixture(scope="module")
def shuffled(spark, tmp_path_factory):
    """The orders ⋈ lineitems job with θ = J, the join: ITEMS (Parquet, Arrow batches of 4 rows)
    reaches it through a shuffle. Recorded by reference, and with --copy-sources as the oracle."""
    d = tmp_path_factory.mktemp("shuffled")
    runs = {}
    for name, extra in (("ref", []), ("copied", ["--copy-sources"])):
        runs[name] = d / f"{name}.db"
        assert main(["record", str(ORDERS_JOB), "--watch", "J", *extra, "-o", str(runs[name]), "--",
                     str(d / f"{name}.json"), str(d / f"{name}-data"), "--items-by-reference"]) == 0
    outs = {name: json.loads((d / f"{name}.json").read_text()) for name in runs}
    return runs, outs


def _channel_tuples(run: Path, op: str) -> dict:
    """What the replay engine reads as the tuples entering `op`, per (instance, port, src)."""
    from tt.replay.engine import Engine

    reader = RunReader(run)
    try:
        engine = Engine(reader, trust=True)
        node = engine.graph.node(op)
        return {(i, *ch): [values.encode(e.get(s)) for s in range(len(e))]
                for i in range(node.instances) for ch, e in engine.instances[(node.id, i)].entry.items()}
    finally:
        reader.close()


def test_rows_shuffled_into_g_theta_are_rebuilt_from_the_source(shuffled):
    """The join's lineitems are not copied where they enter G(θ): replay rebuilds them from
    ITEMS's file positions and the instance each row went to, equal, channel by channel and in
    order, to the rows the copied run holds; the run verifies and the job's output is the same."""
    runs, outs = shuffled
    assert outs["ref"] == outs["copied"]
    a = RunReader(runs["ref"])
    try:
        items, j = a.operator("ITEMS").id, a.operator("J").id
        by_ref = set(a.plan.get("by_reference", ()))
        assert by_ref, "the shuffle from ITEMS into J is recorded by reference"
        port = next(e["port"] for e in a.plan["edges"] if e["id"] in by_ref)
        assert not [x for i in range(2) for x in a.entry_index(j, i) if x[1] == port], "no copy at J"
        assert {x[5] for i in range(a.operator("ITEMS").instances) for x in a.entry_index(items, i)} == {"ref"}
        assert len(a.entry_index(items, 0)) > 1, "several chunks of positions (Arrow batches of 4 rows)"
    finally:
        a.close()
    rebuilt, oracle = _channel_tuples(runs["ref"], "J"), _channel_tuples(runs["copied"], "J")
    assert rebuilt.keys() == oracle.keys()
    for ch in oracle:
        assert rebuilt[ch] == oracle[ch] and oracle[ch], ch
    for run in runs.values():
        results = verified(run)
        assert results and all(x["ok"] for x in results), results


def test_the_run_file_holds_positions_not_the_shuffled_rows(shuffled, capsys):
    runs, _ = shuffled
    a, b = RunReader(runs["ref"]), RunReader(runs["copied"])
    try:
        assert a.sizes()["recorded_tuples"] < b.sizes()["recorded_tuples"]
    finally:
        a.close()
        b.close()
    assert main(["inspect", str(runs["ref"])]) == 0
    text = capsys.readouterr().out
    assert "source   ITEMS: by reference: 30 rows as " in text
    assert "source   ORDERS" not in text, "ORDERS reaches G(θ) through T: T's rows are what J records"
    (items,) = [line for line in text.splitlines() if line.startswith("ITEMS ")]
    assert "lineage" not in items, "recorded without --lineage: ITEMS logs only what replay needs"


def test_the_scan_is_read_in_few_round_trips_and_as_item_by_item(spark, tmp_path):
    """The driver examines a source's plan through py4j, a round trip a call: 0.6 ms each in a new
    process, 794 of them for TPC-H W2's four sources before the leaves, names and strings were read
    at once (411 since). Read at once, they are what reading them item by item gave: the physical
    plan's one leaf, the scan's columns, its paths and filters (a partitioned table with a space
    in a directory name and a renamed, filtered column; no filters at all)."""
    from pyspark.sql import functions as F

    from tt.recorder import sources

    data = write_partitioned(tmp_path / "a dir" / "t", 2)
    df = spark.read.parquet(str(data))
    filtered = df.where((F.col("id") > 3) & (F.col("g") != 3)).select(F.col("id").alias("key"), "g")
    for frame, filters in ((filtered, True), (df, False)):
        qe = frame._jdf.queryExecution()
        walked = [n for n in sources._walk(sources._physical(qe.executedPlan())) if n.children().size() == 0]
        (scan,) = walked
        leaves = sources._physical(qe.executedPlan()).collectLeaves()
        assert leaves.size() == 1 and leaves.apply(0).equals(scan)
        assert sources._field_names(scan.requiredSchema()) == list(scan.requiredSchema().fieldNames())
        for seq in (scan.relation().location().rootPaths(), scan.pushedDownFilters(), scan.dataFilters()):
            assert sources._strings(seq) == [str(seq.apply(i)) for i in range(seq.size())]
        assert bool(sources._strings(scan.dataFilters())) is filters
    ref, why = sources.reference(filtered)
    assert ref is not None, why
    assert ref.columns == ["id", "g"] and len(ref.info["paths"]) == 1 and "a dir" in ref.info["paths"][0]
    assert any("id" in f for f in ref.info["data_filters"]) and ref.info["pushed_filters"]


@pytest.mark.parametrize("lineage", [False, True], ids=["plain", "lineage"])
def test_sources_are_examined_while_spark_plans_them_and_only_those_asked_for(spark, tmp_path, lineage, monkeypatch):
    """The driver examines the sources `_reference_sources` will ask about in a thread begun before
    Spark plans the job (recorder/sources.py `Examination`): the sources that feed G(θ), and with
    `--lineage` every one. Each early answer is the one examining it then gives, and none is waste."""
    import tt
    from tt.recorder import sources
    from tt.recorder.session import RecordingSession

    data = write_files(tmp_path / "data", 2)
    early, asked = [], []
    examine = sources.Examination.__init__

    def started(self, frames):
        early.extend(frames)
        examine(self, frames)
    monkeypatch.setattr(sources.Examination, "__init__", started)
    take = sources.Examination.reference

    def answered(self, nid, df):
        ref, why = take(self, nid, df)
        asked.append(nid)
        assert ref is not None, why
        again, _ = sources.reference(df)
        assert (ref.columns, ref.files, ref.splits, ref.info, ref.counted) == (
            again.columns, again.files, again.splits, again.info, again.counted)
        return ref, why
    monkeypatch.setattr(sources.Examination, "reference", answered)

    flow = tt.Dataflow("two_scans", partitions=2)
    near = flow.source("NEAR", spark.read.parquet(str(data)).where("id > 3"))
    far = flow.source("FAR", spark.read.parquet(str(data)).select("id"))
    counted = near.process(first_column_counter(), name="R")
    far.map(lambda r: r, name="M").union(counted, name="U").collect("out")
    session = RecordingSession(tmp_path / "run.db", Path(__file__), [], watch="R", lineage=lineage)
    try:
        with session:
            flow.run()
    finally:
        session.close()
    ids = {n.name: n.id for n in flow.graph.nodes}
    assert sorted(early) == sorted(asked) == sorted([ids["NEAR"], ids["FAR"]] if lineage else [ids["NEAR"]])
    reader = RunReader(tmp_path / "run.db")
    assert {s for (s,) in reader.conn.execute("SELECT source FROM source_scans")} == set(asked)
    reader.close()

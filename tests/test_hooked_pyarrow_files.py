"""A hooked function that reads files with pyarrow's readers (tests/jobs/hooked_lookup.py).

`pyarrow.parquet.read_table` and `ParquetFile`, `pyarrow.csv.read_csv` and `open_csv`, and
`pyarrow.feather.read_table` open a local file in C++, past the patched `open()` that logs what
a step reads (core/files_read.py): a replay read the file as it is now, and after the lookup
tables changed it emitted other rows, while `tt verify` said "verified" (a generator's state is
empty once it ended). Now a step's call opens the file through `open`'s log and hands pyarrow
the file object. The oracle is what the job's own `collect()` returned, against what the
replay emits with the files rewritten since.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
from plain_jobs import record_on_and_off, replayed_outputs

from tt.cli.main import main
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_lookup.py"


def test_a_replay_reads_the_lookup_as_the_recording_did(spark, tmp_path, capsys):
    lookup = tmp_path / "lookup.parquet"
    run, on, off = record_on_and_off(JOB, tmp_path, [str(lookup)])
    assert on == off
    assert on[-1] == [19, sum((x * (1.0, 2.0, 3.0)[i] + (0.5, 0.25, 0.125)[i] + (1.0, 2.0, 4.0)[i] + (8.0, 16.0, 32.0)[i])
                              * (1.0, 0.5, 2.0)[i] for x in range(10, 20) for i in [x % 3])]
    files = [lookup, Path(f"{lookup}.csv"), Path(f"{lookup}.feather")]
    reader = RunReader(run)
    try:   # each file's bytes, kept once (two readers read the Parquet file, two the CSV)
        kept = sorted(size for (size,) in reader.conn.execute("SELECT size FROM file_contents"))
        assert kept == sorted(f.stat().st_size for f in files)
    finally:
        reader.close()
    pq.write_table(pa.table({"k": [0, 1, 2], "rate": [10.0, 20.0, 30.0], "bonus": [5.0, 2.5, 1.25]}), lookup)
    pacsv.write_csv(pa.table({"extra": [-1.0, -2.0, -4.0], "step": [0.0, 0.0, 0.0]}), files[1])
    feather.write_feather(pa.table({"scale": [3.0, 3.0, 3.0]}), files[2])
    assert replayed_outputs(run) == on   # the rows the job collected, from the file as it was
    code = main(["verify", str(run)])
    assert code == 0, capsys.readouterr().out

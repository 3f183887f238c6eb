"""A hooked function that asks `TaskContext.get()` who its task is (tests/jobs/hooked_task_context.py).

Spark sets the context in its Python worker only. A replay runs the step where there is none:
`get()` gave None, and a step that recorded fine raised `AttributeError` in replay ("verify:
… raised … in replay, but not when recorded"). Each task now tells the coordinator its
context, the run keeps it per attempt, and a replayed step gets that attempt's
(core/task_context.py). The oracle is what the job's own `collect()` returned, TaskContext
values and all, against what the replay emits.

Its sink writes through `os.open` and pyarrow's Parquet, CSV, Feather and IPC writers, past the
patched `open`: a replay wrote the job's files again, and one stopped part way through a
writer's steps left them cut short. Now they go to the replay's scratch copy, as `open` does
(core/outside_effects.py). Its
temporary file, moved onto its name with `os.replace`, was a scratch copy that the real
`os.replace` did not find: the replay raised `FileNotFoundError`, as `os.remove` of a file it
wrote did, and `os.makedirs` of its folder `FileExistsError`; `tempfile.NamedTemporaryFile` left
its file in the job's folder, and `shutil.rmtree` of a folder an earlier run left emptied the
job's folder; `os.truncate` cut the job's file short again, and `os.link` of a name the
recording made raised `FileExistsError`. Now all of them act on the copies.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from plain_jobs import record_on_and_off, replayed_outputs

from tt.cli.main import main
from tt.replay.engine import Engine
from tt.store.reader import RunReader
from tt.store.schema import SAME_AS

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_task_context.py"


def _line_of(text: str) -> int:
    return next(n for n, line in enumerate(JOB.read_text().splitlines(), 1) if text in line)


def test_a_replayed_step_gets_its_recorded_tasks_context(spark, tmp_path, capsys):
    run, on, off = record_on_and_off(JOB, tmp_path)
    without_stage = lambda rows: [r[:3] + r[4:] for r in rows]   # (Spark numbers stages per session)
    assert without_stage(on["rows"]) == without_stage(off["rows"]) and on["frame"] == off["frame"]
    assert {tuple(r[2:]) for r in on["rows"]} == {(p, on["rows"][0][3], 0, 1, "blue") for p in (0, 1)}
    replayed = replayed_outputs(run, by_operator=True)
    assert [list(r) for r in replayed["tagged"]] == on["rows"]
    frames = replayed["numbered"]
    assert sorted([int(i), int(p)] for f in frames for i, p in zip(f["id"], f["part"])) == on["frame"]
    assert {int(p) for f in frames for p in f["part"]} == {0, 1, 2}
    code = main(["verify", str(run)])
    said = capsys.readouterr().out
    assert code == 0, said
    assert "verified" in said and "diverges" not in said
    # their generators had ended at every interaction: "equals" compared empty states, and says so,
    # and that what they emitted was compared (their rows' digests: replay/outputs.py)
    empty = next(line for line in said.splitlines() if "no interaction fell inside any of their tasks" in line)
    assert empty.split(": ")[1] == "numbered, sink, tagged", empty
    assert "verify compared how many outputs each input gave, and what they emitted" in empty
    assert re.search(r"^\S+: what the hooked functions emitted \(\d+ instances\) is what the replay emits$", said,
                     re.M), said


def test_a_replay_writes_moves_and_clears_scratch_copies_of_what_the_sink_wrote(spark, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    run, on, _ = record_on_and_off(JOB, tmp_path)
    parts = tmp_path / "on.json.parts"
    written = {str(p.relative_to(parts)): p for p in parts.rglob("*") if p.is_file()}
    assert sorted(written) == ["arrow-0.arrow", "arrow-0.csv", "arrow-0.feather", "arrow-0.parquet", "arrow-1.arrow",
                               "arrow-1.csv", "arrow-1.feather", "arrow-1.parquet", "atomic-0.txt", "atomic-1.txt",
                               "cut-0.hard", "cut-0.soft", "cut-0.txt", "cut-1.hard", "cut-1.soft", "cut-1.txt",
                               "dir-0/total.txt", "dir-1/total.txt", "named-0.txt", "named-1.txt", "raw-0.txt",
                               "raw-1.txt"]
    for pair in (("raw-0.txt", "raw-1.txt"), ("atomic-0.txt", "atomic-1.txt"), ("named-0.txt", "named-1.txt"),
                 ("dir-0/total.txt", "dir-1/total.txt"), ("cut-0.hard", "cut-1.soft")):
        assert sorted(int(written[name].read_text()) for name in pair) == [10, 35]   # sum(0..4), sum(5..9)
    cut = [written[f"cut-{i}.txt"] for i in (0, 1)]
    assert {(p.stat().st_mode & 0o777, p.stat().st_mtime) for p in cut} == {(0o600, 1_000_000_000)}
    assert all(written[f"cut-{i}.hard"].samefile(cut[i]) and written[f"cut-{i}.soft"].is_symlink() for i in (0, 1))
    for kind, read in (("parquet", pq.read_table), ("csv", pacsv.read_csv), ("feather", feather.read_table),
                       ("arrow", lambda p: pa.ipc.open_file(p).read_all())):
        assert sorted(read(written[f"arrow-{i}.{kind}"])["total"][0].as_py() for i in (0, 1)) == [10, 35], kind
    reader = RunReader(run)
    try:
        said = " ".join(reader.warnings())
    finally:
        reader.close()
    assert "sink: a step wrote " in said and "writes a scratch copy of it instead" in said
    for p in written.values():
        p.write_bytes(b"the job's file, as it is now")
    for p in cut:
        p.chmod(0o644)
        os.utime(p, (2_000_000_000, 2_000_000_000))
    code = main(["verify", str(run)])
    assert code == 0, capsys.readouterr().out
    assert {p.read_bytes() for p in written.values()} == {b"the job's file, as it is now"}   # none cut short
    assert {(p.stat().st_mode & 0o777, p.stat().st_mtime) for p in cut} == {(0o644, 2_000_000_000)}
    assert all(written[f"cut-{i}.hard"].samefile(cut[i]) and written[f"cut-{i}.soft"].is_symlink() for i in (0, 1))
    assert sorted(str(p.relative_to(parts)) for p in parts.rglob("*") if p.is_file()) == sorted(written)   # none left


def test_a_folder_the_recording_cleared_is_left_as_the_job_left_it(spark, tmp_path, capsys):
    """The sink clears a folder an earlier run left (`shutil.rmtree`). A replay's `rmtree` acts
    on the scratch copies only: the job's folder, as the recording left it, stays."""
    from tt.recorder.job import record_job

    out, run = tmp_path / "on.json", tmp_path / "run.db"
    for i in (0, 1):
        (tmp_path / "on.json.parts" / f"dir-{i}").mkdir(parents=True)
        (tmp_path / "on.json.parts" / f"dir-{i}" / "old.txt").write_text("an earlier run's")
    outcome = record_job(JOB, [str(out)], run)
    assert outcome.status == "complete", outcome.error
    folders = [tmp_path / "on.json.parts" / f"dir-{i}" for i in (0, 1)]
    assert [sorted(p.name for p in f.iterdir()) for f in folders] == [["total.txt"], ["total.txt"]]
    for f in folders:
        (f / "total.txt").write_text("the job's file, as it is now")
    code = main(["verify", str(run)])
    assert code == 0, capsys.readouterr().out
    assert [sorted(p.name for p in f.iterdir()) for f in folders] == [["total.txt"], ["total.txt"]]
    assert {(f / "total.txt").read_text() for f in folders} == {"the job's file, as it is now"}


def test_outside_a_replayed_step_the_context_is_pysparks(spark, tmp_path):
    """The patched `get()` answers as PySpark's outside a replayed step: None on the driver.
    The run keeps each task attempt's context, local properties the same as an earlier
    attempt's stored once (named by the others)."""
    from pyspark import TaskContext

    run, on, _ = record_on_and_off(JOB, tmp_path)
    reader = RunReader(run)
    try:
        Engine(reader)
        assert TaskContext.get() is None
        kept = [reader.task_context(a) for a, in reader.conn.execute("SELECT id FROM attempts ORDER BY id")]
        assert sorted((c["partitionId"], c["localProperties"].get("tt.test.tag", "-")) for c in kept) == [
            (0, "-"), (0, "-"), (0, "blue"), (1, "-"), (1, "-"), (1, "blue"), (2, "-")]
        # the sink's Spark job is named by the job's call, as PySpark names it, not by tt's hook
        sites = {c["localProperties"].get("callSite.short") for c in kept}
        assert f"foreachPartition at {JOB}:{_line_of('.foreachPartition(sink)')}" in sites, sites
        assert not [s for s in sites if s and "hooks.py" in s], sites
        stored = dict(reader.conn.execute("SELECT attempt, context FROM task_contexts"))
        named = {a: json.loads(c)["localProperties"].get(SAME_AS) for a, c in stored.items()}
        firsts = {first for first in named.values() if first is not None}
        assert firsts and all(named[first] is None for first in firsts)   # held in full by the attempt named
        read = {a: reader.task_context(a)["localProperties"] for a in stored}
        assert all(read[a] == read[first] and SAME_AS not in read[a] for a, first in named.items() if first is not None)
    finally:
        reader.close()


def test_a_step_that_imports_pyspark_itself_gets_the_patched_context():
    """A replay patches PySpark's TaskContext as it is imported, where no job module loaded it
    before (a fresh process: the import happens inside the step)."""
    import subprocess
    import sys

    script = ("import sys; from tt.core import task_context as t; t.install(); "
              "assert 'pyspark.taskcontext' not in sys.modules; "
              "from pyspark import TaskContext; "
              "print(TaskContext.__dict__['get'].__func__ is t._get, TaskContext.get())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "None"]

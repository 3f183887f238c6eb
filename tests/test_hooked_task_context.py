"""A hooked function that asks `TaskContext.get()` who its task is (tests/jobs/hooked_task_context.py).

Spark sets the context in its Python worker only. A replay runs the step where there is none:
`get()` gave None, and a step that recorded fine raised `AttributeError` in replay ("verify:
… raised … in replay, but not when recorded"). Each task now tells the coordinator its
context, the run keeps it per attempt, and a replayed step gets that attempt's
(core/task_context.py). The oracle is what the job's own `collect()` returned, TaskContext
values and all, against what the replay emits.
"""

from __future__ import annotations

from pathlib import Path

from plain_jobs import record_on_and_off

from tt.cli.main import main
from tt.replay.engine import Engine
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_task_context.py"


def _replayed(run: Path) -> dict[str, list]:
    """What each operator's replay emits, instance after instance."""
    reader = RunReader(run)
    try:
        engine = Engine(reader)
        out: dict[tuple[str, int], list] = {}
        for (op, i), inst in sorted(engine.instances.items()):
            inst.runner.targets.append(out.setdefault((inst.node.name, i), []).append)
        engine.advance_to({key: inst.total for key, inst in engine.instances.items()}, pull=True)
        return {name: [row for (n, i), rows in sorted(out.items()) if n == name for row in rows]
                for name in {n for n, _ in out}}
    finally:
        reader.close()


def test_a_replayed_step_gets_its_recorded_tasks_context(spark, tmp_path, capsys):
    run, on, off = record_on_and_off(JOB, tmp_path)
    without_stage = lambda rows: [r[:3] + r[4:] for r in rows]   # (Spark numbers stages per session)
    assert without_stage(on["rows"]) == without_stage(off["rows"]) and on["frame"] == off["frame"]
    assert {tuple(r[2:]) for r in on["rows"]} == {(p, on["rows"][0][3], 0, 1, "blue") for p in (0, 1)}
    replayed = _replayed(run)
    assert [list(r) for r in replayed["tagged"]] == on["rows"]
    frames = replayed["numbered"]
    assert sorted([int(i), int(p)] for f in frames for i, p in zip(f["id"], f["part"])) == on["frame"]
    assert {int(p) for f in frames for p in f["part"]} == {0, 1, 2}
    code = main(["verify", str(run)])
    said = capsys.readouterr().out
    assert code == 0, said
    assert "verified" in said and "diverges" not in said


def test_outside_a_replayed_step_the_context_is_pysparks(spark, tmp_path):
    """The patched `get()` answers as PySpark's outside a replayed step: None on the driver.
    The run keeps each task attempt's context."""
    from pyspark import TaskContext

    run, on, _ = record_on_and_off(JOB, tmp_path)
    reader = RunReader(run)
    try:
        Engine(reader)
        assert TaskContext.get() is None
        kept = [reader.task_context(a) for a, in reader.conn.execute("SELECT id FROM attempts ORDER BY id")]
        assert sorted((c["partitionId"], c["localProperties"].get("tt.test.tag", "-")) for c in kept) == [
            (0, "-"), (0, "blue"), (1, "-"), (1, "blue"), (2, "-")]
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

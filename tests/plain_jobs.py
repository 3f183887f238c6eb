"""Running a plain PySpark test job (tests/jobs/hooked_*.py) with recording off and on.

Each job writes what it computed to the JSON file named by its first argument, so a test
can compare the job's output without tt and under `tt record` (in this process, beside
the suite's SparkSession, as `tt record` runs a job).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from tt.core import values
from tt.recorder.job import record_job, run_as_main
from tt.replay.session import DebugSession


def run_plain(job: Path, args: list[str]) -> None:
    """The job as `python job.py ARGS` runs it: nothing patched, nothing recorded."""
    run_as_main(job, args)


def record_on_and_off(job: Path, where: Path, args: list[str] = (), **options) -> tuple[Path, object, object]:
    """(run file, the job's output recorded, its output with recording off); `options` go to
    `record_job` (when=, watch=, on_event=…)."""
    return _on_and_off(job, where, lambda way: list(args), **options)


def record_streaming_on_and_off(job: Path, where: Path, before: list[str] = (), after: list[str] = (),
                                **options) -> tuple[Path, object, object]:
    """`record_on_and_off` of a streaming job whose runs each read an input folder and keep a
    checkpoint of their own (`IN_DIR CKPT`, between the arguments `before` and `after`): a query
    cannot start over from another run's checkpoint."""
    return _on_and_off(job, where, lambda way: [*before, str(where / f"in_{way}"), str(where / f"ck_{way}"), *after],
                       **options)


def _on_and_off(job: Path, where: Path, args_of, **options) -> tuple[Path, object, object]:
    off, on, run = where / "off.json", where / "on.json", where / "run.db"
    run_plain(job, [str(off), *args_of("off")])
    outcome = record_job(job, [str(on), *args_of("on")], run, **options)
    assert outcome.status == "complete", outcome.error
    return run, json.loads(on.read_text()), json.loads(off.read_text())


def printed_on_and_off(job: Path, args: list[str], run: Path, spark) -> tuple[str, str]:
    """(what the job printed recorded into `run`, what it printed with recording off). The
    sample jobs set the session's shuffle partitions; the suite's setting is put back."""
    def printed(fn) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            fn()
        return out.getvalue()

    before = spark.conf.get("spark.sql.shuffle.partitions")
    outcome = None

    def record():
        nonlocal outcome
        outcome = record_job(job, args, run)
    try:
        off = printed(lambda: run_plain(job, args))
        on = printed(record)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    assert outcome.status == "complete", outcome.error
    return on, off


def payment_file(f: int, per_file: int):
    """File f of `job_settings.write_payment_files` (tests/jobs/), as pandas reads it: payments
    f * per_file up to the next file's, amount (i * 37) % 101."""
    import pandas as pd

    ids = range(f * per_file, (f + 1) * per_file)
    return pd.DataFrame({"id": ids, "amount": [float((i * 37) % 101) for i in ids]})


def post_mortem(job: Path, args: list[str], out: Path, *errors: str) -> DebugSession:
    """Record `job`, whose run fails with every one of `errors` in its error, and open the
    run where the debugger opens a failed one: just before the tuple it failed on."""
    outcome = record_job(job, args, out)
    assert outcome.status == "failed"
    assert all(e in outcome.error for e in errors), outcome.error
    session = DebugSession(out)
    assert session.failure is not None
    session.goto_failure()
    return session


def each_step(session: DebugSession, op: str):
    """Step over every unit of every instance of the hooked operator `op`, one instance after
    the other, in a replay: (instance, the unit, or None for the END step, and the instance's
    state after it, decoded) after each step."""
    node = session.reader.operator(op)
    for i in range(node.instances):
        inst = session.engine.instances[(node.id, i)]
        while not inst.runner.finished:
            unit = inst.peek()
            session.step_over(session.parse_ref(f"{op}:{i}:{inst.count}"))
            yield i, unit, values.decode(session.engine.states()[(node.id, i)])
            if unit is None:
                break


def verified(run: Path, capsys) -> None:
    """`tt verify RUN` exits 0 and says it verified every interaction of the run."""
    from tt.cli.main import main
    from tt.store.reader import RunReader

    reader = RunReader(run)
    n = len(reader.interactions())
    reader.close()
    capsys.readouterr()
    assert main(["verify", str(run)]) == 0
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out


def replayed_outputs(run: Path, by_operator: bool = False) -> list | dict[str, list]:
    """What the replay of the recorded run emits, instance after instance (partition order),
    each row as a list: the oracle a job's own `collect()` is compared with. `by_operator`:
    `{operator: its rows}`, each as emitted."""
    from tt.replay.engine import Engine
    from tt.store.reader import RunReader

    reader = RunReader(run)
    try:
        engine = Engine(reader)
        out: dict[tuple[str, int], list] = {}
        for (op, i), inst in sorted(engine.instances.items()):
            inst.runner.targets.append(out.setdefault((inst.node.name, i), []).append)
        engine.advance_to({key: inst.total for key, inst in engine.instances.items()}, pull=True)
        if by_operator:
            return {name: [row for (n, _), rows in sorted(out.items()) if n == name for row in rows]
                    for name in {n for n, _ in out}}
        return [list(row) for _, rows in sorted(out.items(), key=lambda kv: kv[0][1]) for row in rows]
    finally:
        reader.close()

"""Environment variables a job's functions read, and the time zone they tell local time in, recorded
unchanged (core/nondeterministic.py, core/local_time.py).

`tests/jobs/hooked_environ.py` gives its executors a rate, a limit, a token and Tokyo's time
zone through Spark's executor environment; its functions read them (`os.environ[...]`, `.get`,
`os.getenv`, `in`; `time.localtime`, `datetime.fromtimestamp`), set one themselves
mid-partition, and emit what they read. This process, which replays, has other values and New
York's zone. The oracle is the job's own output, collected by Spark: a replay must hand each
function what it read when recorded, not what the replaying machine has.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from plain_jobs import each_step, record_on_and_off

from tt.cli.main import main
from tt.core import runtime
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_environ.py"
RATE, UNSET, TOKEN, LIMIT, STAGE, LENT = ("TT_TEST_ENV_RATE", "TT_TEST_ENV_UNSET", "TT_TEST_ENV_API_TOKEN",
                                          "TT_TEST_ENV_LIMIT", "TT_TEST_ENV_STAGE", "TT_TEST_ENV_LENT")


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, the job's output recorded, its output with recording off); an interaction after
    every unit of θ."""
    return record_on_and_off(JOB, tmp_path_factory.mktemp("hooked_environ"), when="True")


@pytest.fixture
def elsewhere(monkeypatch):
    """This process set up otherwise than the executors were: another rate, limit and token, and
    the name that was unset there set here. (A replay sets the name the function sets: it is
    taken away afterwards.)"""
    for name, value in ((RATE, "7"), (LIMIT, "2"), (TOKEN, "another-token"), (UNSET, "here")):
        monkeypatch.setenv(name, value)
    os.environ.pop(STAGE, None)
    monkeypatch.setenv(LENT, "")   # (the job's function takes it and puts it back: not here afterwards)
    monkeypatch.delenv(LENT)
    zone = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    os.environ.pop(STAGE, None)
    if zone is None:   # (a replay sets this process's zone to the run's: put back the suite's)
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = zone
    time.tzset()


def test_recording_changes_nothing_the_functions_read(recorded):
    _, on, off = recorded
    assert on == off
    rated = [json.loads(s) for s in on["rated"]]
    assert {(r["rate"], r["mode"], r["has"], r["token"]) for r in rated} == {(3.0, "default", True, 20)}
    assert sum(r["stage"] == "late" for r in rated) == 2 * (20 - 5)   # each partition's rows from its sixth on
    assert sum(r["before"] == "late" for r in rated) == 2 * (20 - 6)   # (its sixth read the setting before it set it)
    assert {r["lent"] for r in rated} == {"lent"}   # (each task found it: the one before gave it back)
    # ids below 25, batches of 10; the first id's hour in Tokyo (UTC+9)
    assert sorted(on["limited"]) == [[5, 25, 5], [5, 25, 15], [10, 25, 9], [20, 25, 19]]
    assert {(r["row"] + 9) % 24 == r["hour"] for r in rated} == {True}


def test_a_replay_hands_each_step_the_values_the_executor_read(recorded, elsewhere):
    emitted = {json.loads(s)["row"]: json.loads(s) for s in recorded[1]["rated"]}
    session = DebugSession(recorded[0])
    steps = [(unit, state) for _, unit, state in each_step(session, "rated") if unit is not None]
    limited = {i: state["kept"] for i, _, state in each_step(session, "Limited")}   # each instance's last
    session.reader.close()
    assert len(steps) == 40
    for unit, state in steps:   # all it read, but the token, which this process has its own of
        assert state["closure"]["seen"]["last"] == {**emitted[unit], "token": len("another-token")}
    # what it took out of an environment that had it, from this one, which did not (`pop`: no KeyError)
    assert {state["closure"]["seen"]["last"]["lent"] for _, state in steps} == {"lent"}
    assert os.environ[RATE] == "7"   # (what this process has, which the steps were not handed)
    reader = RunReader(recorded[0])
    assert reader.timezone == "Asia/Tokyo" == os.environ["TZ"]   # (the engine set it)
    reader.close()
    assert limited == {0: 20, 1: 5}   # the job's last `kept` of each partition (with a limit of 2: 2 and 0)


def test_verify_passes_on_a_machine_set_up_otherwise(recorded, elsewhere, monkeypatch, capsys):
    monkeypatch.setenv(TOKEN, "recorded-token-value")   # a name kept out of the run file: the replay reads its own
    assert main(["verify", str(recorded[0])]) == 0
    reader = RunReader(recorded[0])
    n = len(reader.interactions())
    reader.close()
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out


def test_the_run_file_holds_each_name_once_an_instance_and_no_secret(recorded):
    reader = RunReader(recorded[0])
    node = reader.operator("rated")
    for i in range(node.instances):
        logged = [(r.position, *r.value) for r in reader.results(node.id, i) if r.call == runtime.ENVIRON_CALL]
        names = [name for _, name, _, _ in logged]
        assert TOKEN not in names
        # the lent one, the rate, the unset name and the stage once each, the stage again where the function set it:
        # (input, value, which read of the name in that step)
        assert sorted(set(names)) == [LENT, RATE, STAGE, UNSET]
        assert [(p, v, nth) for p, n, v, nth in logged if n == LENT] == [(0, "lent", 0)]   # (`pop` read it)
        stage = [(p, v, nth) for p, n, v, nth in logged if n == STAGE]
        if stage[0] == (0, "late", 0):   # the worker still held what an earlier task set: `pop` read it
            stage = stage[1:]
        assert [(p, v) for p, v, _ in stage] == [(0, None), (5, "late")]
        assert stage[-1][2] == 1   # the step's second read of it, after the step set it
        assert [(p, v, nth) for p, n, v, nth in logged if n == RATE] == [(0, "3", 0)]
        assert [(p, v, nth) for p, n, v, nth in logged if n == UNSET] == [(0, None, 0)]
    reader.close()


def test_an_unlogged_name_is_read_where_the_replay_runs():
    source = runtime.ResultSource([])
    assert source.environ(RATE, 3) is runtime.UNLOGGED
    from tt.core.logs import LoggedResult

    source = runtime.ResultSource([LoggedResult(4, runtime.ENVIRON_CALL, runtime.ENVIRON, [STAGE, None, 0]),
                                   LoggedResult(9, runtime.ENVIRON_CALL, runtime.ENVIRON, [STAGE, "late", 2]),
                                   LoggedResult(9, 0, "time.time", 1.5)])
    # by input and read: the first logged for a read sooner than it; at input 9 the third read on
    assert [source.environ(STAGE, p, nth) for p, nth in ((0, 0), (4, 0), (8, 3), (9, 0), (9, 1), (9, 2), (9, 3), (30, 0))] \
        == [None, None, None, None, None, "late", "late", "late"]
    older = runtime.ResultSource([LoggedResult(4, runtime.ENVIRON_CALL, runtime.ENVIRON, [STAGE, "x"])])   # (no nth)
    assert older.environ(STAGE, 4, 0) == older.environ(STAGE, 4, 1) == "x"


def test_a_zone_is_told_as_a_value_another_process_can_take(monkeypatch):
    from tt.core import local_time

    assert local_time._posix("JST", -9 * 3600) == "JST-9"
    assert local_time._posix("+0530", -(5 * 3600 + 1800)) == "<+0530>-5:30"
    assert local_time._posix("UTC", 0) == "UTC0"
    monkeypatch.setenv("TZ", "Europe/Paris")
    assert local_time.zone() == "Europe/Paris"
    time.tzset()
    try:
        assert local_time.use(None) == (None, None)   # (a run without one: this process's own)
        assert local_time.use("Europe/Paris", local_time.facts()) == ("Europe/Paris", None)
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.fixture
def no_zone_data(tmp_path, monkeypatch):
    """This process as on a machine without time zone data: glibc's zone folder empty (`TZDIR`)
    and no `tzdata` package to import."""
    monkeypatch.setenv("TZDIR", str(tmp_path))
    monkeypatch.setenv("TZDIR_EMPTY", str(tmp_path))
    monkeypatch.setitem(sys.modules, "tzdata", None)


def test_a_zone_without_data_here_is_told_by_its_rule_or_named_where_that_differs(monkeypatch, no_zone_data):
    from tt.core import local_time

    monkeypatch.delenv("TZDIR")   # (the workers', which have the data)
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    paris = local_time.facts()
    monkeypatch.setenv("TZ", "America/Sao_Paulo")   # (summer time until 2019: its rule says none)
    time.tzset()
    sao_paulo = local_time.facts()
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    monkeypatch.setenv("TZDIR", os.environ["TZDIR_EMPTY"])   # (a worker without the zone's data: UTC, as glibc tells)
    time.tzset()
    tokyo_without_data = local_time.facts()
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert paris == {"rule": "CET-1CEST,M3.5.0,M10.5.0/3",
                         "probe": [[3600, "CET"], [7200, "CEST"], [3600, "CET"], [7200, "CEST"]]}
        assert local_time.setting("Europe/Paris", paris) == ("CET-1CEST,M3.5.0,M10.5.0/3", None)
        with monkeypatch.context() as m:   # once in it, a second engine's setting tries no other zone
            assert local_time.use("Europe/Paris", paris).tz == os.environ["TZ"] == "CET-1CEST,M3.5.0,M10.5.0/3"
            m.setattr(local_time, "_told", lambda tz: pytest.fail(f"tried {tz} under a running replay"))
            assert local_time.setting("Europe/Paris", paris) == ("CET-1CEST,M3.5.0,M10.5.0/3", None)
        os.environ["TZ"] = "UTC"   # (as the test had it: the fixture's monkeypatch puts back the suite's)
        time.tzset()
        told = local_time.setting("America/Sao_Paulo", sao_paulo)
        assert told.tz == "<-03>3" and told.note == (
            "local time in America/Sao_Paulo differs here from the workers' (on 2000-01-15: -03:00 -03 here, "
            "-02:00 -02 there; read by its rule <-03>3): install tzdata (pip install tzdata) where tt replays")
        # a run recorded before the facts were kept: glibc would tell UTC, and says nothing
        assert local_time.setting("Europe/Paris") == ("Europe/Paris", (
            "local time in Europe/Paris cannot be told here: this machine has no data for it, so glibc tells UTC; "
            "install tzdata (pip install tzdata) where tt replays"))
        # workers that had no data for their zone told UTC: so does a replay, where it has the data
        monkeypatch.delenv("TZDIR")
        assert tokyo_without_data == {"rule": None, "probe": [[0, "Asia"]] * 4}
        assert local_time.setting("Asia/Tokyo", tokyo_without_data) == ("Asia0", None)
        assert os.environ["TZ"] == "UTC"   # (`setting` tries, and leaves this process as it was)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_replay_without_zone_data_here_tells_the_workers_local_time(recorded, elsewhere, no_zone_data,
                                                                      monkeypatch, capsys):
    monkeypatch.setenv(TOKEN, "recorded-token-value")
    reader = RunReader(recorded[0])
    n, facts = len(reader.interactions()), reader.timezone_facts
    reader.close()
    assert facts["rule"] == "JST-9" and facts["probe"][0] == [9 * 3600, "JST"]
    assert main(["verify", str(recorded[0])]) == 0   # (the hours each step read: 9 hours ahead of UTC)
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out
    assert os.environ["TZ"] == "JST-9"
    assert main(["inspect", str(recorded[0])]) == 0
    assert "warning  local time" not in capsys.readouterr().out


def test_a_replay_that_cannot_tell_the_workers_local_time_says_so(recorded, elsewhere, no_zone_data,
                                                                  monkeypatch, tmp_path, capsys):
    import shutil
    import sqlite3

    monkeypatch.setenv(TOKEN, "recorded-token-value")
    older = tmp_path / "older.db"
    shutil.copy(recorded[0], older)
    with sqlite3.connect(older) as conn:   # as recorded before the workers' zone facts were kept
        conn.execute("DELETE FROM meta WHERE key='timezone_facts'")
    conn.close()
    note = ("local time in Asia/Tokyo cannot be told here: this machine has no data for it, so glibc tells UTC; "
            "install tzdata (pip install tzdata) where tt replays")
    assert main(["verify", str(older)]) == 1   # the hours read in UTC, where the workers read them in Tokyo
    assert note in capsys.readouterr().out
    assert main(["inspect", str(older)]) == 0
    assert f"warning  {note}" in capsys.readouterr().out
    assert "cannot be told here" in _debugger_opening_line(older)


def _debugger_opening_line(run) -> str:
    """What `tt debug RUN`'s message line says once its replay engine is ready."""
    import asyncio

    from tt.tui.app import DebuggerApp
    from tt.tui.widgets.message_line import MessageLine

    app = DebuggerApp(run, timings=False)

    async def script() -> str:
        async with app.run_test(size=(160, 30)) as pilot:
            t0 = time.monotonic()
            while not app.is_idle:   # (the session open, and what it shows first on screen)
                assert time.monotonic() - t0 < 120, "the session never opened"
                await pilot.pause(0.02)
            assert app.session_error is None
            return app.query_one(MessageLine).plain

    return asyncio.run(script())


def test_inspect_names_the_zone_a_replay_runs_in(recorded, elsewhere, capsys):
    reader = RunReader(recorded[0])
    seed = reader.hash_seed   # (the suite's PYTHONHASHSEED, else PySpark's 0)
    reader.close()
    python = {"implementation": sys.implementation.name, "version": ".".join(map(str, sys.version_info[:3]))}
    assert main(["inspect", str(recorded[0])]) == 0
    out = capsys.readouterr().out
    assert (f"workers  {python['implementation']} {python['version']}, hash seed {seed}, time zone Asia/Tokyo "
            f"(here America/New_York): a replay runs with these") in out
    assert main(["inspect", str(recorded[0]), "--json"]) == 0
    workers = json.loads(capsys.readouterr().out)["workers"]
    loaded = workers.pop("libraries")
    assert workers == {"python": python, "python_here": python, "hash_seed": seed, "timezone": "Asia/Tokyo",
                       "timezone_here": "America/New_York", "timezone_note": None, "libraries_differing": []}
    import numpy
    import pandas
    import pyarrow   # (a mapInPandas worker has them loaded; the same here)
    assert {n: loaded.get(n) for n in ("numpy", "pandas", "pyarrow")} == {
        "numpy": numpy.__version__, "pandas": pandas.__version__, "pyarrow": pyarrow.__version__}
    assert f"libraries  the {len(loaded)} packages the workers had loaded are as here" in out


@pytest.mark.slow
def test_a_library_a_function_imports_after_its_task_began_is_named(tmp_path):
    """`Limited` imports markdown-it in a later batch than its first. In a fresh `tt record`
    process the job's Python workers serve a task each (the suite's session reuses workers that
    ran the job already), so no task's hello lists it: the end of the task does."""
    import subprocess

    import markdown_it

    run = tmp_path / "run.db"
    proc = subprocess.run([sys.executable, "-m", "tt", "record", str(JOB), "-o", str(run), "--",
                           str(tmp_path / "out.json")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reader = RunReader(run)
    loaded = reader.libraries
    reader.close()
    assert loaded.get("markdown_it") == markdown_it.__version__

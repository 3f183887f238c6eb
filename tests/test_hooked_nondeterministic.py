"""A job's clock reads, random draws and ids, recorded unchanged (core/nondeterministic.py).

`tests/jobs/hooked_nondeterministic.py` has five hooked functions (a generator, a callable
class, a grouped function, a StatefulProcessor, a UDTF) that call `time`, `datetime`,
`random`, `uuid`, `os.urandom`, `secrets` and the worker's process id and host, keep what they got
and emit it. The oracle is
the job's own output, which Spark collected and tt never reads: a replay must hand each
function exactly what it got when recorded, so its replayed state holds the values it emitted.
"""

from __future__ import annotations

import datetime
import json
import pickle
import random
import time
from pathlib import Path

import pytest

from plain_jobs import each_step, record_on_and_off

from tt.core import nondeterministic
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_nondeterministic.py"


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, the job's output recorded, its output with recording off); an interaction
    after every unit of θ."""
    return record_on_and_off(JOB, tmp_path_factory.mktemp("hooked_nondeterministic"), when="True")


@pytest.fixture(scope="module")
def replayed(recorded):
    """{operator: [(instance, unit, state after it)]}: every step of every function, replayed."""
    session = DebugSession(recorded[0])
    steps = {op: list(each_step(session, op)) for op in ("stamped", "StampBatches", "drawn", "Stamps", "Ids")}
    session.reader.close()
    return steps


def ends(steps: list) -> dict:
    """Each instance's state after its last step."""
    return {i: state for i, _, state in steps}


def test_recording_changes_nothing_the_code_sees(recorded):
    _, on, off = recorded
    assert {k: len(v) for k, v in on.items()} == {k: len(v) for k, v in off.items()} == {
        "stamped": 60, "batches": 6, "drawn": 3, "stamps": 6, "ids": 60}
    for out in (on, off):   # `isinstance` of what `datetime.now()` made, through the stand-in class
        assert {tuple(json.loads(s)["kinds"]) for _, s in out["stamped"]} == {(True, True, "datetime")}


def test_verify_replays_every_interaction(recorded, capsys):
    from tt.cli.main import main

    assert main(["verify", str(recorded[0])]) == 0
    n = len(RunReader(recorded[0]).interactions())
    assert n > 60 and f"verified {n} of {n} interactions" in capsys.readouterr().out


def test_a_generator_is_handed_each_rows_clock_ids_and_draws_again(recorded, replayed):
    emitted = {i: json.loads(s) for i, s in recorded[1]["stamped"]}
    rows = [(unit, state) for _, unit, state in replayed["stamped"] if unit is not None]
    assert len(rows) == 60
    for unit, state in rows:
        assert state["closure"]["seen"]["last"] == emitted[unit[0]]
    assert {i: s["closure"]["seen"]["n"] for i, s in ends(replayed["stamped"]).items()} == {0: 30, 1: 30}


def test_the_other_functions_are_handed_what_they_got(recorded, replayed):
    on = recorded[1]
    batches = [b for s in ends(replayed["StampBatches"]).values() for b in s["batches"]]
    assert sorted(json.dumps(b) for b in batches) == on["batches"]
    assert sorted(json.dumps(d) for d in ends(replayed["drawn"])[0]["closure"]["drawn_so_far"]) == on["drawn"]
    made = [m for s in ends(replayed["Ids"]).values() for m in s["made"]]
    assert sorted(map(tuple, made)) == sorted(tuple(json.loads(s)) for _, s in on["ids"])
    last = {}   # each key's last row: the ValueState the processor updated with `time.time()`, `uuid4()`
    for k, s in on["stamps"]:
        at, made_id, _, _ = json.loads(s)
        last[k] = max(last.get(k, (at, made_id)), (at, made_id))
    seen = {k: tuple(v) for s in ends(replayed["Stamps"]).values() for k, v in s["seen"].items()}
    assert seen == last


def test_the_process_facts_are_logged_once_an_instance_by_name(recorded):
    """A worker's id, host and cores are logged as environment variables are (`_process_fact`):
    once per instance, whatever its batches asked, and apart from the numbered calls."""
    from tt.core import runtime

    reader = RunReader(recorded[0])
    node = reader.operator("StampBatches")
    for i in range(node.instances):
        logged = [r.value[0] for r in reader.results(node.id, i) if r.call == runtime.ENVIRON_CALL]
        assert sorted(logged) == ["os.cpu_count()", "os.getpid()", "os.getppid()", "platform.node()",
                                  "socket.gethostname()"]
    reader.close()


def test_calls_outside_a_step_are_answered_and_not_logged():
    nondeterministic.install()
    assert time.time.__module__ == "time" and time.time is not nondeterministic._ORIGINAL[("time", "time")]
    assert abs(time.time() - nondeterministic._ORIGINAL[("time", "time")]()) < 60
    assert not nondeterministic.users_step(1)
    items = list(range(10))
    random.shuffle(items)
    assert sorted(items) == list(range(10)) and random.choice(items) in items
    for fn in (time.time, random.random, random.shuffle, nondeterministic.LoggedDatetime):   # by reference
        assert pickle.loads(pickle.dumps(fn)) is fn
    import numpy

    nondeterministic.prepare(len)   # numpy is imported: its functions are patched too (no globals to point)
    ordered = numpy.arange(8)
    numpy.random.shuffle(ordered)
    assert sorted(ordered) == list(range(8)) and pickle.loads(pickle.dumps(numpy.random.shuffle)) is numpy.random.shuffle
    stand_in = nondeterministic.LoggedDatetime
    made = stand_in(2024, 5, 6, 7)
    assert type(made) is datetime.datetime and isinstance(made, stand_in) and issubclass(datetime.datetime, stand_in)
    assert type(stand_in.fromisoformat("2024-05-06")) is datetime.datetime
    assert isinstance(stand_in.now(), datetime.datetime)


def test_a_patched_function_is_logged_by_the_name_it_had_before():
    """A tt.Dataflow job's `tt.log_result(random.random)` recorded in an executor where nothing
    was patched replays in a process where it is (the test suite's, the debugger's)."""
    from tt.core.logs import callable_name

    nondeterministic.install()
    original = nondeterministic._ORIGINAL[("random", "random")]
    assert random.random is not original and callable_name(random.random) == callable_name(original)
    assert callable_name(random.shuffle) == callable_name(nondeterministic._ORIGINAL[("random", "shuffle")])
    assert callable_name(time.time) == "time.time"


def stamp() -> datetime.datetime:
    return datetime.datetime.now()


def test_only_globals_shipped_by_value_are_pointed_at_the_stand_ins():
    """A loaded module's namespace (a library's, the job's own in its driver or a notebook) keeps
    the real `datetime`; a copy of the same code as Spark ships it gets the stand-ins."""
    import sys

    import cloudpickle

    nondeterministic.prepare(stamp)
    assert stamp.__globals__["datetime"] is datetime and type(stamp()) is datetime.datetime
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        shipped = cloudpickle.loads(cloudpickle.dumps(stamp))
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    nondeterministic.prepare(shipped)
    assert shipped.__globals__["datetime"].datetime is nondeterministic.LoggedDatetime
    assert type(shipped()) is datetime.datetime   # outside a step: the real answer, unlogged


def test_a_module_loaded_or_replaced_since_the_last_prepare_keeps_the_real_datetime(monkeypatch):
    """`prepare` lists the loaded modules' namespaces again only where a module came, went or was
    replaced since it last did (a worker's tasks each call it): a module loaded since, or put in
    another's place under the same name (as many modules as before), is still left alone."""
    import sys
    import types

    def loaded_module() -> types.ModuleType:
        module = types.ModuleType("tt_test_loaded_since")
        exec("import datetime\ndef stamp():\n    return datetime.datetime.now()\n", module.__dict__)
        return module

    nondeterministic.prepare(stamp)   # (the modules listed)
    first = loaded_module()
    monkeypatch.setitem(sys.modules, first.__name__, first)
    nondeterministic.prepare(first.stamp)
    assert first.stamp.__globals__["datetime"] is datetime
    second = loaded_module()
    monkeypatch.setitem(sys.modules, second.__name__, second)   # in its place
    nondeterministic.prepare(second.stamp)
    assert second.stamp.__globals__["datetime"] is datetime and type(second.stamp()) is datetime.datetime


def make_generator() -> random.Random:
    return random.Random()


def make_numpy_generator():
    import numpy

    return numpy.random.RandomState()


def test_only_a_generator_the_jobs_own_code_makes_without_a_seed_has_its_seed_logged(monkeypatch):
    """`random.Random()` in code shipped by value (the job file's) seeds itself with what
    `log_result` answers (the seed drawn when recording, the logged one in replay); one a loaded
    module makes (a library's, which a replay in another process may make at another step or not
    at all) and one given a seed do not ask. pandas' `Timestamp.now()` is answered so too."""
    import sys

    import cloudpickle
    import pandas

    nondeterministic.prepare(len)
    asked = []

    def log_result(fn, *args, **kwargs):   # what a replay answers: the logged value
        asked.append(fn)
        return 1234 if fn is nondeterministic._system_seed else fn(*args, **kwargs)

    def users_step(depth=2, since=1):
        """As in a hooked step, this test's code standing for the step's: a call with tt's code
        above it is not the step's (numpy's seed source asked through tt's `_randbits` draws
        through `random._urandom`, which is logged only where the step's code calls it)."""
        frame = sys._getframe(depth)
        while frame is not None:
            if frame.f_globals.get("__name__", "").startswith("tt."):
                return False
            frame = frame.f_back
        return True

    monkeypatch.setattr(nondeterministic, "users_step", users_step)
    monkeypatch.setattr(nondeterministic, "log_result", log_result)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        shipped, shipped_numpy = cloudpickle.loads(cloudpickle.dumps((make_generator, make_numpy_generator)))
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    shipped_numpy()             # numpy's seed source, asked through log_result
    make_numpy_generator()      # ... but not for a loaded module's call
    assert asked == [nondeterministic._ORIGINAL[("numpy.random.bit_generator", "randbits")]]
    asked.clear()
    made = shipped()
    assert asked == [nondeterministic._system_seed]
    seeded = random.Random(1234)
    assert [made.random() for _ in range(3)] == [seeded.random() for _ in range(3)]
    make_generator()            # this module is loaded: a library's call, unlogged
    random.Random(5)            # seeded
    assert asked == [nondeterministic._system_seed]   # (`seeded` asked nothing either)
    assert isinstance(pandas.Timestamp.now(), pandas.Timestamp)
    assert asked[1:] == [nondeterministic._ORIGINAL[("pandas.Timestamp", "now")]]
    assert pandas.Timestamp("now") > pandas.Timestamp(2024, 1, 2) == pandas.Timestamp("2024-01-02")
    assert asked[2:] == [nondeterministic._timestamp_of]   # the clock's string alone asks


def test_a_run_recorded_before_a_call_was_covered_replays_it_unlogged(monkeypatch):
    """An operator recorded with version 1 (2026-11-29: True) logged no `Random()` seed: its
    replay must not ask the log for one (no such call was logged), nor for pandas' clock."""
    from tt.core.hooked import operator_for
    from tt.core.operator import CONTEXT

    import pandas

    nondeterministic.prepare(len)
    assert operator_for(len, "rdd.map", "").logs_nondeterministic == nondeterministic.VERSION >= 2

    class Runner:
        op = operator_for(len, "rdd.map", "")

    asked = []
    monkeypatch.setattr(nondeterministic, "log_result", lambda fn, *a, **k: asked.append(fn) or fn(*a, **k))
    monkeypatch.setattr(nondeterministic, "_called_by_users_code", lambda own: True)
    monkeypatch.setattr(nondeterministic, "STEP_FRAMES", frozenset({(__name__, "in_a_step")}))
    monkeypatch.setattr(CONTEXT, "runner", Runner)

    def in_a_step():   # stands for tt's frame that calls the user's code in a step: its calls are the user's
        random.Random()
        pandas.Timestamp.now()

    monkeypatch.setattr(nondeterministic, "_NOT_USERS", ("tt.", "pyspark", "py4j", __name__))   # ... as tt's frames are
    in_a_step()
    assert len(asked) == 2
    Runner.op.logs_nondeterministic = True   # recorded on 2026-11-29
    asked.clear()
    in_a_step()
    assert asked == []

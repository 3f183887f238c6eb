"""Module globals a hooked function (or a StatefulProcessor's methods) assigns or writes into, the
instance of a method bound through `functools.partial` and the arguments a partial binds, and a
function's own attributes, are its state (`tests/jobs/hooked_globals.py`).

A function that loads a model once (`global MODEL`) and counts its batches (`global BATCHES`)
showed no state at all: the debugger had nothing to show and `tt verify` nothing to compare.
A function that dedupes through a global set (`SEEN.add(x)`) or keeps a dict bound by
`partial(f, totals={})` showed none of it either. Checked here: the output recorded and not, and
against pandas; `tt verify`; the globals after each batch or row in a replay, against what the
data makes; globals it only reads are not state; and an operator recorded before shows what it
showed then (a run's states stay what it recorded).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import each_step, record_on_and_off, verified

from tt.core import hooked
from tt.core.written_globals import written_attributes, written_globals
from tt.replay.session import DebugSession

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_globals.py"
ROWS, BATCH = 80, 9
RATES = {"c0": 1.0, "c1": 1.5}


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    return record_on_and_off(JOB, tmp_path_factory.mktemp("globals"))


def test_recording_does_not_change_the_output(recorded):
    _, on, off = recorded
    assert on == off
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["score"] = ((pdf["id"] * 7) % 11) * (pdf["id"] % 2).map({0: RATES["c0"], 1: RATES["c1"]})
    pdf["batch"] = (pdf["id"] % (ROWS // 2)) // BATCH + 1   # two partitions of 40 rows, in batches of 9
    assert on["scores"] == [[i, s, b] for i, s, b in zip(pdf["id"], pdf["score"], pdf["batch"])]
    per_partition = [min(BATCH * n, ROWS // 2) * 10 for n in range(1, -(-(ROWS // 2) // BATCH) + 1)]
    assert on["tallies"] == sorted(per_partition * 2)
    assert on["sightings"] == sorted(row for part in _partitions() for row in _first_sightings(part))
    assert on["totals"] == sorted(row for part in _partitions() for row in _running_totals(part))


def _partitions() -> list[pd.DataFrame]:
    """The job's two partitions of payments (`spark.range(0, 80, numPartitions=2)`)."""
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["customer"] = "c" + (pdf["id"] % 2).astype(str)
    pdf["amount"] = ((pdf["id"] * 7) % 11).astype(float)
    return [pdf.iloc[:ROWS // 2].reset_index(drop=True), pdf.iloc[ROWS // 2:].reset_index(drop=True)]


def _first_sightings(part: pd.DataFrame, upto: int | None = None):
    """`first_sightings` over a partition's first `upto` rows: its outputs, `SEEN` and `COUNTS`."""
    seen, counts, out = set(), {}, []
    for r in part.iloc[:upto].itertuples():
        counts[r.customer] = counts.get(r.customer, 0) + 1
        if r.amount not in seen:
            seen.add(r.amount)
            out.append([r.id, r.customer, counts[r.customer]])
    return (out, seen, counts) if upto is not None else out


def _running_totals(part: pd.DataFrame, batches: int | None = None):
    """`running` over a partition's first `batches` batches of BATCH rows: its outputs, or its totals."""
    totals, out = {}, []
    for b, start in enumerate(range(0, len(part), BATCH)[:batches], start=1):
        for r in part.iloc[start:start + BATCH].itertuples():
            totals[r.customer] = totals.get(r.customer, 0.0) + r.amount
        out.extend([c, t, b] for c, t in totals.items())
    return totals if batches is not None else out


def test_verify_passes(recorded, capsys):
    verified(recorded[0], capsys)


def test_the_globals_it_assigns_are_its_state_after_each_batch(recorded):
    session = DebugSession(recorded[0])
    batches: dict[int, int] = {}
    for i, unit, state in each_step(session, "score"):
        if unit is None:
            continue
        batches[i] = batches.get(i, 0) + 1
        assert state["globals"] == {"MODEL": {"weights": RATES, "loaded": 1}, "BATCHES": batches[i]}
    session.reader.close()
    assert sorted(batches.values()) == [-(-(ROWS // 2) // BATCH)] * 2


def test_the_globals_it_writes_into_are_its_state_after_each_row(recorded):
    """`first_sightings` fills `SEEN` and `COUNTS` without assigning them (`SEEN.add(x)`,
    `COUNTS[c] = ...`): after each row of a replay, they hold what its partition's rows so far make."""
    session = DebugSession(recorded[0])
    rows = {0: 0, 1: 0}
    for i, unit, state in each_step(session, "first_sightings"):
        if unit is not None:
            rows[i] += 1
            _, seen, counts = _first_sightings(_partitions()[i], rows[i])
            assert state["globals"] == {"SEEN": seen, "COUNTS": counts}
    session.reader.close()
    assert rows == {0: ROWS // 2, 1: ROWS // 2}


def test_the_arguments_a_partial_binds_and_a_functions_attributes_are_its_state(recorded):
    """`mapInPandas(partial(running, totals={}))` keeps its totals in the bound dict, and counts
    its batches in `running.batches`: both after each batch, against pandas."""
    session = DebugSession(recorded[0])
    batches = {0: 0, 1: 0}
    for i, unit, state in each_step(session, "running"):
        if unit is not None:
            batches[i] += 1
            totals = _running_totals(_partitions()[i], batches[i])
            assert (state["batches"], state["arguments"]) == (batches[i], {"totals": totals})
            assert state["locals"]["totals"] == totals   # (the generator's parameter: the same dict)
    session.reader.close()
    assert batches == {0: 5, 1: 5}


def test_a_method_bound_through_partial_is_named_and_shows_its_instance(recorded):
    """`mapInPandas(partial(Tally().run, scale=10))`: the operator is `run` (it was `partial`), and
    its state the instance's `rows` (it was `{}`), the rows it has seen, batch after batch."""
    session = DebugSession(recorded[0])
    rows: dict[int, int] = {}
    for i, unit, state in each_step(session, "run"):
        if unit is not None:
            rows[i] = rows.get(i, 0) + len(unit)
            assert state["rows"] == rows[i]
    session.reader.close()
    assert sorted(rows.values()) == [ROWS // 2] * 2


def test_a_processor_shows_the_global_its_methods_assign(recorded):
    """`Largest` keeps the largest amount in `global LARGEST`: after each customer's rows (one
    task: one shuffle partition), the largest of that customer's and the ones before."""
    pdf = pd.DataFrame({"id": range(ROWS)})
    pdf["customer"] = "c" + (pdf["id"] % 2).astype(str)
    pdf["amount"] = ((pdf["id"] * 7) % 11).astype(float)
    session = DebugSession(recorded[0])
    largest, keys = 0.0, []
    for _, unit, state in each_step(session, "Largest"):
        if unit is not None and unit[0] in ("rows", "one_row"):
            keys.append(unit[1][0])
        if unit is not None and unit[0] in ("rows_end", "one_row"):
            largest = max(largest, float(pdf[pdf["customer"] == keys[-1]]["amount"].max()))
            assert state["globals"] == {"LARGEST": largest}
    session.reader.close()
    assert sorted(keys) == ["c0", "c1"]
    assert recorded[1]["largest"] == sorted([c, float(pdf[pdf["customer"].isin(keys[:keys.index(c) + 1])]["amount"].max())]
                                            for c in keys)


def test_a_function_recorded_before_shows_what_it_showed_then():
    def counting(rows, tally):
        global COUNTED
        for r in rows:
            COUNTED = r
            FILLED.append(r)
            counting.calls += 1
            yield r

    counting.calls = 1
    op = hooked.operator_for(functools.partial(counting, tally=[]), "mapInPandas", "x.py:1")
    globals().update(COUNTED=3, FILLED=[4])
    assert op.state() == {"calls": 1, "arguments": {"tally": []}, "globals": {"COUNTED": 3, "FILLED": [4]}}
    op.state_version = 1   # as an operator pickled by a tt before this one unpickles
    assert op.state() == {"globals": {"COUNTED": 3}}
    op.state_version = 0
    assert op.state() == {}


def _writes(k, v, rows):
    """Every way of writing into a global that `written_globals` finds (and reads it must not take
    for writes)."""
    W_SET[k] = v
    W_AUG[k] += 1
    W_CHAIN.setdefault(k, []).append(v)
    W_PART[k].append(v)
    W_ADD.add(v)
    del W_DEL[k]
    W_OBJ.attr = v
    W_DEEP.stats.count += 1
    W_NEST[k][v] = 1
    W_SLICE[1:2] = [v]
    W_LOC.loc[k, "a"] = v
    W_CALLED[len(rows)] = v
    W_BUILT[k] = [x for x in R_COMPREHENDED]
    R_KEY_OF[R_KEY[k]] = 1   # (R_KEY_OF is written into, R_KEY only read)
    x = R_GET[k] + R_LEN.get(k, 0) + len(R_CALLED)
    if k in R_TESTED:
        x += 1
    for r in R_LOOPED:
        x += r
    print(R_PRINTED, file=R_FILE)

    def inner():
        W_INNER.append(1)
    _helper()   # (a function of this module it calls writes into W_HELPED)
    return x, inner


def _helper():
    W_HELPED.add(1)
    _writes   # (a loop of calls back is read once)


def test_written_globals_finds_the_writes_into_a_global_and_not_its_reads():
    written = {"W_SET", "W_AUG", "W_CHAIN", "W_PART", "W_ADD", "W_DEL", "W_OBJ", "W_DEEP", "W_NEST", "W_SLICE",
               "W_LOC", "W_CALLED", "W_BUILT", "R_KEY_OF", "W_INNER", "W_HELPED"}
    names = {name for name in _writes.__code__.co_names if name.startswith(("W_", "R_"))} | {"W_INNER", "W_HELPED"}
    globals().update({name: [] for name in names})
    assert set(written_globals(_writes)) == written
    assert set(written_globals(_writes, in_place=False)) == set()


def test_the_globals_of_a_class_are_those_its_methods_assign():
    """A UDTF is handed over as its class, a processor or a callable as an instance: every method
    of their classes counts, PySpark's own base classes aside."""
    class Handler:
        def eval(self, row):
            global HANDLED
            HANDLED = row

        def _helper(self):
            global HELPED
            HELPED = 1

    globals().update(HANDLED=7, HELPED=2)
    assert written_globals(Handler) == written_globals(Handler()) == {"HANDLED": 7, "HELPED": 2}
    assert written_globals(Handler().eval) == {"HANDLED": 7}


def test_written_attributes_are_those_a_callable_objects_methods_write_into_itself():
    """A per-row UDF that is a callable object keeps state in its attributes (`self.n += 1`):
    `written_attributes` names those its methods write, `__init__`'s (run where it is made)
    and reads aside; a function or a class writes none of its own."""
    class Numbering:
        def __init__(self):
            self.n, self.cache, self.model, self.seen = 0, {}, 3, []

        def __call__(self, x):
            self.n += 1
            self.cache[x] = self.model * x
            self._note(x)
            return self.n

        def _note(self, x):
            self.seen.append(x)

    class Reading:
        def __init__(self):
            self.model = 3

        def __call__(self, x):
            return self.model * x

    assert written_attributes(Numbering()) == ["n", "cache", "seen"]
    assert written_attributes(Numbering().__call__) == ["n", "cache"]
    assert written_attributes(Reading()) == written_attributes(Numbering) == written_attributes(lambda x: x) == []


def test_class_attributes_written_through_self_are_the_shared_ones():
    """What a recording warns of and a state shows as its class's (core/written_globals.py):
    attributes in the class body that the methods change in place through `self`. An immutable
    one (`count = 0`, then `self.count += 1`) becomes the instance's own at the first write, one
    `__init__` sets is the instance's, and a property or a method is no state."""
    from tt.core.written_globals import class_shared_writes, shared_class_attributes

    class Handler:
        count = 0
        seen = []
        totals = {}
        mine = {}

        def __init__(self):
            self.mine = {}

        @property
        def size(self):
            return len(self.seen)

        def eval(self, x):
            self.count += 1
            self.seen.append(x)
            self.totals[x] = self.totals.get(x, 0) + 1
            self.mine[x] = 1

    assert class_shared_writes(Handler) == ["seen", "totals"]
    h = Handler()
    h.eval(3)
    assert shared_class_attributes(h) == {"seen": [3], "totals": {3: 1}}
    assert h.__dict__ == {"mine": {3: 1}, "count": 1}

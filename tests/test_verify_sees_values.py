"""`tt verify` compares what an operator's state holds, whatever Python holds it in.

States are compared by their encoding (core/values.py). A numpy array was encoded by its repr,
which leaves out the middle of a long array and the digits past the eighth; an enum member and
a pandas Series had no public attributes and were encoded as `{}`; a random generator was its
attributes (`gauss_next`) or its repr, whatever it would draw next; a DataFrame was its shape. A
replay that changed any of
them was "verified". The operator below keeps one of each; the job reads an environment variable
that tt does not log (a `tt.Dataflow` operator's reads are not: tests/test_replay_differs.py), so
a replay where it is set differs in one field, and verify must name that field. The oracle of
the states is the job's input.
"""

from __future__ import annotations

import enum
import os
import random
import sys

import cloudpickle
import numpy as np
import pandas as pd
import pytest

import tt
from tt.cli.main import main
from tt.core import values
from tt.store.reader import RunReader

ROWS, BINS = 3000, 2000   # more bins than an array shows item by item (values.SHOWN_ITEMS)
CHANGED = {"counts": "TT_TEST_CHANGE_COUNTS", "phase": "TT_TEST_CHANGE_PHASE", "recent": "TT_TEST_CHANGE_RECENT",
           "rng": "TT_TEST_CHANGE_RNG", "gen": "TT_TEST_CHANGE_GEN", "last": "TT_TEST_CHANGE_LAST"}


class Phase(enum.Enum):
    OPEN = 1
    LATE = 2


class Binned(tt.Operator):
    """Adds each row's `v` into bin `id % BINS` (a numpy array), keeps the last five `v`s (a
    pandas Series) and the last three rows (a DataFrame), is LATE once row 2,500 has passed, and
    draws from two seeded generators a row (`random.Random`, numpy's `Generator`). An environment variable per field changes that field
    alone, a little, before row 1,500, where the replay finds it set (a generator draws once more)."""

    def __init__(self):
        self.counts = np.zeros(BINS)
        self.recent = pd.Series([], dtype=float)
        self.phase = Phase.OPEN
        self.rng = random.Random(5)
        self.gen = np.random.default_rng(5)
        self.last = pd.DataFrame({"id": pd.Series([], dtype="int64"), "v": pd.Series([], dtype=float)})

    def process(self, row, port=0):
        middle = row["id"] == 1000   # (a bin in the middle of the array)
        self.counts[row["id"] % BINS] += row["v"] + (1e-9 if middle and os.environ.get(CHANGED["counts"]) else 0.0)
        late = row["id"] == 1499 and os.environ.get(CHANGED["recent"])   # (among the last five at row 1,500)
        self.recent = pd.concat([self.recent, pd.Series([row["v"] + (0.5 if late else 0.0)])],
                                ignore_index=True).iloc[-5:]
        seen = {"id": row["id"], "v": row["v"] + (0.5 if row["id"] == 1499 and os.environ.get(CHANGED["last"]) else 0.0)}
        self.last = pd.concat([self.last, pd.DataFrame([seen])], ignore_index=True).iloc[-3:]
        if row["id"] >= 2500 or (middle and os.environ.get(CHANGED["phase"])):
            self.phase = Phase.LATE
        for name in ("rng", "gen"):
            for _ in range(2 if middle and os.environ.get(CHANGED[name]) else 1):
                getattr(self, name).random()
        yield row


def _input() -> pd.DataFrame:
    return pd.DataFrame({"id": range(ROWS), "v": [float(i % 7) + 0.25 for i in range(ROWS)]})


@pytest.fixture(scope="module")
def binned_run(spark, tmp_path_factory):
    from pathlib import Path

    from tt.recorder.session import RecordingSession

    assert not any(v in os.environ for v in CHANGED.values())
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    out = tmp_path_factory.mktemp("binned") / "binned.db"
    flow = tt.Dataflow("binned")
    flow.source("U", spark.createDataFrame(_input()).coalesce(1)).process(Binned(), name="B").collect("out")
    session = RecordingSession(out, Path(__file__), [], watch="B", when="row['id'] == 1500")
    with session:
        flow.run()
    session.close()
    return out


def _interaction(run, trigger: str) -> int:
    reader = RunReader(run)
    try:
        return next(i.k for i in reader.interactions() if i.trigger == trigger)
    finally:
        reader.close()


def _state_at(run, trigger: str) -> dict:
    k = _interaction(run, trigger)
    reader = RunReader(run)
    try:
        b = reader.operator("B").id
        (at,) = [a for (op, _), a in reader.instances_at(k).items() if op == b]
        return values.decode(reader.state(at.state))
    finally:
        reader.close()


def test_the_recorded_states_hold_every_value(binned_run):
    """At the condition (rows 0..1500 in) and at the end, against numpy and pandas on the input."""
    pdf = _input()
    for trigger, n in (("condition", 1501), ("end", ROWS)):
        state = _state_at(binned_run, trigger)
        seen = pdf.iloc[:n]
        counts = np.bincount(seen["id"] % BINS, weights=seen["v"], minlength=BINS)
        assert state["counts"]["shape"] == [BINS] and state["counts"]["dtype"] == "float64"
        assert state["counts"]["first"] == counts[:10].tolist()
        assert state["counts"] == values.decode(values.encode(counts))   # all bins, by their digest
        assert state["recent"]["items"] == seen["v"].iloc[-5:].tolist()
        assert state["recent"]["index"] == "RangeIndex(start=1, stop=6, step=1)"   # (six values, the first dropped)
        assert state["phase"] == ("<Phase.LATE: 2>" if n > 2500 else "<Phase.OPEN: 1>")
        rng, gen = random.Random(5), np.random.default_rng(5)
        for _ in range(n):
            rng.random(), gen.random()
        assert state["rng"] == values.decode(values.encode(rng)) and state["rng"].startswith("<Random state ")
        assert state["gen"] == values.decode(values.encode(gen)) and state["gen"].startswith("<Generator state ")
        rng.random(), gen.random()
        assert (state["rng"], state["gen"]) != (values.encode(rng)["$repr"], values.encode(gen)["$repr"])
        last = seen.iloc[-3:].set_axis(range(1, 4))   # (the index concat, then iloc, leave it: digested too)
        assert state["last"] == values.decode(values.encode(last))
        assert state["last"].startswith("<DataFrame: 3 rows × 2 columns (id, v), xxh3 ")
        assert state["last"] != values.decode(values.encode(last.assign(v=last["v"] + 1e-9)))
        assert state["last"] != values.decode(values.encode(seen.iloc[-3:]))


def test_verify_passes_where_the_replay_reads_what_the_recording_did(binned_run, capsys):
    assert main(["verify", str(binned_run)]) == 0
    assert "every replayed state equals the recorded one" in capsys.readouterr().out


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_verify_finds_a_replay_that_changed_one_field(binned_run, field, monkeypatch, capsys):
    """One bin of 2,000 off by 1e-9, the phase one member early, one of the last five values off
    by 0.5, a generator one draw ahead: each passed as verified when the state was encoded by
    repr or public attributes.
    The first interaction after the change (the condition's) is the one named."""
    monkeypatch.setenv(CHANGED[field], "1")
    assert main(["verify", str(binned_run)]) != 0
    out = capsys.readouterr().out
    k = _interaction(binned_run, "condition")
    assert f"replay diverges at interaction {k}: B:0 differs at interaction {k} in {field}" in out, out


def test_a_run_recorded_before_is_replayed_with_the_encoding_it_stored(binned_run, monkeypatch):
    """A run says how its states are encoded (meta `state_encoding`); one that says nothing was
    recorded by a tt that encoded an array by its repr, and an enum member, a Series or NA by
    their public attributes (none), NaT as a datetime: its replay encodes them so again, so that
    its recorded states still compare (the encodings below are what that tt wrote)."""
    assert RunReader(binned_run).state_encoding == values.ENCODING == 4
    _replay_a_copy_whose_meta_says(binned_run, None, monkeypatch)
    assert values._encoding == 1
    assert values.encode({"counts": np.arange(3.0), "phase": Phase.OPEN, "recent": pd.Series([1.5]),
                          "na": pd.NA, "seen": pd.NaT}) == {
        "counts": {"$repr": "array([0., 1., 2.])"},
        "phase": {"$object": f"{__name__}.Phase", "attrs": {}},
        "recent": {"$object": "pandas.core.series.Series", "attrs": {}},
        "na": {"$object": "pandas._libs.missing.NAType", "attrs": {}},
        "seen": {"$datetime": "NaT"}}


def test_a_run_recorded_with_encoding_2_shows_its_generators_as_it_did(binned_run, monkeypatch):
    """Encoding 2 wrote a random generator by its attributes or its repr: a run that stored 2 is
    replayed so."""
    _replay_a_copy_whose_meta_says(binned_run, 2, monkeypatch)
    assert values._encoding == 2
    assert values.encode({"rng": random.Random(5), "gen": np.random.default_rng(5)}) == {
        "rng": {"$object": "random.Random", "attrs": {"gauss_next": None}}, "gen": {"$repr": "Generator(PCG64)"}}


def test_a_run_recorded_with_encoding_3_shows_its_dataframes_by_their_shape(binned_run, monkeypatch):
    """Encoding 3 wrote a DataFrame by its shape alone: a run that stored 3 is replayed so."""
    _replay_a_copy_whose_meta_says(binned_run, 3, monkeypatch)
    assert values._encoding == 3
    assert values.encode(pd.DataFrame({"id": [1, 2], "v": [0.5, 1.5]})) == {
        "$repr": "<DataFrame: 2 rows × 2 columns (id, v)>"}


def _replay_a_copy_whose_meta_says(run, encoding: int | None, monkeypatch) -> None:
    """Open a replay engine on a copy of `run` whose meta names `encoding` (None: names none, as
    a run recorded before the meta was written); the process's encoding is put back after the test."""
    import sqlite3

    from tt.replay.engine import Engine

    monkeypatch.setattr(values, "_encoding", values.ENCODING)
    copy = run.parent / f"encoding-{encoding}.db"
    copy.write_bytes(run.read_bytes())
    with sqlite3.connect(copy) as conn:
        conn.execute("DELETE FROM meta WHERE key = 'state_encoding'")
        if encoding is not None:
            conn.execute("INSERT INTO meta VALUES ('state_encoding', ?)", (str(encoding),))
    reader = RunReader(copy)
    Engine(reader)
    reader.close()

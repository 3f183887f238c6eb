"""`tt verify` on runs it must not pass: unlogged randomness (named down to the tuple),
and interactions that are incomplete for another reason than the run having been cut off."""

from __future__ import annotations

import json
import random
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import cloudpickle
import pytest

import tt
import workloads
from tt.cli.main import main
from tt.recorder.session import RecordingSession
from tt.store.reader import RunReader

FIRST_DRAW = 151   # Pick draws for ids 151, 201, 251, ... (never before interaction 2)


class Pick(tt.Operator):
    """Keeps a random number per chosen row, drawn with random.random() and not logged."""

    def __init__(self):
        self.picked = {}
        self.n = 0

    def process(self, row, port=0):
        self.n += 1
        if row["id"] >= FIRST_DRAW and row["id"] % 50 == 1:
            self.picked[f"k{row['id']}"] = random.random()
        yield row


def build_pick(spark):
    rows = [{"id": i, "v": i % 7} for i in range(400)]
    flow = tt.Dataflow("pick")
    # one partition, in id order: input #i of R:0 is the row with id i
    flow.source("U", spark.createDataFrame(rows, "id long, v long").coalesce(1)).process(Pick(), name="R") \
        .collect("S")
    return flow


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """Two runs: `pick` (unlogged random draws) and `chain` (deterministic)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    out = {}
    base = tmp_path_factory.mktemp("verify_faults")
    for name, build, watch, when in (("pick", build_pick, "R", "row['id'] % 100 == 0"),
                                     ("chain", workloads.build_chain, "A", "row['amount'] > 400")):
        path = base / f"{name}.db"
        session = RecordingSession(path, Path(__file__), [], watch=watch, every=None, when=when)
        try:
            with session:
                build(spark).run()
        finally:
            session.close()
        out[name] = path
    return out


def _verify(path, capsys, *extra) -> tuple[int, str]:
    code = main(["verify", str(path), *extra])
    return code, capsys.readouterr().out


def test_unlogged_random_is_named_down_to_the_tuple(recorded, capsys):
    path = recorded["pick"]
    code, text = _verify(path, capsys)
    assert code == 1, text
    # interaction 2 (after 101 inputs) still matches, interaction 3 (after 201) does not: the first
    # draw in between is the row with id 151, R:0's input #151
    m = re.search(r"R:0 differs at interaction (\d+) in picked\.k(\d+)", text)
    assert m, text
    assert "R:0:151 {id: 151, v: 4}" in text, text
    assert "replaying R:0 twice from interaction" in text and "tt.log_result" in text, text
    assert text.startswith(f"{path}: verified ") and " of 6 interactions, then replay diverges" in text, text

    code, out = _verify(path, capsys, "--json")
    data = json.loads(out)
    bad = data["divergence"]
    assert code == 1 and not data["ok"]
    assert bad["op"] == "R" and bad["tuple"] == "R:0:151" and bad["input"] == 151 and bad["found_by"] == "replays"
    # the oracle: the named input is the first drawing one after the last interaction that matched
    reader = RunReader(path)
    matched = [r["k"] for r in data["results"] if r["ok"]]
    r_op = reader.operator("R").id
    before = reader.instances_at(matched[-1])[(r_op, 0)].position
    after = reader.instances_at(bad["k"])[(r_op, 0)].position
    draws = [i for i in range(before, after) if i >= FIRST_DRAW and i % 50 == 1]
    assert draws and bad["input"] == draws[0]
    assert data["checked"] == len(matched) and data["recorded"] == len(reader.interactions_all) == 6


def _copy(path: Path, tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copy(path, dst)
    return dst


def _interactions(path: Path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [k for (k,) in conn.execute("SELECT k FROM interactions ORDER BY k")]
    finally:
        conn.close()


def test_a_complete_run_verifies_n_of_m(recorded, capsys):
    path = recorded["chain"]
    m = len(_interactions(path))
    code, text = _verify(path, capsys)
    assert code == 0, text
    assert f"verified {m} of {m} interactions — every replayed state equals the recorded one" in text


def test_verify_compares_an_instance_again_only_where_it_moved(recorded, monkeypatch):
    """An instance at the position and recorded state at which it last matched matches again:
    verify compares each instance once per place it stood (a run taken every 0.1 s, whose
    50,000-key states were compared again at every interaction, kept verify over ten minutes).
    Every instance is still compared where it moved, and the run still verifies."""
    from tt.replay import verify as verifying
    from tt.replay.engine import Instance

    reader = RunReader(recorded["chain"])
    places: dict = {}   # instance -> the (position, recorded state) it stood at, over the run
    stood_still = 0
    for i in reader.interactions():
        for key, at in reader.instances_at(i.k).items():
            if at.state is not None:
                stood_still += (at.position, at.state) in places.get(key, set())
                places.setdefault(key, set()).add((at.position, at.state))
    assert stood_still, "the run has an instance standing still between two interactions"
    compared: dict = {}
    state = Instance.state

    def counted(self, *args, **kwargs):
        compared[self.key] = compared.get(self.key, 0) + 1
        return state(self, *args, **kwargs)

    monkeypatch.setattr(Instance, "state", counted)
    results = verifying.verify(reader)
    assert results and all(r["ok"] for r in results), results
    assert compared == {key: len(at) for key, at in places.items()}
    reader.close()


def test_an_incomplete_interaction_in_a_complete_run_fails(recorded, tmp_path, capsys):
    path = _copy(recorded["chain"], tmp_path, "gap.db")
    ks = _interactions(path)
    k = ks[len(ks) // 2]
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM barriers WHERE k=? AND op=(SELECT MIN(op) FROM barriers WHERE k=?)", (k, k))
    conn.commit()
    conn.close()
    assert RunReader(path).status == "complete"
    code, text = _verify(path, capsys)
    assert code == 1, text
    assert f"verified {len(ks) - 1} of {len(ks)} interactions, but interaction {k} is incomplete" in text, text
    assert "A:" in text and "took no snapshot" in text and "although the run completed" in text, text


def _cut_off(path: Path, extra_k: int) -> None:
    """As if the recorder had been killed: status interrupted, one task never committed, and an
    interaction requested after the last complete one that no instance took."""
    conn = sqlite3.connect(path)
    conn.execute("UPDATE run SET status='interrupted'")
    conn.execute("UPDATE attempts SET status='running' WHERE id=(SELECT MAX(id) FROM attempts)")
    conn.execute("INSERT INTO interactions VALUES (?, 0, 'user', NULL)", (extra_k,))
    conn.commit()
    conn.close()


def test_a_cut_off_run_may_lose_its_last_interactions(recorded, tmp_path, capsys):
    path = _copy(recorded["chain"], tmp_path, "cut.db")
    ks = _interactions(path)
    _cut_off(path, ks[-1] + 1)
    reader = RunReader(path)
    complete = len(reader.interactions())
    assert reader.status == "interrupted" and complete < len(ks) + 1
    code, text = _verify(path, capsys)
    assert code == 0, text
    cut = len(ks) + 1 - complete
    assert (f"verified {complete} of {len(ks) + 1} interactions — every replayed state equals the recorded one "
            f"(the run is interrupted; the {cut} interactions after the last complete one were cut off)") in text


def test_a_cut_off_run_with_a_hole_before_a_complete_interaction_fails(recorded, tmp_path, capsys):
    path = _copy(recorded["chain"], tmp_path, "hole.db")
    ks = _interactions(path)
    _cut_off(path, ks[-1] + 1)
    k = ks[2]
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM barriers WHERE k=?", (k,))
    conn.commit()
    conn.close()
    reader = RunReader(path)
    last = reader.interactions()[-1].k
    assert k < last
    code, text = _verify(path, capsys)
    assert code == 1, text
    assert f"interaction {k} is incomplete" in text and f"although interaction {last} after it is complete" in text

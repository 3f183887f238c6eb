"""The lineage index (replay/lineage_index.py): built by the first `tt lineage`, kept in the run
file, read by every later query instead of a replay of G(θ).

Its answers must be the replay's: every backward tree of every row any operator of G(θ)
emitted, and every forward tree of every tuple that entered it, equal (as `--json` prints
them) with the index just built, with the index read back from the file by a new session,
and without an index; and they still find the ids the oracle job carries in its rows. Then
the command: the note on the first query, none on the next, `--reindex`, `--no-index`, an
index for other logs ignored, an altered index refused, and a run still being recorded
indexed for the query alone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3

import pytest

from tt.cli.main import main
from tt.replay.lineage import Lineage
from tt.replay.lineage_index import FORMAT
from tt.replay.session import DebugSession

from test_lineage import JOB, source_ids

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """A run of the oracle job (θ = T, the user operator after the sources), never indexed
    (each test indexes a copy), and the sink rows Spark computed."""
    d = tmp_path_factory.mktemp("lineage_index")
    run, out = d / "run.db", d / "out.json"
    assert main(["record", str(JOB), "--watch", "T", "-o", str(run), "--", str(out), str(d / "data")]) == 0
    return run, json.loads(out.read_text())


@pytest.fixture
def run(recorded, tmp_path):
    copy = tmp_path / "run.db"
    shutil.copy(recorded[0], copy)
    return copy


def _all_trees(lin: Lineage) -> dict[str, list]:
    """Every tree this run has: back from every output of every operator of G(θ), forward from
    every source row; as --json prints them."""
    g = lin.graph
    out = {}
    for node in g.nodes:
        if node.id in g.in_g:
            roots = lin.rows_of(node.name, "True")
            out[f"{node.name} back"] = [lin.as_dict(t) for t in lin.trees(roots, back=True)]
    for source in ("ORDERS", "ITEMS"):
        roots = lin.rows_of(source, "True")
        out[f"{source} forward"] = [lin.as_dict(t) for t in lin.trees(roots, back=False)]
    return out


def test_the_index_answers_as_the_replay_does(run):
    plain = Lineage(DebugSession(run))
    expected = _all_trees(plain)

    built = Lineage(DebugSession(run))
    note = built.use_index()
    assert note.startswith("indexed the lineage of the ") and f"kept in {run}" in note
    assert _all_trees(built) == expected

    read = Lineage(DebugSession(run))   # a new session: the index comes from the file
    assert read.use_index() is None and read.index is not None
    assert not any(inst.count for inst in read.engine.instances.values()), "no replay"
    answers = _all_trees(read)
    assert answers == expected
    assert not any(inst.count for inst in read.engine.instances.values()), "answered without a replay"

    # and against the oracle: each sink row's backward tree reaches exactly the ids it carries
    sink = read.rows_of("OUT", "True")
    for tree in read.trees(sink, back=True):
        assert source_ids(tree) == set(tree.rows[tree.root]["ids"]), read.label(tree.root)
    assert len(sink) == len(answers["OUT back"]) > 0


def _lineage(run, *args, capsys) -> tuple[int, str, str]:
    rc = main(["lineage", str(run), *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_built_once_then_read(run, recorded, capsys):
    query = ["OUT", "--where", "kind == 'customer'", "--back", "--json"]
    rc, first, err = _lineage(run, *query, capsys=capsys)
    assert rc == 0 and err.startswith("tt: indexed the lineage of the ") and "later queries read it" in err
    with sqlite3.connect(run) as conn:
        parts = dict(conn.execute("SELECT part, COUNT(*) FROM lineage_index GROUP BY part").fetchall())
        info = json.loads(conn.execute("SELECT value FROM meta WHERE key='lineage_index'").fetchone()[0])
    assert parts["made"] == len(info["instances"]) and parts["outputs"] >= len(info["instances"])
    customers = [r for r in recorded[1] if r["kind"] == "customer"]
    assert sorted(t["tuples"][0]["row"]["cust"] for t in json.loads(first)) == sorted(r["cust"] for r in customers)

    rc, again, err = _lineage(run, *query, capsys=capsys)
    assert (rc, again, err) == (0, first, ""), "read from the file: no note, the same answer"
    rc, plain, err = _lineage(run, *query, "--no-index", capsys=capsys)
    assert (rc, plain, err) == (0, first, "")
    rc, rebuilt, err = _lineage(run, *query, "--reindex", capsys=capsys)
    assert rc == 0 and rebuilt == first and err.startswith("tt: indexed the lineage")


def test_a_wrong_question_is_told_before_an_index_is_built(run, capsys):
    """A tuple, row or --where that cannot be right is one line at once: the index (a replay of
    G(θ)) is not built for a question it cannot answer."""
    for args, said in ((["T:", "--back"], "bad tuple 'T:'"),
                       (["T:0:999999999", "--back"], "T:0 has inputs #0..#"),
                       (["T:0:0/x", "--back"], "bad row 'T:0:0/x'"),
                       (["OUT", "--where", "kind ==", "--back"], "bad --where expression 'kind =='"),
                       (["OUT", "--back"], "which of OUT's rows? choose them with --where"),
                       (["T:0:0", "--where", "True", "--back"], "T:0:0 names one tuple"),
                       (["OUT", "--where", "True", "--at", "1", "--back"], "--at chooses when a state value")):
        rc, out, err = _lineage(run, *args, capsys=capsys)
        assert (rc, out) == (2, "") and err.startswith(f"tt: error: {said}") and err.count("\n") == 1, (args, err)
    with sqlite3.connect(run) as conn:
        assert conn.execute("SELECT COUNT(*) FROM lineage_index").fetchone()[0] == 0


def test_a_query_pauses_the_cycle_collector_for_its_walk_alone(run, capsys, monkeypatch):
    """A walk's objects hold no cycles, so it runs without collections; a replay of the job's
    code (to build the index, or with --no-index) collects as usual; the command leaves
    collection on, after an answer as after an error."""
    import gc

    import tt.replay.lineage as rl
    from tt.replay.engine import Engine

    seen: dict[str, set] = {"replay": set(), "walk": set()}
    advance, made_of = Engine.advance_to, rl.Lineage._made_of
    monkeypatch.setattr(Engine, "advance_to", lambda *a, **k: (seen["replay"].add(gc.isenabled()), advance(*a, **k))[1])
    monkeypatch.setattr(rl.Lineage, "_made_of", lambda *a: (seen["walk"].add(gc.isenabled()), made_of(*a))[1])
    for flag, replayed in (("--no-index", {True}), ("--reindex", {True}), ("--index", set())):
        seen = {"replay": set(), "walk": set()}
        rc, out, _ = _lineage(run, "OUT", "--where", "kind == 'customer'", "--back", flag, capsys=capsys)
        assert rc == 0 and out.strip() and gc.isenabled()
        assert seen == {"replay": replayed, "walk": {False}}, flag
    rc, _, err = _lineage(run, "OUT", "--where", "kind ==", "--back", capsys=capsys)
    assert rc != 0 and "bad --where" in err and gc.isenabled()


def test_an_index_of_other_logs_is_ignored_and_built_again(run, capsys):
    query = ["ORDERS", "--where", "o_id == 3", "--forward"]
    rc, first, _ = _lineage(run, *query, capsys=capsys)
    with sqlite3.connect(run) as conn:
        info = json.loads(conn.execute("SELECT value FROM meta WHERE key='lineage_index'").fetchone()[0])
        info["instances"][0][2] += 1   # as if made when that instance had logged one more input
        conn.execute("UPDATE meta SET value=? WHERE key='lineage_index'", (json.dumps(info),))
    rc, again, err = _lineage(run, *query, capsys=capsys)
    assert rc == 0 and again == first and err.startswith("tt: indexed the lineage"), "rebuilt, not trusted"


def test_an_index_an_older_tt_kept_is_built_again(run, capsys):
    """An index in another format (an older tt's: one that traced a processor's state per
    instance, say) is not read: the next query builds it again, with the same answers here."""
    query = ["OUT", "--where", "True", "--back"]
    rc, first, _ = _lineage(run, *query, capsys=capsys)
    with sqlite3.connect(run) as conn:
        info = json.loads(conn.execute("SELECT value FROM meta WHERE key='lineage_index'").fetchone()[0])
        assert info["format"] == FORMAT
        info["format"] = FORMAT - 1
        conn.execute("UPDATE meta SET value=? WHERE key='lineage_index'", (json.dumps(info),))
    rc, again, err = _lineage(run, *query, capsys=capsys)
    assert rc == 0 and again == first and "tt: indexed the lineage" in err, "rebuilt, not read"
    rc, _, err = _lineage(run, *query, capsys=capsys)
    assert rc == 0 and err == "", "kept in this format: read"


def test_an_altered_index_is_refused_in_one_line(run, capsys):
    query = ["OUT", "--where", "True", "--back"]
    assert _lineage(run, *query, capsys=capsys)[0] == 0
    with sqlite3.connect(run) as conn:
        rowid, data = conn.execute("SELECT rowid, data FROM lineage_index WHERE part='outputs' LIMIT 1").fetchone()
        conn.execute("UPDATE lineage_index SET data=? WHERE rowid=?", (data[:-1] + bytes([data[-1] ^ 1]), rowid))
    rc, out, err = _lineage(run, *query, capsys=capsys)
    assert rc != 0 and out == "" and len(err.strip().splitlines()) == 1
    assert "altered" in err and "--trust" in err


def test_a_run_still_being_recorded_is_indexed_for_the_query_alone(run, capsys):
    with sqlite3.connect(run) as conn:   # as a live recorder on this host leaves it
        conn.execute("UPDATE run SET status='recording', recorder_pid=?, recorder_host=?",
                     (os.getpid(), socket.gethostname()))
    rc, out, err = _lineage(run, "OUT", "--where", "True", "--back", capsys=capsys)
    assert rc == 0 and out.startswith("OUT:")
    assert "for this query only: the run is still being recorded" in err
    with sqlite3.connect(run) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='lineage_index'").fetchone() is None


def test_a_join_outside_g_theta_answers_from_the_index_as_from_its_key_log(spark, tmp_path):
    """With `--lineage` and θ = R, the join J lies outside G(θ) and logs its inputs' keys alone
    (core/runtime.py `JoinLineageRunner`); the index keeps what each of its outputs was made
    from (`joined`), which its keys imply. Every tree must be the same with that index, read back
    by a new session, as without an index, and each sink row's backward tree must still reach the
    ids its row carries."""
    run, out = tmp_path / "run.db", tmp_path / "out.json"
    assert main(["record", str(JOB), "--watch", "R", "--lineage", "-o", str(run), "--", str(out),
                 str(tmp_path / "data"), "--items-by-reference"]) == 0
    plain = Lineage(DebugSession(run))
    assert plain.reader.keyed_joins(), "J logged its keys"
    expected = _all_trees(plain)
    assert Lineage(DebugSession(run)).use_index().startswith("indexed the lineage of the ")
    read = Lineage(DebugSession(run))
    assert read.use_index() is None and read.index is not None
    j = read.graph.node("J").id
    assert all(read.index.joined(key) == bytes(read.reader.made_from(*key)) for key in read.reader.keyed_joins()
               if key[0] == j) and read.index.joined((j, 0)), "kept in the index"
    items = read.graph.node("ITEMS").id   # read by reference, counted (no filter): its rows per row group kept
    counts = read.index.load_counts((items, 0))
    assert counts is not None and counts.sum() > 0 and read.reader.sources().known_counts is not None
    assert len(read.index.load_rows((items, 0, 0))) == counts[0] and read.reader.sources().known_rows is not None
    assert _all_trees(read) == expected
    sink = read.rows_of("OUT", "True")
    for tree in read.trees(sink, back=True):
        assert source_ids(tree) == set(tree.rows[tree.root]["ids"]), read.label(tree.root)
    assert sink

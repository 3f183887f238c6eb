"""Unit tests of the pieces under the recorder and the replay engine (no Spark)."""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import itertools
import pickle
import random
import socket
import sqlite3
import threading
from array import array

import pandas as pd
import pytest

from tt.core import values
from tt.core.errors import UsageError
from tt.core.graph import Graph, stable_hash
from tt.core.logs import (InputRuns, LoggedResult, pack_dests, pack_results, pack_runs, unpack_dests,
                          unpack_results, unpack_runs)
from tt.core.operator import Filter, Map, Operator, Source
from tt.recorder import wire
from tt.recorder.triggers import compile_condition, parse_duration
from tt.store.writer import Writer


# --- values --------------------------------------------------------------------------------

class Point:
    def __init__(self):
        self.x, self.y, self._hidden = 1, (2, 3), "no"


class MyFrame(pd.DataFrame):
    """A DataFrame subclass (at module level: pickle finds it)."""


@pytest.mark.parametrize("value", [
    None, True, 3, -2**70, 2.5, float("inf"), "s", [1, "a"], (1, (2,)), {"a": 1}, {1: "int key"},
    {"$tuple": "looks like a tag"}, {3, 1, 2}, frozenset({"x"}), b"\x00\xff", decimal.Decimal("1.10"),
    dt.datetime(2024, 1, 2, 3, 4, 5), dt.date(2024, 1, 2), {"nested": [{"t": (1, 2)}, {2: {3}}]},
])
def test_values_round_trip(value):
    encoded = values.encode(value)
    assert values.loads(values.dumps(value)) == encoded
    assert values.decode(encoded) == value


def test_values_keep_apart_what_behaves_differently():
    assert values.dumps([1, 2]) != values.dumps((1, 2))
    assert values.dumps({1: "a"}) != values.dumps({"1": "a"})
    assert values.dumps(1.0) != values.dumps(decimal.Decimal("1.0"))
    assert values.dumps({"b": 1, "a": 2}) == values.dumps({"a": 2, "b": 1})


def test_objects_and_first_difference():
    enc = values.encode(Point())
    assert enc["attrs"] == {"x": 1, "y": {"$tuple": [2, 3]}}
    a = values.encode({"blacklist": {"Bob": 7, "Eve": 3}, "n": 1})
    b = values.encode({"blacklist": {"Bob": 7, "Eve": 4}, "n": 1})
    assert values.first_difference(a, b) == ("blacklist.Eve", 3, 4)
    assert values.first_difference(a, a) is None
    assert values.first_difference([1, 2], [1, 2, 3])[0] == "[2]"
    assert values.first_difference({"z": [1, 0.0]}, {"z": [1, -0.0]}) == ("z[1]", 0.0, -0.0), "verify sees the sign"
    assert not values.same_encoded({"z": [1, 0.0]}, {"z": [1, -0.0]}) and not values.same_encoded([1], [True])
    assert values.same_encoded({"a": 1, "b": [0.5]}, {"b": [0.5], "a": 1}) and values.same_encoded(a, a)


class Linked:
    def __init__(self, parent=None):
        self.parent, self.children = parent, []
        if parent is not None:
            parent.children.append(self)


def _ring() -> dict:
    a = Linked()
    Linked(a)
    loop: list = [1]
    loop.append(loop)
    mapping: dict = {"n": 1}
    mapping["me"] = mapping
    return {"tree": a, "loop": loop, "mapping": mapping}


def test_a_value_that_leads_back_to_itself_is_cut_where_the_loop_closes():
    """A tree with parent links, a list or a dict holding itself: encoded (it raised RecursionError),
    each return shown as `<cycle: T>` where it closes, the same bytes for the same shape."""
    encoded = values.encode(_ring())
    assert encoded["tree"]["attrs"]["children"][0]["attrs"] == {"parent": {"$repr": "<cycle: Linked>"}, "children": []}
    assert encoded["loop"] == [1, {"$repr": "<cycle: list>"}]
    assert encoded["mapping"] == {"n": 1, "me": {"$repr": "<cycle: dict>"}}
    assert values.dumps(_ring()) == values.dumps(_ring())
    shared = [1, 2]   # met twice, but never inside itself: whole both times
    assert values.encode({"a": shared, "b": (shared, shared)}) == {"a": [1, 2], "b": {"$tuple": [[1, 2], [1, 2]]}}


def test_a_value_nested_deeper_than_json_is_written_is_cut_at_a_fixed_depth():
    """A chain of 2,000 objects (deeper than Python's stack) and 300 nested lists (deeper than orjson
    writes): cut at `_DEEPEST` levels, where `<too deep: T>` says so."""
    node = None
    for _ in range(2000):
        node = Linked(node)
    deep = values.dumps(node)
    assert deep.count(b'"$object"') == values._DEEPEST // 2 and b"<too deep: Linked>" in deep   # (an object, then its attributes)
    nested: list = []
    inner = nested
    for _ in range(300):
        inner.append([])
        inner = inner[0]
    assert values.dumps(nested).count(b"[") == values._DEEPEST and b"<too deep: list>" in values.dumps(nested)


def test_the_process_machinery_is_shown_by_name_and_without_its_address():
    """A module and a logger are not walked (a logger's manager holds every logger of the process,
    which a replay's does not), and a repr drops the memory address a replay's object never shares."""
    import json
    import logging

    log = logging.getLogger("tt.test.units")
    assert values.encode({"log": log, "root": logging.getLogger(), "handler": logging.StreamHandler(),
                          "codec": json}) == {
        "log": {"$repr": "<Logger tt.test.units>"}, "root": {"$repr": "<RootLogger root>"},
        "handler": {"$repr": "<StreamHandler>"}, "codec": {"$repr": "<module 'json'>"}}
    lock = threading.Lock()
    assert values.encode(lock) == {"$repr": "<unlocked _thread.lock object>"}
    assert values.dumps(threading.Lock()) == values.dumps(lock)


class Slotted:
    __slots__ = ("x", "y", "_hidden", "unset")

    def __init__(self, x):
        self.x, self.y, self._hidden = x, [x], "no"


class Color(__import__("enum").Enum):
    RED = 1
    BLUE = 2


def test_values_without_public_attributes_are_encoded_by_what_they_hold():
    """An enum member, a slotted object, numpy and Arrow arrays, pandas Series, Index and arrays:
    encoded as `{}` or by a repr that leaves items out before, so two different ones were equal."""
    import numpy as np
    import pyarrow as pa

    assert values.encode(Color.RED) == {"$repr": "<Color.RED: 1>"} != values.encode(Color.BLUE)
    assert values.encode(Slotted(1)) == {"$object": "test_units.Slotted", "attrs": {"x": 1, "y": [1]}}
    assert values.encode(np.array([[1.5, float("nan")], [float("inf"), -0.0]])) == {"$object": "numpy.ndarray", "attrs": {
        "dtype": "float64", "shape": [2, 2], "items": [[1.5, {"$float": "nan"}], [{"$float": "inf"}, -0.0]]}}
    big = np.arange(values.SHOWN_ITEMS + 1, dtype=float)
    changed = big.copy()
    changed[500] = np.nextafter(changed[500], 1e9)   # one item, one unit in the last place
    assert values.encode(big)["attrs"]["first"] == list(range(10)) and values.dumps(big) != values.dumps(changed)
    assert values.dumps(big) == values.dumps(big.copy()) == values.dumps(np.asfortranarray(big))
    words = np.array([f"w{i}" for i in range(values.SHOWN_ITEMS + 1)], dtype=object)
    other = words.copy()
    other[700] = "x"
    assert values.dumps(words) != values.dumps(other)
    s = pd.Series([1.0, 2.0], index=["a", "b"], name="amount")
    assert values.encode(s)["attrs"] == {"dtype": "float64", "name": "amount", "shape": [2], "items": [1.0, 2.0],
                                         "index": {"$object": "pandas.core.indexes.base.Index", "attrs": {
                                             "dtype": "object", "shape": [2], "items": ["a", "b"]}}}
    assert values.encode(pd.Series([1, None], dtype="Int64"))["attrs"]["items"] == [1, {"$repr": "<NA>"}]
    assert values.encode(pd.Categorical(["a", "b"]))["attrs"] == {"dtype": "category", "shape": [2], "items": ["a", "b"]}
    assert values.encode(pa.array(["x", None]))["attrs"] == {"dtype": "object", "type": "string", "shape": [2],
                                                              "items": ["x", None]}
    assert values.decode(values.encode({"seen": pd.NaT, "na": pd.NA})) == {"seen": "NaT", "na": "<NA>"}   # (NaT's isoformat read back raised)


def test_an_array_renders_as_numpy_shows_one():
    """In `tt inspect state`, `tt replay` and the debugger's state tree (its one-line `short`)."""
    import numpy as np

    from tt.tui.widgets.state_inspector import short

    assert values.render(values.encode({"h": np.array([16.0, 12.0])})) == "{h: ndarray([16.0, 12.0], float64)}"
    assert values.render(values.encode(pd.Series([1.5], name="amt"))) == "Series 'amt'([1.5], float64)"
    long = values.encode(np.zeros((50, 100)))
    assert values.render(long, None) == (f"ndarray([{', '.join(['0.0'] * 10)}, …] 50×100 float64, "
                                         f"xxh3 {long['attrs']['xxh3'][:8]})")
    assert short(long, 30) == "ndarray([0.0, 0.0, 0.0, 0.0, …" and short(values.encode(np.arange(3))) == "ndarray([0, 1, 2], int64)"


def test_render_is_short():
    assert values.render(values.encode({"k": (1, 2)})) == "{k: (1, 2)}"
    assert len(values.render(values.encode(list(range(1000))), 40)) == 40


# --- logs ----------------------------------------------------------------------------------------

def test_input_runs_merge_and_split():
    runs = InputRuns()
    for port, src in [(0, 1), (0, 1), (1, 0), (1, 0), (1, 0), (0, 1)]:
        runs.add(port, src)
    assert runs.runs == [[0, 1, 2], [1, 0, 3], [0, 1, 1]]
    assert runs.take(3) == [[0, 1, 2], [1, 0, 1]]
    assert runs.runs == [[1, 0, 2], [0, 1, 1]]
    assert unpack_runs(pack_runs(runs.take())) == [(1, 0, 2), (0, 1, 1)]


@pytest.mark.parametrize("n_dest", [1, 2, 3, 4, 7, 16, 17, 256, 300, 70000])
def test_dests_pack(n_dest):
    rng = random.Random(n_dest)
    a = array("I", [rng.randrange(n_dest) for _ in range(1003)])
    packed = pack_dests(a, n_dest)
    assert unpack_dests(packed, len(a)) == a
    if n_dest <= 4:
        assert len(packed) <= 1 + len(a) // 4 + 1


def test_results_pack():
    rows = [(3, 0, "random.random", 0.5), (3, 1, "time.time", {"x": (1,)})]   # as a runner logs them
    assert unpack_results(pack_results(rows)) == [LoggedResult(*r) for r in rows]


# --- graph -----------------------------------------------------------------------------------------

class Stateful(Operator):
    def __init__(self):
        self.n = 0

    def process(self, row, port=0):
        yield row


def _graph():
    g = Graph()
    u = g.add_node("U", "source", Source())
    v = g.add_node("V", "source", Source())
    a = g.add_node("A", "process", Stateful())
    m = g.add_node("M", "map", Map(lambda r: r))
    k = g.add_node("K", "process", Stateful())
    un = g.add_node("UN", "union", Stateful())
    f = g.add_node("F", "filter", Filter(bool))
    g.connect(u, a)
    g.connect(a, m)
    g.connect(m, k, key=lambda r: r, partitions=5)
    g.connect(k, un)
    g.connect(v, un)          # a merge of two stages without key: becomes a shuffle
    g.connect(un, f)
    return g


def test_stage_cutting_and_g_theta():
    g = _graph()
    g.cut_stages({0: 4, 1: 3}, default_partitions=None)
    stage = {n.name: n.stage for n in g.nodes}
    assert stage["A"] == stage["M"] == stage["U"]
    assert stage["K"] not in (stage["U"], stage["V"])
    assert g.node("K").instances == 5
    assert stage["UN"] not in (stage["K"], stage["V"]) and stage["F"] == stage["UN"]
    assert all(g.edges[e].shuffle for e in g.node("UN").inputs)
    theta = g.choose_theta(None)
    assert theta.name == "A" and {g.nodes[i].name for i in g.in_g} == {"A", "M", "K", "UN", "F"}
    assert g.is_entry(g.edges[g.node("UN").inputs[1]])
    with pytest.raises(UsageError, match="unknown operator 'Z'"):
        g.choose_theta("Z")


def test_names_are_unique_and_clean():
    g = Graph()
    g.add_node("A", "source", Source())
    with pytest.raises(UsageError, match="two operators"):
        g.add_node("A", "map", Map(str))
    with pytest.raises(UsageError):
        g.add_node("B C", "map", Map(str))


def test_stable_hash_is_the_same_in_every_process():
    import os
    import subprocess
    import sys

    keys = ["Bob", ("a", 1), 5, 2**40, 1.5, None]
    code = "from tt.core.graph import stable_hash; print([stable_hash(k) for k in %r])" % (keys,)
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "random")}
    assert len(outs) == 1, "Python's salted hash would differ between executors"
    assert outs.pop().strip() == str([stable_hash(k) for k in keys])


# --- triggers ---------------------------------------------------------------------------------------

def test_durations():
    assert parse_duration("10s") == 10 and parse_duration("250ms") == 0.25 and parse_duration("2m") == 120
    assert parse_duration("1.5") == 1.5
    for bad in ("", "soon", "-1s", "0s", "5 parsecs"):
        with pytest.raises(UsageError):
            parse_duration(bad)


def test_conditions():
    when = compile_condition("row['amount'] > 1000 and row['customer'] != 'Mallory'")
    assert when({"amount": 5000, "customer": "Bob"})
    assert not when({"amount": 5000, "customer": "Mallory"})
    assert not when({"customer": "Bob"}), "a condition that raises is false for that tuple"
    assert when.first_error == ("--when \"row['amount'] > 1000 and row['customer'] != 'Mallory'\" raised "
                                "KeyError: 'amount' (such tuples count as false)")
    with pytest.raises(UsageError, match="unknown name"):
        compile_condition("__import__('os').system('true')")
    with pytest.raises(UsageError, match="unknown name"):
        compile_condition("_failed(row) or rows")   # (the names of the compiled functions' own)
    # names the condition binds itself are its own
    when = compile_condition("any(v > 1000 for k, v in row.items() if k != 'id')")
    assert when({"id": 5000, "amount": 2000}) and not when({"id": 5000, "amount": 3})
    assert compile_condition("(lambda r: r['amount'])(row) > 1000")({"amount": 5000})
    with pytest.raises(UsageError, match=r"unknown name\(s\) limit"):
        compile_condition("any(v > limit for v in row.values())")


def test_a_conditions_first_hit_is_the_first_row_it_holds_for():
    """θ's loop over a batch asks for the first row of a slice that meets `--when`
    (`first_hit`): the same rows `when` holds for one by one, a row that raises counted false
    and said once, a value whose truth raises (a numpy array) too."""
    import numpy as np

    when = compile_condition("row['n'] % 7 == 3 or (row['n'] > 90 and row['x'])")
    rows = [{"n": n} if n % 11 == 0 else {"n": n, "x": np.array([1, 2]) if n % 5 == 0 else n % 2} for n in range(120)]
    expected = [i for i, r in enumerate(rows) if when(r)]
    assert expected[:3] == [3, 10, 17] and 91 in expected and 95 not in expected
    found, start = [], 0
    while (i := when.first_hit(rows, start, len(rows))) >= 0:
        found.append(i)
        start = i + 1
    assert found == expected
    assert when.first_hit(rows, 4, 10) == -1 and when.first_hit(rows, 10, 10) == -1
    fresh = compile_condition("row['x'] > 0")
    assert fresh.first_hit([{"n": 1}, {"x": 0}, {"x": 2}], 0, 3) == 2
    assert fresh.first_error == "--when \"row['x'] > 0\" raised KeyError: 'x' (such tuples count as false)"


# --- wire and writer --------------------------------------------------------------------------------------

def test_frames_and_auth():
    a, b = socket.socketpair()
    wire.send(a, {"t": "log", "n": 1}, [b"abc", b"", b"\x00" * 70000])
    header, blobs = wire.recv(b)
    assert header["t"] == "log" and blobs == [b"abc", b"", b"\x00" * 70000]
    assert wire.check("s3cret", "nonce", wire.proof("s3cret", "nonce"))
    assert not wire.check("s3cret", "nonce", wire.proof("other", "nonce"))
    a.close()
    with pytest.raises(wire.ChannelClosed):
        wire.recv(b)


def test_writer_commits_batches_atomically(tmp_path):
    conn = sqlite3.connect(tmp_path / "w.db", check_same_thread=False, isolation_level=None)
    conn.execute("CREATE TABLE t (x INTEGER)")
    w = Writer(conn)
    threads = [threading.Thread(target=lambda i=i: [w.submit([("INSERT INTO t VALUES (?)", [(i * 100 + j,)])])
                                                    for j in range(100)]) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.flush()
    assert conn.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 400
    w.submit([("INSERT INTO t VALUES (?)", [(1,)]), ("INSERT INTO nope VALUES (1)", [()])])
    with pytest.raises(RuntimeError, match="writing the run file failed"):
        w.flush()
    assert conn.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 400, "a failed batch leaves no trace"


def test_a_flush_or_call_does_not_wait_out_the_writers_gathering(tmp_path):
    """The writer gathers batches for up to `max_delay` before it commits them; whoever waits
    for a commit (the run's end flushes) has it at once. With a gathering of an hour, a flush
    and a call that waited it out would still be running when the join gives up."""
    conn = sqlite3.connect(tmp_path / "w.db", check_same_thread=False, isolation_level=None)
    conn.execute("CREATE TABLE t (x INTEGER)")
    w = Writer(conn, max_delay=3600)
    answers = []

    def wait_for_commits():
        w.submit([("INSERT INTO t VALUES (?)", [(1,)])])
        w.flush()
        answers.append(conn.execute("SELECT COUNT(*) FROM t").fetchone()[0])
        w.submit([("INSERT INTO t VALUES (?)", [(2,)])])
        answers.append(w.call(lambda c: c.execute("SELECT SUM(x) FROM t").fetchone()[0]))

    t = threading.Thread(target=wait_for_commits, daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive() and answers == [1, 3]
    w.close()


@pytest.mark.parametrize("container", [
    {f"k{i}": float(i) for i in range(20)},
    {f"k{i}": (float("nan") if i == 5 else 1.0) for i in range(20)},
    {f"k{i}": (float("inf") if i == 5 else 1) for i in range(20)},
    {f"k{i}": (2**70 if i == 3 else 1) for i in range(20)},
    {i: 1 for i in range(20)},
    [float(i) for i in range(20)] + [float("-inf")],
    [(1, 2)] * 20,
    {f"k{i}": [i] for i in range(20)},
    # int-keyed rows (an Aggregate's accumulators): pairs made in C where every item is plain
    {i: [i, i * 0.5, f"c{i}", True, None] for i in range(20)},
    {i: [i, (float("nan") if i == 7 else 1.5), "x"] for i in range(20)},
    {i: [i, (float("-inf") if i == 7 else 1.5)] for i in range(20)},
    {i: [1e308, 1e308] for i in range(20)},                           # finite items whose sum is not
    {i: [i, (2**63 if i == 7 else 1)] for i in range(20)},
    {i: [i, (-(2**63) - 1 if i == 7 else 1)] for i in range(20)},
    {i: [-(2**63), 2**63 - 1] for i in range(20)},
    {i: ([i] if i != 7 else (i,)) for i in range(20)},
    {i: ([i] if i != 7 else "x") for i in range(20)},
    {i: [[i]] for i in range(20)},
    {i: [{"a": i}] for i in range(20)},
    {i: [decimal.Decimal("1.0")] for i in range(20)},
    {i: [] for i in range(20)},
    {(2**63 if i == 7 else i): [i] for i in range(20)},
    {(True if i == 1 else i): [i] for i in range(20)},
    {(1.5 if i == 1 else i): [i] for i in range(20)},
    {i: i * 0.5 for i in range(20)},                                  # int-keyed scalars: pairs too
    {i: (float("nan") if i == 7 else 0.5) for i in range(20)},
    {i: (2**63 if i == 7 else 1) for i in range(20)},
    {i: (f"c{i}" if i % 2 else None) for i in range(20)},
    {i: ([i] if i % 2 else i) for i in range(20)},
    {i: (i * 0.5, i) for i in range(20)},                              # int-keyed tuples (a processor's view)
    {i: (f"c{i}", None, True, -(2**63), 2**63 - 1) for i in range(20)},
    {i: () for i in range(20)},
    {i: (i,) for i in range(20)},
    {i: (float("nan") if i == 7 else 0.5, i) for i in range(20)},
    {i: (2**63 if i == 7 else 1, i) for i in range(20)},
    {i: ((i,) if i % 2 else [i]) for i in range(20)},
    {i: ((i, (i,)) if i == 7 else (i, i)) for i in range(20)},
    {i: (decimal.Decimal("1.0"), i) for i in range(20)},
    {(True if i == 1 else i): (i, i) for i in range(20)},
])
def test_fast_path_encodes_like_the_tagged_walk(container, monkeypatch):
    fast = values.dumps(container)
    monkeypatch.setattr(values, "_plain_container", lambda v: False)
    monkeypatch.setattr(values, "_int_keyed_pairs", lambda v: None)
    assert values.dumps(container) == fast
    import orjson
    assert values.dumps(values.decode(orjson.loads(fast))) == fast   # and what is stored reads back as it was


# --- snapshots stored as deltas ---------------------------------------------------------------------

def test_snapshot_deltas_rebuild_every_state():
    import orjson

    from tt.core import state_deltas

    rng = random.Random(9)
    enc = state_deltas.StateEncoder(full_every=5)
    stored, state = {}, {"highest": {f"c{i}": float(i) for i in range(300)}, "seen": 0, "tags": ["a"],
                         "weird": {"$x": 1}, "nan": {"k": float("nan")}}
    kinds = set()
    for step in range(40):
        for _ in range(rng.randrange(0, 20)):
            k = f"c{rng.randrange(400)}"
            if rng.random() < 0.2:
                state["highest"].pop(k, None)
            else:
                state["highest"][k] = rng.random()
        state["seen"] += 1
        if step % 7 == 0:
            state["tags"] = state["tags"] + [str(step)]
        if step == 20:
            state["extra"] = {"new": True}
        h, data, size = enc.encode("i", {k: (dict(v) if isinstance(v, dict) else v) for k, v in state.items()})
        if data:
            stored[h] = orjson.loads(data)
            kinds.add(state_deltas.is_delta(stored[h]))
        # rebuild as the reader does
        chain, x = [], stored[h]
        while state_deltas.is_delta(x):
            chain.append(x)
            x = stored[x["$delta"]["base"]]
        for d in reversed(chain):
            x = state_deltas.apply(x, d)
        assert x == values.loads(values.dumps(state)), step
    assert kinds == {True, False}


def test_identical_tells_apart_what_equality_does_not():
    import decimal

    from tt.core.state_deltas import changed_entries
    from tt.core.values import identical

    pairs = [(1, True), (0, False), (0.0, -0.0), (1, 1.0), (decimal.Decimal("1.0"), decimal.Decimal("1.00")),
             ((1, 0.0), (True, 0.0)), ((1, 0.0), (1, -0.0)), ((1,), (1, 2)), ("a", b"a")]
    for a, b in pairs:
        assert a == b or (a, b) in [((1,), (1, 2)), ("a", b"a")]
        assert not identical(a, b) and not identical(b, a), (a, b)
    for a, b in [(1, int("1")), (0.5, float("0.5")), (float("nan"), float("nan")), ((1, "x"), (1, "x")),
                 (decimal.Decimal("1.0"), decimal.Decimal("1.0")), (frozenset({1}), frozenset({1})), (None, None)]:
        assert identical(a, b), (a, b)
    old = {"a": 1, "b": 0.0, "c": (1, 2), "d": "x"}
    new = {"a": True, "b": -0.0, "c": (1, 2), "d": "x"}
    assert changed_entries(old, new) == ({"a": True, "b": -0.0}, [])
    assert changed_entries(old, {"d": "x", **new}) == ({"a": True, "b": -0.0}, [])   # (the slower path)


def test_snapshot_deltas_keep_changes_equality_misses():
    import orjson

    from tt.core import state_deltas

    enc = state_deltas.StateEncoder()
    state = {"big": {f"k{i}": i for i in range(300)}, "flag": 1}
    stored = {}
    h, data, _ = enc.encode("i", {"big": dict(state["big"]), "flag": 1})
    stored[h] = orjson.loads(data)
    state["big"]["k1"], state["big"]["k0"] = True, 0.0
    h2, data2, _ = enc.encode("i", {"big": dict(state["big"]), "flag": True})
    delta = orjson.loads(data2)
    assert state_deltas.is_delta(delta), "a small change is stored as a delta"
    rebuilt = state_deltas.apply(stored[delta["$delta"]["base"]], delta)
    assert orjson.dumps(rebuilt) == values.dumps({"big": state["big"], "flag": True})


def test_changed_entries_match_a_plain_comparison():
    from tt.core.state_deltas import changed_entries

    rng = random.Random(5)
    new = {f"k{i}": i for i in range(500)}
    for step in range(300):
        old = dict(new)
        for _ in range(rng.randrange(0, 6)):
            k = f"k{rng.randrange(600)}"
            r = rng.random()
            if r < 0.15:
                new.pop(k, None)
            elif r < 0.25 and k in new:
                new[k] = new.pop(k)                  # re-inserted: moves to the end
            elif r < 0.35 and k in new:
                new[k] = int(str(new[k]))            # an equal value in a new object: not a change
            else:
                new[k] = rng.randrange(1000)
        changed, deleted = changed_entries(old, new)
        assert changed == {k: v for k, v in new.items() if k not in old or old[k] != v}, step
        assert sorted(deleted) == sorted(k for k in old if k not in new), step


def test_snapshot_deltas_see_changes_made_in_place():
    import orjson

    from tt.core import state_deltas

    enc = state_deltas.StateEncoder()
    state = {"left": {"c1": [{"id": 1}]}, "n": 1, "big": {f"k{i}": i for i in range(2000)}}
    stored = {}
    h0, d0, _ = enc.encode("j", state)
    stored[h0] = orjson.loads(d0)
    state["left"]["c1"].append({"id": 2})  # the same list, grown in place
    h1, d1, _ = enc.encode("j", state)
    assert d1 and h1 != h0 and state_deltas.is_delta(orjson.loads(d1))
    rebuilt = state_deltas.apply(stored[h0], orjson.loads(d1))
    assert rebuilt == values.loads(values.dumps(state))


def test_snapshot_deltas_from_the_keys_an_operator_lists():
    """Aggregate and HashJoin list the keys they changed (Operator.changed_keys): each
    interaction's state is stored as those keys and the new ones, in long chains, and every
    rebuilt state equals the whole state's encoding, for str, int and tuple keys."""
    import orjson

    from tt.core import state_deltas
    from tt.core.operator import Aggregate, HashJoin

    rng = random.Random(11)
    join = HashJoin(lambda r: r["k"], lambda r: r["k"])
    by_str = Aggregate(lambda r: f"g{r['k'] % 50}", 0, lambda acc, r: acc + r["v"])
    by_tuple = Aggregate(lambda r: (r["k"] % 7, "x"), [0, 0.0], lambda acc, r: [acc[0] + 1, acc[1] + r["v"]])
    from tt.core.operator import Operator

    class Mixed(Operator):
        """A compared field before a listed one: each kind of field is diffed its own way."""

        def __init__(self):
            self.counts, self.rows, self._changed = {}, {}, {}

        def process(self, row, port=0):
            self.counts[f"p{port}"] = self.counts.get(f"p{port}", 0) + 1
            self.rows.setdefault(row["k"], []).append(row["v"])
            self._changed[row["k"]] = None

        def changed_keys(self):
            changed, self._changed = self._changed, {}
            return {"rows": changed}

    mixed = Mixed()
    ops = {"join": join, "by_str": by_str, "by_tuple": by_tuple, "mixed": mixed}
    enc = state_deltas.StateEncoder(full_every=4, long_chain_bytes=2_000)
    stored, kinds, chains = {}, [], dict.fromkeys(ops, 0)
    for step in range(120):
        for _ in range(rng.randrange(0, 30)):
            row = {"k": rng.randrange(300), "v": rng.random()}
            join.process(row, port=rng.randrange(2))
            by_str.process(row)
            by_tuple.process(row)
            mixed.process(row, port=rng.randrange(2))
        if step == 60:   # a str-keyed dict gains an int key: its JSON form changes, so a full snapshot
            by_str.groups[7] = 1.0
        for name, op in ops.items():
            h, data, _ = enc.encode(name, op.state(), op.changed_keys())
            if data:
                stored[h] = orjson.loads(data)
                kinds.append((name, state_deltas.is_delta(stored[h])))
            chain, x = [], stored[h]
            while state_deltas.is_delta(x):
                chain.append(x)
                x = stored[x["$delta"]["base"]]
            rebuilt = state_deltas.apply_chain(x, chain[::-1])
            assert rebuilt == values.loads(values.dumps(op.state())), (name, step)  # a $dict list's order too
            chains[name] = max(chains[name], len(chain))
    assert {name for name, is_delta in kinds if is_delta} == set(ops)
    assert all(sum(not d for n, d in kinds if n == name) > 1 for name in ops)   # full snapshots come again
    assert chains["join"] > 4   # a big state chains past full_every, while its deltas add up to less than it


def test_listed_changes_encode_as_each_key_and_value_encoded_alone():
    """A listed field's delta is its changed keys' pairs, made by one `values.encode` of them (in C
    where the keys are int64s and the values plain: an Aggregate's accumulators per customer); it
    must hold what encoding each key and value alone gives, at every edge of the fast paths."""
    import math

    import orjson

    from tt.core.state_deltas import Tracked, _listed_changes

    rows = {k: [k, k * 0.5, f"c{k}", 1.0, "FRANCE"] for k in range(20)}
    shapes = {
        "int keys, plain rows": rows,
        "int keys, floats": {k: k / 3 for k in range(20)},
        "a NaN": {**rows, 3: [3, math.nan, "c3", 1.0, "X"]},
        "an infinity": {k: (math.inf if k == 5 else float(k)) for k in range(20)},
        "an int beyond int64": {**rows, 2**70: [1, 2.0, "x", 1.0, "y"]},
        "an int value beyond int64": {k: (2**64 if k == 4 else k) for k in range(20)},
        "a tuple in a row": {**rows, 7: [7, (1, 2), "c7", 1.0, "X"]},
        "a Decimal": {**rows, 8: [8, decimal.Decimal("1.10"), "c8", 1.0, "X"]},
        "bool keys and values": {**{k: True for k in range(2, 14)}, True: False},
        "str keys, plain": {f"k{i}": i for i in range(20)},
        "str keys, nested": {f"k{i}": {"a": [i, None]} for i in range(20)},
        "one $ key": {"$dict": 1},
        "a $ key among others": {"$dict": 1, "a": 2},
        "tuple keys": {(i, "x"): i for i in range(20)},
        "few keys": {1: [1, 2.0], 2: [2, 3.0]},
        "mixed keys": {1: 1.0, "a": 2.0, (1,): 3.0, **{k: float(k) for k in range(10, 20)}},
    }
    for name, field in shapes.items():
        keys = list(field)
        listed, old = dict.fromkeys(keys[:-2]), Tracked(len(field) - 2, all(type(k) is str for k in field))
        got = _listed_changes(old, field, listed)
        want = [[values.encode(k), values.encode(field[k])] for k in keys]
        assert orjson.dumps(got) == orjson.dumps(want), name


@pytest.mark.parametrize("of", [None, "counts", "key rows"], ids=["values", "counts", "key-rows"])
def test_a_joins_running_digest_equals_one_made_from_scratch(of):
    """The recorder updates a join's digest from the keys it lists (core/kept_inputs.py), and a
    `key rows` one from the rows it counts as it appends them; replay digests the whole field. The
    two must agree after every interaction, also when the merge writes into the stored rows it
    matched, and must change when one stored value changes (for a digest by keys' rows, a value
    of a key it samples). A `counts` digest is what an operator that lists its changed keys but
    does not count its appends gets (and what older run files hold)."""
    from tt.core import kept_inputs
    from tt.core.operator import HashJoin
    from tt.core.state_deltas import StateEncoder

    class ListingJoin(HashJoin):
        appended_rows = None   # lists its changed keys, counts no rows

    def merge(left, right):
        left["matched"] = left.get("matched", 0) + 1   # changes a stored row
        return {**left, **right}

    rng = random.Random(3)
    join = (ListingJoin if of == "counts" else HashJoin)(lambda r: r["k"], lambda r: r["k"], merge=merge)
    digests, encoder = kept_inputs.KeptDigests(), StateEncoder()
    for step in range(40):
        for _ in range(rng.randrange(0, 150)):
            port = rng.randrange(2)
            join.process({"k": rng.randrange(200), "v": decimal.Decimal(rng.randrange(1000)) / 10, "port": port}, port)
        counted = frozenset(("left", "right")) if of else frozenset()
        listed = join.changed_keys()
        appended = join.appended_rows() if join.appended_rows else None
        state, changed, _ = digests.summarize("J:0", join, join.state(), listed, counted, appended)
        if step == 0:
            first = digests.fields[("J:0", "left")]
        assert changed == {}, "the kept fields leave the listed keys to the digest"
        for side in ("left", "right"):
            assert state[side].__tt_json__() == kept_inputs.summary(getattr(join, side), of).__tt_json__(), \
                (step, side)
        encoder.encode("J:0", state, changed)
    assert state["left"].rows == sum(map(len, join.left.values())) and state["left"].keys == len(join.left)
    # kept up from the listed keys (the counted rows): never made again from scratch
    assert digests.fields[("J:0", "left")] is first
    assert type(first).__name__ == {None: "_FieldDigest", "counts": "_CountDigest", "key rows": "_KeyRowsDigest"}[of]

    stored = values.encode(state["left"])
    assert kept_inputs.is_kept(stored) and "kept as inputs" in values.render(stored)
    assert stored["$kept"].get("of") == of
    replayed = kept_inputs.like_recorded({"left": stored}, join.state())
    assert values.first_difference(stored, values.encode(replayed["left"])) is None
    picks = {"counts": lambda k, rows: kept_inputs._count_hash(k, len(rows)),
             "key rows": lambda k, rows: kept_inputs._key_hash(k)}
    sampled = [k for k, rows in join.left.items() if of and not picks[of](k, rows) >> kept_inputs._UNSAMPLED]
    assert not of or sampled, "the seed gives the digest by keys' rows a sampled key"
    join.left[sampled[0] if of else next(iter(join.left))][0]["v"] += 1   # one stored value differs in "replay"
    changed = values.encode(kept_inputs.like_recorded({"left": stored}, join.state())["left"])
    assert values.first_difference(stored, changed) == ("<root>", stored, changed)


def test_a_join_stored_by_rows_at_interactions_counts_what_replay_counts():
    """Before its task's end an interaction stores the built-in join's sides by their keys and
    rows (core/kept_inputs.py `ROWS`), the rows counted from the inputs each port took, as the
    input log has them (a shuffled stage logs a batch's channel before its rows are consumed):
    what replay counts of the field it rebuilt. The join counts nothing per input for it, and a
    summary of a kind this tt does not know is an error, not a digest compared with another."""
    from tt.core import kept_inputs
    from tt.core.logs import InputRuns
    from tt.core.operator import HashJoin

    class OwnJoin(HashJoin):
        def process(self, row, port=0):
            return super().process(row, port)

    assert HashJoin(len, len).appends_each_input and not OwnJoin(len, len).appends_each_input

    rng = random.Random(5)
    join, runs, digests = HashJoin(lambda r: r["k"], lambda r: r["k"]), InputRuns(), kept_inputs.KeptDigests()
    ahead, consumed = [], 0   # the ports of inputs logged but not consumed yet
    for step in range(60):
        if rng.random() < 0.5:   # a batch's channel logged ahead of its rows
            batch = [(rng.randrange(2), rng.randrange(3)) for _ in range(rng.randrange(1, 60))]
            for port, src in batch:
                runs.add(port, src)
            ahead += [port for port, _ in batch]
        take = rng.randrange(len(ahead) + 1)
        for port in ahead[:take]:
            join.process({"k": rng.randrange(40), "v": decimal.Decimal(rng.randrange(99)) / 7}, port)
        del ahead[:take]
        consumed += take
        state, size = digests.rows("J:0", join, join.state(), runs.per_port(consumed))   # an interaction
        for side in ("left", "right"):
            stored = values.encode(state[side])
            assert stored == {"$kept": {"keys": len(getattr(join, side)), "of": "rows",
                                        "rows": sum(map(len, getattr(join, side).values()))}}, (step, side)
            replayed = values.encode(kept_inputs.like_recorded({side: stored}, join.state())[side])
            assert values.first_difference(stored, replayed) is None
            assert "rows under" in values.render(stored) and "digest at its task's end" in values.render(stored)
        assert kept_inputs.rows_only(values.encode(state)) and not kept_inputs.rows_only({"n": 1})
        assert size > 0 or not consumed
        if rng.random() < 0.3:   # a flush takes the consumed inputs' runs (recorder/task.py `_collect`)
            runs.take(consumed - sum(runs.taken.values()))
    assert join._added is None, "the join counted nothing per input"
    with pytest.raises(ValueError, match="newer tt"):
        kept_inputs.like_recorded({"left": {"$kept": {"keys": 1, "rows": 1, "of": "pages"}}}, join.state())


@pytest.mark.parametrize("of", [None, "counts", "key rows"], ids=["values", "counts", "key-rows"])
def test_a_kept_summary_names_its_hash_and_older_run_files_verify_by_theirs(of):
    """A summary says what hashed its values' JSON (`"hash": "xxh3 text"`, a Decimal written as its
    text); one from a run file before it says `"xxh3"` (values' tagged Decimals) or nothing
    (that JSON hashed by blake2b). Replay digests a field as its stored summary says, so all
    verify, and all find a stored value that differs; a hash this tt does not know is an error,
    not a digest compared with another's."""
    import hashlib

    import orjson

    from tt.core import kept_inputs

    field = {k: [{"k": k, "v": decimal.Decimal(k) / 10, "n": i} for i in range(1 + k % 3)] for k in range(400)}
    new, tagged, old = (kept_inputs.summary(field, of, h).__tt_json__()["$kept"]
                        for h in (kept_inputs.XXH3_TEXT, kept_inputs.XXH3, None))
    assert kept_inputs.summary(field, of).__tt_json__()["$kept"] == new   # (a new summary's)
    assert new["hash"] == "xxh3 text" and tagged["hash"] == "xxh3" and "hash" not in old
    assert len({new["digest"], tagged["digest"], old["digest"]}) == 3
    if of is None:   # the older digest: blake2b of each key's JSON, summed (what run files hold)
        total = sum(int.from_bytes(hashlib.blake2b(orjson.dumps([k, v], default=values.encode,
                                                                option=orjson.OPT_SORT_KEYS),
                                                    digest_size=8).digest(), "little") for k, v in field.items())
        assert old["digest"] == f"{total % 2 ** 64:016x}"
    for stored in (new, tagged, old):
        replayed = kept_inputs.like_recorded({"f": {"$kept": stored}}, {"f": field})["f"]
        assert replayed.__tt_json__()["$kept"] == stored
    picks = {None: lambda k: True,   # a key whose values the digest hashes
             "counts": lambda k: kept_inputs._count_hash(k, len(field[k])) >> kept_inputs._UNSAMPLED == 0,
             "key rows": lambda k: kept_inputs._key_hash(k) >> kept_inputs._UNSAMPLED == 0}
    sampled = next(filter(picks[of], field))
    changed = {**field, sampled: [{**field[sampled][0], "v": decimal.Decimal("-1")}, *field[sampled][1:]]}
    for stored in (new, tagged, old):
        assert kept_inputs.like_recorded({"f": {"$kept": stored}}, {"f": changed})["f"].__tt_json__()["$kept"] != stored
    with pytest.raises(ValueError, match="hashed by 'sha3', which this tt does not know"):
        kept_inputs.like_recorded({"f": {"$kept": {**new, "hash": "sha3"}}}, {"f": field})


def test_a_joins_long_lists_hashed_as_streams_equal_a_digest_from_scratch():
    """A long list the join lists as only appended to is hashed from its new rows on
    (`_Stream`); a key whose rows a `merge` was handed, which may change them, is hashed whole.
    After every interaction the running digest must be the one replay makes from scratch, also
    when the merge writes into stored rows, a list is replaced, or a row cannot be JSON."""
    from tt.core import kept_inputs
    from tt.core.operator import HashJoin

    def merge(left, right):
        if right.get("touch"):
            left["matched"] = left.get("matched", 0) + 1   # changes a stored row of the left side
        return {**left, **right}

    rng = random.Random(11)
    join = HashJoin(lambda r: r["k"], lambda r: r["k"], merge=merge)
    digests = kept_inputs.KeptDigests()
    streamed = 0
    for step in range(60):
        for _ in range(rng.randrange(0, 120)):
            port = 0 if rng.random() < 0.9 else 1
            row = {"k": rng.randrange(4), "v": decimal.Decimal(rng.randrange(1000)) / 10, "touch": rng.random() < 0.3}
            if step == 30 and port == 0 and row["k"] == 1:
                row["odd"] = {1: "an int key: orjson refuses it"}
            join.process(row, port)
        if step == 45:
            join.left[2] = list(join.left[2])   # the same rows in a new list
        state, _, _ = digests.summarize("J:0", join, join.state(), join.changed_keys())
        for side in ("left", "right"):
            assert state[side].__tt_json__() == kept_inputs.summary(getattr(join, side)).__tt_json__(), (step, side)
        streamed += len(digests.fields[("J:0", "left")].streams)
    assert streamed and max(map(len, join.left.values())) > 10 * kept_inputs._STREAMED


def test_a_counts_digest_is_the_same_in_every_process_and_sees_rows_move():
    """A `counts` digest hashes int keys with Python's own hash, which must not depend on the
    process (str hashes are salted; int and tuple hashes are not), and must change when a row goes
    under another key, or a key is added, even where no value it samples changed."""
    import os
    import subprocess
    import sys

    script = (
        "from tt.core import kept_inputs as K\n"
        "fields = [{k: [{'v': k}] * (1 + k % 3) for k in range(500)},\n"
        "          {f'c{k}': [{'v': k}] * (1 + k % 3) for k in range(500)},\n"
        "          {(k, 'x'): [k] for k in range(50)}]\n"
        "print([K.summary(f, of).__tt_json__() for f in fields for of in (K.COUNTS, K.KEY_ROWS)])\n")
    seen = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "random")}
    printed = seen.pop()
    assert not seen and "'counts'" in printed and "'key rows'" in printed

    from tt.core import kept_inputs

    field = {k: [{"v": k}] * (1 + k % 3) for k in range(500)}
    picks = {kept_inputs.COUNTS: lambda k, rows: kept_inputs._count_hash(k, len(rows)),
             kept_inputs.KEY_ROWS: lambda k, rows: kept_inputs._key_hash(k)}
    for of, pick in picks.items():
        before = kept_inputs.summary(field, of)
        unsampled = [k for k, rows in field.items() if pick(k, rows) >> kept_inputs._UNSAMPLED]
        a, b = unsampled[:2]
        moved = {**field, a: field[a] + [field[b][0]], b: field[b][1:] or []}
        after = kept_inputs.summary(moved, of)
        assert (after.rows, after.keys) == (before.rows, before.keys) and after.digest != before.digest, of
        assert kept_inputs.summary({**field, 10_000: []}, of).digest != before.digest, of


def test_a_counts_digest_in_bulk_is_the_sum_of_its_keys_hashes():
    """`_CountDigest` counts and hashes a field in bulk (each key's rows in one pass, the sampled
    keys chosen by shifts in C): its digest must be the one `_count_hash` gives key by key, as
    run files recorded before hold it, at the edges of an int's hash too (-1, ±2**61, beyond 64
    bits), for fields of any other keys and values, and after updates as from scratch."""
    import random

    from tt.core import kept_inputs as K

    class Rows(list):
        pass

    rng = random.Random(5)
    edges = [0, 1, -1, -2, 2**61 - 2, 2**61 - 1, 2**61, -(2**61 - 2), -(2**61 - 1), 2**63 - 1, -(2**63), 2**70]
    fields = [{k: [k] * rng.randrange(0, 5) for k in [rng.randrange(-2**62, 2**62) for _ in range(3000)]},
              {k: [k] * (1 + i % 3) for i, k in enumerate(edges)},
              {k: [k] for k in edges[:2]},
              {f"c{i}": [i] * (1 + i % 4) for i in range(300)},
              {1: [1, 2], 2: "x", 3: {"a": 1}, 4: []},
              {True: [1], (1, "x"): [2, 3]},
              {1: Rows([1, 2]), 2: [3]}, {1: Rows([1, 2]), 2: "x"},   # a list subclass counts its items either way
              {}]

    def by_key(field):
        total = sum(K._count_hash(k, K._rows(v)) for k, v in field.items())
        sampled = sum(K._entry(k, v) >> 96 for k, v in field.items()
                      if not K._count_hash(k, K._rows(v)) >> K._UNSAMPLED)
        return (total + sampled) & K._MASK

    for field in fields:
        kept = K.summary(field, K.COUNTS)
        assert (kept.keys, kept.rows) == (len(field), sum(map(K._rows, field.values())))
        assert kept.digest == by_key(field), list(field)[:3]
    assert K.summary(fields[-3], K.COUNTS).rows == K.summary(fields[-2], K.COUNTS).rows == 3   # 2 + 1 either way
    big = fields[0]
    digest = K._CountDigest(big)
    grown = {**big, **{k: v + [0] for k, v in list(big.items())[:400]}, 2**62 + 5: [1], -1: [2, 2]}
    digest.update(grown, list(big)[:400], None, [2**62 + 5, -1])   # the keys it had, then those added last
    assert digest.kept(grown).digest == by_key(grown)
    odd = {**grown, -1: "not a list"}   # met after a list: the bulk count gives way to the one by one
    digest.update(odd, [next(iter(big)), -1])
    assert digest.kept(odd).digest == by_key(odd)
    # the sampled keys, chosen by their hashes' top bytes, are those `not h >> 58` chooses: Python's
    # signed hashes, blake2b's unsigned ones, and at the bounds of both
    for hashes in ([0, 1, 2**58 - 1, 2**58, 3 << 56, 4 << 56, -1, -(2**58), -(2**63), 2**63 - 1],
                   [0, 2**58 - 1, 2**58, 2**63, 2**64 - 1, 5], [rng.getrandbits(64) - 2**63 for _ in range(5000)]):
        keys = [f"k{i}" for i in range(len(hashes))]
        assert list(K._chosen(keys, hashes)) == [k for k, h in zip(keys, hashes) if not h >> K._UNSAMPLED]


def test_a_key_rows_digest_kept_up_from_counted_rows_is_the_sum_over_its_keys():
    """A `key rows` digest (core/kept_inputs.py) is the sum over its keys of (rows + 1) × the
    key's hash, plus the values' hashes of the keys whose hash it samples. Made in bulk from a
    field, and kept up from the rows counted as appended, it must be that sum taken key by key,
    at the edges of an int's hash, for keys of any type, and for a key whose rows a merge was
    handed (its value hashed again, its count unchanged); the recorder's sums in numpy
    (recorder/key_sums.py) must give the core's, which replay digests with."""
    import random

    from tt.core import kept_inputs as K
    from tt.recorder import key_sums

    rng = random.Random(7)
    edges = [0, 1, -1, -2, 2**61 - 2, 2**61 - 1, 2**61, -(2**61 - 1), 2**63 - 1, -(2**63), 2**70]
    fields = [{k: [k] * rng.randrange(0, 5) for k in [rng.randrange(-2**62, 2**62) for _ in range(3000)]},
              {k: [k] * (1 + i % 3) for i, k in enumerate(edges)},
              {f"c{i}": [i] * (1 + i % 4) for i in range(300)},
              {1: [1, 2], 2: "x", 3: {"a": 1}, 4: []}, {True: [1], (1, "x"): [2, 3]}, {}]
    int64 = [k for k in edges if -2**63 <= k < 2**63] + [-(2**61), -(2**61) - 1, 2**62, -(2**63) + 1]
    fields.append({k: [k] * (1 + i % 3) for i, k in enumerate(int64)})   # int64 keys only
    fields.append({k: [k] * (1 + i % 3) for i, k in enumerate(int64 + list(range(-300, 300)))})   # summed in numpy
    # the recorder sums int keys' hashes in numpy (recorder/key_sums.py), replay in the core: the same
    assert key_sums.int_key_hashes(int64).tolist() == [hash((k,)) & K._MASK for k in int64]
    assert key_sums.int_key_hashes([1, True]) is None and key_sums.int_key_hashes([1, 2**63]) is None
    assert key_sums.int_key_hashes([1, 1.5]) is None

    def by_key(field):
        total = sum((K._rows(v) + 1) * K._key_hash(k) for k, v in field.items())
        sampled = sum(K._entry(k, v) >> 96 for k, v in field.items() if not K._key_hash(k) >> K._UNSAMPLED)
        return (total + sampled) & K._MASK

    for field in fields:
        kept = K.summary(field, K.KEY_ROWS)
        assert (kept.keys, kept.rows, kept.of) == (len(field), sum(map(K._rows, field.values())), K.KEY_ROWS)
        assert kept.digest == by_key(field), list(field)[:3]
        assert K._KeyRowsDigest(field, key_sums.key_sums).kept(field).digest == kept.digest, list(field)[:3]
        if set(map(type, field.values())) <= {list}:   # lengths read unchecked where the operator vouches for lists
            assert K._KeyRowsDigest(field, key_sums.key_sums, lists=True).kept(field).digest == kept.digest
        keys, rows = list(field), [K._rows(v) for v in field.values()]
        for plus in (0, 1):
            assert key_sums.key_sums(keys, rows, plus) == K.key_sums(keys, rows, plus)
            assert key_sums.key_sums(keys, None, plus) == K.key_sums(keys, None, plus)
    for sums, last in ((K.key_sums, 2**70), (key_sums.key_sums, 2**70), (key_sums.key_sums, -(2**63))):
        big = {k: list(v) for k, v in fields[0].items()}   # (with an int64 key last, all in numpy)
        _kept_up_from_appends(K, big, sums, by_key, last)


def test_only_the_built_in_joins_process_vouches_for_lists():
    """`kept_lists` lets a `key rows` digest read its lengths unchecked: a join that stores rows
    its own way (a subclass's `process`) is checked value by value, as replay checks them."""
    from tt.core.operator import HashJoin

    class OwnStore(HashJoin):
        def process(self, row, port=0):
            (self.left if port == 0 else self.right)[row] = "not a list"

    class Renamed(HashJoin):
        pass

    assert HashJoin(len, len).kept_lists and Renamed(len, len).kept_lists
    assert not OwnStore(len, len).kept_lists and not Operator().kept_lists
    assert "kept_lists" not in HashJoin(len, len).state()


def _kept_up_from_appends(K, big: dict, sums, by_key, last: int) -> None:
    """A `key rows` digest of `big` kept up from rows appended under 400 keys, 3 keys added (the
    last one `last`) and a key whose rows a merge was handed, equal to the same field digested
    from scratch."""
    digest = K._KeyRowsDigest(big, sums)
    appended = {}
    for k in list(big)[:400]:
        big[k].append(0)
        appended[k] = 1
    for k, rows in ((2**62 + 5, [1]), (-1, [2, 2]), (last, [3])):   # keys added last, with their rows
        big[k] = rows
        appended[k] = len(rows)
    sampled = [k for k in list(big)[400:] if big[k] and not K._key_hash(k) >> K._UNSAMPLED]
    big[sampled[0]][:0] = ["a merge wrote here"]   # a key whose rows a merge was handed: one more item,
    big[sampled[0]].pop()                          # the same count
    digest.update(big, appended, {**dict.fromkeys(appended, K.APPENDED), sampled[0]: None}, [2**62 + 5, -1, last])
    assert digest.kept(big).digest == by_key(big) == K.summary(big, K.KEY_ROWS).digest
    assert digest.kept(big).rows == sum(map(len, big.values()))


def test_a_join_saved_by_an_older_tt_is_restored_and_counts_when_asked():
    """A checkpoint in an older run file holds a HashJoin that listed its changed keys in
    `_changed` and counted no rows: restored, it joins as it did, and counts the rows it appends
    from the next `changed_keys()` on. A join restored from a newer checkpoint counts nothing
    it counted before it was saved (replay never asks)."""
    import operator
    import pickle

    from tt.core.operator import HashJoin

    join = HashJoin(operator.itemgetter("k"), operator.itemgetter("k"))
    join.process({"k": 1, "v": "a"}, 0)
    old = dict(join.__dict__)
    for name in ("_added", "_touched", "_appended"):
        del old[name]
    old["_changed"] = ({1: "appended"}, {})
    back = HashJoin.__new__(HashJoin)
    back.__setstate__(old)
    assert back.process({"k": 1, "w": "b"}, 1) == [{"k": 1, "v": "a", "w": "b"}]
    assert back.changed_keys() == {"left": {}, "right": {}} and back.appended_rows() == {"left": {}, "right": {}}
    back.process({"k": 1, "v": "c"}, 0)
    back.process({"k": 2, "v": "d"}, 0)
    assert back.changed_keys() == {"left": {1: "appended", 2: "appended"}, "right": {1: None}}
    assert back.appended_rows() == {"left": {1: 1, 2: 1}, "right": {}}
    back.process({"k": 2, "w": "e"}, 1)   # counted, not yet asked for
    again = pickle.loads(pickle.dumps(back))   # as a checkpoint restores it in replay
    assert again.left == back.left and again.right == back.right
    assert again.changed_keys() == {"left": {}, "right": {}} and again.appended_rows() == {"left": {}, "right": {}}


def test_a_kept_entry_hashes_what_it_hashed_before_its_fast_path():
    """A kept-inputs digest (core/kept_inputs.py) hashes the bytes it hashed before its fast path
    for Decimals (orjson with `values.encode` for what orjson cannot write; `values.encode` for all
    of it where orjson refuses the value), and counts a list's rows as before: run files recorded
    before it still verify. Their summaries name no hash and are hashed by blake2b; later ones
    hash the same bytes with xxh3 (`kept_inputs.XXH3`); a new one (`XXH3_TEXT`) hashes them with a
    Decimal written as its text, whichever of its paths wrote them."""
    import datetime
    import hashlib

    import orjson
    import xxhash

    from tt.core import kept_inputs

    class Price(decimal.Decimal):
        pass

    def before(key, value, xxh3: bool = False) -> int:
        try:
            data = orjson.dumps([key, value], default=values.encode, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            data = orjson.dumps([values.encode(key), values.encode(value)], option=orjson.OPT_SORT_KEYS)
        if xxh3:
            return xxhash.xxh3_64_intdigest(data) << 48 | len(data)
        return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") << 48 | len(data)

    plain = [{"l_orderkey": 7, "price": decimal.Decimal("901.50"), "d": decimal.Decimal("0.04")},
             {"b": Price("-1E+3"), "a": [1.5, None, "x", float("nan")], "t": (1, decimal.Decimal("2"))},
             {"when": datetime.date(1994, 1, 1), "set": {3, 1}, "raw": b"\x00"}]
    refused = [{"big": 2 ** 70}, {2: "a key that is not a str"}]
    cases = [(7, plain[:1]), ("k", plain), ((1, "a"), plain[1:]), (3, refused[:1]), (4, [*plain, *refused])]
    def text(key, value) -> int:   # a Decimal as its text; values' encoding for what else orjson cannot write
        try:
            data = orjson.dumps([key, value], default=lambda v: str(v) if isinstance(v, decimal.Decimal)
                                else values.encode(v), option=orjson.OPT_SORT_KEYS)
        except TypeError:
            data = orjson.dumps([values.encode(key), values.encode(value)], option=orjson.OPT_SORT_KEYS)
        return xxhash.xxh3_64_intdigest(data) << 48 | len(data)

    low = (1 << 48) - 1
    for key, value in cases:
        entry, was = kept_inputs._entry(key, value, kept_inputs.HASHES[None]), before(key, value)
        assert (entry >> 96, entry & low) == (was >> 48, was & low), (key, value)   # hash, bytes
        assert (entry >> 48) & low == len(value), (key, value)   # rows: the list's items
        entry, now = kept_inputs._entry(key, value, kept_inputs.HASHES[kept_inputs.XXH3]), before(key, value, xxh3=True)
        assert (entry >> 96, entry & low) == (now >> 48, now & low) and now >> 48 != was >> 48, (key, value)
        entry, new = kept_inputs._entry(key, value), text(key, value)
        assert (entry >> 96, entry & low) == (new >> 48, new & low), (key, value)
        assert (entry >> 48) & low == len(value), (key, value)
    assert kept_inputs._entry(7, plain[:1]) & low == len(b'[7,[{"d":"0.04","l_orderkey":7,"price":"901.50"}]]')
    assert (kept_inputs._entry(1, {"a": 1}) >> 48) & low == 1   # a value that is no list: one row


def test_a_decoded_chunk_hands_out_rows_as_recorded_and_decodes_no_more_than_needed():
    """replay/entries.py DecodedChunk: an operator that writes into its rows gets them as recorded
    on a second pass; showing a consumed row after each step costs one spare decode, not one a
    step; peeking the next row gives the object the take hands over."""
    from tt.replay.entries import DecodedChunk

    decodes = []

    def decode():
        decodes.append(1)
        return [{"i": i} for i in range(5)]

    chunk = DecodedChunk(decode)
    for i in range(5):   # a forward pass that shows each consumed row
        nxt = chunk.peek(i)
        row = chunk.take(i)
        assert row is nxt
        row["seen"] = True
        assert chunk.peek(i) == {"i": i}, "a consumed row is shown as recorded"
    assert len(decodes) == 2, "the first decode, and one spare for showing consumed rows"
    again = [chunk.take(i) for i in range(5)]   # a replay going back over the chunk
    assert again == [{"i": i} for i in range(5)] and len(decodes) == 2, "the spare becomes the rows"
    assert chunk.take(0) == {"i": 0} and len(decodes) == 3


def test_numpy_readers_of_shuffle_logs_equal_the_core_ones():
    """store/dests.py's numpy `pack_dests` and `unpack_dests` and store/reader.py's `NumpyLogArrays`
    give what core's pure-Python ones give (the core runs without numpy)."""
    import random
    from array import array

    from tt.core.scopes import LogArrays
    from tt.store.dests import pack_dests as np_pack_dests, unpack_dests as np_unpack_dests
    from tt.store.reader import NumpyLogArrays

    rng = random.Random(7)
    for n_dest in (1, 2, 3, 4, 5, 16, 300, 70000):
        for n in (0, 1, 7, 8, 9, 1000):
            ds = [rng.randrange(n_dest) for _ in range(n)]
            packed = pack_dests(ds, n_dest)
            assert np_pack_dests(array("I", ds), n_dest) == packed, (n_dest, n)
            assert np_unpack_dests(packed, n) == unpack_dests(packed, n) == array("I", ds), (n_dest, n)
            if n_dest <= 300:
                assert NumpyLogArrays.by_destination(array("I", ds), n_dest) == \
                    LogArrays.by_destination(array("I", ds), n_dest)
            for d in {0, n_dest - 1, *ds[:3]}:   # one destination's outputs, as grouping them all gives them
                assert NumpyLogArrays.sent_to(array("I", ds), d) == LogArrays.sent_to(array("I", ds), d) == \
                    LogArrays.by_destination(array("I", ds), n_dest)[1][d]
            counts = array("I", [rng.randrange(5) for _ in range(n)])
            assert NumpyLogArrays.running_sums(counts) == LogArrays.running_sums(counts)


def test_running_sums_read_a_block_at_a_time_equal_the_core_ones(monkeypatch):
    """store/reader.py's `RunningSums`, summed a block at a time as it is read, gives the core's
    running sums at every index (negative ones too) and in bisects, across blocks' edges."""
    import bisect
    import random
    from array import array

    from tt.core.scopes import LogArrays
    from tt.store.reader import RunningSums

    monkeypatch.setattr(RunningSums, "BLOCK", 8)
    rng = random.Random(3)
    for n in (0, 1, 7, 8, 9, 16, 17, 100):
        counts = array("I", [rng.choice((0, 0, 1, 3)) for _ in range(n)])
        got, want = RunningSums(counts), LogArrays.running_sums(counts)
        assert len(got) == len(want) and [got[i] for i in range(-len(want), len(want))] == list(want) + list(want)
        for g in range(-1, want[-1] + 2):
            assert bisect.bisect_right(got, g) == bisect.bisect_right(want, g), (n, g)
        with pytest.raises(IndexError):
            got[len(want)]


def test_kept_offsets_with_and_without_the_uniform_shortcut():
    """`_Kept`'s offsets (n, then n positions, per output): the one-pass shortcut for outputs
    that all have the same count gives what the loop over counts gives, mixed counts too."""
    import numpy as np

    from tt.replay.lineage import _offsets

    def loop(data: array) -> list[int]:
        at, i = [], 0
        while i < len(data):
            at.append(i)
            i += 1 + data[i]
        return at
    rng = random.Random(3)
    cases = [array("I"), array("I", [0]), array("I", [0, 0, 0]), array("I", [1, 7, 1, 9]),
             array("I", [2, 5, 6, 2, 1, 1]), array("I", [1, 2, 1, 1, 1, 1]), array("I", [1, 2, 2, 1, 1])]
    # (the last two: a position of 2 is no count)
    for _ in range(200):
        data = array("I")
        same = rng.random() < 0.5
        c0 = rng.randrange(3)
        for _ in range(rng.randrange(30)):
            c = c0 if same else rng.randrange(3)
            data.append(c)
            data.extend(rng.randrange(4) for _ in range(c))
        cases.append(data)
    for data in cases:
        arr = np.frombuffer(data, np.uint32) if len(data) else np.zeros(0, np.uint32)
        assert _offsets(arr).tolist() == loop(data), list(data)


def test_where_reads_fields_of_dict_rows_and_indexes_other_rows_without_changing_them():
    from tt.replay.lineage import Where

    row = {"customer": "Bob", "row": 3}
    assert Where("customer == 'Bob'")({"customer": "Bob"}) and not Where("customer == 'Bob'")({"customer": "Al"})
    assert Where("row['row'] == 3")(row), "`row` is the whole row, even where a field is named row"
    assert Where("row[0] == 1 and len(row) == 2")((1, 2)) and Where("any(v == 2 for v in row)")((1, 2))
    assert not Where("(customer := 'x') == 'y'")(row) and row == {"customer": "Bob", "row": 3}, "never written"
    bad = Where("custmer == 'Bob'")
    assert not bad({"customer": "Bob"}) and bad.error.startswith("NameError") and bad.fields == ["customer"]
    assert not bad((1,)) and Where("nope")((1,)) is False


def test_where_reads_the_fields_of_named_rows_and_the_tree_shows_them():
    """A PySpark `Row` made with names (what a transformWithState processor yields) and a
    namedtuple bind their fields as a dict row does; a Row made without names, or a plain
    tuple, only as `row`. The tree shows a named row as its fields, inside a unit too."""
    from pyspark.sql import Row

    from tt.core.values import encode_readable, field_names
    from tt.replay.lineage import Where

    Pay = collections.namedtuple("Pay", "id customer")
    named = [Row(id=1, customer="Bob"), Pay(2, "Bob"), Row(id=3, customer="Al")]
    assert [field_names(r) for r in named] == [["id", "customer"]] * 3
    assert field_names(Row(1, "Bob")) is None and field_names((1, "Bob")) is None
    bob = Where("customer == 'Bob' and row[0] < 3")
    assert [bob(r) for r in named] == [True, True, False] and bob.matching(named + [(1, "Bob")]) == [0, 1]
    assert Where("row.customer == 'Al'")(named[2]), "`row` is the Row itself"
    bad = Where("merchant == 'm1'")
    assert not bad(named[0]) and bad.fields == ["customer", "id"]
    assert encode_readable(("row", Row(id=1, amount="¥5000"), (7,))) == {
        "$tuple": ["row", {"id": 1, "amount": "¥5000"}, {"$tuple": [7]}]}
    assert encode_readable(Row(1, "Bob")) == {"$tuple": [1, "Bob"]}


def test_where_matches_a_dataframe_or_arrow_batch_by_its_rows_and_the_tree_shows_a_small_one():
    """What a pandas or Arrow hooked function emits is a table: it holds where one of its rows
    does (each row's columns are names, `row` is that row); a table of up to `SHOWN_ROWS` rows
    is shown as its rows, a bigger one as its shape."""
    import pandas as pd
    import pyarrow as pa

    from tt.core.values import SHOWN_ROWS, encode_readable
    from tt.replay.lineage import Where

    frame = pd.DataFrame({"k": [4, 5], "amount": [1.5, 2.5]})
    batch = pa.RecordBatch.from_pydict({"k": [7], "amount": [0.5]})
    five, seven = Where("k == 5 and amount > 2"), Where("row['k'] == 7")
    assert five.matching([frame, batch, frame.iloc[:1]]) == [0] and seven.matching([frame, batch]) == [1]
    bad = Where("kind == 'x'")
    assert not bad(frame) and bad.fields == ["amount", "k"]
    assert encode_readable(frame) == [{"k": 4, "amount": 1.5}, {"k": 5, "amount": 2.5}]
    assert encode_readable(("one_row", (5,), batch)) == {
        "$tuple": ["one_row", {"$tuple": [5]}, [{"k": 7, "amount": 0.5}]]}
    big = pd.DataFrame({"k": range(SHOWN_ROWS + 1)})
    assert encode_readable(big) == {"$repr": f"<DataFrame: {SHOWN_ROWS + 1} rows × 1 columns (k)>"}


def _frames_of_every_kind() -> list:
    """DataFrames with every kind of column a job may have, and the odd shapes."""
    import numpy as np

    n = 6
    return [
        pd.DataFrame({
            "id": np.arange(n), "customer": ["Bob", "Alice"] * 3, "usd": [1.5, float("nan")] * 3,
            "f32": np.arange(n, dtype=np.float32) / 3, "u8": np.arange(n, dtype=np.uint8), "flag": [True, False] * 3,
            "when": pd.date_range("2024-01-01", periods=n),
            "tz": pd.date_range("2024-01-01", periods=n, tz="Europe/Paris"),
            "delta": pd.to_timedelta(np.arange(n), unit="s"), "cat": pd.Categorical(["a", "b"] * 3),
            "nullable": pd.array([1, None] * 3, dtype="Int64"), "maybe": pd.array([True, None] * 3, dtype="boolean"),
            "numpy_in_object": [np.int64(3), None] * 3, "na_in_object": [pd.NA, "x"] * 3,
            "nat_in_object": [pd.NaT, 1] * 3, "dec": [decimal.Decimal("1.5")] * n, "list": [[1, 2]] * n,
            "date": [dt.date(2024, 1, 1)] * n,
            "arrow_str": pd.array(["a", None] * 3, dtype="string[pyarrow]"),
            "arrow_int": pd.array([1, None] * 3, dtype="int64[pyarrow]")}),
        pd.DataFrame({"a": pd.Series([], dtype="int64"), "b": pd.Series([], dtype=object)}),   # no row
        pd.DataFrame(index=range(3)),                                                        # no column
        pd.DataFrame([[1, 2], [3, 4]], columns=["a", "a"]),                                  # a label twice
        pd.DataFrame({0: [1, 2], 1: ["x", "y"]}),                                            # labels not names
    ]


def test_a_dataframes_rows_are_what_pandas_to_dict_gives():
    """`table_rows` builds a frame's records column by column (faster than pandas on the small
    frames hooked functions hand over); pandas' own `to_dict("records")` is the oracle: the same
    keys, and values of the same types and equal, for every kind of column a job may have."""
    import warnings

    frames = _frames_of_every_kind()

    def same(a, b) -> bool:
        return type(a) is type(b) and (a is b or a == b or (a != a and b != b))   # (NaN, NaT)

    for frame in frames:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # (pandas warns of the repeated label)
            expected, got = frame.to_dict("records"), values.table_rows(frame)
        assert len(got) == len(expected)
        for want, row in zip(expected, got):
            assert list(row) == list(want)
            assert all(same(want[k], row[k]) for k in want), [(k, want[k], row[k]) for k in want
                                                              if not same(want[k], row[k])]


def test_a_tables_digest_reads_its_columns_as_their_series_give_them():
    """A DataFrame's digest reads its columns as pandas holds them, not through `iloc` (70 % of a
    one-row frame's digest): the oracle is the digest through each column's Series, as tt wrote
    it before, so runs recorded then still verify. An output digest reads a batch through
    `table_dumps`, which gives what `dumps` gives."""
    import numpy as np
    import xxhash
    import orjson

    from tt.core.output_digest import OutputDigest

    def through_series(frame) -> str:
        h = xxhash.xxh3_64()
        columns = [(name, frame.iloc[:, i]) for i, name in enumerate(frame.columns)] + [("$index", frame.index)]
        for name, c in columns:
            a = c.to_numpy() if type(c.dtype).__module__.startswith("numpy") else c.to_numpy(dtype=object)
            h.update(orjson.dumps([values._encode(name), str(c.dtype)]))
            h.update(values._digested(a))
        return h.hexdigest()

    block = pd.DataFrame(np.arange(12.0).reshape(4, 3), columns=["x", "y", "z"])   # one 2-D block: strided columns
    frames = _frames_of_every_kind() + [block, block.iloc[1:3, ::2], block.T]
    for frame in frames:
        assert values._table_digest(frame) == through_series(frame), list(frame.columns)
        assert values.table_dumps(frame) == values.dumps(frame)
    assert len({values._table_digest(f) for f in frames}) == len(frames)   # (each frame digests apart)
    one, other = OutputDigest(1, 1), OutputDigest(1, 1)
    for frame in frames:
        one(frame)
        other.count += 1
        other._hash.update(b"%d:%d:" % (other.count - 1, len(values.dumps(frame))))
        other._hash.update(values.dumps(frame))
    assert one.hexdigest() == other.hexdigest()


def test_a_tasks_flush_interval_is_two_seconds_unless_the_environment_says_another(monkeypatch):
    """`TT_FLUSH_SECONDS` sets how often a recording task sends its logs (benches/instructions.py:
    workers under valgrind flush by rows and bytes, not at the machine's pace); what is not a
    positive number leaves the default."""
    from tt.recorder import task

    for said, seconds in (("1e9", 1e9), ("0.5", 0.5), ("soon", 2.0), ("0", 2.0), ("-3", 2.0), ("", 2.0)):
        monkeypatch.setenv("TT_FLUSH_SECONDS", said)
        assert task._flush_seconds(2.0) == seconds, said
    monkeypatch.delenv("TT_FLUSH_SECONDS")
    assert task._flush_seconds(2.0) == 2.0


def test_where_matching_many_rows_at_once_answers_as_row_by_row():
    """`Where.matching` (the index's scan: one comprehension over a chunk's rows) picks the same
    rows as calling the expression on each, keeps the first error as a row-by-row scan does, and
    its own names (the comprehension's index, its list, enumerate) are not the expression's."""
    from tt.replay.lineage import Where

    rows = [(1, "a"), (2, "b"), (3,), [4, "d"], (5, "e"), {"x": 6}, (2, "b"), collections.OrderedDict(x=7)]
    exprs = ["row[0] == 2", "row[1] == 'e'", "row[0] > 1 and len(row) == 2", "(y := row[0]) > 3 and y < 6",
             "i == 0", "rows", "enumerate(row)", "any(v == 'd' for v in row)", "x == 6", "row[9]"]
    for expr in exprs:
        for sample in (rows, [r for r in rows if not isinstance(r, dict)], rows[:3], []):
            one, many = Where(expr), Where(expr)
            assert many.matching(sample) == [i for i, r in enumerate(sample) if one(r)], (expr, sample)
            assert (many.held, many.error, many.fields) == (one.held, one.error, one.fields), (expr, sample)
    assert Where("row[0] == 2").matching(rows) == [1, 6]
    assert Where("x == 7").matching(rows) == [7]   # (a dict subclass's fields are names too)


def test_arrow_scalars_for_a_prefilter_compare_exactly_or_not_at_all():
    """store/sources.py `_scalar`: the constant of `field == constant` as an Arrow scalar of a
    column it compares with exactly (ints with integer columns, strings with string columns),
    None otherwise; a null in the column matches nothing."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from tt.store.sources import _scalar

    ints = pa.chunked_array([pa.array([1, None, 3], pa.int32()), pa.array([3], pa.int32())])
    strs = pa.chunked_array([pa.array(["a", None, "b"], pa.large_string())])
    assert pc.indices_nonzero(pc.equal(ints, _scalar(3, ints.type))).to_pylist() == [2, 3]
    assert pc.indices_nonzero(pc.equal(strs, _scalar("b", strs.type))).to_pylist() == [2]
    assert pc.indices_nonzero(pc.equal(pa.chunked_array([pa.array(["é", "e"])]), _scalar("é", pa.string()))
                              ).to_pylist() == [0]
    assert _scalar("3", ints.type) is None and _scalar(3, strs.type) is None and _scalar(2 ** 70, ints.type) is None
    assert _scalar(True, ints.type) is None and _scalar(1.0, pa.float64()) is None


def test_a_frozen_frame_thaws_as_its_pickle_does():
    """core/frozen_frames.py: a plain DataFrame frozen as its columns comes back as the frame
    pickle gives back (values, dtypes, index, column order, and a copy: not the frame itself),
    and a frame it cannot rebuild exactly is not frozen that way (kept_apart pickles it)."""
    import pickle

    import numpy as np

    from tt.core.frozen_frames import FrozenFrame, freeze
    from tt.core.logs import Frozen, kept_apart

    n = 7
    plain = [
        pd.DataFrame({"k": np.arange(n, dtype=np.int64), "amount": np.linspace(-1, 1, n), "z": -0.0}),
        pd.DataFrame({"s": ["a", None, "c"], "b": [True, False, True], "f": [np.nan, 1.5, -0.0],
                      "t": pd.to_datetime(["2024-01-01", "2024-02-01", None]), "i8": np.int8([1, 2, 3])}),
        pd.DataFrame({"u": pd.to_datetime(["2024-01-01"]).as_unit("us"), "d": pd.to_timedelta([5], "s"),
                      "o": [[1, 2]], "f32": np.float32([1.25])}),
        pd.DataFrame({"x": np.zeros(0), "y": np.zeros(0, dtype=np.int64)}),
    ]
    for df in plain:
        frozen = freeze(df)
        assert isinstance(frozen, FrozenFrame), df.dtypes
        back, want = pickle.loads(pickle.dumps(frozen)), pickle.loads(pickle.dumps(df))
        pd.testing.assert_frame_equal(back, want, check_exact=True)
        assert repr(back) == repr(want) and list(back.dtypes) == list(want.dtypes)
        assert type(back.index) is type(want.index) and back.index.equals(want.index)
        assert [np.signbit(v) for v in back.select_dtypes("float").to_numpy().ravel()] == \
               [np.signbit(v) for v in want.select_dtypes("float").to_numpy().ravel()]
    df = plain[0]
    unit = kept_apart(("row", df), packed_by_pickle=True, frames=True)
    assert unit[0] == "row" and isinstance(unit[1], FrozenFrame)
    df.loc[0, "amount"] = 99.0   # the function writes into the frame it was handed
    assert pickle.loads(pickle.dumps(unit))[1].loc[0, "amount"] == -1.0, "the frame as it was logged"
    lists = plain[2]
    frozen = freeze(lists)
    lists.loc[0, "o"].append(3)   # ... or into a list an object column holds
    back = pickle.loads(pickle.dumps(frozen))
    assert back.loc[0, "o"] == [1, 2], "an object column's mutable items as they were when frozen"
    thawed = pickle.loads(pickle.dumps(freeze(plain[0])))
    thawed.loc[1, "k"] = 42   # a replayed function may write into the frame it is handed
    assert thawed.loc[1, "k"] == 42

    from tt.core.frozen_frames import thaw   # a frame frozen by an earlier tt: one pickle of its arrays
    old = pickle.dumps((pd.DataFrame, pd.RangeIndex, 3, ["s", "f"],
                        [np.array(["a", None, "c"], dtype=object), np.array([np.nan, 1.5, -0.0])]))
    pd.testing.assert_frame_equal(thaw(old), pd.DataFrame({"s": ["a", None, "c"], "f": [np.nan, 1.5, -0.0]}),
                                  check_exact=True)

    others = [
        pd.DataFrame({"a": [1, 2]}, index=[5, 6]),
        pd.DataFrame({"a": [1, 2]}, index=pd.RangeIndex(1, 3)),
        pd.DataFrame({"a": pd.array([1, None], dtype="Int64")}),
        pd.DataFrame({"a": pd.Categorical(["x", "y"])}),
        pd.DataFrame({"a": pd.array(["x", "y"], dtype="string")}),
        pd.DataFrame([[1, 2]], columns=["a", "a"]),
        pd.DataFrame([[1, 2]], columns=[0, 1]),
        pd.DataFrame([[1, 2]], columns=pd.MultiIndex.from_tuples([("a", "x"), ("a", "y")])),
        pd.DataFrame({"a": pd.to_datetime(["2024-01-01"]).tz_localize("UTC")}),
        MyFrame({"a": [1]}),
        pd.DataFrame(index=pd.RangeIndex(4)),   # (no columns: its column index is a RangeIndex)
    ]
    named = pd.DataFrame({"a": [1]})
    named.index.name = "i"
    attrs = pd.DataFrame({"a": [1]})
    attrs.attrs["source"] = "x"
    for df in [*others, named, attrs]:
        assert freeze(df) is None, df
        kept = kept_apart(df, packed_by_pickle=True, frames=True)
        assert isinstance(kept, Frozen)
        back = pickle.loads(pickle.dumps(kept))
        pd.testing.assert_frame_equal(back, df, check_exact=True)
        assert type(back) is type(df) and back.attrs == df.attrs


def test_a_join_that_hands_its_keys_over_processes_as_its_process_does():
    """`HashJoin.keys_logged_to` repeats `process`'s lines (a call per input less for `--lineage`):
    the same outputs, stored rows and counts of what changed, and one key handed over per row."""
    from tt.core.operator import HashJoin

    rng = random.Random(5)
    seq = [({"k": rng.randrange(40), "i": i}, rng.randrange(2)) for i in range(2_000)]
    joins = [HashJoin(lambda r: r["k"], lambda r: r["k"], merge=lambda a, b: (a["i"], b["i"])) for _ in range(2)]
    handed: list = []
    calls = [joins[0].process, joins[1].keys_logged_to(handed.append)]
    seen: list = [[], []]
    outputs: list = [[], []]
    for n, (row, port) in enumerate(seq):
        for j in (0, 1):
            if n == 700:
                seen[j].append(joins[j].changed_keys())   # from here on the joins count what changed
            outputs[j].append(calls[j](dict(row), port))
            seen[j].append(joins[j].join_key())
    for j in (0, 1):
        seen[j] += [joins[j].changed_keys(), joins[j].appended_rows(), joins[j].left, joins[j].right]
    assert outputs[0] == outputs[1] and sum(map(bool, outputs[0])) > 1_000
    assert seen[0] == seen[1] and handed == [row["k"] for row, _ in seq]


@pytest.mark.parametrize("keys", ["ints", "mixed"])
def test_a_joins_key_log_tells_what_each_output_was_made_from(keys):
    """`--lineage` logs a join's inputs' keys alone (JoinLineageRunner); the reader works out what
    each output was made from (store/join_lineage.py). It must say what remembering every stored
    row by identity said (StoredLineageRunner), output for output, for int keys (-1 and -2 too,
    whose hashes are equal) and for keys of other types (a numpy int, a float or a Decimal is the
    same key as the int it equals, -1 and 2**62 too, whose hashes are not their values; fed row by
    row and in runs)."""
    from tt.core.logs import END
    from tt.core.operator import HashJoin
    from tt.core.runtime import InstanceLog, JoinLineageRunner, OperatorFailure, StoredLineageRunner
    from tt.store import join_lineage

    rng = random.Random(11)
    import numpy as np

    domain = [-2, -1, 0, 7, 2 ** 70] if keys == "ints" else [-2, -1, "a", "b", (1, "x"), 2.5, None, True,
                                                             np.int64(-1), 2 ** 62, np.int64(2 ** 62), -1.0,
                                                             decimal.Decimal(-2), float(2 ** 62), float("nan")]
    seq = [({"k": rng.choice(domain), "i": i}, rng.randrange(2)) for i in range(3_000)]
    made, logged, emitted = None, None, {}
    flushed = (array("q"), array("I"))

    def flush(runner):   # what a task's flush takes of the log (recorder/task.py `_collect`)
        runner.settle_log()
        flushed[0].extend(runner.log.keys)
        flushed[1].extend(runner.log.counts)
        del runner.log.keys[:], runner.log.counts[:]
        runner.log.start = runner.count

    for cls, batched in ((StoredLineageRunner, False), (JoinLineageRunner, False), (JoinLineageRunner, True)):
        op = HashJoin(lambda r: r["k"], lambda r: r["k"], merge=lambda a, b: (a["i"], b["i"]))
        runner = cls("J", 0, op, 1, InstanceLog([]), False)
        out = emitted[(cls, batched)] = []
        runner.targets = [out.append]
        if batched:   # as a shuffle's payloads come: a run of one port's rows at a time (feed_many's
            # loop), some row by row between them, the log flushed now and then
            for n, (_, run) in enumerate(itertools.groupby(seq, key=lambda rp: rp[1])):
                run = list(run)
                if n % 5 == 4:
                    for row, port in run:
                        runner.feed(row, port)
                else:
                    runner.feed_rows([row for row, _ in run], run[0][1])
                if n % 3 == 2:
                    flush(runner)
        else:
            for row, port in seq:
                runner.feed(row, port)
        runner.end()
        assert runner.count == len(seq) + 1
        if cls is StoredLineageRunner:
            made = runner.log.made
        elif batched:   # the same logs and outputs as row by row
            flush(runner)
            assert flushed == (logged.keys, logged.counts)
            assert out == emitted[(JoinLineageRunner, False)] == emitted[(StoredLineageRunner, False)]
        else:
            logged = runner.log
    runs = []
    for _, port in seq:
        if runs and runs[-1][0] == port:
            runs[-1][2] += 1
        else:
            runs.append([port, 0, 1])
    runs.append([*END, 1])
    assert len(logged.keys) == len(seq) and len(logged.made) == 0
    assert sum(made) > 0 and join_lineage.made_from_keys([tuple(r) for r in runs], logged.keys, logged.counts) == made

    # a key function that raises mid-run: the logs are complete up to the failing input either way
    def failing_key(r):
        if r["i"] == 1_550:
            raise ValueError("no key")
        return r["k"]

    def failing_merge(a, b):   # raises once the failing input's row is stored (and its key handed over)
        if 1_550 in (a["i"], b["i"]):
            raise ValueError("no merge")
        return a["i"], b["i"]

    silent = [({"k": i // 3, "i": i}, i // 100 % 2) for i in range(3_000)]
    probing = [({"k": i % 7, "i": i}, int(i < 1_500)) for i in range(3_000)]   # 1,550 matches stored rows
    for inputs, join in ((seq, lambda: HashJoin(failing_key, failing_key)),
                         (silent, lambda: HashJoin(failing_key, failing_key)),   # (silent runs)
                         (probing, lambda: HashJoin(lambda r: r["k"], lambda r: r["k"], merge=failing_merge))):
        failed = []
        for batched in (False, True):
            runner = JoinLineageRunner("J", 0, join(), 1, InstanceLog([]), False)
            runner.targets = [lambda o: None]
            with pytest.raises(OperatorFailure):
                if batched:
                    for port, run in itertools.groupby(inputs, key=lambda rp: rp[1]):
                        runner.feed_rows([row for row, _ in run], port)
                else:
                    for row, port in inputs:
                        runner.feed(row, port)
            runner.settle_log()   # (as a flush does)
            failed.append((runner.count, runner.log.keys, runner.log.counts))
        assert failed[0] == failed[1] and failed[0][0] == len(failed[0][1]) == len(failed[0][2]) == 1_550

    # an input fed row by row, then a batch whose merge raises: a key for each input taken, the failing one's not
    runner = JoinLineageRunner("J", 0, HashJoin(lambda r: r["k"], lambda r: r["k"], merge=failing_merge), 1,
                               InstanceLog([]), False)
    runner.targets = [lambda o: None]
    runner.feed({"k": 1, "i": 0}, 1)
    with pytest.raises(OperatorFailure):
        runner.feed_rows([{"k": 1, "i": i} for i in range(1_545, 1_560)], 0)
    runner.settle_log()
    assert runner.count == len(runner.log.keys) == len(runner.log.counts) == 6

    # counts beyond the stored rows (a log the built-in join never writes): those outputs come from nothing
    runs, keys, counts = [(0, 0, 2), (1, 0, 2), (-1, -1, 1)], array("q", [5, 6, 5, 5]), array("I", [0, 0, 2, 3, 0])
    assert list(join_lineage.made_from_keys(runs, keys, counts)) == [1, 0, 0, 1, 0, 0, 0]


def test_a_hooked_key_is_one_unit_only_when_spark_hands_it_exactly_one_element():
    """`_only` (recorder/hooked_calls.py) reads Spark's iterator at most two ahead: a key of one
    element becomes the one unit `one_row`/`one_chunk`; of none or several, every element in
    order, each read once."""
    from tt.recorder.hooked_calls import _only

    assert _only(iter(["a"])) == ("a", None)
    for elements in ([], ["a", "b"], ["a", "b", "c", "d"]):
        pulled = []
        only, rest = _only(pulled.append(e) or e for e in elements)
        assert only is None and len(pulled) == min(len(elements), 2)
        assert list(rest) == elements and pulled == elements


# --- θ's loop over a batch ------------------------------------------------------------------

def test_thetas_loop_over_a_batch_logs_and_takes_barriers_as_row_by_row():
    """`RecordingRunner.feed_many` logs a run of silent inputs at once and checks for barriers
    between slices of rows: its outputs and output counts equal those of `feed` row by row; a
    barrier at a fixed position (a re-run's) is taken exactly there, with every input before
    it logged; an interaction that arrives mid-batch (the control thread sets `barrier_at` to
    0) is taken within a slice (≤ `_SLICE_ROWS` rows) with the log complete; a failing input
    leaves the log complete up to it; a `--when` condition triggers at the same inputs, after
    their outputs, with the log complete, from `when_from` on, beside barriers at fixed
    positions (a trigger's barriers move the next one, as `_on_trigger`'s do)."""
    from tt.core.runtime import _SLICE_ROWS, INF, InstanceLog, OperatorFailure, ThetaRunner

    class Op(Operator):   # 0, 1 or 2 outputs by the row; long silent runs, as an aggregate's
        def __init__(self):
            self.seen = 0
            self.arrived: list[int] = []   # positions at which an "interaction" arrives
            self.runner = None
            self.fail_at = -1

        def process(self, row, port=0):
            self.seen += 1
            if row == self.fail_at:
                raise ValueError("bad row")
            if self.arrived and self.seen == self.arrived[0]:
                self.arrived.pop(0)
                self.runner.barrier_at = 0
            if row % 1000 < 700:
                return None
            return [row] * (row % 3)

    rows = list(range(20_000))

    def run(batched: bool, fixed=(), arrive=(), fail_at=-1, when=None, when_from=0):
        op = Op()
        op.arrived, op.fail_at = list(arrive), fail_at
        taken = []
        fixed = list(fixed)

        def on_barrier(position):
            assert len(runner.log.counts) == position - runner.log.start   # every input before it logged
            taken.append(position)
            while fixed and fixed[0] <= position:
                fixed.pop(0)
            runner.barrier_at = fixed[0] if fixed else INF

        def on_trigger(position, row):
            assert len(runner.log.counts) == position - runner.log.start and len(out) == emitted[row]
            taken.append(("when", position, row))
            while fixed and fixed[0] <= position:
                fixed.pop(0)
            runner.barrier_at = fixed[0] if fixed else INF

        runner = ThetaRunner("T", 0, op, 1, InstanceLog([]), False, on_barrier=on_barrier,
                             on_trigger=on_trigger, when=when, when_from=when_from)
        op.runner = runner
        runner.barrier_at = fixed[0] if fixed else INF
        out = []
        runner.targets = [out.append]
        try:
            if batched:
                for at in range(0, len(rows), 3_000):   # as a source's batches come
                    runner.feed_rows(rows[at:at + 3_000], 0)
            else:
                for row in rows:
                    runner.feed(row, 0)
        except OperatorFailure as f:
            assert f.row == fail_at and runner.count == fail_at
        return out, runner.log.counts, taken, runner.count

    plain = run(False)
    assert run(True) == plain and sum(plain[1]) == len(plain[0]) > 0 and len(plain[1]) == len(rows)
    fixed = [1, 2, 699, 700, 2_999, 3_000, 3_001, 12_345, 19_999]
    batched = run(True, fixed=fixed)
    assert batched == run(False, fixed=fixed) and batched[2] == fixed
    out, counts, taken, _ = run(True, arrive=[500, 9_000])
    assert (out, counts) == plain[:2]
    assert len(taken) == 2 and 500 <= taken[0] <= 500 + _SLICE_ROWS and 9_000 <= taken[1] <= 9_000 + _SLICE_ROWS
    failed = run(True, fail_at=7_777)
    assert failed == run(False, fail_at=7_777) and len(failed[1]) == 7_777

    emitted = dict(zip(rows, itertools.accumulate(0 if r % 1000 < 700 else r % 3 for r in rows)))
    when = compile_condition("row % 997 in (0, 1) or row in (2_999, 3_000, 3_001, 19_999)")
    for args in ({}, {"fixed": fixed}, {"fixed": fixed, "when_from": 5_000}, {"fail_at": 7_777}):
        batched = run(True, when=when, **args)
        assert batched == run(False, when=when, **args)
        hits = [t for t in batched[2] if type(t) is tuple]
        expected = [r for r in rows[args.get("when_from", 0):args.get("fail_at", len(rows))] if when(r)]
        assert [row for _, _, row in hits] == expected and all(at == row + 1 for _, at, row in hits)


# --- a source's batch into a shuffle ---------------------------------------------------------

@pytest.mark.parametrize("logged", [False, True])
def test_a_sources_batch_into_a_shuffle_is_routed_and_logged_as_row_by_row(logged):
    """A source hands its batch to its one shuffle at once (`emit.many`): every row goes to the
    destination `emit` sends it to, in order, and the dests log is the same; where the key
    function raises on a row, the source fails at that row, having sent each row before it
    once (the batch is then emitted row by row). A logged source's Output log says one output
    for each row."""
    from tt.core.runtime import InstanceLog, Runner, SourceLineageRunner
    from tt.recorder.task import ROWS_PER_PAYLOAD, Outbox

    def key(row):
        if row["k"] == -1:
            raise ValueError("no key")
        return row["k"]

    def run(rows, batch: int, one_by_one: bool):
        outbox = Outbox(0)
        dests = array("I") if logged else None
        emit = outbox.shuffle_target(0, key, 3, False, dests)
        if one_by_one:
            del emit.many
        if logged:
            log = InstanceLog([0])
            source = SourceLineageRunner("U", 0, Source(), 0, log, False)
        else:
            source = Runner("U", 0, Source(), 0)
        source.targets = [emit]
        error = None
        try:
            for i in range(0, len(rows), batch):
                source.feed_rows(rows[i:i + batch], 0)
        except ValueError as e:
            error = e
        outbox.close()
        sent = [(d, r["i"]) for d, payload in zip(outbox.cols[1], outbox.cols[5]) for r in pickle.loads(payload)]
        return sent, list(dests or []), source.count, error, list(source.log.counts) if logged else None

    rows = [{"i": i, "k": i * 7919 % 1009} for i in range(3 * ROWS_PER_PAYLOAD + 17)]
    at_once = run(rows, 700, False)
    assert at_once[:3] == run(rows, 700, True)[:3] and at_once[3] is None
    assert sorted(i for _, i in at_once[0]) == list(range(len(rows)))
    assert {d for d, _ in at_once[0]} == {0, 1, 2} and at_once[2] == len(rows)
    if logged:
        assert at_once[1] == [stable_hash(r["k"]) % 3 for r in rows]
        assert at_once[4] == [1] * len(rows)   # its Output log: one output per row, batch by batch

    rows[1000]["k"] = -1   # in the second batch
    failed, by_row = run(rows, 700, False), run(rows, 700, True)
    assert failed[:3] == by_row[:3] and str(failed[3]) == str(by_row[3]) == "no key"
    assert failed[2] == 1001 and sorted(i for _, i in failed[0]) == list(range(1000))


def test_a_partitions_store_over_micro_batches_is_the_store_its_calls_built():
    """`partition_store` lays the views of one partition's micro-batches over each other. Its
    oracle is a model of Spark's store for the partition, which starts empty and which every
    call reads or writes: random calls on a value, a list, a map and timers (reads answered from
    the model, as Spark answers them; lists appended to without a read, map entries written or
    removed one by one, variables deleted, timers that fire), each micro-batch seen by a fresh
    view; after every micro-batch the views laid over each other hold exactly the model."""
    from tt.core.state_handle import StoreView
    from tt.replay.partition_store import partition_store

    kinds = {"v": "value", "l": "list", "m": "map"}
    rng = random.Random(20261129)
    for _ in range(300):
        model: dict[str, dict] = {name: {} for name in kinds}
        timers: dict[str, set] = {}
        views = []
        for _batch in range(rng.randint(1, 5)):
            view = StoreView()
            for name, kind in kinds.items():
                view.declare(name, kind)
            deleted = set()
            for _call in range(rng.randint(0, 14)):
                k, x = rng.choice("abc"), rng.randint(0, 3)
                name = rng.choice([*kinds, "timers"])
                if name in deleted:
                    continue
                have = model.get(name, {}).get(k)
                if name == "timers":
                    method = rng.choice(["registerTimer", "deleteTimer", "listTimers", "fired"])
                    mine = timers.setdefault(k, set())
                    if method == "fired":
                        if mine:
                            t = min(mine)
                            mine.discard(t)
                            view.fired((k,), t)
                        continue
                    answer = sorted(mine) if method == "listTimers" else None
                    if method != "listTimers":
                        (mine.add if method == "registerTimer" else mine.discard)(x)
                    view.saw("timers", method, k, (x,) if method != "listTimers" else (), answer)
                    continue
                method = rng.choice({"value": ["get", "update", "clear", "exists"],
                                     "list": ["get", "put", "appendValue", "appendList", "clear", "exists"],
                                     "map": ["getValue", "containsKey", "updateValue", "removeKey", "iterator",
                                             "clear", "exists", "deleteIfExists"]}[kinds[name]])
                args, answer = (), None
                if method == "deleteIfExists":
                    view.saw(name, method, k, (name,), None)
                    view.drop(name)
                    model[name], deleted = {}, deleted | {name}
                    continue
                if method == "exists":
                    answer = have is not None
                elif method == "clear":
                    model[name].pop(k, None)
                elif method == "get":
                    answer = (None if have is None else (have,)) if name == "v" else [(v,) for v in have or []]
                elif method == "update":
                    args, model[name][k] = ((x,),), x
                elif method in ("put", "appendValue", "appendList"):
                    new = [x] if method == "appendValue" else [x, x + 1]
                    args = ((x,),) if method == "appendValue" else ([(v,) for v in new],)
                    model[name][k] = new if method == "put" else [*(have or []), *new]
                elif method == "iterator":
                    answer = [((u,), (v,)) for u, v in (have or {}).items()]
                else:   # one entry of the map
                    args = ((x,),)
                    if method == "getValue":
                        answer = (have[x],) if have and x in have else None
                    elif method == "containsKey":
                        answer = bool(have and x in have)
                    elif method == "updateValue":
                        args = ((x,), (x * 10,))
                        model[name][k] = {**(have or {}), x: x * 10}
                    elif have is not None:   # removeKey
                        have.pop(x, None)
                        if not have:
                            del model[name][k]
                view.saw(name, method, k, args, answer)
            views.append(view)
            expected = {name: {k: v for k, v in per_key.items() if v not in ([], {})}
                        for name, per_key in model.items()}
            shown_timers = {k: sorted(t) for k, t in timers.items() if t}
            if shown_timers:
                expected["timers"] = shown_timers
            assert partition_store(views) == expected, [v.__dict__ for v in views]


def test_a_pandas_unit_that_arrow_would_change_is_pickled():
    """`blobs.pack_unit`: a DataFrame holding arrays, maps or structs (numpy arrays and dicts,
    after nulls, NaN, pd.NA) is pickled and comes back as it was, as does a group whose key
    Arrow cannot take (pd.NaT); one of numbers, strings, bytes, decimals and dates stays Arrow.
    `blobs.round_trips` tells which frames Arrow gives back as they were (for `tt pack`, which
    checks the nested ones)."""
    import datetime
    import decimal

    import numpy as np

    from tt.store import blobs

    plain = pd.DataFrame({"i": [1, 2, 3], "f": [np.nan, 1.5, 2.0], "s": [None, "x", "y"], "b": [b"1", None, b"2"],
                          "d": [decimal.Decimal("1.5"), None, decimal.Decimal("2.0")],   # (one scale, as Spark gives)
                          "t": [datetime.date(2024, 1, 1), None, datetime.date(2024, 1, 2)]})
    assert blobs.pack_unit(blobs.PANDAS, plain)[0] == blobs.PANDAS
    assert blobs.pack_unit(blobs.PANDAS_GROUP, ((np.int32(1),), plain, plain))[0] == blobs.PANDAS_GROUP
    for column, arrow_keeps in (([pd.NA, {"a": 1}, {"b": 2}], False),                 # a map after a null
                                ([np.nan, {1: "x"}, {}], False),                       # keys that are no strings
                                ([np.array([0, None], dtype=object), None, np.array([1])], False),  # a null in an array
                                ([np.array([1, 2]), np.array([3]), None], True),       # an array of longs
                                ([{"x": 1, "y": "s"}] * 3, True)):                     # a struct
        frame = plain.assign(c=pd.Series(column, dtype=object))
        assert blobs.round_trips(frame) is arrow_keeps, column
        for codec, unit in ((blobs.PANDAS, frame), (blobs.PANDAS_GROUP, (("k",), plain, frame))):
            packed = blobs.pack_unit(codec, unit)
            assert packed[0] == blobs.PICKLE, column
            (back,) = blobs.unpack_tuples(*packed)
            got = back if codec == blobs.PANDAS else back[2]
            assert repr(got["c"].tolist()) == repr(frame["c"].tolist())   # (arrays and NaN: compared as text)
    assert blobs.round_trips(plain)
    assert blobs.pack_unit(blobs.PANDAS_GROUP, ((np.int64(1), np.array([0, None], dtype=object)), plain))[0] == \
        blobs.PICKLE   # an array in the key (grouped by an expression, it is in no column)
    packed = blobs.pack_unit(blobs.PANDAS_GROUP, ((pd.NaT, None), plain))   # a null timestamp key
    assert packed[0] == blobs.PICKLE
    (key, back), = blobs.unpack_tuples(*packed)
    assert key[0] is pd.NaT and key[1] is None and back.equals(plain)


def test_the_libraries_loaded_are_asked_once_and_listed_while_loaded(monkeypatch):
    """`libraries.loaded` asks a module its version when it first sees it loaded (a worker's
    tasks ask twice each), lists a package loaded since its last call, and not one unloaded."""
    import sys
    import types

    from tt.core import libraries

    before = libraries.loaded()
    assert "ttfakepkg" not in before and "pandas" in before
    fake = types.ModuleType("ttfakepkg")
    fake.__version__ = "1.2"
    monkeypatch.setitem(sys.modules, "ttfakepkg", fake)
    monkeypatch.setitem(sys.modules, "ttfakepkg.sub", types.ModuleType("ttfakepkg.sub"))
    assert libraries.loaded() == dict(sorted({**before, "ttfakepkg": "1.2"}.items()))
    fake.__version__ = "9"   # (asked once: what it said when first seen)
    assert libraries.loaded()["ttfakepkg"] == "1.2"
    monkeypatch.delitem(sys.modules, "ttfakepkg")
    assert libraries.loaded() == before
    answer = libraries.loaded()   # (given again while no module came or went: a copy each time)
    answer["ttfakepkg"] = "1.2"
    assert libraries.loaded() == before
    other = types.ModuleType("ttotherpkg")   # one gone and another come: as many modules, another list
    other.__version__ = "3"
    monkeypatch.delitem(sys.modules, "ttfakepkg.sub")
    monkeypatch.setitem(sys.modules, "ttotherpkg", other)
    assert libraries.loaded() == dict(sorted({**before, "ttotherpkg": "3"}.items()))


def test_a_set_of_numbers_shows_in_order_and_a_changed_set_shows_what_it_gained():
    """A set is stored in the order of its items' JSON, so numbers showed as '{1031, 112, 1150}';
    and `tt replay` cut the old and the new set to 60 characters, which showed the same first
    items and not the one added (a UDTF's `seen` set of event ids). Neither changes the stored
    state, whose bytes runs already hold."""
    from tt.cli.replay import _set_change

    assert values.render(values.encode({1031, 112, 5, 1150})) == "{5, 112, 1031, 1150}"
    assert values.render(values.encode({"b", "a"})) == "{'a', 'b'}"
    assert values.dumps({1031, 112}) == values.dumps({112, 1031})
    big = set(range(1000, 1200))
    assert _set_change({"old": values.encode(big), "new": values.encode(big | {5})}) == "+{5} (200 → 201 items)"
    assert _set_change({"old": values.encode({1, 2}), "new": values.encode({2, 3})}) == "+{3} -{1} (2 → 2 items)"
    assert _set_change({"old": values.encode([1]), "new": values.encode([1, 2])}) is None
    assert _set_change({"new": values.encode({1})}) is None


def test_two_values_that_differ_are_shown_where_they_differ():
    """tt verify cut both values to 60 characters: two DataFrames whose digests differ read the
    same, '<DataFrame: 1000 rows × 7 columns (order_id, customer, amo…' twice."""
    a = {"$repr": "<DataFrame: 1000 rows × 7 columns (order_id, customer, amount, a, b, c, d), xxh3 5f0c1234>"}
    b = {"$repr": "<DataFrame: 1000 rows × 7 columns (order_id, customer, amount, a, b, c, d), xxh3 77aa9999>"}
    shown = values.render_apart(a, b, 60)
    assert shown == ("…c, d), xxh3 5f0c1234>", "…c, d), xxh3 77aa9999>")
    assert values.render_apart(1, 2) == ("1", "2") and values.render_apart("x" * 99, "x" * 99) == (
        values.render("x" * 99, 60),) * 2


def test_a_field_set_to_none_is_written_by_that_call():
    """Row lineage's tracking (replay/state_access.py) took a plain field whose new value is None
    for a tracked dict left as it was (`_dicts.get(name) is value`: None is None), so the call
    that reset it was no writer, and a UDTF's handler made by `init` (customer None) chained a
    key's rows to the earlier keys' first rows."""
    from tt.replay.state_access import StateAccess, positions

    class Last(Operator):
        def __init__(self):
            self.last = None

        def process(self, row, port=0):
            self.last = row
            return []

    op = Last()
    access = StateAccess(op)
    for position, row in enumerate(["a", None, "b", None]):
        access.begin(position)
        op.process(row)
        access.end(row, 0)
        assert list(positions(access.writers_of(("last",))))[0] == position, (position, row)


def test_the_logs_view_names_a_conditions_tuple_as_every_view_does():
    """The interactions log said `Enrich:1 #10` of the tuple the timeline and `tt inspect` name
    `Enrich:1:9`: the detail holds a count, one more than the tuple's number."""
    from tt.replay.logview import _detail

    assert _detail({"op": "Enrich", "instance": 1, "position": 10, "row": "<DataFrame>"}) == "Enrich:1:9 <DataFrame>"
    assert _detail({"batch": 3}) == "batch=3"

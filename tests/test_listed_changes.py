"""A join and an aggregate store their interaction states from the keys they list (Operator.changed_keys).

The built-in HashJoin and Aggregate tell the recorder which keys they changed, so each
snapshot holds those keys and the new ones instead of a comparison of the whole dict
(core/state_deltas.py); the join's stored rows, which are its inputs, as a digest updated from
those keys (core/kept_inputs.py). The run must replay to exactly the stored states (`tt verify`),
and the stored end states, and the replayed rows behind the join's digests, must be what the
input data says, computed in plain Python. A join whose stored rows differ in replay is found.
Before its task's end, an interaction stores the join's rows by their keys and rows alone
(`of: rows`): the rows only grow, so the end's digest finds any row that differs.
"""

from __future__ import annotations

import orjson
import pytest

import tt
from tt.core import values
from tt.cli.main import main
from tt.replay.engine import Engine
from tt.replay.verify import verify
from tt.store import blobs
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow

ITEMS = [{"seq": i, "o": (i * 7) % 300, "amount": float(i % 13)} for i in range(2000)]
ORDERS = [{"seq": 5000 + o, "o": o, "cust": f"c{o % 7}"} for o in range(0, 300, 2)]   # half the orders exist


def build(spark):
    flow = tt.Dataflow("listed_changes", partitions=2)
    items = flow.source("L", spark.createDataFrame(ITEMS, "seq long, o long, amount double").repartition(2))
    orders = flow.source("O", spark.createDataFrame(ORDERS, "seq long, o long, cust string").repartition(2))
    joined = items.key_by(lambda r: r["o"]).join(orders.key_by(lambda r: r["o"]), name="J")
    joined.key_by(lambda r: r["cust"]).aggregate(0.0, lambda acc, r: acc + r["amount"], name="A").collect("S")
    return flow


def _end_states(reader, name):
    op = reader.operator(name)
    end = reader.instances_at(reader.interactions()[-1].k)
    return [values.decode(reader.state(end[(op.id, i)].state)) for i in range(op.instances)]


def test_join_and_aggregate_snapshots_from_listed_keys_replay_exactly(record, capsys):
    path = record(build, watch="J", when="row['seq'] % 40 == 0")
    reader = RunReader(path)
    try:
        assert reader.status == "complete"
        ints = reader.interactions()
        assert len(ints) >= 20

        # the snapshots after the first are deltas made of listed keys, for both operators
        listed = set()
        for (data,) in reader.conn.execute("SELECT data FROM states"):
            stored = orjson.loads(blobs.decompress(data))
            if "$delta" in stored:
                listed.update(stored["$delta"].get("keys", {}))
        assert "groups" in listed

        # the join's stored rows are its inputs: every snapshot keeps a summary of them, never a copy:
        # their keys and rows at interactions, and at the task's end their digest; both sides come
        # through a shuffle from outside G(θ), so their rows' values are in the run file (`key rows`)
        j = reader.operator("J").id
        finals = {state for (state,) in reader.conn.execute("SELECT state FROM finals WHERE op=?", (j,))}
        stored = [(i.k, key, at.state in finals, values.decode(reader.state(at.state))) for i in ints if i.k
                  for key, at in reader.instances_at(i.k).items() if key[0] == j]
        assert stored and all(set(s["left"]) == {"$kept"} and set(s["right"]) == {"$kept"} for *_, s in stored)
        assert {(end, s[side]["$kept"]["of"]) for _, _, end, s in stored for side in ("left", "right")} == {
            (False, "rows"), (True, "key rows")}
        # an instance's rows only grow, up to its end's
        grew = False
        for key in {key for _, key, _, _ in stored}:
            rows = [(s["left"]["$kept"]["rows"], s["right"]["$kept"]["rows"]) for _, at, _, s in stored if at == key]
            assert all(a <= b for was, now in zip(rows, rows[1:]) for a, b in zip(was, now)), (key, rows)
            grew = grew or rows[0] < rows[-1]
        assert grew, "interactions came while the join was taking its inputs"

        results = verify(reader)
        assert len(results) == len(ints) and all(r["ok"] for r in results), [r for r in results if not r["ok"]][:1]
        assert {op for r in results for op in r.get("rows_only", ())} == {"J"}, "verify says what it compared so"

        # the oracle: the input data, joined and summed in plain Python; the join's rows as replayed
        want_left = {}
        for r in ITEMS:
            want_left.setdefault(r["o"], []).append(r)
        counts = {side: [0, 0] for side in ("left", "right")}
        for s in _end_states(reader, "J"):
            for side in counts:
                counts[side][0] += s[side]["$kept"]["rows"]
                counts[side][1] += s[side]["$kept"]["keys"]
        assert counts == {"left": [len(ITEMS), len(want_left)], "right": [len(ORDERS), len(ORDERS)]}
        engine = Engine(reader)
        engine.jump(ints[-1].k)
        left, right = {}, {}
        for i in range(reader.operator("J").instances):
            op = engine.instances[(reader.operator("J").id, i)].runner.op
            for side, into in ((op.left, left), (op.right, right)):
                for k, rows in side.items():
                    into.setdefault(k, []).extend(rows)
        assert {k: sorted(v, key=lambda r: r["seq"]) for k, v in left.items()} == want_left
        assert right == {r["o"]: [r] for r in ORDERS}

        assert main(["verify", str(path)]) == 0
        said = capsys.readouterr().out
        assert "every replayed state equals the recorded one" in said
        assert (": J: stored rows, which are the inputs, compared by their keys and rows at interactions and by "
                "their digest at each task's end") in said

        # what `tt inspect` shows of them, and the replay it points at, which shows the rows
        k = str(ints[-1].k)
        assert main(["inspect", str(path), "state", "--at", k, "--op", "J"]) == 0
        text = capsys.readouterr().out
        assert "rows under" in text and "kept as inputs (digest" in text and "seq" not in text
        command = text.rsplit("A replay shows them: ", 1)[1].split()
        assert command[:2] == ["tt", "replay"] and command[3:] == ["--to", k, "--states", "all"]
        assert main(command[1:]) == 0
        shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  state J:0 = ")]
        assert shown and "seq: " in shown[0] and "left: {" in shown[0]

        cust = {r["o"]: r["cust"] for r in ORDERS}
        want_sums = {}
        for r in ITEMS:
            if r["o"] in cust:
                want_sums[cust[r["o"]]] = want_sums.get(cust[r["o"]], 0.0) + r["amount"]
        sums = {}
        for s in _end_states(reader, "A"):
            sums.update(s["groups"])
        assert sums == pytest.approx(want_sums)
    finally:
        reader.close()


def build_noisy(spark):
    """The join's merge writes a random number into the stored order row it matched: not
    logged, so a replay stores other values than the recording did."""
    import random

    def merge(item, order):
        order["noise"] = random.random()
        return {**item, "cust": order["cust"]}

    flow = tt.Dataflow("noisy_join", partitions=2)
    items = flow.source("L", spark.createDataFrame(ITEMS, "seq long, o long, amount double").repartition(2))
    orders = flow.source("O", spark.createDataFrame(ORDERS, "seq long, o long, cust string").repartition(2))
    items.key_by(lambda r: r["o"]).join(orders.key_by(lambda r: r["o"]), merge=merge, name="J").collect("S")
    return flow


def test_stored_rows_that_differ_in_replay_are_found_through_the_digest(record):
    path = record(build_noisy, watch="J", when="row['seq'] % 400 == 0")
    reader = RunReader(path)
    try:
        results = verify(reader)
        bad = [r for r in results if not r["ok"]]
        assert bad, "a join whose stored rows differ in replay must fail verify"
        first = bad[0]
        assert first["op"] == "J" and first["field"] == "right", first
        assert "kept as inputs" in first["error"] and "digest" in first["error"], first["error"]
        assert first.get("found_by") == "replays" and first["tuple"].startswith("J:"), first
        assert "processing it is not deterministic" in first["error"], "the row arrived the same both times"
        assert "noise" not in first["row"], "the row as it arrived, before the merge wrote into it"
        stored = values.decode(reader.state(reader.instances_at(first["k"])[(reader.operator("J").id, 0)].state))
        assert stored["right"]["$kept"]["of"] == "key rows", "found by the values of the keys its digest samples"
    finally:
        reader.close()


CUSTOMERS = [{"cust": f"c{i}", "region": ("north", "south", "east")[i % 3]} for i in range(7)]


def build_two_joins(spark):
    """J (θ) joins two shuffled sources; J2 joins J's output, which replay recomputes, with a third."""
    flow = tt.Dataflow("two_joins", partitions=2)
    items = flow.source("L", spark.createDataFrame(ITEMS, "seq long, o long, amount double").repartition(2))
    orders = flow.source("O", spark.createDataFrame(ORDERS, "seq long, o long, cust string").repartition(2))
    custs = flow.source("C", spark.createDataFrame(CUSTOMERS, "cust string, region string").repartition(2))
    joined = items.key_by(lambda r: r["o"]).join(orders.key_by(lambda r: r["o"]), name="J")
    joined.key_by(lambda r: r["cust"]).join(custs.key_by(lambda r: r["cust"]), name="J2").collect("S")
    return flow


def test_a_join_fed_from_inside_g_theta_keeps_the_digest_of_its_values(record):
    """J's sides and J2's customers come from outside G(θ) through a shuffle: digested by their
    keys' row counts. J2's left side is J's output, which replay recomputes: the digest of its
    values, so that a replay whose J emitted other rows fails verify there. The end states' counts
    are the plain-Python join's."""
    path = record(build_two_joins, watch="J", when="row['seq'] % 100 == 0")
    reader = RunReader(path)
    try:
        assert reader.status == "complete"
        results = verify(reader)
        assert results and all(r["ok"] for r in results), [r for r in results if not r["ok"]][:1]
        j, j2 = _end_states(reader, "J"), _end_states(reader, "J2")
        assert {(side, s[side]["$kept"].get("of")) for s in j for side in ("left", "right")} == {
            ("left", "key rows"), ("right", "key rows")}
        assert {(side, s[side]["$kept"].get("of")) for s in j2 for side in ("left", "right")} == {
            ("left", None), ("right", "key rows")}
        assert all("bytes" in s["left"]["$kept"] and "bytes" not in s["right"]["$kept"] for s in j2)
        cust = {r["o"]: r["cust"] for r in ORDERS}
        matched = [r for r in ITEMS if r["o"] in cust]
        assert sum(s["left"]["$kept"]["rows"] for s in j2) == len(matched)
        assert sum(s["left"]["$kept"]["keys"] for s in j2) == len({cust[r["o"]] for r in matched})
        assert sum(s["right"]["$kept"]["rows"] for s in j2) == len(CUSTOMERS)
    finally:
        reader.close()

"""Row lineage (issue 16), against an oracle that does not use tt's logs.

The job (tests/jobs/lineage_orders.py) carries in every row, as plain data, the ids of
the orders and lineitems it was computed from: through a join, a keyed aggregate, a
union of two paths, a flat_map and a user operator with a dict state. tt's lineage
never reads those ids; it must find them anyway: backward from every sink row down to
the source rows, forward from every source row up to exactly the sink rows that carry
its id. Then the fraud sample: Bob's Fraud rows come from his ¥5,000 payment through
FD's state. Then the command: --json, text, --csv and one-line errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import workloads
from tt.cli.main import main
from tt.core import values
from tt.core.errors import UsageError
from tt.replay.lineage import Lineage, Output, Where
from tt.replay.session import DebugSession

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "jobs" / "lineage_orders.py"
FRAUD = ROOT / "sample_runs" / "fraud" / "job.py"


@pytest.fixture(scope="module")
def orders(spark, tmp_path_factory):
    """(run file, the sink rows as the job computed them on Spark)."""
    d = tmp_path_factory.mktemp("lineage")
    run, out = d / "run.db", d / "out.json"
    assert main(["record", str(JOB), "--watch", "T", "-o", str(run), "--", str(out), str(d / "data")]) == 0
    return run, json.loads(out.read_text())


@pytest.fixture(scope="module")
def orders_lineage(orders):
    session = DebugSession(orders[0])
    yield Lineage(session)
    session.reader.close()


def source_id(row: dict) -> str:
    """A source row's id, from its own columns (not from the `ids` the job adds)."""
    return f"l{row['l_id']}" if "l_id" in row else f"o{row['o_id']}"


def source_ids(tree) -> set[str]:
    return {source_id(tree.rows[n]) for n, e in tree.entered.items() if e.get("source")}


def test_backward_lineage_of_every_sink_row_is_the_ids_it_carries(orders, orders_lineage):
    lin, (_, spark_rows) = orders_lineage, orders
    sink_rows = lin.rows_of("OUT", "True")
    trees = [lin.back(r) for r in sink_rows]
    replayed = [t.rows[t.root] for t in trees]
    assert sorted(map(json.dumps, replayed)) == sorted(map(json.dumps, spark_rows)), "the rows are Spark's"
    assert {r["kind"] for r in replayed} == {"customer", "running"}
    for tree in trees:
        assert source_ids(tree) == set(tree.rows[tree.root]["ids"]), lin.label(tree.root)
        kinds = {e["as"] for e in tree.entered.values()}
        assert kinds <= {"theta input", "free tuple", "end of input"}
        assert lin.stops(tree) is None, "every leaf is a source row: nothing lies outside G(θ)"
    customer = next(t for t in trees if t.rows[t.root]["kind"] == "customer")
    states = {link.state.split(" ")[1].split("[")[0] for link in customer.links if link.kind == "state"}
    assert "groups" in states and states - {"groups"} and states <= {"groups", "left", "right"}, \
        "through A's groups, then the join's stored rows"


def test_forward_lineage_of_every_source_row_reaches_exactly_its_sink_rows(orders_lineage):
    lin = orders_lineage
    sink = {}
    for r in lin.rows_of("OUT", "True"):
        sink[r] = set(lin.back(r, depth=0).rows[r]["ids"])
    sources = lin.rows_of("ORDERS", "True") + lin.rows_of("ITEMS", "True")
    assert len(sources) == 14 + 30
    absorbed = 0
    for ref in sources:
        tree = lin.forward(ref)
        sid = source_id(tree.rows[ref])
        reached = {n for n, end in tree.ends.items() if end["end"] == "sink"}
        assert reached == {r for r, ids in sink.items() if sid in ids}, sid
        assert not any(end["end"] == "pending" for end in tree.ends.values())
        absorbed += any(end["end"] == "absorbed" for end in tree.ends.values())
    assert absorbed, "orders without lineitems, lineitems without orders and filtered rows end early"


def test_a_state_values_writers_are_the_ids_its_customers_row_carries(orders, orders_lineage):
    """`A:i.groups.c`, the aggregate's accumulator of customer c at the end, comes from exactly the
    source rows whose ids A's row for c carries (Spark's output, not tt's logs)."""
    lin, (_, spark_rows) = orders_lineage, orders
    expected = {r["cust"]: set(r["ids"]) for r in spark_rows if r["kind"] == "customer"}
    found = {}
    for i in range(2):
        for cust in expected:
            try:
                root = lin.state_value(f"A:{i}", f"groups.{cust}")
            except UsageError:
                continue   # that customer's key went to the other instance
            tree = lin.back(root)
            found[cust] = source_ids(tree)
            assert {link.kind for link in tree.links if link.src == root} == {"state"}
    assert found == expected


def test_source_rows_read_by_reference_show_file_and_row(orders_lineage):
    lin = orders_lineage
    (ref,) = lin.rows_of("ORDERS", "o_id == 9")
    tree = lin.back(ref)
    entered = tree.entered[ref]
    assert entered["as"] == "theta input" and entered["from"] == "ORDERS" and entered["source"]
    assert entered["file"].endswith("orders/part-1.parquet") and entered["row"] == 9 - 8
    (item,) = lin.rows_of("ITEMS", "l_id == 107")
    entered = lin.back(item).entered[item]
    assert entered["as"] == "free tuple" and entered["at"] == "J" and "file" not in entered, \
        "ITEMS enters through a shuffle: its rows are copied"


def test_json_text_and_csv(orders, capsys):
    run = str(orders[0])
    assert main(["lineage", run, "OUT", "--where", "kind == 'customer' and cust == 'c3'", "--back", "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["direction"] == "back" and doc["root"].startswith("OUT:")
    root_row = doc["tuples"][0]["row"]
    entered = [t for t in doc["tuples"] if t.get("entered", {}).get("source")]
    assert {source_id(t["row"]) for t in entered} == set(root_row["ids"])
    assert any(link["kind"] == "state" and link["state"].startswith("A:") for link in doc["links"])

    assert main(["lineage", run, "OUT", "--where", "kind == 'customer' and cust == 'c3'", "--back"]) == 0
    text = capsys.readouterr().out
    assert "emitted while processing" in text and "through state A:" in text and "groups['c3']" in text
    assert "entered G(θ) at T (θ's input) from source ORDERS: file:" in text and ".parquet row " in text

    assert main(["lineage", run, "ITEMS", "--where", "l_id == 107", "--forward"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("J:") and "reached sink OUT" in text, "a lineitem enters G(θ) at the join"

    assert main(["lineage", run, "ORDERS", "--where", "o_id == 9", "--forward", "--csv", "--depth", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "root,from,kind,state,read_by,to,row,note,spark,rows" and len(lines) >= 3


def test_a_counter_field_is_written_but_read_by_no_output():
    """`self.scored += 1` in every call must not make each output depend on every earlier input."""
    import tt
    from tt.replay.state_access import counters

    class Counting(tt.Operator):
        def process(self, row, port=0):
            self.calls += 1
            self.total = self.total + row["x"]    # a plain assignment: read
            self.seen -= 1
            yield {"x": row["x"], "seen": self.seen}   # read again: not a counter

    class ByName(Counting):
        def dump(self):
            return vars(self)    # reaches its fields by name: nothing is a counter

    assert counters(Counting) == {"calls"}
    assert counters(ByName) == frozenset()


@pytest.mark.parametrize("args, needle", [
    (["NOPE", "--where", "True", "--back"], "unknown operator 'NOPE'"),
    (["NOPE", "--back"], "unknown operator 'NOPE'"),   # named wrong: told so, not asked for --where
    (["T:0:99", "--back"], "T:0 has inputs #0..#"),
    (["OUT", "--where", "cust == 'nobody'", "--back"], "none of the 42 rows OUT emitted matches"),
    (["OUT", "--where", "custmer == 'c3'", "--back"], "NameError"),
    (["OUT", "--back"], "choose them with --where"),
    (["T:0:1", "--back", "--forward"], "choose one direction"),
    (["A:1.groups", "--back"], "A:1.groups is a dict: its keys are written one by one; name one, e.g. A:1.groups.c"),
    (["A:0.nope", "--back"], "A:0 has no field 'nope' (its fields: groups)"),
    (["A:0.groups.nobody", "--back"], "groups has no 'nobody' at the end of the run"),
])
def test_bad_input_gets_one_line(orders, capsys, args, needle):
    assert main(["lineage", str(orders[0]), *args]) != 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines()
             if line.strip() and not line.startswith("tt: indexed the lineage")]   # (the first query's note)
    assert len(lines) == 1 and lines[0].startswith("tt: error: ") and needle in lines[0], lines


@pytest.fixture(scope="module")
def fraud(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("lineage_fraud")
    run = d / "fraud.db"
    assert main(["record", str(FRAUD), "--watch", "FE", "-o", str(run), "--",
                 "--rows", "3000", "--data", str(d / "payments.parquet")]) == 0
    return run


def test_bobs_fraud_rows_come_from_his_yen_payment_through_fd_state(fraud, capsys):
    session = DebugSession(fraud)
    try:
        lin = Lineage(session)
        rows = lin.rows_of("FD", "customer == 'Bob' and label == 'Fraud'")
        trees = [lin.back(r) for r in rows]   # in the order FD processed them (one instance: Bob's)
        assert len(trees) >= 2
        for tree in trees:
            yen = [link for link in tree.links if link.kind == "state" and "blacklist['Bob']" in link.state
                   and link.state.startswith("FD:") and tree.rows[link.to]["amount"] == "¥5000"]
            assert yen, f"{lin.label(tree.root)} does not come from the ¥5000 payment through FD's state"
            sources = [tree.rows[n] for n, e in tree.entered.items() if e.get("from") == "U"]
            assert any(r["amount"] == "¥5000" for r in sources), "down to the source row"
            assert {r["customer"] for r in sources} == {"Bob"}, \
                "Bob's keys alone: FD.scored, a counter no output reads, links no other customer's payment"
        first = trees[0]
        assert first.rows[first.root]["amount"] == "¥5000", "his first Fraud row is the ¥5000 payment itself, " \
            "labelled from the blacklist entry its own call wrote"
        assert isinstance(first.root, Output)
    finally:
        session.reader.close()

    assert main(["lineage", str(fraud), "FD", "--where", "customer == 'Bob' and label == 'Fraud'",
                 "--back", "--depth", "1"]) == 0
    text = capsys.readouterr().out
    assert "through state FD:" in text and "blacklist['Bob'], written by FD:" in text and "¥5000" in text


def test_who_put_bob_on_the_blacklist(fraud, capsys):
    """A state value as the root: `FD:i.blacklist.Bob` was written by one call, the ¥5000 payment's,
    whose id is the value itself; the oracle is the sample's Parquet input, read with pyarrow."""
    import pyarrow.parquet as pq

    payments = pq.read_table(fraud.parent / "payments.parquet").to_pylist()
    (yen,) = [p for p in payments if p["customer"] == "Bob" and p["amount"] == "¥5000"]
    session = DebugSession(fraud)
    try:
        assert session.jump(session.interactions()[-1].k).ok
        [i] = [i for i in range(session.reader.operator("FD").instances)
               if "Bob" in session.engine.instances[(session.reader.operator("FD").id, i)].state()["blacklist"]]
    finally:
        session.reader.close()
    assert main(["lineage", str(fraud), f"FD:{i}.blacklist.Bob", "--back", "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["root"] == f"FD:{i} blacklist['Bob']" and doc["tuples"][0]["row"] == yen["id"]
    writers = [link for link in doc["links"] if link["from"] == doc["root"]]
    assert len(writers) == 1 and writers[0]["kind"] == "state"
    rows = {t["tuple"]: t["row"] for t in doc["tuples"]}
    assert rows[writers[0]["to"]]["id"] == yen["id"] and rows[writers[0]["to"]]["usd"] == 5000.0
    entered = [t["row"] for t in doc["tuples"] if t.get("entered", {}).get("from") == "U"]
    assert yen in entered, "down to the source row as the Parquet file has it"
    assert main(["lineage", str(fraud), f"FD:{i}.blacklist.Bob", "--forward"]) != 0
    assert "is a state value: its lineage runs --back" in capsys.readouterr().err


@pytest.fixture(scope="module")
def fraud_when(spark, tmp_path_factory):
    """The fraud sample with an interaction right after Bob's ¥ payment (as `tt demo` takes it)."""
    d = tmp_path_factory.mktemp("lineage_fraud_when")
    run = d / "fraud.db"
    assert main(["record", str(FRAUD), "--watch", "FE", "--when", "row['amount'].startswith('¥')", "-o", str(run),
                 "--", "--rows", "3000", "--data", str(d / "payments.parquet")]) == 0
    return run


def test_a_state_value_at_an_earlier_interaction(fraud_when, capsys):
    """`--at K`: a customer's `highest` as interaction K saw it. FE reads and writes it on every
    payment of the customer, so its writers accumulate (docs/LINEAGE.md §2): at K they are the
    customer's payments before K, the highest of them the value then; at the end, more of them."""
    session = DebugSession(fraud_when)
    try:
        k = next(i.k for i in session.interactions() if i.trigger == "condition")
        fe = session.reader.operator("FE")
        snap = session.reader.instances_at(k)
        assert session.jump(k).ok
        at_k = {i: (snap[(fe.id, i)].position, dict(session.engine.instances[(fe.id, i)].state()["highest"]))
                for i in range(fe.instances)}
        last = session.reader.instances_at(session.interactions()[-1].k)
    finally:
        session.reader.close()
    fraud_job = workloads.load_sample("fraud")   # its parse_amount: what FE folds into highest
    # the instance whose input held Bob's ¥ payment: K is right after it there, which the data
    # decides; where K fell in the other instances is Spark's scheduling (some had ended)
    yen = fraud_job.parse_amount("¥5000")
    (i,) = [i for i, (_, highest) in at_k.items() if highest.get("Bob") == yen]
    pos, highest = at_k[i]
    assert 0 < pos < last[(fe.id, i)].position

    def writers(customer: str, *extra) -> dict[int, dict]:
        assert main(["lineage", str(fraud_when), f"FE:{i}.highest.{customer}", "--back", "--json", *extra]) == 0
        (doc,) = json.loads(capsys.readouterr().out)
        rows = {t["tuple"]: t["row"] for t in doc["tuples"]}
        return {int(link["to"].rsplit(":", 1)[1]): rows[link["to"]] for link in doc["links"]
                if link["from"] == doc["root"]}

    # at least six customers, and on until one paid again after K (the named ones pay rarely)
    checked, grew = 0, 0
    for customer in sorted(c for c in highest if c.isidentifier()):
        then, end = writers(customer, "--at", str(k)), writers(customer)
        assert then and all(p < pos and r["customer"] == customer for p, r in then.items()), then
        assert max(fraud_job.parse_amount(r["amount"]) for r in then.values()) == highest[customer]
        assert then.keys() <= end.keys() and all(r["customer"] == customer for r in end.values())
        assert all(p >= pos for p in end.keys() - then.keys())
        checked, grew = checked + 1, grew + (len(end) > len(then))
        if checked >= 6 and grew:
            break
    assert grew, "some customer paid again after interaction K"
    assert main(["lineage", str(fraud_when), f"FE:{i}.highest.Bob", "--back", "--at", "999"]) != 0
    assert f"{fraud_when} has no interaction 999; its complete ones: 0-" in capsys.readouterr().err
    assert main(["lineage", str(fraud_when), f"FE:{i}:0", "--back", "--at", str(k)]) != 0
    assert "--at chooses when a state value is read" in capsys.readouterr().err


def test_a_tuple_waiting_on_a_channel_and_a_row_a_call_emitted(fraud_when, capsys):
    """A tuple that `tt replay` shows waiting on a channel is a root by the name it prints; so is
    OP:I:N/J, the J-th row a call emitted. The oracle is the sample's Parquet input: the waiting
    row was made from the payment whose id it carries and, through FE's state, from the earlier
    payments of its customer, the highest of which is the `highest` the row carries."""
    import pyarrow.parquet as pq

    payments = {p["id"]: p for p in pq.read_table(fraud_when.parent / "payments.parquet").to_pylist()}
    parse_amount = workloads.load_sample("fraud").parse_amount
    session = DebugSession(fraud_when)
    k = next(i.k for i in session.interactions() if i.trigger == "condition")
    session.reader.close()

    def replay(*steps) -> dict:
        assert main(["replay", str(fraud_when), "--to", str(k), *steps, "--json"]) == 0
        return json.loads(capsys.readouterr().out)[-1]["pending"]
    for theta_input in sorted((p for inst, p in replay().items() if inst.startswith("FE:")),
                              key=lambda p: p["tuple"]):   # FE is θ, fed from U
        instance = theta_input["tuple"].rsplit(":", 1)[0]
        waiting = [p for p in replay("--step-into", theta_input["tuple"]).values()
                   if p["from"] == instance and p["row"]["id"] == theta_input["row"]["id"]]
        if waiting:   # its output is the next tuple at its FD instance (none of FE's older ones ahead of it)
            (w,) = waiting
            break
    else:
        raise AssertionError("no θ input waiting at the interaction has its output next in line at FD")

    def back(root: str) -> dict:
        assert main(["lineage", str(fraud_when), root, "--back", "--json"]) == 0
        (doc,) = json.loads(capsys.readouterr().out)
        return doc
    doc = back(w["tuple"])
    rows = {t["tuple"]: t["row"] for t in doc["tuples"]}
    assert doc["root"] == w["tuple"] and rows[w["tuple"]] == w["row"]
    assert [link["to"] for link in doc["links"] if link["from"] == doc["root"] and link["kind"] == "emitted"] \
        == [theta_input["tuple"]]
    sources = [t["row"] for t in doc["tuples"] if t.get("entered", {}).get("from") == "U"]
    assert payments[w["row"]["id"]] in sources and all(r == payments[r["id"]] for r in sources)
    assert {r["customer"] for r in sources} == {w["row"]["customer"]}
    assert max(parse_amount(r["amount"]) for r in sources) == w["row"]["highest"]

    emitted = back(f"{theta_input['tuple']}/0")   # the same row, named by the call that emitted it
    assert emitted["tuples"][0]["row"] == w["row"]
    assert {t["tuple"] for t in emitted["tuples"][1:]} == {t["tuple"] for t in doc["tuples"][1:]}
    assert main(["lineage", str(fraud_when), f"{theta_input['tuple']}/0", "--forward", "--json"]) == 0
    (ahead,) = json.loads(capsys.readouterr().out)
    assert {"from": ahead["root"], "to": w["tuple"], "kind": "consumed"}.items() <= \
        next(link for link in ahead["links"] if link["from"] == ahead["root"]).items()
    assert main(["lineage", str(fraud_when), f"{theta_input['tuple']}/1", "--back"]) != 0
    assert f"{theta_input['tuple']}'s call emitted one row, {theta_input['tuple']}/0, not" in capsys.readouterr().err


# --- whole-job lineage: tt record --lineage ----------------------------------------------------------


@pytest.fixture(scope="module")
def far(spark, tmp_path_factory):
    """The oracle job with θ = J, the join: T (which tags each order with its id) lies outside G(θ).
    (run recorded with --lineage, run recorded without, the sink rows Spark computed)."""
    d = tmp_path_factory.mktemp("lineage_far")
    out = d / "out.json"
    runs = []
    for name, extra in (("whole.db", ["--lineage"]), ("plain.db", [])):
        runs.append(d / name)
        assert main(["record", str(JOB), "--watch", "J", *extra, "-o", str(runs[-1]), "--",
                     str(out), str(d / f"{name}.data")]) == 0   # (the job writes its data: a run's own files)
    return runs[0], runs[1], json.loads(out.read_text())


@pytest.fixture(scope="module")
def deep(spark, tmp_path_factory):
    """The oracle job with θ = R, near the end: the join J and the aggregate A lie outside G(θ),
    recorded with --lineage. (run, the sink rows Spark computed)"""
    d = tmp_path_factory.mktemp("lineage_deep")
    run, out = d / "run.db", d / "out.json"
    assert main(["record", str(JOB), "--watch", "R", "--lineage", "-o", str(run), "--", str(out), str(d / "data"),
                 "--items-by-reference"]) == 0
    return run, json.loads(out.read_text())


def test_with_lineage_every_sink_row_traces_to_its_source_rows_across_theta(far):
    """θ is the join; the orders reach it through T, outside G(θ). With --lineage the backward
    lineage of every sink row still ends at exactly the source rows whose ids the row carries: the
    orders as rows of their Parquet files (file, row number and values, read back from the files),
    the lineitems as θ's inputs at the join."""
    import pyarrow.parquet as pq

    whole, _, spark_rows = far
    session = DebugSession(whole)
    try:
        lin = Lineage(session)
        assert lin.graph.lineage == {lin.graph.node("T").id}
        trees = [lin.back(r) for r in lin.rows_of("OUT", "True")]
        assert sorted(json.dumps(t.rows[t.root]) for t in trees) == sorted(map(json.dumps, spark_rows))
        files: dict[str, list] = {}
        for tree in trees:
            assert source_ids(tree) == set(tree.rows[tree.root]["ids"]), lin.label(tree.root)
            assert lin.stops(tree) is None
            for n, e in tree.entered.items():
                if e["as"] == "source row":
                    assert e["at"] == "T" and e["from"] == "ORDERS" and n.op == lin.graph.node("T").id
                    rows = files.setdefault(e["file"], pq.read_table(e["file"]).to_pylist())
                    assert rows[e["row"]] == tree.rows[n], "the row the file holds at that number"
                elif e["as"] != "end of input":   # (A's finish(): the aggregate's rows)
                    assert e["from"] == "ITEMS" and e["as"] == "theta input"   # (θ is the join)
        assert len(files) == 2
        # the link from the join's input to T's call was emitted while T processed the order
        tree = trees[0]
        t_links = [k for k in tree.links if k.kind == "emitted" and k.to.op == lin.graph.node("T").id]
        assert t_links and all(k.src.op == lin.graph.node("J").id for k in t_links)
    finally:
        session.reader.close()


def test_with_lineage_forward_from_a_source_row_outside_g_theta(far):
    whole, _, _ = far
    session = DebugSession(whole)
    try:
        lin = Lineage(session)
        sink = {r: set(lin.back(r, depth=0).rows[r]["ids"]) for r in lin.rows_of("OUT", "True")}
        orders = lin.rows_of("ORDERS", "True")
        assert len(orders) == 14 and {o.op for o in orders} == {lin.graph.node("T").id}
        for ref in orders:
            tree = lin.forward(ref)
            sid = source_id(tree.rows[ref])
            reached = {n for n, end in tree.ends.items() if end["end"] == "sink"}
            assert reached == {r for r, ids in sink.items() if sid in ids}, sid
    finally:
        session.reader.close()


def test_without_lineage_it_stops_at_theta_and_says_how_to_go_further(far, capsys):
    whole, plain, _ = far
    assert main(["lineage", str(plain), "OUT", "--where", "kind == 'customer' and cust == 'c1'", "--back"]) == 0
    text = capsys.readouterr().out
    assert "lineage stops where tuples entered G(θ) (θ = J) from T; record with --lineage" in text
    assert main(["lineage", str(plain), "T:0:0", "--forward"]) != 0
    assert "record with --lineage to trace them" in capsys.readouterr().err
    assert main(["lineage", str(whole), "OUT", "--where", "kind == 'customer' and cust == 'c1'", "--back"]) == 0
    text = capsys.readouterr().out
    assert "lineage stops" not in text and "← a row of source ORDERS read by T: " in text
    assert "part-0.parquet row" in text or "part-1.parquet row" in text


def test_lineage_logs_leave_replay_and_verify_unchanged(far, capsys):
    """The logs --lineage adds are ids and counts outside G(θ): the run replays and verifies as
    the plain one does, and holds no copied rows of T's input; `tt inspect` says what was logged."""
    from tt.store.reader import RunReader

    whole, plain, _ = far
    assert main(["verify", str(whole)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(whole)]) == 0
    text = capsys.readouterr().out
    assert "lineage  T outside G(θ) logged for lineage too (tt record --lineage)" in text
    (t_line,) = [line for line in text.splitlines() if line.startswith("T ")]
    assert t_line.split()[-2:] == ["lineage", "14"], "T consumed the 14 orders"
    assert main(["inspect", str(plain)]) == 0
    assert "lineage " not in capsys.readouterr().out
    a, b = RunReader(whole), RunReader(plain)
    try:
        t = a.operator("T").id
        assert a.input_runs(t, 0) and a.output_counts(t, 0) and not b.output_counts(t, 0)
        codecs = {c for (_, _, _, _, _, c) in a.entry_index(t, 0)}
        assert codecs == {"ref"}, "T's source rows are kept as file positions, never copied"
        assert [i.k for i in a.interactions()] == [i.k for i in b.interactions()]
    finally:
        a.close()
        b.close()


def test_with_lineage_a_join_and_an_aggregate_outside_g_theta_log_what_they_kept(deep):
    """θ = R: the join and the aggregate are outside G(θ), their state never replayed. They log
    which kept rows each output was made from, so every sink row (a customer's row of A enters
    G(θ) at U as a free tuple) still traces to exactly the orders and lineitems whose ids it
    carries: source rows read by reference, ORDERS through a narrow edge into T, ITEMS through a
    shuffle into J (the source logs where each row went); their values are read back from the
    files, and checked against the files with pyarrow."""
    import pyarrow.parquet as pq

    run, spark_rows = deep
    session = DebugSession(run)
    try:
        lin = Lineage(session)
        names = {lin.graph.nodes[i].name for i in lin.graph.lineage}
        assert {"J", "A", "T", "F", "X"} <= names and not lin.graph.untracked
        trees = [lin.back(r) for r in lin.rows_of("OUT", "True")]
        assert sorted(json.dumps(t.rows[t.root]) for t in trees) == sorted(map(json.dumps, spark_rows))
        files: dict[str, list] = {}
        for tree in trees:
            leaves = [(n, e) for n, e in tree.entered.items() if e["as"] == "source row"]
            assert {source_id(tree.rows[n]) for n, _ in leaves} == set(tree.rows[tree.root]["ids"]), \
                lin.label(tree.root)
            for n, e in leaves:
                assert (e["from"], e["at"]) in {("ORDERS", "T"), ("ITEMS", "ITEMS")}
                rows = files.setdefault(e["file"], pq.read_table(e["file"]).to_pylist())
                assert rows[e["row"]] == tree.rows[n], "the row the file holds at that number"
            assert lin.stops(tree) is None
        kept = {link.state for t in trees for link in t.links if link.kind == "state"}
        assert any(k.startswith("J:") and k.endswith("kept rows") for k in kept)
        assert any(k.startswith("A:") and k.endswith("kept rows") for k in kept)
        # forward from an order, outside G(θ): exactly the sink rows carrying its id
        sink = {t.root: set(t.rows[t.root]["ids"]) for t in trees}
        for ref in lin.rows_of("ORDERS", "o_id in (2, 5, 13)"):
            tree = lin.forward(ref)
            sid = source_id(tree.rows[ref])
            assert {n for n, e in tree.ends.items() if e["end"] == "sink"} == \
                {r for r, ids in sink.items() if sid in ids}, sid
    finally:
        session.reader.close()


def test_where_on_a_source_read_by_reference_is_prefiltered_on_its_columns_and_finds_the_same_rows(deep):
    """`--where "l_id == 107"` on a source read by reference is first filtered on the Parquet
    columns (`Where.equal`, `SourceReader.rows_where`); it must choose exactly the rows the
    expression chooses row by row (`l_id + 0 == 107` is no `field == constant`: not prefiltered),
    and count every row as checked."""
    run, _ = deep
    session = DebugSession(run)
    try:
        lin = Lineage(session)
        every = {ref: lin._rows[ref] for ref in lin.rows_of("ITEMS", "True")}
        assert len(every) == 30
        for expr, equal, by_row in [("l_id == 107", {"l_id": 107}, "l_id + 0 == 107"),
                                    ("o_id == 3 and qty == 5", {"o_id": 3, "qty": 5}, "o_id + 0 == 3 and qty + 0 == 5"),
                                    ("3 == o_id and qty > 1", {"o_id": 3}, "3 == o_id + 0 and qty > 1"),
                                    ("o_id == 3 or qty == 3", {}, None)]:
            assert Where(expr).equal == equal and (by_row is None or Where(by_row).equal == {})
            expected = sorted(r for r, row in every.items() if eval(expr, {}, values.decode(row)))
            assert expected and lin.rows_of("ITEMS", expr) == expected, expr
            if by_row is not None:
                assert lin.rows_of("ITEMS", by_row) == expected
        assert Where("l_id == 107 and qty == 'x'").equal == {"l_id": 107, "qty": "x"}   # (not on an int column)
        for expr in ("l_id == 9999", "l_id + 0 == 9999", "l_id == 107 and qty == 'x'"):
            with pytest.raises(UsageError, match="none of the 30 rows ITEMS emitted matches"):
                lin.rows_of("ITEMS", expr)
    finally:
        session.reader.close()


def test_a_packed_lineage_run_keeps_its_source_rows(deep, tmp_path, capsys):
    """`tt pack` copies the referenced rows in, those --lineage kept outside G(θ) too: lineage
    then shows the same source rows without the files (where they were is no longer shown)."""
    run, _ = deep
    packed = tmp_path / "packed.db"
    assert main(["pack", str(run), "-o", str(packed)]) == 0
    trees = {}
    for path in (run, packed):
        session = DebugSession(path)
        try:
            lin = Lineage(session)
            (root,) = lin.rows_of("OUT", "kind == 'customer' and cust == 'c2'")
            tree = lin.back(root)
            trees[path] = ({lin.label(n): tree.rows[n] for n, e in tree.entered.items() if e["as"] == "source row"},
                           {lin.label(n): "file" in e for n, e in tree.entered.items() if e["as"] == "source row"})
        finally:
            session.reader.close()
    (rows, files), (packed_rows, packed_files) = trees[run], trees[packed]
    assert rows == packed_rows and all(r is not None for r in rows.values()) and len(rows) > 2
    assert all(files.values()) and not any(packed_files.values())
    capsys.readouterr()
    assert main(["lineage", str(packed), "OUT", "--where", "kind == 'customer' and cust == 'c2'", "--back"]) == 0
    text = capsys.readouterr().out
    assert "of its read (copied into the run file)" in text and ".parquet row" not in text


# --- a StatefulProcessor: through its state variables, per key ---------------------------------

TWS_JOB = ROOT / "tests" / "jobs" / "lineage_tws.py"


@pytest.fixture(scope="module")
def trail(spark, tmp_path_factory):
    """(run file, the job's rows recorded, its rows with recording off): tests/jobs/lineage_tws.py."""
    from plain_jobs import record_on_and_off

    return record_on_and_off(TWS_JOB, tmp_path_factory.mktemp("lineage_tws"))


def _unit_id(row) -> int | tuple:
    """The payment id of a processor's unit ('row', Row(id=..., customer=...)), as lineage shows
    it (the Row by its fields); the start of a key's rows, ('rows', (customer,), times), as
    ('rows', (customer,))."""
    unit = values.decode(row)
    return unit[1]["id"] if unit[0] == "row" else unit[:2]


def test_a_processors_rows_trace_through_its_state_calls_to_exactly_the_rows_of_their_key(trail):
    """Each row the processor emitted names, as plain data, the ids its two state reads were
    written by: every earlier row of its customer (`ids`, read then appended to), and the last
    row of its customer that wrote `latest` without reading it. tt's lineage, which never reads
    those columns, must find exactly them, variable by variable, and no other customer's rows;
    and through `locals` (what the running `handleInputRows` holds) the start of the customer's
    rows and its rows handed before. Then `VAR.KEY` as a root: a customer's `ids` was written by
    all of their rows."""
    run, on, off = trail
    assert on == off, "recording does not change the job's output"
    session = DebugSession(run)
    try:
        lin = Lineage(session)
        rows = lin.rows_of("Trail", "True")
        assert len(rows) == len(on) == 60
        instance_of: dict[str, str] = {}
        for root in rows:
            tree = lin.back(root, depth=1)
            emitted = values.decode(tree.rows[root])   # Row(id=..., ...), shown by its fields
            customer, earlier, latest = emitted["customer"], emitted["earlier"], emitted["latest"]
            by_state: dict[str, set] = {}
            for link in tree.links:
                if link.kind == "state":
                    by_state.setdefault(link.state.split(" ", 1)[1], set()).add(_unit_id(tree.rows[link.to]))
            want = {f"ids[{customer!r}]": set(json.loads(earlier))} if json.loads(earlier) else {}
            want[f"locals[{customer!r}]"] = set(json.loads(earlier)) | {("rows", (customer,))}
            if latest != -1:
                want[f"latest[{customer!r}]"] = {latest}
            assert by_state == want, lin.label(root)
            instance_of[customer] = lin.label(root).split(":")[1]
        for customer in ("c0", "c3"):
            tree = lin.back(lin.state_value(f"Trail:{instance_of[customer]}", f"ids.{customer}"))
            writers = {_unit_id(tree.rows[link.to]) for link in tree.links if link.kind == "state"}
            assert writers == {r[0] for r in on if r[1] == customer}
        replayed = [lin.as_dict(t) for t in lin.trees(rows, back=True)]
    finally:
        session.reader.close()
    session = DebugSession(run)   # the lineage index (replay/lineage_index.py) answers the same
    try:
        indexed = Lineage(session)
        assert indexed.use_index() is not None and indexed.index is not None
        assert [indexed.as_dict(t) for t in indexed.trees(indexed.rows_of("Trail", "True"), back=True)] == replayed
    finally:
        session.reader.close()

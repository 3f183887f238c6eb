"""Lineage across Spark's own operators between two hooked functions (replay/spark_links.py),
against an oracle that does not use tt's logs.

The job (tests/jobs/hooked_spark_lineage.py) is plain PySpark: `Tag` (mapInPandas) passes each
payment on with the id of its batch's first row, and `tally` (applyInPandas, after Spark's
shuffle by customer) emits, as plain data, how many of each customer's rows came from each
batch. With `spark.range` over two partitions and a fixed batch size, a first id names the
partition and the batch by arithmetic: the instance and the unit of `Tag` that emitted them.
tt's lineage never reads those counts; every `tally` group must link back through Spark to
exactly those batches with exactly those counts, and every batch forward to exactly the
customers' groups that counted its rows. `keep` gets rows Spark made (an aggregate's `total`):
no link is made to rows with other values.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from plain_jobs import record_on_and_off
from tt.cli.main import main

pytestmark = pytest.mark.slow

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_spark_lineage.py"
ROWS, BATCH = 2000, 300
PER_PARTITION = ROWS // 2


def unit_of(first_id: int) -> str:
    """The `Tag` output holding the batch that starts at `first_id`, by arithmetic on the job's shape."""
    part, offset = divmod(first_id, PER_PARTITION)
    return f"Tag:{part}:{offset // BATCH}/0"


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    run, on, off = record_on_and_off(JOB, tmp_path_factory.mktemp("through_spark"))
    return run, on, off


def lineage_json(capsys, run: Path, *args: str) -> list[dict]:
    capsys.readouterr()
    assert main(["lineage", str(run), *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_recording_does_not_change_the_jobs_output(recorded):
    _, on, off = recorded
    assert on == off
    assert sum(n for _, _, n in on["tallied"]) == ROWS


def test_each_group_links_back_through_spark_to_the_batches_its_rows_came_from(recorded, capsys):
    run, on, _ = recorded
    want: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for customer, first_id, n in on["tallied"]:
        want[customer][unit_of(first_id)] = n
    assert len(want) == 7
    for customer, batches in want.items():
        (doc,) = lineage_json(capsys, run, "tally", "--where", f"customer == {customer!r}", "--back", "--depth", "3")
        (call,) = [link["to"] for link in doc["links"] if link["from"] == doc["root"] and link["kind"] == "emitted"]
        got = {link["to"]: link["rows"] for link in doc["links"] if link["from"] == call and link["kind"] == "spark"}
        assert got == batches, customer
        assert {link["spark"] for link in doc["links"] if link["kind"] == "spark"} == {"shuffle by customer"}
        # and on, below each batch: the call of Tag that emitted it, whose input entered from the source
        assert {link["to"] for link in doc["links"] if link["from"] in got and link["kind"] == "emitted"} == \
            {b.rsplit("/", 1)[0] for b in got}


def test_each_batch_links_forward_through_spark_to_the_groups_that_hold_its_rows(recorded, capsys):
    run, on, _ = recorded
    want: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for customer, first_id, n in on["tallied"]:
        want[unit_of(first_id)][customer] = n
    assert len(want) == 8   # four batches in each of the two partitions
    for batch, customers in want.items():
        docs = lineage_json(capsys, run, batch, "--forward", "--depth", "1")
        (doc,) = docs
        rows = {t["tuple"]: t["row"] for t in doc["tuples"]}
        links = [link for link in doc["links"] if link["kind"] == "spark"]
        assert {(link["to"].split(":")[0], "keys" in link) for link in links} == {("tally", False), ("keep", True)}
        for op in ("tally", "keep"):   # tally's groups hold its rows; keep's were made of them (by key)
            got = {rows[link["to"]]["$tuple"][0]["$tuple"][0]: link["rows"] for link in links
                   if link["to"].startswith(f"{op}:")}
            assert got == customers, (batch, op)


def test_an_aggregates_group_links_back_by_its_key_to_the_rows_it_was_made_of(recorded, capsys):
    """`keep`'s units hold a `total` that no batch of Tag holds: Spark's aggregate by customer made
    it of every row of that customer Tag emitted. So each group links back by its key, not by
    value, to the batches that held the customer's rows, with how many: the counts `tally`
    emitted as plain data (its groups are the same customers' rows, counted by batch)."""
    run, on, _ = recorded
    want: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for customer, first_id, n in on["tallied"]:
        want[customer][unit_of(first_id)] = n
    for customer in ("c3", "c0"):
        (doc,) = lineage_json(capsys, run, "keep", "--where", f"customer == {customer!r}", "--back", "--depth", "3")
        (call,) = [link["to"] for link in doc["links"] if link["from"] == doc["root"] and link["kind"] == "emitted"]
        through = [link for link in doc["links"] if link["from"] == call and link["kind"] == "spark"]
        assert {link["to"]: link["rows"] for link in through} == want[customer], customer
        assert {(link["spark"], tuple(link["keys"])) for link in through} == \
            {("aggregate by customer, shuffle by customer", ("customer",))}
    capsys.readouterr()
    assert main(["lineage", str(run), "keep", "--where", "customer == 'c0'", "--back", "--depth", "2"]) == 0
    n = want["c0"]["Tag:0:0/0"]
    assert f"through Spark (aggregate by customer, shuffle by customer), {n} rows matched by key in Tag:0:0/0" in \
        capsys.readouterr().out


def test_an_rdd_of_a_dataframes_rows_links_back_to_the_group_that_emitted_each(recorded, capsys):
    """`tallied.rdd.mapPartitions(scale)`: the RDD PySpark makes of a DataFrame's rows is fed by
    the hooked function that DataFrame's plan runs last, tally ("as is"), and not by Tag below
    it (the edges in the run file: the first had none, the second was shown). Back from each
    row `scale` emitted, (customer, first_id, 10 n), lineage goes through Spark to tally's row
    (customer, first_id, n) in that customer's group: the job's own output pairs them."""
    from tt.store.reader import RunReader

    run, on, _ = recorded
    reader = RunReader(run)
    names = {o.id: o.name for o in reader.operators}
    edges = {(names[e["src"]], names[e["dst"]], e["label"]) for e in reader.plan["spark_edges"]}
    reader.close()
    assert {e for e in edges if e[1] == "scale.in"} == {("tally", "scale.in", "as is")}, edges
    tallied = {(c, f): n for c, f, n in on["tallied"]}
    assert len(on["scaled"]) == len(tallied)
    for customer, first_id, ten_n in on["scaled"][:6]:
        assert ten_n == 10 * tallied[(customer, first_id)]
        (doc,) = lineage_json(capsys, run, "scale", "--where", f"row == ({customer!r}, {first_id}, {ten_n})",
                              "--back", "--depth", "3")
        rows = {t["tuple"]: t["row"] for t in doc["tuples"]}
        (call,) = [link["to"] for link in doc["links"] if link["from"] == doc["root"] and link["kind"] == "emitted"]
        (through,) = [link for link in doc["links"] if link["from"] == call and link["kind"] == "spark"]
        assert through["spark"] == "as is" and through["rows"] == 1 and through["to"].startswith("tally:"), through
        (group,) = [link["to"] for link in doc["links"] if link["from"] == through["to"] and link["kind"] == "emitted"]
        assert rows[group]["$tuple"][0]["$tuple"][0] == customer, rows[group]   # the call on that customer's group


def test_a_run_until_keeps_what_takes_tags_rows_through_a_shuffle_after_tag(recorded):
    """`tally` takes `Tag`'s rows through Spark's shuffle: in the job it ran once every `Tag`
    batch was done. A run until a condition on `Tag` ran `tally` (its input logged) up to the
    interaction that ends Tag's epoch first, so it stopped in a state that never was: Tag mid-way,
    tally done. Now what takes θ's rows through Spark waits for θ's inputs of the epoch."""
    from tt.replay.session import DebugSession

    run, _, _ = recorded
    session = DebugSession(run)
    try:
        result = session.run_until("Tag[0].batches == 2")
        assert result.ok, result.note
        at = result.position
        assert at["Tag:0"] == 2 and all(n == 0 for label, n in at.items() if not label.startswith("Tag:")), at
        done = session.run_until("tally[0].__class__ is not None")   # (tally's first step: Tag is done)
        assert done.ok, done.note
        ends = {label: n for label, n in session.position.items() if label.startswith("Tag:")}
        assert all(n == session.engine.instances[session.parse_instance(label)].total for label, n in ends.items()), ends
    finally:
        session.reader.close()


def test_an_expression_gets_a_waiting_batch_as_tag_gets_it(recorded):
    """`e` in tt debug evaluates over the selected tuple, `row`: it got the line that shows a
    DataFrame (`row['id']` raised "string indices must be integers", `len(row)` was 52). It
    gets the batch Tag will get: its ids by arithmetic on the job's shape."""
    from tt.replay.session import DebugSession

    run, _, _ = recorded
    session = DebugSession(run)
    try:
        for ref, first in (("Tag:0:0", 0), ("Tag:1:1", PER_PARTITION + BATCH)):
            row = session.waiting_row(ref)
            assert type(row).__name__ == "DataFrame" and len(row) == BATCH, type(row)
            assert session.evaluate("int(row['id'].iloc[0]), len(row)", row) == [
                ("int(row['id'].iloc[0]), len(row)", (first, BATCH))]
        session.step_over("Tag:0:0")
        assert session.waiting_row("Tag:0:0") is None   # (consumed: it waits no more)
    finally:
        session.reader.close()


def test_the_text_view_says_through_spark(recorded, capsys):
    run, on, _ = recorded
    capsys.readouterr()
    assert main(["lineage", str(run), "tally", "--where", "customer == 'c0'", "--back", "--depth", "2"]) == 0
    text = capsys.readouterr().out
    n = {unit_of(f): k for c, f, k in on["tallied"] if c == "c0"}["Tag:0:0/0"]
    assert f"through Spark (shuffle by customer), {n} rows matched by value in Tag:0:0/0" in text


def test_w_in_tt_debug_traces_a_group_through_spark(recorded):
    """`w` on a recorded unit of `tally` in the logs view: the tree beside the state links it
    through Spark to the batches of Tag its customer's rows came from, with the job's counts."""
    from test_tui import drive, keys, until
    from tt.tui.app import DebuggerApp
    from tt.tui.widgets.lineage_tree import LineageTree
    from tt.tui.widgets.log_browser import LogBrowser

    run, on, _ = recorded
    app = DebuggerApp(run)

    async def script(pilot):
        await keys(pilot, "4")
        logs = app.query_one(LogBrowser)
        logs.open_source("tuples:tally:0")
        await until(pilot, lambda: logs.base is not None and logs.base.key == "tuples:tally:0", what="tally:0's tuples")
        logs.lines.focus()
        await until(pilot, lambda: logs.lines.row_cells(0) is not None, what="the first recorded unit")
        await keys(pilot, "w")
        why = app.query_one(LineageTree)
        await until(pilot, lambda: why.display and why.lines, what="the lineage tree")
        return list(why.lines)
    lines = drive(app, script, size=(200, 48))
    customer = lines[0].split("(('")[1].split("'")[0]
    want = {unit_of(f): n for c, f, n in on["tallied"] if c == customer}
    got = {line.split(" matched by value in ")[1].split()[0]: int(line.split("), ")[1].split(" row")[0])
           for line in lines if "through Spark (shuffle by customer)" in line}
    assert got == want, lines


RDD_JOB = Path(__file__).resolve().parent / "jobs" / "hooked_rdd.py"


@pytest.fixture(scope="module")
def rdd_recorded(spark, tmp_path_factory):
    run, on, off = record_on_and_off(RDD_JOB, tmp_path_factory.mktemp("through_pyspark"))
    assert on == off
    return run, on


def test_pipelined_rdd_functions_link_back_exactly(rdd_recorded, capsys):
    """`mapPartitions(running_total).filter(Threshold()).map(lambda p: p[0] * 2)`: PySpark hands
    each function's outputs to the next in order, so lineage links them exactly ("passed on by
    PySpark (pipelined)"). Back from every row `map` emitted, 2x, the chain of calls that emitted
    it reaches the call of `running_total` that pulled x (the job's own arithmetic, no tt log);
    the other links of the tree are the functions' state."""
    run, on = rdd_recorded
    assert on["kept"]
    for v in on["kept"]:
        (doc,) = lineage_json(capsys, run, "map", "--where", f"row == {v}", "--back")
        rows = {t["tuple"]: t["row"] for t in doc["tuples"]}

        def one(src: str, kind: str) -> str:
            (to,) = [link["to"] for link in doc["links"] if link["from"] == src and link["kind"] == kind]
            return to
        node = doc["root"]
        for kind in ("emitted", "spark", "emitted", "spark", "emitted"):   # map, Threshold, running_total
            node = one(node, kind)
        assert node.startswith("running_total:") and rows[node] == v // 2, (v, node, rows[node])
        assert {link["spark"] for link in doc["links"] if link["kind"] == "spark"} == {"pipelined"}


def test_pipelined_rdd_functions_link_forward_to_where_each_number_ended(rdd_recorded, capsys):
    """Forward from numbers `running_total` pulled: a multiple of 5 that Threshold keeps reaches
    `map`'s row 2x; for one it drops, the filter's call emits nothing and no row 2x is reached
    (the kept rows of the job's output decide)."""
    run, on = rdd_recorded
    kept = {v // 2 for v in on["kept"]}
    dropped = sorted(x for x in range(0, 400, 5) if x not in kept)
    assert dropped
    for x in (min(kept), max(kept), dropped[0], dropped[-1]):
        (doc,) = lineage_json(capsys, run, "running_total.in", "--where", f"row == {x}", "--forward")
        ends = {(t["end"]["end"], t["end"]["at"], json.dumps(t["row"])) for t in doc["tuples"] if "end" in t}
        threshold = [t for t in doc["tuples"] if t["tuple"].startswith("Threshold:") and "/" not in t["tuple"]
                     and t["row"]["$tuple"][0] == x]   # the pair (x, total) the filter was handed
        assert len(threshold) == 1, (x, doc["tuples"])
        emitted = [link for link in doc["links"] if link["from"] == threshold[0]["tuple"] and link["kind"] == "emitted"]
        if x in kept:
            assert ("sink", "map", json.dumps(2 * x)) in ends and emitted, (x, ends)
        else:   # (its call still counted it in Threshold's state, which later calls read)
            assert not emitted and ("sink", "map", json.dumps(2 * x)) not in ends, (x, emitted)


def test_a_processors_rows_link_through_spark_to_the_function_that_takes_them(spark, tmp_path, capsys):
    """`per_tier` takes `Totals`' rows through Spark's shuffle by tier. Spark's plan names the
    processor's node `transformWithStateUDF(...)`, so no edge was found and a tier's lineage
    stopped at it. Each tier now links back to the steps of exactly its customers, by pandas'
    totals (the oracle reads none of tt's logs)."""
    import hooked_processor_chain as chain

    run, on, off = record_on_and_off(Path(chain.__file__), tmp_path)
    assert on == off
    totals = chain.amounts()
    want = {tier: sorted(c for c, t in totals.items() if (t >= 2500) == (tier == "high")) for tier in ("high", "low")}
    assert {tier: customers.split(",") for tier, customers in on["tiers"]} == want
    for tier, customers in want.items():
        (found,) = lineage_json(capsys, run, "per_tier", "--where", f"tier == '{tier}'", "--back")
        rows = {t["tuple"]: t["row"] for t in found["tuples"]}
        through = [link for link in found["links"] if link["kind"] == "spark"]
        assert through and {link["spark"] for link in through} == {"shuffle by tier"}, found["links"]
        assert sorted(rows[link["to"]][0]["customer"] for link in through) == customers
        steps = {link["to"] for link in found["links"] if link["kind"] == "emitted"
                 and link["from"] in {t["to"] for t in through}}   # each output's step: its customer's key
        assert sorted(rows[step]["$tuple"][1]["$tuple"][0] for step in steps) == customers

"""Orders ⋈ lineitems whose rows carry, as plain data, the ids of the inputs that made them.

    python lineage_orders.py OUT.json DATA_DIR [--items-by-reference]

(--items-by-reference also makes Spark hand the stages Arrow batches of 4 rows.)

The oracle of tests/test_lineage.py: every row keeps in its field `ids` the orders
("o3") and lineitems ("l107") it was computed from, so a sink row says which source
rows made it without tt's logs. θ is `T`, the first operator (it tags each order with
its id); the lineitems enter G(θ) at the join.

    ORDERS → T ─key o_id─┐
                         J (join) ─key cust→ A (aggregate) ───────────────────┐
    ITEMS ───key o_id────┘  └→ F (filter) → X (flat_map) ─key cust→ R (running) ─┴→ U (union) → OUT

`R` is a user operator with a dict state: each row it emits carries the ids of every
row of its customer so far, its own included (what its state was made from).
"""

import json
import sys
from pathlib import Path

import tt

ORDERS = [(o, f"c{o % 4}") for o in range(1, 15)]                         # (o_id, customer)
ITEMS = [(100 + n, 1 + (n * 5) % 17, 1 + n % 5) for n in range(30)]       # (l_id, o_id, qty): some o_id match no order


def write_data(d: Path) -> tuple[str, str]:
    """Parquet files: ORDERS, two files read by reference (a plain scan feeding θ), ITEMS copied
    (it enters G(θ) through a shuffle; read by reference with --items-by-reference)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    orders, items = d / "orders", d / "items.parquet"
    orders.mkdir(parents=True, exist_ok=True)
    half = len(ORDERS) // 2
    for n, part in enumerate((ORDERS[:half], ORDERS[half:])):
        pq.write_table(pa.table({"o_id": pa.array([o for o, _ in part], pa.int64()),
                                 "cust": [c for _, c in part]}), orders / f"part-{n}.parquet")
    pq.write_table(pa.table({"l_id": pa.array([i[0] for i in ITEMS], pa.int64()),
                             "o_id": pa.array([i[1] for i in ITEMS], pa.int64()),
                             "qty": pa.array([i[2] for i in ITEMS], pa.int64())}), items)
    return str(orders), str(items)


class Running(tt.Operator):
    """Per customer, the ids of every row seen so far."""

    def __init__(self):
        self.seen = {}

    def process(self, row, port=0):
        c = row["cust"]
        self.seen[c] = self.seen.get(c, ()) + tuple(row["ids"])
        yield {"kind": "running", "cust": c, "ids": sorted(set(self.seen[c]))}


def joined(order, item):
    return {"cust": order["cust"], "qty": item["qty"], "ids": order["ids"] + [f"l{item['l_id']}"]}


def build(spark, orders: str, items: str, items_by_reference: bool = False) -> tt.Dataflow:
    flow = tt.Dataflow("lineage_orders")
    t = flow.source("ORDERS", spark.read.parquet(orders)).map(
        lambda r: {**r, "ids": [f"o{r['o_id']}"]}, name="T")
    items = spark.read.parquet(items)
    li = flow.source("ITEMS", items if items_by_reference else items.repartition(2))
    j = t.key_by(lambda r: r["o_id"], partitions=2).join(li.key_by(lambda r: r["o_id"], partitions=2),
                                                          merge=joined, name="J")
    a = j.key_by(lambda r: r["cust"], partitions=2).aggregate(
        (), lambda acc, r: acc + tuple(r["ids"]),
        lambda cust, acc: {"kind": "customer", "cust": cust, "ids": sorted(set(acc))}, name="A")
    units = j.filter(lambda r: r["qty"] % 4 != 0, name="F").flat_map(
        lambda r: [{"cust": r["cust"], "ids": r["ids"]}] * min(r["qty"], 2), name="X")
    r = units.key_by(lambda r: r["cust"], partitions=2).process(Running(), name="R")
    a.union(r, name="U").collect("OUT")
    return flow


if __name__ == "__main__":
    out, data = sys.argv[1], Path(sys.argv[2])
    spark = tt.spark_session("lineage_orders")
    by_reference = "--items-by-reference" in sys.argv
    batch = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(batch)
    if by_reference:   # many small Arrow batches per partition: many chunks of positions
        spark.conf.set(batch, "4")
    try:
        rows = build(spark, *write_data(data), items_by_reference=by_reference).run()["OUT"]
    finally:
        spark.conf.set(batch, before)
    Path(out).write_text(json.dumps(rows))

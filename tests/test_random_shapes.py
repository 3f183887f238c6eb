"""Dataflows of random shape, recorded with random options; replay must hold up on each.

Each seed builds a chain of operators drawn from the workloads' (stateful ones, maps,
filters, a keyed shuffle, a join with a second source, a fan-out joined again by a union,
an aggregate), picks θ among its stateful operators and how interactions are taken
(every so often, on a condition), and sometimes online checkpoints, `--lineage` or copied
sources. Then:

- the recorded run's output equals the same dataflow's with recording off;
- `verify` finds every replayed state equal to the recorded one;
- in `tt debug`'s session, steps from a jumped-to interaction, undone one by one, come
  back through the same positions and states, and a reverse step from there lands just
  before θ's previous input, as a session that never stepped lands there.

The seeds drew shapes the hand-written ones (test_shapes.py) do not have: fan-outs joined
again before a join or an aggregate, joins in stages of one instance, online checkpoints with
copied sources, `--lineage` through a fan-out and through a join. Seed 11 drew a join whose
sides both came in one partition, which Spark 4 ran in one task until the job's unions were
planned one part after the other (recorder/execute.py). A scratch run of 110 seeds found nothing
else.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import replay_checks
import workloads as W

import tt
from tt.core import values
from tt.recorder.session import RecordingSession
from tt.replay.verify import verify
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow


class Running(tt.Operator):
    """A running count, and sums per amount bucket."""

    def __init__(self):
        self.n = 0
        self.sums = {}

    def process(self, row, port=0):
        self.n += 1
        b = int(row["amount"]) % 7
        self.sums[b] = round(self.sums.get(b, 0.0) + row["amount"], 2)
        yield {**row, "rb": b}


class Copies(tt.Operator):
    """Emits 0, 1 or 2 rows an input; keeps the last id per customer."""

    def __init__(self):
        self.last = {}

    def process(self, row, port=0):
        self.last[row.get("customer", "?")] = row["id"]
        for j in range(row["id"] % 3):
            yield {**row, "copy": j}


def build(seed: int, spark, where: Path):
    """The dataflow of `seed`, its stateful operators' names, and what was drawn."""
    rng = random.Random(seed)
    n, parts = rng.choice([300, 1500, 4000]), rng.choice([1, 2, 3, 4])
    parquet = rng.choice(["memory", "parquet"]) == "parquet"
    df = spark.createDataFrame(W.payments(n, seed), W.PAYMENT_SCHEMA)
    if parquet:
        path = where / f"payments-{seed}.parquet"
        if not path.exists():
            df.repartition(parts).write.parquet(str(path))
        df = spark.read.parquet(str(path))
    else:
        df = df.repartition(parts, "id")
    flow = tt.Dataflow(f"random-{seed}")
    s = flow.source("U", df)
    stateful, drawn, joined = [], [f"{n} rows in {parts} {'Parquet file(s)' if parquet else 'partition(s)'}"], False
    for i in range(rng.randint(1, 5)):
        kind = rng.choice(["enrich", "map", "filter", "detect", "join", "running", "copies", "fan"])
        name = f"{kind[:3].upper()}{i}"
        if kind == "enrich":
            s = s.process(W.Enrich(), name=name)
        elif kind == "running":
            s = s.process(Running(), name=name)
        elif kind == "copies":
            s = s.process(Copies(), name=name)
        elif kind == "map":
            s = s.map(lambda r: {**r, "amount": round(r["amount"] * 1.5, 2)}, name=name)
        elif kind == "filter":
            t = rng.choice([10, 30, 100])
            s = s.filter(lambda r, t=t: r["amount"] > t, name=name)
        elif kind == "detect":
            s = s.key_by(lambda r: r["customer"], partitions=rng.choice([1, 2, 3])).process(W.Detect(), name=name)
        elif kind == "join" and not joined:
            joined = True
            customers = spark.createDataFrame(W.customers(), "cid string, region string").repartition(rng.choice([1, 2]))
            s = s.key_by(lambda r: r["customer"], partitions=rng.choice([1, 2, 3])).join(
                flow.source("C", customers).key_by(lambda r: r["cid"]), name=name)
        elif kind == "fan":
            small = s.filter(lambda r: r["amount"] < 30, name=name + "a")
            big = s.filter(lambda r: r["amount"] >= 20, name=name + "b").process(W.Bucket(), name=name + "B")
            s, name = small.union(big, name=name + "U"), name + "B"
        else:
            continue
        drawn.append(name)
        if kind not in ("map", "filter"):
            stateful.append(name)
    if rng.random() < 0.6:
        s = s.key_by(lambda r: r["customer"], partitions=rng.choice([1, 2])).aggregate(
            0, lambda acc, r: acc + 1, emit=lambda k, acc: {"k": k, "n": acc}, name="AGG")
        stateful.append("AGG")
        drawn.append("AGG")
    s.collect("S")
    return flow, stateful, drawn


def _rows(rows) -> list[str]:
    return sorted(json.dumps(values.encode(r), sort_keys=True) for r in rows)


@pytest.mark.parametrize("seed", [0, 3, 11, 14, 23, 27, 29, 31, 50])
def test_a_random_shape_records_and_replays(spark, tmp_path, seed):
    flow, stateful, drawn = build(seed, spark, tmp_path)
    off = _rows(flow.run()["S"])
    rng = random.Random(seed * 7919)
    theta = rng.choice(stateful)
    every = rng.choice([None, 0.02, 0.1])
    when = rng.choice([None, "row['amount'] > 200", "row['id'] % 97 == 0"]) if every is None or rng.random() < 0.3 \
        else None
    options = {}
    if rng.random() < 0.3:
        options["checkpoint_tau"] = rng.choice([0.05, 0.5])
    if rng.random() < 0.3:
        options["lineage"] = True
    if rng.random() < 0.2:
        options["copy_sources"] = True
    what = f"{' '.join(drawn)}, θ = {theta}, every {every}, when {when}, {options}"
    out = tmp_path / "run.db"
    session = RecordingSession(out, Path(__file__), [], watch=theta, every=every, when=when, **options)
    try:
        with session:
            result = build(seed, spark, tmp_path)[0].run()
    finally:
        session.close()
    assert _rows(result["S"]) == off, what

    reader = RunReader(out)
    assert reader.status == "complete", what
    bad = [r for r in verify(reader) if not r["ok"]]
    assert not bad, (what, bad[0])

    replay_checks.steps_undo_and_reverse(out, reader, rng, what)

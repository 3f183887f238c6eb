"""A plain PySpark job, without tt, drawn from a seed: one to four steps among a generator
`mapInPandas` that counts the rows it saw, a `mapInArrow`, a grouped `applyInPandas`, an
`rdd.mapPartitions` generator, a `transformWithStateInPandas` processor counting per key, a
filter and a repartition by key; every step keeps the schema, so any order runs. The source
is in memory or, half the time when a folder is given, Parquet files written there. Some
seeds set Arrow batches of 7 rows (a key's rows in several chunks). It writes the steps
drawn and the sorted rows it collected (tests/test_hooked_random_shapes.py).

Usage: python hooked_random.py OUT.json SEED [PARQUET_FOLDER]"""
import json
import random
import sys

import pandas as pd
import pyarrow.compute as pc
from pyspark.sql import SparkSession, functions as F
from pyspark.sql.streaming import StatefulProcessor

SCHEMA = "id long, customer string, amount double"


def payments(n, seed):
    rng = random.Random(seed)
    return [(i, f"c{rng.randrange(40):02d}", round(rng.lognormvariate(3.0, 1.0), 2)) for i in range(n)]


def running(it):
    seen = 0
    for pdf in it:
        seen += len(pdf)
        yield pdf.assign(amount=(pdf["amount"] + seen % 3).round(2))


def scaled(it):
    for batch in it:
        yield batch.set_column(2, "amount", pc.round(pc.multiply(batch.column(2), 1.1), 2))


def top(pdf):
    return pdf.sort_values(["amount", "id"], ascending=[False, True]).head(3)


def alternate(rows):
    n = 0
    for r in rows:
        n += 1
        yield (r["id"], r["customer"], round(r["amount"] + n % 2, 2))


class Counter(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", "n long")
        self.chunks = 0

    def handleInputRows(self, key, rows, timerValues):
        n = self.count.get()[0] if self.count.exists() else 0
        out = []
        for pdf in rows:
            self.chunks += 1
            for i, a in zip(pdf["id"], pdf["amount"]):
                n += 1
                out.append((int(i), key[0], round(float(a) + n, 2)))
        self.count.update((n,))
        yield pd.DataFrame(out, columns=["id", "customer", "amount"])

    def close(self):
        pass


def draw(seed: int) -> dict:
    """What the job of `seed` does: its settings, source and steps (each with its argument)."""
    rng = random.Random(seed)
    settings = {"spark.sql.shuffle.partitions": str(rng.choice([1, 2, 4])), "spark.sql.adaptive.enabled": "false"}
    if rng.random() < 0.5:
        settings["spark.sql.execution.arrow.maxRecordsPerBatch"] = "7"   # several chunks a key
    n, parts, parquet = rng.choice([300, 1500, 4000]), rng.choice([1, 2, 3]), rng.random() < 0.5
    steps = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["running", "scaled", "top", "alternate", "counter", "filter", "shuffle"])
        steps.append([kind, rng.choice([10, 30]) if kind == "filter" else rng.choice([1, 2, 3]) if kind == "shuffle"
                      else None])
    return {"settings": settings, "rows": n, "partitions": parts, "parquet": parquet, "steps": steps}


def main(out: str, seed: int, folder: str | None = None) -> None:
    spark = SparkSession.builder.getOrCreate()
    job = draw(seed)
    before = {k: spark.conf.get(k, None) for k in job["settings"]}
    for k, v in job["settings"].items():
        spark.conf.set(k, v)
    try:   # (the session may be a test suite's: its settings come back)
        rows = run(spark, job, seed, folder)
    finally:
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    with open(out, "w") as f:
        json.dump({"steps": [kind for kind, _ in job["steps"]], "rows": rows}, f)


def run(spark, job: dict, seed: int, folder: str | None) -> list:
    df = spark.createDataFrame(payments(job["rows"], seed), SCHEMA)
    if folder is not None and job["parquet"]:
        path = f"{folder}/payments-{seed}.parquet"
        df.repartition(job["partitions"]).write.mode("overwrite").parquet(path)
        df = spark.read.parquet(path)
    else:
        df = df.repartition(job["partitions"], "id")
    for kind, arg in job["steps"]:
        if kind == "running":
            df = df.mapInPandas(running, SCHEMA)
        elif kind == "scaled":
            df = df.mapInArrow(scaled, SCHEMA)
        elif kind == "top":
            df = df.groupBy("customer").applyInPandas(top, SCHEMA)
        elif kind == "alternate":
            df = df.rdd.mapPartitions(alternate).toDF(SCHEMA)
        elif kind == "counter":
            df = df.groupBy("customer").transformWithStateInPandas(Counter(), SCHEMA, "Update", "None")
        elif kind == "filter":
            df = df.filter(F.col("amount") > arg)
        elif kind == "shuffle":
            df = df.repartition(arg, "customer")
    return sorted((r["id"], r["customer"], r["amount"]) for r in df.collect())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])

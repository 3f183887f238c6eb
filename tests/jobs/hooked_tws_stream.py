"""A plain PySpark Structured Streaming job, without tt: a StatefulProcessor over files.

The job writes FILES CSV files of payments into IN_DIR, then streams them one file per
micro-batch (`maxFilesPerTrigger=1`, `trigger(availableNow=True)`: the query ends by itself
after the last file) through `Balance` (`transformWithStateInPandas`, RocksDB state store,
changelog checkpointing so Spark's change feed can be read back): per customer a ValueState
`balance` (sum, count) and a MapState `by_kind` (kind -> count). It emits each customer's
balance after every micro-batch that brought rows for it. With MODE=row it is the same
processor on `transformWithState`. With MODE=sparse it is `Balance` over files where only c0 and
c1 pay after the first (`customer`). With MODE=timers it is `TimedBalance`, `Balance` with
event-time timers (payment i happens at minute 60 + i, the watermark follows it): a key's timer is
set a day (MODE=timers-later: two days) after its latest payment of the micro-batch, so none
fires in the run. For c0 and c1 it lists a key's timers and deletes them before it registers
one (a key has one timer); for c2 and c3 it registers one more each micro-batch. The state
store is in CKPT, where the tests read Spark's own view of it (the `statestore` source).

Payment i (0 <= i < FILES*PER_FILE) is in file i // PER_FILE: customer c{i % 4}, amount
(i * 37) % 101, kind card when i % 3 == 0: the tests compute every state with pandas.
Usage: python hooked_tws_stream.py OUT.json IN_DIR CKPT [FILES] [PER_FILE] [MODE]
"""

import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

from job_settings import spark_settings   # tests/jobs/job_settings.py


class Balance(StatefulProcessor):
    def init(self, handle):
        self.balance = handle.getValueState("balance", "amount double, n long")
        self.by_kind = handle.getMapState("by_kind", "kind string", "n long")
        self.batches = 0

    def _fold(self, key, amounts, kinds):
        amount, n = self.balance.get() or (0.0, 0)
        amount, n = amount + float(sum(amounts)), n + len(amounts)
        self.balance.update((amount, n))
        for kind in kinds:
            seen = self.by_kind.getValue((kind,))
            self.by_kind.updateValue((kind,), ((seen[0] if seen else 0) + 1,))
        return amount, n

    def handleInputRows(self, key, rows, timerValues):
        amounts, kinds = [], []
        for chunk in rows:
            amounts += list(chunk["amount"])
            kinds += list(chunk["kind"])
        self.batches += 1
        amount, n = self._fold(key, amounts, kinds)
        yield pd.DataFrame({"customer": [key[0]], "amount": [amount], "n": [n]})

    def close(self):
        pass


class RowBalance(Balance):
    def handleInputRows(self, key, rows, timerValues):
        amounts, kinds = [], []
        for row in rows:
            amounts.append(row.amount)
            kinds.append(row.kind)
        self.batches += 1
        amount, n = self._fold(key, amounts, kinds)
        yield Row(customer=key[0], amount=amount, n=n)


DAY_MS = 24 * 3600 * 1000


class TimedBalance(Balance):
    def __init__(self, days: int = 1):
        self.days = days

    def init(self, handle):
        super().init(handle)
        self.handle = handle

    def handleInputRows(self, key, rows, timerValues):
        chunks = list(rows)
        if key[0] in ("c0", "c1"):   # one timer: the earlier ones listed and deleted
            for expiry in list(self.handle.listTimers()):
                self.handle.deleteTimer(expiry)
        latest = (60 + max(int(c["id"].max()) for c in chunks)) * 60_000   # payment i at minute 60 + i
        self.handle.registerTimer(latest + self.days * DAY_MS)
        yield from super().handleInputRows(key, iter(chunks), timerValues)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        return iter([])


def customer(i: int, per_file: int, sparse: bool) -> str:
    """Payment i's customer: c{i % 4}; with `sparse`, after the first file c{i % 2} (c2 and c3
    pay in the first micro-batch only)."""
    return "c%d" % (i % (2 if sparse and i >= per_file else 4))


def write_files(in_dir: Path, files: int, per_file: int, sparse: bool = False) -> None:
    in_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time() - files - 10
    for f in range(files):
        ids = range(f * per_file, (f + 1) * per_file)
        pdf = pd.DataFrame({"id": list(ids)})
        pdf["customer"] = [customer(i, per_file, sparse) for i in ids]
        pdf["amount"] = [float((i * 37) % 101) for i in ids]
        pdf["kind"] = ["card" if i % 3 == 0 else "cash" for i in ids]
        tmp = in_dir / f".part-{f:03d}.csv"
        pdf.to_csv(tmp, index=False)
        os.utime(tmp, (t0 + f, t0 + f))   # Spark takes files in mtime order, ties in any order
        tmp.rename(in_dir / f"part-{f:03d}.csv")   # whole files only: the stream lists the folder


def main(out: str, in_dir: str, ckpt: str, files: int = 3, per_file: int = 40, mode: str = "pandas") -> None:
    write_files(Path(in_dir), files, per_file, sparse=mode == "sparse")
    spark = SparkSession.builder.master("local[2]").appName("hooked-tws-stream").getOrCreate()
    settings = {"spark.sql.streaming.stateStore.providerClass":
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
                "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
                "spark.sql.shuffle.partitions": "2"}
    with spark_settings(spark, settings):   # the session may be a test suite's
        payments = (spark.readStream.schema("id long, customer string, amount double, kind string")
                    .option("maxFilesPerTrigger", 1).option("header", True).csv(in_dir))
        grouped = payments.groupBy("customer")
        schema = "customer string, amount double, n long"
        if mode == "row":
            out_df = grouped.transformWithState(RowBalance(), schema, "Update", "None")
        elif mode in ("timers", "timers-later"):
            grouped = (payments.withColumn("ts", F.timestamp_seconds((F.col("id") + 60) * 60))
                       .withWatermark("ts", "0 seconds").groupBy("customer"))
            out_df = grouped.transformWithStateInPandas(
                statefulProcessor=TimedBalance(2 if mode == "timers-later" else 1), outputStructType=schema,
                outputMode="Update", timeMode="EventTime")
        else:
            out_df = grouped.transformWithStateInPandas(
                statefulProcessor=Balance(), outputStructType=schema, outputMode="Update", timeMode="None")
        name = f"balances_{Path(ckpt).name}"
        query = (out_df.writeStream.format("memory").queryName(name).outputMode("update")
                 .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        query.awaitTermination()
        result = {"balances": sorted([list(r) for r in spark.sql(f"SELECT * FROM {name}").collect()]),
                  "batches": query.lastProgress["batchId"] + 1}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:4], *(int(a) if a.isdigit() else a for a in sys.argv[4:]))

"""A plain PySpark job, without tt: functions that read the clock, draw random numbers and
make ids, keep what they got in their state and emit it.

- `stamped` (`rdd.mapPartitions`, a generator; θ) reads `time.time()`, `datetime.now()`
  (imported as `from datetime import datetime`), `perf_counter()`, `uuid.uuid4()`, and
  shuffles, chooses and samples with `random`, and draws from a `random.Random()` it makes
  without a seed and from a `random.SystemRandom()`; and reads the clock where no time is
  given (`time.strftime(fmt)`, `ctime()`, `localtime()`, …), by `clock_gettime`, `thread_time`
  and `os.times`;
- `StampBatches` (`mapInPandas`, a callable class) reads `time.time_ns()`,
  `datetime.datetime.utcnow()` (through `import datetime`), `os.urandom` and pandas'
  `Timestamp.now()`, `Timestamp.today()`, `Timestamp("now")` and `to_datetime("today")`, and
  names each batch by its worker's host and process (`socket.gethostname()`, `platform.node()`,
  `os.getpid()`, `os.getppid()`) and cores (`os.cpu_count()`);
- `drawn` (`applyInPandas`) draws `random.gauss`, `secrets.token_hex`, `date.today()`, and
  with numpy `normal`, `shuffle`, and a `default_rng()`, a `RandomState()` and a
  `Generator(PCG64())` made without a seed;
- `Stamps` (`transformWithStateInPandas`) keeps `time.time()` and a `uuid4` in a ValueState
  and `datetime.now()` in an attribute;
- `Ids` (a UDTF) makes an id and a draw per row.

Every function emits what it got, so the job's output (written without tt reading any log)
is what a replay must hand the functions again. `kinds` notes what `isinstance` says of
what the code made (it must say it with tt as without).
Usage: python hooked_nondeterministic.py OUT.json
"""

import datetime as dtmod
import json
import os
import platform
import random
import secrets
import socket
import sys
import time
import uuid
from datetime import date, datetime
from time import perf_counter

import numpy as np
import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.functions import udtf
from pyspark.sql.streaming import StatefulProcessor

from job_settings import spark_settings   # tests/jobs/job_settings.py

ROWS = 60
LETTERS = ["a", "b", "c", "d", "e"]


def make_stamped():
    seen = {"n": 0, "took": 0.0, "last": None}

    def stamped(rows):
        own = random.Random()   # seeded by the system: the seed it drew is what a replay needs
        for row in rows:
            started = perf_counter()
            order = list(LETTERS)
            random.shuffle(order)
            now = datetime.now()
            seen["n"] += 1
            seen["last"] = {"time": time.time(), "now": now.isoformat(), "id": str(uuid.uuid4()), "order": "".join(order),
                            "pick": random.choice(LETTERS) + "".join(random.sample(LETTERS, 2)) + random.choices(LETTERS)[0],
                            "draw": random.random() + random.randint(0, 9), "own": own.random(),
                            "kinds": [isinstance(now, datetime), isinstance(now, dtmod.date), type(now).__name__],
                            "clocks": [time.strftime("%Y-%m-%d %H:%M:%S"), time.ctime(), time.asctime(),
                                       list(time.localtime())[:6], list(time.gmtime(None))[:6],
                                       time.clock_gettime(time.CLOCK_REALTIME), time.clock_gettime_ns(time.CLOCK_MONOTONIC),
                                       time.thread_time(), os.times().elapsed, random.SystemRandom().random(),
                                       time.strftime("%H:%M", time.gmtime(0))]}
            seen["took"] += perf_counter() - started
            yield row.id, json.dumps(seen["last"])
    return stamped


class StampBatches:
    def __init__(self):
        self.batches = []

    def __call__(self, frames):
        for pdf in frames:
            self.batches.append([time.time_ns(), dtmod.datetime.utcnow().isoformat(), os.urandom(4).hex(), len(pdf),
                                 pd.Timestamp.now().isoformat(), str(pd.Timestamp.today()), str(pd.Timestamp("now")),
                                 str(pd.to_datetime("today")),
                                 f"{socket.gethostname()}/{platform.node()}:{os.getpid()}<{os.getppid()}",
                                 os.cpu_count()])
            yield pd.DataFrame({"stamp": [json.dumps(self.batches[-1])]})


def make_drawn():
    drawn_so_far = []

    def drawn(key, pdf):
        order = np.arange(6)
        np.random.shuffle(order)
        drawn_so_far.append([int(key[0]), random.gauss(0, 1), secrets.token_hex(4), date.today().isoformat(),
                             float(np.random.normal()), order.tolist(), int(np.random.default_rng().integers(0, 10**9)),
                             int(np.random.RandomState().randint(0, 10**9)),
                             int(np.random.Generator(np.random.PCG64()).integers(0, 10**9))])
        return pd.DataFrame({"draw": [json.dumps(drawn_so_far[-1])]})
    return drawn


class Stamps(StatefulProcessor):
    def init(self, handle):
        self.seen = handle.getValueState("seen", "at double, id string")
        self.last_seen = None

    def handleInputRows(self, key, rows, timerValues):
        for pdf in rows:
            self.last_seen = datetime.now()
            self.seen.update((time.time(), str(uuid.uuid4())))
            at, made = self.seen.get()
            yield pd.DataFrame({"k": [int(key[0])], "stamp": [json.dumps([at, made, self.last_seen.isoformat(), len(pdf)])]})

    def close(self):
        pass


@udtf(returnType="k long, stamp string")
class Ids:
    def __init__(self):
        self.made = []

    def eval(self, k: int):
        self.made.append([str(uuid.uuid4()), random.random()])
        yield k, json.dumps(self.made[-1])


def main(out: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-nondeterministic").getOrCreate()
    settings = {"spark.sql.shuffle.partitions": "2", "spark.sql.execution.arrow.maxRecordsPerBatch": "10"}
    with spark_settings(spark, settings):
        rows = spark.range(0, ROWS, numPartitions=2)
        keyed = rows.selectExpr("id", "id % 3 AS k")
        spark.udtf.register("ids", Ids)
        keyed.createOrReplaceTempView("keyed")
        result = {
            "stamped": sorted(rows.rdd.mapPartitions(make_stamped()).collect()),
            "batches": sorted(r.stamp for r in rows.mapInPandas(StampBatches(), "stamp string").collect()),
            "drawn": sorted(r.draw for r in keyed.groupBy("k").applyInPandas(make_drawn(), "draw string").collect()),
            "stamps": sorted(tuple(r) for r in keyed.groupBy("k").transformWithStateInPandas(
                Stamps(), "k long, stamp string", "Update", "None").collect()),
            "ids": sorted(tuple(r) for r in spark.sql("SELECT i.k, i.stamp FROM keyed, LATERAL ids(keyed.k) i").collect()),
        }
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])

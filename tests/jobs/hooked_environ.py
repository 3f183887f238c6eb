"""A plain PySpark job, without tt, whose functions read their settings from the environment.

- `rated` (`rdd.mapPartitions`, a generator; θ) reads a rate with `os.environ[...]`, a mode
  with `os.getenv` of a name that is unset, asks `in os.environ`, reads an API token's length
  (a name tt keeps out of the run file), and sets a variable itself in its sixth row, between
  two reads of it (clearing it with `pop` first, as the worker process outlives the task), and
  takes a variable out of the environment for its partition (`pop`), which the replaying process
  lacks, and puts it back;
- `Limited` (`mapInPandas`, a callable class) reads a limit with `os.environ.get` per batch,
  and imports a library in its body where it first needs it, in a later batch (markdown-it, to
  keep a note);
- both tell the hour of a timestamp in local time, and the executors run in Tokyo's time zone
  (`TZ`), which tt notes and a replay runs in (core/local_time.py).

The executors get the variables from the job (`SparkContext.environment`, as
`spark.executorEnv.*` sets them); the process that replays has other values or none. Every
function emits what it read, so the job's output (collected by Spark, never read by tt) is
what a replay must hand the functions again.
Usage: python hooked_environ.py OUT.json
"""

import json
import os
import sys
import time
from datetime import datetime

import pandas as pd
from pyspark.sql import SparkSession

from job_settings import spark_settings   # tests/jobs/job_settings.py

ROWS = 40
RATE, UNSET, TOKEN, LIMIT, STAGE, LENT = ("TT_TEST_ENV_RATE", "TT_TEST_ENV_UNSET", "TT_TEST_ENV_API_TOKEN",
                                          "TT_TEST_ENV_LIMIT", "TT_TEST_ENV_STAGE", "TT_TEST_ENV_LENT")
EXECUTORS = {RATE: "3", TOKEN: "recorded-token-value", LIMIT: "25", LENT: "lent", "TZ": "Asia/Tokyo"}


def make_rated():
    seen = {"n": 0, "total": 0.0, "last": None}

    def rated(rows):
        os.environ.pop(STAGE, None)
        lent = os.environ.pop(LENT, "gone")   # taken for the partition (a replay's process need not have it)
        for row in rows:
            before = os.environ.get(STAGE, "early")
            if seen["n"] == 5:   # (between two reads of it in the same step)
                os.environ[STAGE] = "late"
            rate = float(os.environ[RATE])
            seen["n"] += 1
            seen["total"] += row * rate
            seen["last"] = {"row": row, "rate": rate, "mode": os.getenv(UNSET, "default"), "has": RATE in os.environ,
                            "lent": lent, "before": before, "stage": os.environ.get(STAGE, "early"),
                            "token": len(os.environ.get(TOKEN, "")),
                            "total": seen["total"], "hour": time.localtime(row * 3600).tm_hour,
                            "local": datetime.fromtimestamp(row * 3600).isoformat()}
            yield json.dumps(seen["last"])
        os.environ[LENT] = lent   # (given back)
    return rated


class Limited:
    def __init__(self):
        self.kept = 0

    def __call__(self, frames):
        for pdf in frames:
            limit = int(os.environ.get(LIMIT, "0"))
            self.kept += int((pdf.id < limit).sum())
            self.first_hour = time.localtime(int(pdf.id.iloc[0]) * 3600).tm_hour
            if self.kept > limit // 2:   # (in a later batch than its first: not loaded when the task began)
                from markdown_it import MarkdownIt
                self.note = MarkdownIt().renderInline(f"kept **{self.kept}**")
            yield pd.DataFrame({"kept": [self.kept], "limit": [limit], "hour": [self.first_hour]})


def main(out: str) -> None:
    # (a Python worker a task each: what one task imported is not loaded when the next begins)
    spark = (SparkSession.builder.master("local[2]").appName("hooked-environ")
             .config("spark.python.worker.reuse", "false").getOrCreate())
    environment = spark.sparkContext.environment   # what the executors' Python workers get
    before = {k: environment.get(k) for k in EXECUTORS}
    environment.update(EXECUTORS)
    try:
        with spark_settings(spark, {"spark.sql.execution.arrow.maxRecordsPerBatch": "10"}):
            rated = spark.sparkContext.parallelize(range(ROWS), 2).mapPartitions(make_rated())
            rows = spark.range(0, ROWS, numPartitions=2)
            result = {
                "rated": sorted(rated.collect()),
                "limited": sorted(tuple(r) for r in rows.mapInPandas(Limited(), "kept long, limit long, hour long")
                                  .collect()),
            }
    finally:
        for k, v in before.items():
            environment.pop(k) if v is None else environment.__setitem__(k, v)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])

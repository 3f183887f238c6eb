"""A plain PySpark Structured Streaming job, without tt: `applyInPandasWithState` over files.

The job writes three CSV files of click events into IN_DIR and streams them one file per
micro-batch (`maxFilesPerTrigger=1`, `trigger(availableNow=True)`), with a 10-second
watermark on the event time, through `sessions` (`applyInPandasWithState`,
`EventTimeTimeout`): per user a GroupState (clicks, total, last event in ms) and a timeout
60 s after the user's last event. A user's call emits the session so far ("open"); once
the watermark passes the timeout, Spark calls it again with `hasTimedOut`, and it emits
the session "closed" and removes the state.

Events (times in seconds after BASE): file 0 has every user u0..u3 at 0..49 s, file 1 only u0 and u1
at 100..149 s, file 2 only u0 at 300..349 s; click i of a file has value (i * 7) % 13.
So u2 and u3 time out once file 1 is in, u1 once file 2 is in, and u0 never: the tests
compute every session with pandas. Sixteen rows an Arrow batch: a user's ten clicks of
file 0 come as one DataFrame, the twenty or forty of the later files as several. With FAIL=u1 the function raises on u1's timeout.
With PLUS=n every click's value is n more (the tests' store that disagrees); with EXTRA=user,
file 1 has one click of that user more (a store that wrote a GroupState the recording did not).
With TIMEOUT=none the query has `NoTimeout`: no session closes, and Spark's store keeps no
timeout beside the GroupState.
Usage: python hooked_apiws_stream.py OUT.json IN_DIR CKPT [FAIL or -] [PLUS] [EXTRA or -] [TIMEOUT]
"""

import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming.state import GroupStateTimeout

from job_settings import spark_settings   # tests/jobs/job_settings.py

GAP_MS = 60_000
BASE = 1_790_000_000   # seconds: Spark's first watermark is 0, and an event at 0 would be late
# EXTRA's click in file 1, at 50 s: after micro-batch 0's watermark (39 s), and early enough that
# the user still times out in micro-batch 2 (at 110 s, where the watermark is 139 s), as without it
EXTRA_SECOND, EXTRA_VALUE = -50, 5
FAIL = None
TIMEOUT = True


def sessions(key, chunks, state):
    user = key[0]
    if state.hasTimedOut:
        if user == FAIL:
            raise RuntimeError(f"cannot close {user}'s session")
        clicks, total, last = state.get
        state.remove()
        yield pd.DataFrame({"user": [user], "clicks": [clicks], "total": [total], "status": ["closed"]})
        return
    clicks, total, last = state.getOption or (0, 0, 0)
    for chunk in chunks:
        clicks += len(chunk)
        total += int(chunk["value"].sum())
        last = max(last, int(chunk["ts"].max().timestamp() * 1000))
    state.update((clicks, total, last))
    if TIMEOUT:
        state.setTimeoutTimestamp(last + GAP_MS)
    yield pd.DataFrame({"user": [user], "clicks": [clicks], "total": [total], "status": ["open"]})


def events(f: int, plus: int = 0, extra: str | None = None) -> pd.DataFrame:
    users = {0: ["u0", "u1", "u2", "u3"], 1: ["u0", "u1"], 2: ["u0"]}[f]
    start = BASE + {0: 0, 1: 100, 2: 300}[f]
    rows = [(users[i % len(users)], start + i % 50, (i * 7) % 13 + plus) for i in range(40)]
    if extra and f == 1:
        rows.append((extra, start + EXTRA_SECOND, EXTRA_VALUE))
    pdf = pd.DataFrame(rows, columns=["user", "second", "value"])
    pdf["ts"] = pd.to_datetime(pdf["second"], unit="s").dt.strftime("%Y-%m-%d %H:%M:%S")
    return pdf[["user", "ts", "value"]]


def write_files(in_dir: Path, plus: int = 0, extra: str | None = None) -> None:
    in_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time() - 10
    for f in range(3):
        tmp = in_dir / f".part-{f}.csv"
        events(f, plus, extra).to_csv(tmp, index=False)
        os.utime(tmp, (t0 + f, t0 + f))   # Spark takes files in mtime order, ties in any order
        tmp.rename(in_dir / f"part-{f}.csv")   # whole files only: the stream lists the folder


def main(out: str, in_dir: str, ckpt: str, fail: str | None = None, plus: str = "0", extra: str = "-",
         timeout: str = "event") -> None:
    global FAIL, TIMEOUT
    FAIL = None if fail == "-" else fail
    TIMEOUT = timeout != "none"
    write_files(Path(in_dir), int(plus), None if extra == "-" else extra)
    spark = SparkSession.builder.master("local[2]").appName("hooked-apiws-stream").getOrCreate()
    settings = {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC",
                "spark.sql.execution.arrow.maxRecordsPerBatch": "16"}   # file 0's users: one DataFrame each; later, more
    with spark_settings(spark, settings):   # the session may be a test suite's
        clicks = (spark.readStream.schema("user string, ts timestamp, value long")
                  .option("maxFilesPerTrigger", 1).option("header", True).csv(in_dir)
                  .withWatermark("ts", "10 seconds"))
        out_df = clicks.groupBy("user").applyInPandasWithState(
            sessions, "user string, clicks long, total long, status string",
            "clicks long, total long, last long", "Append",
            GroupStateTimeout.EventTimeTimeout if TIMEOUT else GroupStateTimeout.NoTimeout)
        name = f"sessions_{Path(ckpt).name}"
        query = (out_df.writeStream.format("memory").queryName(name).outputMode("append")
                 .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        query.awaitTermination()
        result = {"rows": sorted([list(r) for r in spark.sql(f"SELECT * FROM {name}").collect()]),
                  "batches": query.lastProgress["batchId"] + 1}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:8])

"""Click sessions in a Structured Streaming query: a StatefulProcessor with event-time timers.

    data/clicks/step-*.json → withWatermark("ts", "10 minutes")
        → groupBy("user").transformWithState(SessionProcessor, timeMode="EventTime")
        → one row per closed session (memory sink)

The job writes a morning of clicks into `data/clicks/` in five steps, one JSON file a
step. After each file it waits until the query (trigger: `processingTime="1 second"`,
RocksDB state store, checkpoint in `data/checkpoint/`) has processed it: a micro-batch
reads the file, then Spark runs one without data to fire the timers the moved watermark
has passed. After the fifth file it stops the query and prints the closed sessions.

`SessionProcessor` keeps, per user, a ValueState `session` (first click, last click,
clicks; times in epoch milliseconds, as Spark counts time) and an event-time timer GAP
(30 minutes) after the session's last click: when the watermark passes it,
`handleExpiredTimer` emits the session and clears it. A click more than GAP after the
last one closes the session at once. The fifth file, a click at 13:00, moves the
watermark past the end of every earlier session. (Spark refuses a TTL on state in
`EventTime` mode, STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL: the timer is what
clears a session.)

The bug: `SessionProcessor._end` gives the timer in seconds, but Spark's timers are in
milliseconds. To Spark the timer is in January 1970, behind every watermark but the
first micro-batch's, so each session closes with the micro-batch it was last seen in.
Alice browsed from 09:00 to 09:45 and came back at 11:30: she should have 2 sessions
(6 in all, Dave's still open), but the job prints

    sessions closed: 10 (alice 3, bob 3, carol 3, dave 1)

Record it and find it with:

    tt record sample_runs/sessions_streaming/job.py -o sessions.db
    tt replay sessions.db --run-until "'alice' in SessionProcessor.timers"
    tt debug sessions.db        # c, the same condition; / alice (twice): session, then timers

The replay stops at Alice's first click: her session is (1772442000000, 1772442000000, 1),
in milliseconds, and the timer just registered for it is 1772443800, a thousand times
smaller. Run it plainly (recording off) with `python sample_runs/sessions_streaming/job.py`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming import StatefulProcessor

HERE = Path(__file__).resolve().parent
GAP_SECONDS = 30 * 60   # a session ends after 30 minutes without a click
DAY = "2026-03-02"

# The morning's clicks, one file a step: (time, user, page), in time order.
STEPS = [
    [("09:00", "alice", "home"), ("09:04", "alice", "search"), ("09:10", "bob", "home"),
     ("09:15", "alice", "item"), ("09:18", "carol", "home")],
    [("09:28", "alice", "cart"), ("09:30", "bob", "search"), ("09:41", "carol", "search"),
     ("09:45", "alice", "pay")],
    [("10:20", "bob", "item")],
    [("11:30", "alice", "home"), ("11:40", "carol", "home")],
    [("13:00", "dave", "home")],
]


class SessionProcessor(StatefulProcessor):
    """One user's clicks: the open session, and a timer at its end."""

    def init(self, handle):
        self.handle = handle
        self.session = handle.getValueState("session", "start long, last long, clicks long")

    def handleInputRows(self, key, rows, timerValues):
        for row in rows:
            click = int(row.ts.timestamp() * 1000)
            session = self.session.get()
            if session is not None and click > session[1] + GAP_SECONDS * 1000:
                yield self._closed(key[0], session)   # a click after the gap: the open session is over
                session = None
            if session is None:
                start, last, clicks = click, click, 1
            else:
                self.handle.deleteTimer(self._end(session[1]))
                start, last, clicks = min(session[0], click), max(session[1], click), session[2] + 1
            self.session.update((start, last, clicks))
            self.handle.registerTimer(self._end(last))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        session = self.session.get()
        if session is not None:
            self.session.clear()
            yield self._closed(key[0], session)

    def _end(self, last: int) -> int:
        """When a session whose last click was at `last` ends: GAP later. (The bug: in seconds.)"""
        return last // 1000 + GAP_SECONDS

    def _closed(self, user: str, session: tuple) -> Row:
        start, last, clicks = session
        return Row(user=user, start=start, last=last, clicks=clicks)

    def close(self):
        pass


CLOSED = "user string, start long, last long, clicks long"
SETTINGS = {"spark.sql.streaming.stateStore.providerClass":   # transformWithState needs RocksDB
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
            "spark.sql.shuffle.partitions": "2"}


def hhmm(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%H:%M")


def write_step(folder: Path, step: int) -> None:
    """One step's file, written whole: the stream lists the folder and skips dot files."""
    tmp = folder / f".step-{step}.json"
    tmp.write_text("".join(json.dumps({"ts": f"{DAY}T{t}:00Z", "user": u, "page": p}) + "\n"
                           for t, u, p in STEPS[step]))
    tmp.rename(folder / f"step-{step}.json")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description="click sessions with event-time timers (tt sample)")
    ap.add_argument("--out", default=str(HERE / "data"), help="for the clicks and the checkpoint (emptied first)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    clicks = out / "clicks"
    clicks.mkdir(parents=True)
    spark = SparkSession.builder.appName("sessions-streaming").getOrCreate()
    before = {k: spark.conf.get(k, None) for k in SETTINGS}
    for k, v in SETTINGS.items():
        spark.conf.set(k, v)
    try:
        stream = (spark.readStream.schema("ts timestamp, user string, page string").json(str(clicks))
                  .withWatermark("ts", "10 minutes"))
        closed = stream.groupBy("user").transformWithState(SessionProcessor(), CLOSED, "Append", "EventTime")
        query = (closed.writeStream.format("memory").queryName("sessions").outputMode("append")
                 .option("checkpointLocation", str(out / "checkpoint")).trigger(processingTime="1 second")
                 .start())
        try:
            for step in range(len(STEPS)):
                write_step(clicks, step)
                query.processAllAvailable()   # the file's micro-batch, and the one that fires timers
        finally:
            query.stop()
        rows = sorted(spark.table("sessions").collect(), key=lambda r: (r.user, r.start))
        spark.catalog.dropTempView("sessions")
    finally:   # the session may be someone else's (a notebook's, a test suite's): leave it as it was
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    per_user: dict[str, int] = {}
    for r in rows:
        print(f"  {r.user:6} {hhmm(r.start)}–{hhmm(r.last)}  {r.clicks} click{'s' if r.clicks != 1 else ''}")
        per_user[r.user] = per_user.get(r.user, 0) + 1
    print(f"sessions closed: {len(rows)} ({', '.join(f'{u} {n}' for u, n in sorted(per_user.items()))})")


if __name__ == "__main__":
    main(sys.argv[1:])

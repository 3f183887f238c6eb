"""Monthly counts of happy or glad tweets: IcedTea's W4 workflow on Spark.

    Source T → Clean (θ) ─┬→ Happy (filter) → key_by(month) ─┐
                           └→ Glad  (filter) → key_by(month) ─┴→ Union → key_by(month) → Monthly (aggregate)

Two paths from Clean meet again at Union: a tweet with both words reaches it
twice, and Union consumes, epoch by epoch, everything from the Happy path before
anything from the Glad path. Tuple scopes therefore overlap: stepping over a
glad tweet would first need the later happy tweets that Union consumed before it
(`tt inspect RUN overlaps` lists them).

    tt record sample_runs/keywords/job.py --watch Clean --every 1s -o keywords.db
"""

from __future__ import annotations

import argparse
import random
import sys

import tt

MONTHS = ["2019-11", "2019-12", "2020-01", "2020-02", "2020-03", "2020-04"]
WORDS = ("climate weather today great news friend city rain sun coffee work weekend music game "
         "train school family food movie team win lose late early home").split()


def tweets(n: int, seed: int = 11) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = rng.sample(WORDS, 6)
        r = rng.random()
        if r < 0.07:
            words.append("happy")
        elif r < 0.11:
            words.append("glad")
        elif r < 0.12:
            words += ["happy", "glad"]
        rng.shuffle(words)
        out.append({"id": i, "user": f"u{rng.randrange(500):03d}", "month": MONTHS[i * len(MONTHS) // n],
                    "text": " ".join(words).capitalize()})
    return out


class Clean(tt.Operator):
    """Lowercases and tokenizes; counts tweets per user (its state)."""

    def __init__(self):
        self.per_user = {}

    def process(self, row, port=0):
        self.per_user[row["user"]] = self.per_user.get(row["user"], 0) + 1
        yield {"id": row["id"], "month": row["month"], "words": row["text"].lower().split()}


def build(spark, n: int, partitions: int) -> tt.Dataflow:
    df = spark.createDataFrame(tweets(n), "id long, user string, month string, text string").repartition(
        partitions, "id")
    flow = tt.Dataflow("keywords")
    clean = flow.source("T", df).process(Clean(), name="Clean")
    happy = clean.filter(lambda r: "happy" in r["words"], name="Happy")
    glad = clean.filter(lambda r: "glad" in r["words"], name="Glad")
    by_month = lambda r: r["month"]  # noqa: E731
    both = happy.key_by(by_month, partitions=2).union(glad.key_by(by_month, partitions=2), name="Union")
    both.key_by(by_month, partitions=2).aggregate(
        0, lambda n, r: n + 1, emit=lambda month, n: {"month": month, "tweets": n}, name="Monthly").collect("S")
    return flow


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description="monthly happy/glad tweets (tt sample, IcedTea's W4)")
    ap.add_argument("--tweets", type=int, default=50_000)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args(argv)
    spark = tt.spark_session("keywords")
    result = build(spark, args.tweets, args.partitions).run()
    for row in sorted(result["S"], key=lambda r: r["month"]):
        print(f"{row['month']}: {row['tweets']}")


if __name__ == "__main__":
    main(sys.argv[1:])

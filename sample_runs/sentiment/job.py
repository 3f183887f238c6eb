"""Sentiment of beauty reviews by k-nearest neighbours: IcedTea's W5 workflow on Spark.

    Source A (all beauty)    ─┐
                              ├→ Sentiment (θ, KNN) → key_by(label) → Count (aggregate)
    Source B (luxury beauty) ─┘

The labeller remembers the last reviews it saw and labels a review like the
majority of its k most similar ones, so its result depends on the order of its
input. A tie between the votes is broken by a random draw wrapped in
`tt.log_result`: replay serves the recorded draw instead of drawing again.

    tt record sample_runs/sentiment/job.py --watch Sentiment --every 1s -o sentiment.db
"""

from __future__ import annotations

import argparse
import random
import sys

import tt

GOOD = "love great soft lovely gentle fresh perfect amazing smooth".split()
BAD = "bad sticky awful harsh dry broke smell waste itchy".split()
NEUTRAL = "cream bottle skin hair face price color size shipping box scent".split()


def reviews(n: int, seed: int, category: str) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        rating = rng.choice([1, 2, 3, 4, 5, 5, 4])
        mood = GOOD if rating >= 4 else BAD if rating <= 2 else GOOD + BAD
        words = rng.sample(NEUTRAL, 4) + rng.sample(mood, 2)
        out.append({"id": f"{category}-{i}", "category": category, "rating": rating, "text": " ".join(words)})
    return out


class Sentiment(tt.Operator):
    """KNN over the last `memory` reviews (Jaccard similarity of words); ties broken at random."""

    def __init__(self, k: int = 4, memory: int = 48):
        self._k = k
        self._memory = memory
        self.recent = []      # [(words, label)] most recent last
        self.labelled = 0

    def process(self, row, port=0):
        words = frozenset(row["text"].split())
        nearest = sorted(self.recent, key=lambda m: -len(words & m[0]) / len(words | m[0]))[: self._k]
        votes = {}
        for _, label in nearest:
            votes[label] = votes.get(label, 0) + 1
        if votes:
            best = max(votes.values())
            tied = sorted(label for label, v in votes.items() if v == best)
            label = tied[0] if len(tied) == 1 else tied[int(tt.log_result(random.random) * len(tied))]
        else:
            label = "neutral"
        truth = "positive" if row["rating"] >= 4 else "negative" if row["rating"] <= 2 else "neutral"
        self.recent.append((sorted(words), truth))
        self.recent = [(frozenset(w), l) for w, l in self.recent[-self._memory:]]
        self.labelled += 1
        yield {"id": row["id"], "label": label, "truth": truth}

    def state(self):
        return {"labelled": self.labelled, "recent": [(sorted(w), l) for w, l in self.recent[-5:]]}


def build(spark, n: int, partitions: int) -> tt.Dataflow:
    schema = "id string, category string, rating long, text string"
    a = spark.createDataFrame(reviews(n, 1, "all-beauty"), schema).repartition(partitions, "id")
    b = spark.createDataFrame(reviews(n * 3 // 2, 2, "luxury-beauty"), schema).repartition(partitions, "id")
    flow = tt.Dataflow("sentiment", partitions=partitions)
    knn = flow.source("A", a).union(flow.source("B", b), name="Reviews").process(Sentiment(), name="Sentiment")
    knn.key_by(lambda r: r["label"], partitions=2).aggregate(
        0, lambda n, r: n + 1, emit=lambda label, n: {"label": label, "reviews": n}, name="Count").collect("S")
    return flow


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description="KNN sentiment of reviews (tt sample, IcedTea's W5)")
    ap.add_argument("--reviews", type=int, default=8000)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args(argv)
    spark = tt.spark_session("sentiment")
    result = build(spark, args.reviews, args.partitions).run()
    for row in sorted(result["S"], key=lambda r: r["label"]):
        print(f"{row['label']}: {row['reviews']}")


if __name__ == "__main__":
    main(sys.argv[1:])

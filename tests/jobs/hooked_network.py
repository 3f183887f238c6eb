"""A plain PySpark job, without tt, whose function asks a service over the network.

- `priced` (`rdd.mapPartitions`, a generator; θ) asks a price service (a TCP server at HOST:PORT,
  one line in, one line out) the price of each row, and keeps a running total;
- `Tagged` (`mapInPandas`, a callable class) computes its tags itself.

tt does not log what a network peer answers: the recording must say that `priced` connected,
and only `priced` (PySpark's own sockets and tt's are not the job's).
Usage: python hooked_network.py OUT.json HOST:PORT
"""

import json
import socket
import sys

import pandas as pd
from pyspark.sql import SparkSession

ROWS = 12


def make_priced(address):
    host, port = address.rsplit(":", 1)

    def priced(rows):
        total = 0
        with socket.create_connection((host, int(port))) as conn:
            answers = conn.makefile("r")
            for row in rows:
                conn.sendall(f"{row}\n".encode())
                price = int(answers.readline())
                total += price
                yield (row, price, total)
    return priced


class Tagged:
    def __init__(self):
        self.seen = 0

    def __call__(self, frames):
        for pdf in frames:
            self.seen += len(pdf)
            yield pd.DataFrame({"id": pdf.id, "tag": pdf.id % 3, "seen": self.seen})


def main(out: str, address: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-network").getOrCreate()
    priced = spark.sparkContext.parallelize(range(ROWS), 2).mapPartitions(make_priced(address))
    tagged = spark.range(0, ROWS, numPartitions=2).mapInPandas(Tagged(), "id long, tag long, seen long")
    result = {"priced": sorted(priced.collect()), "tagged": sorted(tuple(r) for r in tagged.collect())}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

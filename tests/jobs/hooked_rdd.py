"""A plain PySpark job, without tt: state in RDD functions and in `mapInArrow`.

- `running_total` is a `mapPartitions` generator: its state is its frame's locals
  (`total`, the sum of the elements it has pulled);
- `Threshold` is a callable class given to `filter`: it counts what it saw and kept;
- a stateless lambda given to `map` follows;
- `tagged` is a `mapPartitionsWithIndex` generator (it counts its elements in `n`),
  followed by a `flatMap`;
- `CountBatches` is a callable class given to `DataFrame.mapInArrow`: per batch, it
  adds up the rows and the ids it saw.

The data is `range(ROWS)`, so the tests compute every expected state with plain
Python and pandas (tests/test_hooked_rdd.py).
Usage: python hooked_rdd.py OUT.json [ROWS] [PARTITIONS]
"""

import json
import sys

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession


def running_total(elements):
    total = 0
    for x in elements:
        total += x
        if x % 5 == 0:
            yield (x, total)


def tagged(index, elements):
    n = 0
    for x in elements:
        n += 1
        yield (index, x)


class Threshold:
    def __init__(self):
        self.seen = 0
        self.kept = 0

    def __call__(self, pair):
        self.seen += 1
        keep = pair[1] % 3 != 0
        self.kept += keep
        return keep


class CountBatches:
    def __init__(self):
        self.rows = 0
        self.id_sum = 0

    def __call__(self, batches):
        for batch in batches:
            self.rows += batch.num_rows
            self.id_sum += pc.sum(batch.column("id")).as_py() or 0
            yield pa.RecordBatch.from_pydict({"rows": [self.rows], "id_sum": [self.id_sum]})


def main(out: str, rows: int = 400, partitions: int = 2) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-rdd").getOrCreate()
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "40")
    try:
        numbers = spark.sparkContext.parallelize(range(rows), partitions)
        doubled = numbers.mapPartitions(running_total).filter(Threshold()).map(lambda p: p[0] * 2)
        kept = sorted(doubled.collect())
        repeated = numbers.mapPartitionsWithIndex(tagged).flatMap(lambda t: [t[0]] * (t[1] % 3)).count()
        counts = spark.range(0, rows, numPartitions=partitions).mapInArrow(CountBatches(), "rows long, id_sum long")
        last = sorted(tuple(r) for r in counts.collect())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    with open(out, "w") as f:
        json.dump({"kept": kept, "counts": last, "repeated": repeated}, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))

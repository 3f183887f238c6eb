"""A plain PySpark Structured Streaming job, without tt: hooked calls made in `foreachBatch`.

The job writes FILES CSV files of payments into IN_DIR and streams them one file per micro-batch
(`maxFilesPerTrigger=1`, `trigger(availableNow=True)`) into `per_batch`, which Spark calls once
per micro-batch with that micro-batch's rows. Each call makes the same hooked calls again:
`mapInPandas(Running())`, a callable class that numbers the rows it sees and sums their
amounts, and `mapInPandas` of a lambda that tags each row with the micro-batch (its closure
differs from one micro-batch to the next). After the stream, a batch loop makes one
`mapInPandas(Running())` call twice, over two halves of the payments.

Payment i (0 <= i < FILES*PER_FILE) is in file i // PER_FILE, amount (i * 37) % 101: the tests
compute every output and state with pandas.
Usage: python hooked_foreach_batch.py OUT.json IN_DIR CKPT [FILES] [PER_FILE]
"""

import json
import sys

import pandas as pd
from pyspark.sql import SparkSession

from job_settings import spark_settings, write_payment_files   # tests/jobs/job_settings.py

SCHEMA = "id long, seen long, total double"


class Running:
    def __init__(self):
        self.seen = 0
        self.total = 0.0

    def __call__(self, batches):
        for pdf in batches:
            self.seen += len(pdf)
            self.total += float(pdf["amount"].sum())
            yield pd.DataFrame({"id": pdf["id"], "seen": self.seen, "total": self.total})


def main(out: str, in_dir: str, ckpt: str, files: int = 3, per_file: int = 20) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-foreach-batch").getOrCreate()
    write_payment_files(in_dir, files, per_file)
    seen: dict = {"running": [], "tagged": []}

    def per_batch(df, epoch):
        seen["running"] += [list(r) for r in df.mapInPandas(Running(), SCHEMA).collect()]
        tag = df.mapInPandas(lambda it: (p.assign(seen=epoch, total=0.0)[["id", "seen", "total"]] for p in it), SCHEMA)
        seen["tagged"] += [list(r) for r in tag.collect()]

    with spark_settings(spark, {"spark.sql.shuffle.partitions": "2"}):
        stream = (spark.readStream.schema("id long, amount double").option("header", "true")
                  .option("maxFilesPerTrigger", 1).csv(in_dir))
        stream.writeStream.foreachBatch(per_batch).option("checkpointLocation", ckpt).trigger(
            availableNow=True).start().awaitTermination()
        payments = spark.read.schema("id long, amount double").option("header", "true").csv(in_dir)
        halves = []
        for half in (payments.filter("id % 2 = 0"), payments.filter("id % 2 = 1")):
            halves.append(sorted(list(r) for r in half.coalesce(1).mapInPandas(Running(), SCHEMA).collect()))
    with open(out, "w") as f:
        json.dump({"running": sorted(seen["running"]), "tagged": sorted(seen["tagged"]), "halves": halves}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:6]))

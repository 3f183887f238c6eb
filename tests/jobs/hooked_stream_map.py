"""A plain PySpark Structured Streaming job, without tt: `mapInPandas` over a stream of files.

The job writes FILES CSV files of payments into IN_DIR, then streams them one file per
micro-batch (`maxFilesPerTrigger=1`, `trigger(availableNow=True)`) through `Running`, a callable
class that numbers the rows it sees and sums their amounts (its task's, as Spark runs a fresh
copy per task), into a memory sink. Each micro-batch runs the same partition again.

Payment i (0 <= i < FILES*PER_FILE) is in file i // PER_FILE, amount (i * 37) % 101: the tests
compute every output and state with pandas.
With WRITER=writer, a second query writes the same stream through `writeStream.foreach(Tally(...))`,
a ForeachWriter that keeps, per task, its micro-batch and the rows and amount it was handed, and
adds the rows to an accumulator at `close`; with WRITER=function, through a function of one row
that adds 1 to the accumulator; with WRITER=raising, through `Fussy`, a Tally that raises on the
fifth row of its task.
Usage: python hooked_stream_map.py OUT.json IN_DIR CKPT [FILES] [PER_FILE] [WRITER]
"""

import json
import sys

import pandas as pd
from pyspark.sql import SparkSession

from job_settings import spark_settings, write_payment_files   # tests/jobs/job_settings.py


class Running:
    def __init__(self):
        self.seen = 0
        self.total = 0.0

    def __call__(self, batches):
        for pdf in batches:
            self.seen += len(pdf)
            self.total += float(pdf["amount"].sum())
            yield pd.DataFrame({"id": pdf["id"], "seen": self.seen, "total": self.total})


class Tally:
    """A ForeachWriter: per task (one micro-batch's partition), the rows and the amount it was
    handed; at `close`, its rows are added to an accumulator the job reads."""

    def __init__(self, rows):
        self.rows = rows

    def open(self, partition_id, epoch_id):
        self.epoch, self.seen, self.total = epoch_id, 0, 0.0
        return True

    def process(self, row):
        self.seen += 1
        self.total += row["amount"]

    def close(self, error):
        self.rows.add(self.seen)


class Fussy(Tally):
    def process(self, row):
        if self.seen == 4:
            raise ValueError(f"bad row {row['id']}")
        super().process(row)


def main(out: str, in_dir: str, ckpt: str, files: int = 3, per_file: int = 20, writer: str = "") -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-stream-map").getOrCreate()
    write_payment_files(in_dir, files, per_file)
    with spark_settings(spark, {"spark.sql.shuffle.partitions": "2"}):
        stream = (spark.readStream.schema("id long, amount double").option("header", "true")
                  .option("maxFilesPerTrigger", 1).csv(in_dir))
        query = (stream.mapInPandas(Running(), "id long, seen long, total double").writeStream.format("memory")
                 .queryName("running_" + str(abs(hash(out)))).option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        rows = sorted(list(r) for r in spark.sql(f"SELECT * FROM running_{abs(hash(out))}").collect())
        written = {}
        if writer:
            counted = spark.sparkContext.accumulator(0)

            def count_row(row):
                counted.add(1)
            sink = {"writer": Tally(counted), "raising": Fussy(counted)}.get(writer, count_row)
            stream.writeStream.foreach(sink).option("checkpointLocation", ckpt + ".writer").trigger(
                availableNow=True).start().awaitTermination()
            written = {"written": counted.value}
    with open(out, "w") as f:
        json.dump({"rows": rows, **written}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:6]), *sys.argv[6:7])

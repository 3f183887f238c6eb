"""A plain PySpark job, without tt, whose functions ask the running task who it is.

- `tagged` (RDD `mapPartitions`): a running total per partition, each row tagged with
  `TaskContext.get()`'s partition id, stage id, attempt number, CPUs and a local property the
  driver set (`tt.test.tag`);
- `numbered` (`mapInPandas`): adds the partition id as a column;
- `sink` (`foreachPartition`): writes its partition's sum into files of OUT.json.parts/ named by
  the partition id: with `os.open`; with pyarrow's `parquet.write_table`, `csv.write_csv`,
  `feather.write_feather` and `ipc.new_file`, whose C++ code opens the file itself; into a temporary file of its own and one of `tempfile.NamedTemporaryFile`'s,
  each moved onto its name with `os.replace`; and into a folder it clears (`shutil.rmtree`, where
  an earlier run left one) and makes (`os.makedirs`). It also removes a file it wrote
  (`os.remove`), and cuts one short (`os.truncate`), sets its mode and times and links it
  (`os.link`, `os.symlink`).

A replay of any of them used to find no TaskContext (`get()` gave None) and raised where the
recording did not. Usage: python hooked_task_context.py OUT.json
"""

import json
import os
import shutil
import sys
import tempfile

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import SparkSession

PARTS = None   # the sink's folder, named in main


def tagged(rows):
    tc = TaskContext.get()
    tag = (tc.partitionId(), tc.stageId(), tc.attemptNumber(), tc.cpus(), tc.getLocalProperty("tt.test.tag"))
    total = 0
    for x in rows:
        total += x
        yield [x, total, *tag]


def numbered(frames):
    for frame in frames:
        yield frame.assign(part=TaskContext.get().partitionId())


def sink(rows):
    part = TaskContext.get().partitionId()
    total = sum(rows)
    fd = os.open(os.path.join(PARTS, f"raw-{part}.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(fd, f"{total}\n".encode())
    os.close(fd)
    pq.write_table(pa.table({"total": [total]}), os.path.join(PARTS, f"arrow-{part}.parquet"))
    pacsv.write_csv(pa.table({"total": [total]}), os.path.join(PARTS, f"arrow-{part}.csv"))
    feather.write_feather(pa.table({"total": [total]}), os.path.join(PARTS, f"arrow-{part}.feather"))
    with pa.ipc.new_file(os.path.join(PARTS, f"arrow-{part}.arrow"), pa.schema([("total", pa.int64())])) as w:
        w.write_table(pa.table({"total": [total]}))
    temporary = os.path.join(PARTS, f".atomic-{part}.tmp")   # written, then moved onto its name
    with open(temporary, "w") as f:
        f.write(f"{total}\n")
    os.replace(temporary, os.path.join(PARTS, f"atomic-{part}.txt"))
    cut = os.path.join(PARTS, f"cut-{part}.txt")   # written, cut short, its mode and times set, linked
    with open(cut, "w") as f:
        f.write(f"{total} and more\n")
    os.truncate(cut, len(str(total)))
    os.chmod(cut, 0o600)
    os.utime(cut, (1_000_000_000, 1_000_000_000))
    for made in (f"cut-{part}.hard", f"cut-{part}.soft"):
        if os.path.lexists(os.path.join(PARTS, made)):   # (an earlier run's)
            os.remove(os.path.join(PARTS, made))
    os.link(cut, os.path.join(PARTS, f"cut-{part}.hard"))
    os.symlink(cut, os.path.join(PARTS, f"cut-{part}.soft"))
    with open(os.path.join(PARTS, f"stale-{part}"), "w") as f:   # written, then removed
        f.write("-")
    os.remove(os.path.join(PARTS, f"stale-{part}"))
    with tempfile.NamedTemporaryFile("w", dir=PARTS, suffix=".tmp", delete=False) as f:   # (os.open, by an opener)
        f.write(f"{total}\n")
    os.replace(f.name, os.path.join(PARTS, f"named-{part}.txt"))
    folder = os.path.join(PARTS, f"dir-{part}")   # cleared, made, written into
    if os.path.isdir(folder):   # (a folder an earlier run left)
        shutil.rmtree(folder)
    os.makedirs(folder)
    with open(os.path.join(folder, "total.txt"), "w") as f:
        f.write(f"{total}\n")


def main(out: str) -> None:
    global PARTS
    PARTS = out + ".parts"
    os.makedirs(PARTS, exist_ok=True)
    spark = SparkSession.builder.master("local[2]").appName("hooked-task-context").getOrCreate()
    sc = spark.sparkContext
    sc.setLocalProperty("tt.test.tag", "blue")
    rows = sc.parallelize(range(40), 2).mapPartitions(tagged).collect()
    sc.setLocalProperty("tt.test.tag", None)
    frame = spark.range(0, 30, numPartitions=3).mapInPandas(numbered, "id long, part int").collect()
    sc.parallelize(range(10), 2).foreachPartition(sink)
    with open(out, "w") as f:
        json.dump({"rows": rows, "frame": sorted([list(r) for r in frame])}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])

"""A plain PySpark job, without tt, whose functions read files in the executors.

- `scored` (`rdd.mapPartitions`, a generator; θ) reads its rules per partition with
  `json.load(open(...))` of a path relative to the folder the job ran in, a text file's first line with `pathlib.Path.read_text`, a file that
  is not there (falling back to a default, as jobs do), the head of a model too large to keep
  in the run file (`open(..., "rb")`), and a greeting the job gave its executors
  (`SparkContext.addFile`, found with `SparkFiles.get` and `getRootDirectory`: a replay has no
  Spark to ask); and it
  asks of paths without opening them (`os.path.isfile`, `getsize`, `Path.exists`, `islink`) and
  lists its folder (`os.listdir`, `glob.glob`, `os.scandir` with each entry's size, `os.walk`);
- `Priced` (`mapInPandas`, a callable class) reads a price list per batch with
  `pandas.read_csv`.

The files sit in the folder the job is given; a replay runs after they changed or are gone.
Every function emits what it read, so the job's output (collected by Spark, never read by tt) is
what a replay must hand the functions again.
Usage: python hooked_files.py OUT.json FOLDER
"""

import glob
import json
import os
import sys
from pathlib import Path

import pandas as pd
from pyspark import SparkFiles
from pyspark.sql import SparkSession

from job_settings import spark_settings   # tests/jobs/job_settings.py

ROWS = 40
MODEL_BYTES = (1 << 20) + 4096   # larger than tt keeps in a run file (core/files_read.py)


def write_files(folder: Path) -> None:
    """The files as the executors find them when the job runs."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rules.json").write_text(json.dumps({"factor": 3, "labels": ["low", "high"]}))
    (folder / "motto.txt").write_text("recorded motto\nsecond line\n")
    (folder / "prices.csv").write_text("id,price\n" + "".join(f"{i},{i * 1.5}\n" for i in range(ROWS)))
    (folder / "model.bin").write_bytes(bytes(range(256)) * (MODEL_BYTES // 256))
    (folder / "greeting.txt").write_text("hello from the driver")


def make_scored(folder: str):
    seen = {"n": 0, "total": 0, "last": None}
    rules_path = os.path.relpath(os.path.join(folder, "rules.json"))   # (the executors run where the job does)

    def scored(rows):
        with open(rules_path) as f:
            rules = json.load(f)
        motto = Path(folder, "motto.txt").read_text().splitlines()[0]
        try:
            with open(os.path.join(folder, "absent.json")) as f:
                extra = json.load(f)["extra"]
        except FileNotFoundError:
            extra = -1
        with open(os.path.join(folder, "model.bin"), "rb") as f:
            head = f.read(8).hex()
        with open(SparkFiles.get("greeting.txt")) as f:
            greeting = f.read()
        with open(os.path.join(SparkFiles.getRootDirectory(), "greeting.txt")) as f:
            greeting += f.read()
        absent = os.path.join(folder, "absent.json")
        asked = {"motto_is_file": os.path.isfile(os.path.join(folder, "motto.txt")),
                 "prices_bytes": os.path.getsize(os.path.join(folder, "prices.csv")),
                 "absent_there": Path(absent).exists(),
                 "absent_bytes": os.path.getsize(absent) if os.path.lexists(absent) else -1,
                 "rules_link": os.path.islink(rules_path),
                 "listed": sorted(os.listdir(folder)),
                 "texts": sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.txt"))),
                 "sizes": sorted([e.name, e.stat().st_size] for e in os.scandir(folder) if e.is_file()),
                 "walked": sorted(name for _, _, names in os.walk(folder) for name in names)}
        for row in rows:
            seen["n"] += 1
            seen["total"] += row * rules["factor"]
            seen["last"] = {"row": row, "factor": rules["factor"], "label": rules["labels"][row % 2],
                            "motto": motto, "extra": extra, "head": head, "greeting": greeting,
                            "asked": asked, "total": seen["total"]}
            yield json.dumps(seen["last"])
    return scored


class Priced:
    def __init__(self, folder: str):
        self.folder = folder
        self.spent = 0.0

    def __call__(self, frames):
        for pdf in frames:
            prices = pd.read_csv(os.path.join(self.folder, "prices.csv"))
            self.spent += float(prices.set_index("id").loc[pdf.id, "price"].sum())
            yield pd.DataFrame({"first": [int(pdf.id.iloc[0])], "spent": [self.spent]})


def main(out: str, folder: str) -> None:
    write_files(Path(folder))
    spark = SparkSession.builder.master("local[2]").appName("hooked-files").getOrCreate()
    if "greeting.txt" not in {os.path.basename(f) for f in spark.sparkContext.listFiles}:
        spark.sparkContext.addFile(str(Path(folder) / "greeting.txt"))   # (a file is added once a session)
    with spark_settings(spark, {"spark.sql.execution.arrow.maxRecordsPerBatch": "10"}):
        scored = spark.sparkContext.parallelize(range(ROWS), 2).mapPartitions(make_scored(folder))
        rows = spark.range(0, ROWS, numPartitions=2)
        result = {
            "scored": sorted(scored.collect()),
            "priced": sorted(tuple(r) for r in rows.mapInPandas(Priced(folder), "first long, spent double").collect()),
        }
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

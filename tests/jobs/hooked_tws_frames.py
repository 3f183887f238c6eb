"""A plain PySpark job, without tt: a `transformWithStateInPandas` processor that reports, for
each DataFrame PySpark hands it, exactly what it got: its columns, dtypes, index and every
value's repr.

The columns make PySpark's conversion show (tests/test_hooked_tws_frames.py): a long that is
null in some rows (a batch holding a null converts it to float64, one without to int64), a
double with NaN, a string with nulls, a timestamp in a session zone that is not UTC, a date, a
decimal, a boolean and an array. Three rows per Arrow batch: most keys' rows span batches and
come in several DataFrames; two keys have one row each. The processor writes into each
DataFrame it is handed, after describing it.

Usage: python hooked_tws_frames.py OUT.json [ROWS]
"""

import json
import sys

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StatefulProcessor

from job_settings import spark_settings   # tests/jobs/job_settings.py


def described(pdf: pd.DataFrame) -> str:
    return json.dumps([list(pdf.columns), [str(t) for t in pdf.dtypes], repr(pdf.index),
                       [[repr(v) for v in row] for row in pdf.itertuples(index=False)]])


class Shapes(StatefulProcessor):
    def init(self, handle):
        self.seen = handle.getValueState("seen", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = self.seen.get()[0] if self.seen.exists() else 0
        out = []
        for pdf in rows:
            n += len(pdf)
            out.append((key[0], n, described(pdf)))
            pdf.iloc[:, 2] = -1   # writes into the frame PySpark handed over
        self.seen.update((n,))
        yield pd.DataFrame(out, columns=["k", "n", "shape"])

    def close(self):
        pass


def main(out: str, rows: int = 60) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-tws-frames").getOrCreate()
    settings = {"spark.sql.execution.arrow.maxRecordsPerBatch": "3", "spark.sql.shuffle.partitions": "2",
                "spark.sql.adaptive.enabled": "false", "spark.sql.session.timeZone": "America/New_York"}
    with spark_settings(spark, settings):   # the session may be a test suite's
        data = spark.range(0, rows, numPartitions=2).selectExpr(
            "id", "IF(id IN (5, 40), concat('solo', id), concat('k', id % 4)) AS k",
            "IF(id % 7 = 3, NULL, id * 3) AS maybe", "IF(id % 9 = 0, double('NaN'), id / 3) AS amount",
            "IF(id % 5 = 0, NULL, concat('n', id)) AS name", "timestamp_seconds(1700000000 + id * 3600) AS at",
            "date_add(DATE'2024-02-27', CAST(id AS INT)) AS day", "CAST(id * 1.25 AS DECIMAL(10, 2)) AS price",
            "id % 2 = 0 AS even", "array(id, id + 1) AS pair")
        shapes = data.groupBy("k").transformWithStateInPandas(
            statefulProcessor=Shapes(), outputStructType="k string, n long, shape string",
            outputMode="Update", timeMode="None")
        result = sorted([list(r) for r in shapes.collect()])
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))

"""A plain PySpark job, without tt, that runs its functions through pandas-on-Spark
(`apply_batch`, `groupby(...).apply`: PySpark's own `mapInPandas` and `applyInPandas` under
them), and one through a DataFrame's `mapInPandas`, which tt records. pandas-on-Spark's own
operations (`describe`, `sort_values`) run no function of the job's. 60 rows, above the
`compute.shortcut_limit` it sets, under which pandas-on-Spark runs the function on the driver.

Usage: python hooked_pandas_on_spark.py OUT.json
"""

import json
import sys

import pyspark.pandas as ps
from pyspark.sql import SparkSession

ROWS = 60
SEEN = {"batches": 0}


def tag(pdf):
    SEEN["batches"] += 1
    return pdf.assign(doubled=pdf.amount * 2)


def share(pdf):
    return pdf.assign(share=pdf.amount / pdf.amount.sum())


def running(batches):
    total = 0.0
    for b in batches:
        total += float(b["amount"].sum())
        yield b.assign(total=total)


def main(out: str) -> None:
    spark = SparkSession.builder.master("local[2]").appName("hooked-pandas-on-spark").getOrCreate()
    ps.set_option("compute.shortcut_limit", 5)
    psdf = ps.DataFrame({"k": [i % 3 for i in range(ROWS)], "amount": [float(i) for i in range(ROWS)]})
    doubled = float(psdf.pandas_on_spark.apply_batch(tag).doubled.sum())
    shares = round(float(psdf.groupby("k").apply(share).share.sum()), 6)
    described = list(psdf.describe().shape) + list(psdf.sort_values("amount").head(2).shape)
    totals = psdf.to_spark().mapInPandas(running, "k long, amount double, total double").collect()
    ps.reset_option("compute.shortcut_limit")
    with open(out, "w") as f:
        json.dump({"doubled": doubled, "shares": shares, "described": described,
                   "amount": sum(r.amount for r in totals)}, f)


if __name__ == "__main__":
    main(sys.argv[1])

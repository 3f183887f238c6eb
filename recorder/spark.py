"""A SparkSession for tt jobs, with settings that suit local runs."""

from __future__ import annotations

import os
import sys


def session(app_name: str = "tt-job", master: str | None = None, conf: dict | None = None):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    master = master or os.environ.get("TT_SPARK_MASTER")
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif "spark.master" not in _submit_conf():
        builder = builder.master("local[2,4]")
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.execution.arrow.maxBytesPerBatch": str(32 << 20),
        "spark.driver.memory": "2g",
    }
    for k, v in {**defaults, **{k: str(v) for k, v in (conf or {}).items()}}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("TT_SPARK_LOG_LEVEL", "ERROR"))
    return spark


def _submit_conf() -> str:
    return os.environ.get("PYSPARK_SUBMIT_ARGS", "") + " " + os.environ.get("SPARK_MASTER", "")

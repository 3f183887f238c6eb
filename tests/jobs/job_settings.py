"""What the test jobs share: Spark settings for the length of a job, put back afterwards.

A test job runs in the test suite's own SparkSession (recorded in-process), which every
later test shares: a setting a job changes must not outlive it."""

from contextlib import contextmanager


@contextmanager
def spark_settings(spark, settings: dict):
    """Set `settings` on `spark` for the block, then put each back as it was."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)

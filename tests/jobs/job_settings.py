"""What the test jobs share: Spark settings for the length of a job, put back afterwards, and
the payment files their streaming queries read.

A test job runs in the test suite's own SparkSession (recorded in-process), which every
later test shares: a setting a job changes must not outlive it."""

import os
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


def write_payment_files(in_dir: str, files: int, per_file: int) -> None:
    """FILES CSV files of PER_FILE payments (id, amount) into IN_DIR: payment i in file
    i // PER_FILE, amount (i * 37) % 101, so a test computes every output with pandas. Each file
    is a second older than the next: a stream takes files in the order of their times, so
    micro-batch f reads file f (written in the same second, they came in an order of Spark's)."""
    import time

    import pandas as pd

    os.makedirs(in_dir, exist_ok=True)
    t0 = time.time() - files - 10
    for f in range(files):
        ids = range(f * per_file, (f + 1) * per_file)
        path = os.path.join(in_dir, f"part-{f}.csv")
        pd.DataFrame({"id": ids, "amount": [float((i * 37) % 101) for i in ids]}).to_csv(path, index=False)
        os.utime(path, (t0 + f, t0 + f))

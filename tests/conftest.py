"""Shared fixtures: one real local SparkSession for the suite, and recording helpers.

Recordings run in-process (the same code path as `tt record`, without a second
JVM), so every integration test shares the session's executors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
sys.path.insert(1, str(TESTS / "jobs"))   # the jobs' shared job_settings, and the jobs' data functions

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("TT_SPARK_LOG_LEVEL", "ERROR")


def pytest_configure(config):
    # A private signing key, so tests never touch the user's ~/.config/tt.
    key_dir = Path(os.environ.get("TT_TEST_KEY_DIR", "/tmp")) / f"tt-test-key-{os.getpid()}"
    key_dir.mkdir(parents=True, exist_ok=True)
    os.environ["TT_KEY_FILE"] = str(key_dir / "key")


def pytest_collection_modifyitems(session, config, items):
    if not items:
        raise pytest.UsageError("no tests were collected; refusing to report success")


@pytest.fixture(scope="session")
def spark():
    import tt
    import workloads

    workloads.register_by_value()
    session = tt.spark_session("tt-tests", master="local[2,4]")
    yield session
    session.stop()


@pytest.fixture
def record(spark, tmp_path):
    """Record a dataflow built by `build(spark)`; returns the run file's path."""
    from tt.recorder.session import RecordingSession

    def run(build, *, watch=None, every=None, when=None, name="run.db", before_run=None):
        out = tmp_path / name
        session = RecordingSession(out, Path(__file__), [], watch=watch, every=every, when=when)
        try:
            with session:
                flow = build(spark)
                if before_run is not None:
                    before_run(session)
                result = flow.run()
        finally:
            session.close()
        run.result = result
        return out

    return run

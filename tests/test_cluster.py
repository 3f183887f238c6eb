"""Record the fraud sample on a standalone Spark cluster (one master, two workers,
executors in their own JVMs), started on loopback from the pyspark package."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import pyspark
from tt.replay.verify import verify
from tt.store.reader import RunReader

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SPARK_HOME = Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, ValueError):  # not up yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_NO_DAEMONIZE": "1", "PYSPARK_PYTHON": sys.executable}
    work = tmp_path_factory.mktemp("spark-cluster")
    port, ui = _free_port(), _free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)],
                              env=env, stdout=open(work / "master.log", "w"), stderr=subprocess.STDOUT)]
    url = f"spark://127.0.0.1:{port}"
    try:
        _wait(lambda: socket.create_connection(("127.0.0.1", port), 1).close() or True, 90, "the master")
        for i in range(2):
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                 "--cores", "1", "--memory", "2g", "--webui-port", str(_free_port()),
                 "--work-dir", str(work / f"worker{i}")],
                env=env, stdout=open(work / f"worker{i}.log", "w"), stderr=subprocess.STDOUT))

        def workers():
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                return json.load(r).get("aliveworkers", 0) >= 2
        _wait(workers, 120, "two workers")
        yield {"url": url, "ui": ui, "env": env}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_record_fraud_on_a_standalone_cluster(cluster, tmp_path):
    out = tmp_path / "cluster.db"
    job = ROOT / "sample_runs" / "fraud" / "job.py"
    proc = subprocess.run(
        [sys.executable, "-m", "tt", "record", str(job), "--master", cluster["url"], "--watch", "FE",
         "--every", "1s", "--when", "row['amount'].startswith('¥')", "-o", str(out), "--",
         "--rows", "30000", "--data", str(tmp_path / "payments.parquet")],
        env=cluster["env"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    reader = RunReader(out)
    assert reader.status == "complete"
    assert reader.run["master"] == cluster["url"]
    hosts = {h.split(":")[1] for (h,) in reader.conn.execute("SELECT host FROM attempts")}
    assert len(hosts) >= 2, "operator tasks ran in the executors' Python workers"
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster['ui']}/json/", timeout=5) as r:
        apps = json.load(r)
    ran = apps.get("completedapps", []) + apps.get("activeapps", [])
    assert any(a["name"] == "fraud" for a in ran), "the job ran as an application of the cluster"
    assert any(i.trigger == "condition" for i in reader.interactions())
    results = verify(reader)
    assert results and all(r["ok"] for r in results)


def test_record_a_stateful_processor_on_a_standalone_cluster(cluster, tmp_path):
    """A plain PySpark job's StatefulProcessor (sample_runs/fraud_tws/), recorded unchanged on the
    cluster: tt's stand-in and its state handle run in the executors' Python workers, whose state
    calls go to Spark's state store there. The replay, without Spark, passes `tt verify` and ends
    with the state pandas computes from the payments: per customer the highest payment in dollars,
    and the blacklist of the payments over the limit."""
    import pandas as pd

    from tt.replay.session import DebugSession

    out, data = tmp_path / "tws.db", tmp_path / "payments.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "tt", "record", str(ROOT / "sample_runs" / "fraud_tws" / "job.py"),
         "--master", cluster["url"], "-o", str(out), "--", "--rows", "20000", "--data", str(data)],
        env=cluster["env"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    reader = RunReader(out)
    assert reader.status == "complete" and reader.run["master"] == cluster["url"]
    hosts = {h.split(":")[1] for (h,) in reader.conn.execute("SELECT host FROM attempts")}
    assert len(hosts) >= 2, "the processor ran in both executors' Python workers"
    results = verify(reader)
    assert results and all(r["ok"] for r in results)

    session = DebugSession(out)
    session.jump(max(i.k for i in session.interactions()))
    highest, blacklist = {}, {}
    for label, state in session.states().items():
        if label.startswith("FraudDetector:"):
            assert not highest.keys() & state["highest"].keys(), "a customer's state is in one partition"
            highest.update(state["highest"])
            blacklist.update(state["blacklist"])
    payments = pd.read_parquet(data)
    payments["usd"] = payments["amount"].str.lstrip("$¥€£").map(float)   # the job's parse_amount, bug included
    assert highest == payments.groupby("customer")["usd"].max().to_dict()
    over = payments[payments["usd"] > 2000.0]
    assert blacklist == {c: dict(zip(g["merchant"], g["id"])) for c, g in over.groupby("customer")}
    assert blacklist["Bob"], "the sample's bug: Bob's ¥5000 blacklisted him"

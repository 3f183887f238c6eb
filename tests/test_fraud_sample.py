"""The fraud sample: recorded through the CLI, with the paper's bug reproduced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tt.cli.main import main
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "sample_runs" / "fraud" / "job.py"


@pytest.fixture(scope="module")
def fraud_run(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fraud")
    out = tmp / "fraud.db"
    code = main(["record", str(JOB), "--watch", "FE", "--every", "1s", "--when", "row['amount'].startswith('¥')",
                 "-o", str(out), "--", "--rows", "30000", "--data", str(tmp / "payments.parquet")])
    assert code == 0
    return out


def test_the_recording_has_stages_partitions_and_the_bug(fraud_run):
    reader = RunReader(fraud_run)
    assert reader.status == "complete"
    assert len(reader.plan["stages"]) >= 2
    fe, fd = reader.operator("FE"), reader.operator("FD")
    assert fe.instances > 1 and fd.instances > 1 and fe.stage != fd.stage
    assert fe.is_theta and {o.name for o in reader.operators if o.in_g} == {"FE", "FD", "FF", "S"}

    end = reader.interactions()[-1]
    snap = reader.instances_at(end.k)
    blacklist = {}
    for i in range(fd.instances):
        blacklist.update(reader.state(snap[(fd.id, i)].state)["blacklist"])
    assert "Bob" in blacklist and "Mallory" in blacklist, "the bug: Bob is blacklisted like a fraudster"
    highest_bob = max(reader.state(snap[(fe.id, i)].state)["highest"].get("Bob", 0) for i in range(fe.instances))
    assert highest_bob == 5000.0, "FE read ¥5000 as $5000"

    yen = [i for i in reader.interactions() if i.trigger == "condition"]
    assert len(yen) == 1 and "¥5000" in yen[0].detail["row"]


def test_verify_and_inspect(fraud_run, capsys):
    assert main(["verify", str(fraud_run)]) == 0
    assert "every replayed state equals the recorded one" in capsys.readouterr().out

    assert main(["inspect", str(fraud_run), "interactions", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["k"] == 0 and rows[-1]["trigger"] == "end"
    assert set(rows[-1]["positions"]) >= {"FE:0", "FD:0", "FF:0", "S:0"}

    k = next(r["k"] for r in rows if r["trigger"] == "condition")
    assert main(["inspect", str(fraud_run), "state", "--at", str(k), "--op", "FD", "--json"]) == 0
    states = json.loads(capsys.readouterr().out)
    assert set(states) == {f"FD:{i}" for i in range(len(states))}
    assert any("Bob" in s["state"]["blacklist"] for s in states.values()), \
        "tuple consistency: at the ¥ interaction FD has already processed Bob's payment"

    assert main(["inspect", str(fraud_run)]) == 0
    text = capsys.readouterr().out
    assert "θ        FE" in text and "FE→FD (shuffle)" in text


def test_the_job_runs_with_recording_off(tmp_path):
    proc = subprocess.run([sys.executable, str(JOB), "--rows", "5000", "--data", str(tmp_path / "p.parquet")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "approved" in proc.stdout and "Bob has" in proc.stdout
    assert not list(tmp_path.glob("*.db"))

"""`tt record` killed with SIGKILL mid-run leaves a run file that opens, says it is
incomplete, and replays every interaction it lists."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tt.replay.verify import verify
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow

JOB = Path(__file__).parent / "jobs" / "slow_keyed.py"


def _complete(path: Path) -> int:
    try:
        reader = RunReader(path)
    except Exception:
        return 0
    try:
        return len([i for i in reader.interactions() if i.k > 0])
    except Exception:
        return 0
    finally:
        reader.close()


def test_sigkill_mid_run_leaves_a_readable_verifiable_file(tmp_path):
    out = tmp_path / "killed.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tt", "record", str(JOB), "--watch", "FE", "--every", "0.3s", "-o", str(out),
         "--", "8000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and _complete(out) >= 3:
                break
            time.sleep(0.2)
        assert proc.poll() is None, f"tt record ended before it could be killed: {proc.stderr.read()[-2000:]}"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    reader = RunReader(out)
    assert reader.status == "incomplete"
    listed = reader.interactions()
    assert len(listed) >= 3
    assert len(listed) < len(reader.interactions_all) or reader.run["status"] == "recording"
    results = verify(reader)
    assert len(results) == len(listed)
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]][:1]

"""`tt debug` in a real terminal: tests/tui_tmux_smoke.sh drives it under tmux by keys alone.

The fraud sample is recorded by `python -m tt demo` in a subprocess (its own
Spark), as the README's Quickstart does; then the script opens `tt debug` in a
detached 120x40 tmux session and types the README's debugging sequence key by
key (`c` 'Bob' in FD.blacklist Enter, `/` Bob Enter, `w` `w`, `C` Enter), reads the ¥5000
tuple waiting at FD off the screen, and checks the exit status.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve().parent / "tui_tmux_smoke.sh"
JOB = ROOT / "sample_runs" / "fraud" / "job.py"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tt_debug_under_tmux_finds_bobs_blacklisting(tmp_path):
    env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8")
    out = tmp_path / "fraud.db"
    # recorded as the README's Quickstart does (`tt demo`: watch FE, every 1s, and right after the ¥ payment)
    rec = subprocess.run([sys.executable, "-m", "tt", "demo", "--no-show", "-o", str(out)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert rec.returncode == 0, rec.stderr[-3000:]
    # then `tt debug fraud.db` and the README's keys: c 'Bob' in FD.blacklist Enter / Bob Enter w w C Enter
    smoke = subprocess.run(["bash", str(SCRIPT), str(out), f"{sys.executable} -m tt"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "found: FD:" in smoke.stdout and "blacklisted Bob" in smoke.stdout
    assert "names the call that wrote it" in smoke.stdout
    assert "Bob's ¥5000 payment" in smoke.stdout and smoke.stdout.strip().endswith("OK")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_tt_record_tui_follows_the_run_and_takes_an_interaction_on_i(tmp_path):
    """`tt record --tui`: the debugger opens while the job runs, `i` takes an interaction, the end is announced."""
    import time

    from tt.store.reader import RunReader

    env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8")
    out = tmp_path / "live.db"
    sock = f"tt-record-{os.getpid()}"
    tmux = ["tmux", "-u", "-L", sock]
    cmd = (f"{sys.executable} -m tt record {JOB} --watch FE --every 1s -o {out} --tui -- --rows 200000 "
           f"--data {tmp_path / 'payments.parquet'}; echo EXIT=$?; sleep 60")

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "rec"], capture_output=True, text=True).stdout

    def wait_for(text: str, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            shot = screen()
            if text in shot:
                return shot
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {text!r}:\n{screen()}")

    subprocess.run([*tmux, "new-session", "-d", "-s", "rec", "-x", "100", "-y", "30", cmd], env=env, check=True,
                   cwd=tmp_path)
    try:
        wait_for("● live", 120)
        wait_for("[FE θ", 180)                       # the dataflow started: the DAG is drawn
        subprocess.run([*tmux, "send-keys", "-t", "rec", "2"], check=True)   # the timeline view
        subprocess.run([*tmux, "send-keys", "-t", "rec", "i"], check=True)
        wait_for("via tui", 120)                     # the user interaction in the timeline
        wait_for("the job finished (complete)", 300)
        subprocess.run([*tmux, "send-keys", "-t", "rec", "q"], check=True)
        shot = wait_for("EXIT=", 60)
        assert "EXIT=0" in shot and f"recorded {out}:" in shot, shot     # the record summary, as `tt record`
        assert "approved " in shot and "Bob has" in shot, shot            # the job's own print, kept
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    r = RunReader(out)
    try:
        assert r.status == "complete"
        assert any(i.trigger == "user" and i.detail.get("via") == "tui" for i in r.interactions_all)
    finally:
        r.close()

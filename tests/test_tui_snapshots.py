"""Snapshots of the debugger's main screen (pytest-textual-snapshot), at 80×24 and 160×48.

Deterministic by construction: the fraud sample is recorded with a `--when`
condition only (no timer) and θ in one partition, so positions depend on the
data alone; the test's copy of the run file gets fixed times; the app is told
not to print how long actions took. Update with `pytest --snapshot-update`.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from test_tui import idle, record_fraud, until

from tt.tui.app import DebuggerApp, PromptScreen
from tt.tui.widgets.progress_line import ProgressLine

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fixed_run(spark, tmp_path_factory) -> Path:
    recorded = record_fraud(spark, tmp_path_factory.mktemp("snap-rec") / "fraud.db", partitions=1, rows=9000)
    out = tmp_path_factory.mktemp("snap") / "fraud.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(str(recorded) + suffix).exists():
            shutil.copy(str(recorded) + suffix, str(out) + suffix)
    c = sqlite3.connect(out)
    c.execute("UPDATE run SET started = 1700000000.0, finished = 1700000030.0")
    c.execute("UPDATE interactions SET time = 1700000000.0 + 2.5 * k")
    c.commit()
    c.close()
    return out


def _ready(*keys: str, answer: str | None = None):
    async def run_before(pilot) -> None:
        app = pilot.app
        await until(pilot, lambda: app.model is not None and app.shown is not None
                    and app.shown.overlaps is not None, what="the engine and the overlaps")
        await idle(pilot)
        for k in keys:
            await pilot.press(k)
            await idle(pilot)               # (a prompt on screen counts as idle: it waits for the user)
            if answer is not None and isinstance(app.screen, PromptScreen):
                app.screen.query_one("Input").value = answer
                await pilot.press("enter")
                await idle(pilot)           # not idle from Enter until the jump's frame is on screen
        assert app.is_idle and not isinstance(app.screen, PromptScreen)
        assert "…" not in app.query_one(ProgressLine).text, "a progress bar, not the position"
    return run_before


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_start(fixed_run, snap_compare, size):
    assert snap_compare(DebuggerApp(fixed_run, timings=False), terminal_size=size, run_before=_ready())


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_at_the_yen_interaction(fixed_run, snap_compare, size):
    assert snap_compare(DebuggerApp(fixed_run, timings=False), terminal_size=size,
                        run_before=_ready("j", answer="1"))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_inside_a_scope_after_step_into(fixed_run, snap_compare, size):
    assert snap_compare(DebuggerApp(fixed_run, timings=False), terminal_size=size,
                        run_before=_ready("j", "s", answer="1"))

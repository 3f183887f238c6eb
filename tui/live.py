"""`tt record --tui`: record a job while the debugger follows the run live.

The job runs under recording in a background thread (Spark's own output goes
to RUN.log, as with `tt record`), the debugger runs in the main thread on the
run file as it grows: new interactions appear in the timeline, `i` takes one
through the recording's coordinator, and when the job ends the app says so and
stays open for debugging. Textual draws on the terminal through a duplicate of
the original stderr, because the recorder points file descriptor 2 at RUN.log.
What the job prints while the app is open is kept and printed when it closes,
followed by the same summary `tt record` prints.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

WAIT_FOR_START = 120.0  # seconds the job may take before Spark's output is redirected


def record_with_tui(job: str | Path, args: list[str], out: str | Path, *, watch: str | None = None,
                    every: float | None = None, when: str | None = None, master: str | None = None,
                    force: bool = False, recorder: Callable[..., Any], **options: Any) -> int:
    """Record `job` into `out` with the debugger open on it; returns the exit code of `tt record`.

    `recorder` is `tt.recorder.job.record_job`, handed in by the CLI: tui/ does not import
    the recorder (it would pull in Spark's world for every `tt debug`)."""
    from .app import DebuggerApp, LiveJob

    record_job = recorder
    out = Path(out)
    log = Path(str(out) + ".log")
    live = LiveJob()
    state: dict[str, Any] = {"outcome": None, "error": None, "app": None}
    started, done = threading.Event(), threading.Event()

    def on_session(session) -> None:
        live.coordinator = lambda: session.coordinator
        started.set()

    def to_app(fn_name: str, *a) -> None:
        app = state["app"]
        if app is None or not app.is_running:
            return
        try:
            app.call_from_thread(getattr(app, fn_name), *a)
        except Exception:  # the app is closing
            pass

    def on_event(kind: str, info: dict) -> None:
        if kind == "interaction":
            to_app("live_event")

    def run() -> None:
        try:
            state["outcome"] = record_job(job, args, out, watch=watch, every=every, when=when, master=master,
                                          force=force, on_session=on_session, on_event=on_event,
                                          spark_log=log, **options)
        except BaseException as e:  # raised before the job ran (bad arguments, file exists, ...)
            state["error"] = e
        finally:
            done.set()
            outcome = state["outcome"]
            live.finished = True
            live.outcome = outcome.status if outcome is not None else "failed"
            to_app("job_finished", live.outcome, outcome.error if outcome is not None else str(state["error"]))

    terminal_fd = os.dup(2)
    before = os.fstat(2)
    thread = threading.Thread(target=run, name="tt-record", daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_FOR_START
    while not done.is_set() and time.monotonic() < deadline:
        now = os.fstat(2)
        if started.is_set() and (now.st_ino, now.st_dev) != (before.st_ino, before.st_dev):
            break  # Spark's output now goes to the log
        time.sleep(0.02)
    error = state["error"]
    if error is not None:
        os.close(terminal_fd)
        raise error  # a TTError becomes tt's one-line message
    if not out.exists():
        os.close(terminal_fd)
        outcome = state["outcome"]
        print(f"tt: error: {outcome.error if outcome else 'the recording did not start'}", file=sys.stderr)
        return (outcome.exit_code if outcome else 1) or 1

    terminal = os.fdopen(terminal_fd, "w", buffering=1, encoding="utf-8", errors="replace")
    saved = sys.__stderr__
    sys.__stderr__ = terminal  # Textual's driver writes to sys.__stderr__
    app = DebuggerApp(out, trust=True, live=live)
    state["app"] = app
    try:
        app.run()
    finally:
        sys.__stderr__ = saved
        if live.output:  # the job's own prints, captured while the app had the screen
            sys.stdout.write("".join(live.output))
            sys.stdout.flush()
    if not done.is_set():
        print("tt: the debugger closed; the job is still recording (Ctrl-C stops waiting; the run file keeps "
              "what was recorded)", file=terminal)
        try:
            while not done.wait(0.5):
                pass
        except KeyboardInterrupt:
            terminal.close()
            print(f"tt: stopped waiting; {out} keeps what was recorded so far", file=sys.stderr)
            return 130
    if sys.stderr is not saved and getattr(sys.stderr, "closed", False):
        sys.stderr = saved
    terminal.close()
    outcome = state["outcome"]
    if outcome is None or outcome.status != "complete":
        why = outcome.error if outcome is not None else "the recording failed"
        print(f"tt: error: {why}; {out} keeps what was recorded; Spark's output is in {log}", file=sys.stderr)
        return (outcome.exit_code if outcome is not None else 1) or 1
    return 0   # (the CLI prints the record summary, as `tt record` does)

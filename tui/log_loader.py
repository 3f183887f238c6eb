"""The log browser's background reader: pages, counts, searches and filters off the UI thread.

One thread owns the log browser's `LogView` (and so its SQLite connection). The
widget asks for pages it is about to draw; the thread reads them into the
source's page cache and calls back so the widget repaints. Searches and filter
scans, which may walk millions of rows, advance one page at a time between page
requests, so scrolling stays fluid while they run, and a new search or filter
replaces the old one.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from ..replay import logview


class LogLoader(threading.Thread):
    def __init__(self, path: str | Path, *, trust: bool = False,
                 on_error: Callable[[str], None] | None = None):
        super().__init__(daemon=True, name="tt-log-loader")
        self.path = path
        self.trust = trust
        self.on_error = on_error or (lambda msg: None)
        self.view: logview.LogView | None = None
        self._pages: queue.Queue = queue.Queue()
        self._jobs: queue.Queue = queue.Queue()
        self._pending: set = set()
        self._lock = threading.Lock()
        self._task: _Incremental | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()

    # --- requests (any thread) ---------------------------------------------------------------

    def request_page(self, source: logview.Source, n: int, done: Callable[[], None]) -> None:
        key = (id(source), n)
        with self._lock:
            if key in self._pending:
                return
            self._pending.add(key)
        self._pages.put((key, source, n, done))
        self._wake.set()

    def submit(self, fn: Callable[[logview.LogView], Any], done: Callable[[Any], None]) -> None:
        """Run fn(view) in the thread, then done(result)."""
        self._jobs.put((fn, done))
        self._wake.set()

    def search(self, source: logview.Source, text: str, start: int, step: int,
               done: Callable[[int | None], None], progress: Callable[[int, int], None]) -> None:
        self._replace_task(_Search(source, text, start, step, done, progress))

    def scan(self, flt: logview.Filter, progress: Callable[[int, int], None], done: Callable[[], None]) -> None:
        self._replace_task(_Scan(flt, progress, done))

    def cancel_task(self) -> None:
        self._replace_task(None)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _replace_task(self, task: "_Incremental | None") -> None:
        with self._lock:
            self._task = task
        self._wake.set()

    # --- the thread ---------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.view = logview.LogView(self.path, trust=self.trust)
        except Exception as e:  # the run file went away or is damaged: say so in the browser
            self.on_error(str(e))
            return
        while not self._stop.is_set():
            worked = False
            try:
                key, source, n, done = self._pages.get_nowait()
                try:
                    source.page(n)
                    done()
                except Exception as e:
                    self.on_error(f"cannot read the log: {e}")
                finally:
                    with self._lock:
                        self._pending.discard(key)
                worked = True
            except queue.Empty:
                pass
            if worked:
                continue
            try:
                fn, done = self._jobs.get_nowait()
                try:
                    done(fn(self.view))
                except Exception as e:
                    self.on_error(f"{type(e).__name__}: {e}")
                    traceback.print_exc()
                continue
            except queue.Empty:
                pass
            with self._lock:
                task = self._task
            if task is not None:
                try:
                    finished = task.advance()
                except Exception as e:
                    self.on_error(f"{type(e).__name__}: {e}")
                    finished = True
                if finished:
                    with self._lock:
                        if self._task is task:
                            self._task = None
                continue
            self._wake.wait(0.5)
            self._wake.clear()
        if self.view is not None:
            self.view.close()


class _Incremental:
    _last = 0.0

    def advance(self) -> bool:
        """Do one page of work; True when finished."""
        raise NotImplementedError

    def tick(self, progress, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last >= 0.25:
            self._last = now
            progress(done, total)


class _Search(_Incremental):
    def __init__(self, source, text, start, step, done, progress):
        self.source, self.needle, self.i, self.step = source, text.lower(), start, step
        self.done, self.progress = done, progress
        self.scanned = 0

    def advance(self) -> bool:
        total = len(self.source)
        if not self.needle or not 0 <= self.i < total:
            self.done(None)
            return True
        p = self.i // logview.PAGE
        page = self.source.page(p)
        base = p * logview.PAGE
        rng = range(self.i - base, len(page)) if self.step > 0 else range(self.i - base, -1, -1)
        for j in rng:
            if logview.matches(page[j], self.needle):
                self.done(base + j)
                return True
        self.scanned += len(rng)
        self.i = base + logview.PAGE if self.step > 0 else base - 1
        self.tick(self.progress, self.scanned, total)
        return False


class _Scan(_Incremental):
    def __init__(self, flt: logview.Filter, progress, done):
        self.flt, self.progress, self.done = flt, progress, done
        self._pages_done = False

    def advance(self) -> bool:
        flt = self.flt
        if flt.scan_page():
            self.done()
            return True
        self.tick(self.progress, flt.scanned, len(flt.base))
        return False

"""The single writer: one thread commits everything the recorder sends.

Coordinator threads hand over *batches* (lists of `(sql, rows)` for executemany);
the writer groups whatever is queued into one transaction, so SQLite sees few,
large commits however many executors are sending. The queue is bounded: if the
disk falls behind, executors block on their sockets instead of the driver's
memory growing. A batch is never split across transactions, which is what keeps
a run killed at any moment consistent.

If a commit fails (a full disk, an I/O error) the writer rolls the batch back,
keeps what was committed before, and from then on drops what is submitted:
`failure` says what went wrong in one line (a `RunFileWriteError` naming the file
and the cause), listeners added with `on_error` hear it at once (the recorder
cancels the job), and `flush`, `call` and `close` raise it. `salvage` may then
still commit a tiny last batch (the run's status) in the space the rolled-back
batch freed.
"""

from __future__ import annotations

import errno
import os
import queue
import shutil
import sqlite3
import threading
import time
from typing import Callable, Iterable

from ..core.errors import RunFileWriteError

Statement = tuple[str, Iterable[tuple]]

_STOP = object()
_NOW = object()   # commit what is queued now: someone waits for it (`flush`, `call`)


class Writer:
    def __init__(self, conn: sqlite3.Connection, *, max_pending: int = 512, max_delay: float = 0.05):
        self._conn = conn
        self._queue: queue.Queue = queue.Queue(maxsize=max_pending)
        self._max_delay = max_delay
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tt-writer", daemon=True)
        self._done = threading.Condition()
        self._submitted = 0
        self._committed = 0
        self.bytes_written = 0
        self.failure: RunFileWriteError | None = None
        self._listeners: list[Callable[[RunFileWriteError], None]] = []
        self._path = _main_file(conn)
        self._thread.start()

    def on_error(self, listener: Callable[[RunFileWriteError], None]) -> None:
        """Call `listener(failure)` (on the writer thread) when a commit fails."""
        self._listeners.append(listener)
        if self.failure is not None:
            listener(self.failure)

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def submit(self, statements: list[Statement], nbytes: int = 0) -> None:
        """Queue one atomic batch of statements (dropped once writing has failed: see `failure`)."""
        if self._error is not None:
            return
        with self._done:
            self._submitted += 1
        self._queue.put((statements, nbytes))

    def call(self, fn: Callable[[sqlite3.Connection], object]):
        """Run `fn(conn)` on the writer thread, after everything queued before it; return its result."""
        box: dict = {}
        done = threading.Event()

        def job(conn):
            try:
                box["value"] = fn(conn)
            except BaseException as e:  # handed back to the caller
                box["error"] = e
            finally:
                done.set()

        self._raise_if_failed()
        self.submit([("__call__", job)])
        self._queue.put(_NOW)
        while not done.wait(0.1):
            if self._error is not None and not done.is_set():
                self._raise_if_failed()  # the job was dropped with its batch
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def flush(self) -> None:
        """Wait until every batch submitted so far is committed."""
        with self._done:
            target = self._submitted
        self._queue.put(_NOW)   # not the rest of the writer's wait for more batches (50 ms at the run's end)
        with self._done:
            while self._committed < target and self._error is None:
                self._done.wait(0.1)
        self._raise_if_failed()

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RunFileWriteError(str(self.failure)) from self._error

    def salvage(self, statements: list[Statement]) -> bool:
        """After a failure: try once to commit `statements` (keep them tiny); True if committed.

        The failed batch was rolled back, so the space its pages took in the
        write-ahead log is free again and a one-row update usually still fits.
        The writer thread no longer touches the connection once it has failed.
        """
        if self.failure is None:
            raise RuntimeError("salvage is for a writer that has failed")
        conn = self._conn
        try:
            conn.execute("BEGIN")
            for sql, rows in statements:
                conn.executemany(sql, rows)
            conn.execute("COMMIT")
            return True
        except sqlite3.Error:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            return False

    def _run(self) -> None:
        conn = self._conn
        stop = False
        while not stop:
            item = self._queue.get()
            if item is _STOP:
                break
            if item is _NOW:
                continue
            batch = [item]
            deadline = time.monotonic() + self._max_delay
            while len(batch) < 256:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    nxt = self._queue.get(timeout=timeout)
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                if nxt is _NOW:
                    break
                batch.append(nxt)
            try:
                conn.execute("BEGIN")
                for statements, nbytes in batch:
                    for sql, rows in statements:
                        if sql == "__call__":
                            rows(conn)
                        else:
                            conn.executemany(sql, rows)
                    self.bytes_written += nbytes
                conn.execute("COMMIT")
            except BaseException as e:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                self.failure = describe_failure(e, self._path)
                self._error = e
                for listener in list(self._listeners):
                    try:
                        listener(self.failure)
                    except Exception:  # a listener must not stop the writer from draining
                        pass
            with self._done:
                self._committed += len(batch)
                self._done.notify_all()
            if self._error is not None:
                # keep draining so producers never block forever; nothing more is written
                while True:
                    item = self._queue.get()
                    if item is _STOP:
                        return
                    if item is _NOW:
                        continue
                    with self._done:
                        self._committed += 1
                        self._done.notify_all()


def _main_file(conn: sqlite3.Connection) -> str:
    try:
        for _, name, file in conn.execute("PRAGMA database_list").fetchall():
            if name == "main":
                return file or ":memory:"
    except sqlite3.Error:
        pass
    return "the run file"


def describe_failure(e: BaseException, path: str) -> RunFileWriteError:
    """One line: which file, and why writing it failed (a full disk said as such)."""
    full = (isinstance(e, sqlite3.Error) and (getattr(e, "sqlite_errorcode", None) == getattr(sqlite3, "SQLITE_FULL", 13)
                                             or "disk is full" in str(e))) \
        or (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT))
    if full:
        where = os.path.dirname(os.path.abspath(path))
        try:
            free = f"; {_size(shutil.disk_usage(where).free)} free in {where}"
        except OSError:
            free = ""
        return RunFileWriteError(f"{path}: disk full ({e}{free})")
    return RunFileWriteError(f"{path}: writing the run file failed ({type(e).__name__}: {e})")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"

"""The single writer: one thread commits everything the recorder sends.

Coordinator threads hand over *batches* (lists of `(sql, rows)` for executemany);
the writer groups whatever is queued into one transaction, so SQLite sees few,
large commits however many executors are sending. The queue is bounded: if the
disk falls behind, executors block on their sockets instead of the driver's
memory growing. A batch is never split across transactions, which is what keeps
a run killed at any moment consistent.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from typing import Callable, Iterable

Statement = tuple[str, Iterable[tuple]]

_STOP = object()


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
        self._thread.start()

    def submit(self, statements: list[Statement], nbytes: int = 0) -> None:
        """Queue one atomic batch of statements."""
        self._raise_if_failed()
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

        self.submit([("__call__", job)])
        done.wait()
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def flush(self) -> None:
        """Wait until every batch submitted so far is committed."""
        with self._done:
            target = self._submitted
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
            raise RuntimeError(f"writing the run file failed: {self._error}") from self._error

    def _run(self) -> None:
        conn = self._conn
        stop = False
        while not stop:
            item = self._queue.get()
            if item is _STOP:
                break
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
                self._error = e
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
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
                    with self._done:
                        self._committed += 1
                        self._done.notify_all()

"""The one thread that runs every call into the debug session, for the app's whole life.

The replay engine drives users' generator functions in greenlets (`core/pulled.py`),
and a greenlet can only be resumed by the thread that created it: a new worker thread
per action will not do. Textual workers hand their calls to this thread and wait.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, InvalidStateError
from queue import SimpleQueue
from typing import Any, Callable

from ..core.errors import Cancelled


class EngineClosed(Cancelled):
    """The app is closing: the engine thread takes no more calls (a call waiting for it gives up)."""


class EngineThread:
    """The one thread that loads the session and runs every call into it (see the module's
    docstring). It starts with the first call and is a daemon: quitting never waits for an
    action still running (`close` lets its caller go at once)."""

    def __init__(self, name: str = "tt-engine"):
        self.name = name
        self.thread: threading.Thread | None = None
        self._jobs: SimpleQueue = SimpleQueue()
        self._waiting: set[Future] = set()     # calls whose caller waits: failed at once by `close`
        self._guard = threading.Lock()
        self._closed = False

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the engine thread; waits for it and returns its result or raises its exception.

        Called on the engine thread itself (an action calling back into the model), it runs `fn`
        right away: waiting for the thread there would wait forever."""
        if threading.current_thread() is self.thread:
            return fn(*args)
        future: Future = Future()
        with self._guard:
            if self._closed:
                raise EngineClosed("the debugger is closing")
            if self.thread is None:
                self.thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self.thread.start()
            self._waiting.add(future)
            self._jobs.put((future, fn, args))
        try:
            return future.result()
        finally:
            with self._guard:
                self._waiting.discard(future)

    def close(self) -> None:
        """Take no more calls and let every caller still waiting go (with `EngineClosed`); the thread ends
        once what it runs returns (an action the caller cancels, or one that cannot be, runs to its end)."""
        with self._guard:
            self._closed = True
            waiting, self._waiting = self._waiting, set()
            if self.thread is not None:
                self._jobs.put(None)
        for future in waiting:
            _settle(future, EngineClosed("the debugger is closing"))

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            _run(*job)
            del job   # hold nothing of the session while waiting for the next call


def _run(future: Future, fn: Callable[..., Any], args: tuple) -> None:
    """One call, for the caller waiting on `future` (unless `EngineThread.close` has let it go)."""
    if future.done():
        return
    try:
        result = fn(*args)
    except BaseException as e:  # (re-raised in the caller, whatever it is)
        _settle(future, e)
    else:
        _settle(future, None, result)


def _settle(future: Future, error: BaseException | None, result: Any = None) -> None:
    """Complete `future` unless `EngineThread.close` already has."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass

"""Driving a pull-based user function one input unit at a time.

PySpark's iterator APIs hand the user's code an iterator and take an iterator
back: `mapPartitions(f)` calls `f(rows)`, `mapInPandas(f)` calls `f(batches)`,
and `f` pulls inputs whenever it likes, often as a generator. tt's runtime is
push-based: one input per step, with the outputs of that step attributed to it
(the Output log) and the state readable between two steps (interactions, step
into). `Pulled` bridges the two without threads: the user's function runs in a
greenlet, and the iterator it pulls from switches back to tt whenever it needs
the next unit. Outputs yielded after unit i was pulled and before unit i+1 is
pulled belong to unit i; outputs yielded before the first pull belong to the
start (position -1), and those after the input ran out to the END step.

The same attribution holds while recording (in the executor) and in replay, so
the logs written by one are what the other checks.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Iterator

import greenlet

_NEED = object()     # switched to the driver: the function wants the next unit
_DONE = object()     # the function's output is exhausted
_OVER = object()     # switched to the driver: the function returned or raised (`Pulled._outcome` says which)


class Pulled:
    """`fn(inputs) -> iterable of outputs`, fed one unit at a time.

    `start()` runs `fn` up to its first pull, `feed(unit)` hands it one unit and runs it
    up to its next pull, `end()` tells it the input is exhausted and runs it to the end;
    each returns the outputs yielded meanwhile. An exception raised by `fn` propagates
    from the call during which it was raised; the function is finished after it.

    A greenlet belongs to the thread that created it: one `Pulled` is driven from one
    thread (the replay engine's), from `start()` to `end()`. The function runs on a greenlet
    taken from that thread's idle ones (`_workers`), which goes back to them once the function
    has returned or raised."""

    def __init__(self, fn: Callable[[Iterator[Any]], Iterable[Any]]):
        self._fn = fn
        self._outputs: list[Any] = []
        self._ended = False
        self.started = False
        self.finished = False
        self.failed = False                # the function raised: it can take nothing more
        self.pulled = 0                    # units handed to the function so far
        self.returned: Any = None          # what fn returned: for a generator, its frame holds the state
        self._runner: greenlet.greenlet | None = None   # the greenlet it runs on, from its first step
        self._outcome: Any = None          # _DONE or _Raised, once the function is over

    # --- the driver's side ----------------------------------------------------------------------

    def start(self) -> list[Any]:
        """Run the function until it first asks for input (or finishes): the outputs meanwhile."""
        self.started = True
        return self._resume(None)

    def feed(self, unit: Any) -> list[Any]:
        """Hand `unit` to the function; run it until it asks for the next one (or finishes)."""
        if not self.started:
            raise RuntimeError("start() first: what the function yields before its first pull is not this unit's")
        if self.finished:
            raise RuntimeError("the function has finished; it takes no more input")
        return self._resume(unit)

    def end(self) -> list[Any]:
        """The input is exhausted: run the function to its end. The outputs meanwhile."""
        self._ended = True
        if self.finished:
            return []
        self.started = True
        return self._resume(None)

    def _resume(self, unit: Any) -> list[Any]:
        self._outputs = []
        if self._runner is None:   # its first step: the function starts on an idle greenlet
            self._runner = _workers.take()
            signal = self._runner.switch(self)
        else:
            signal = self._runner.switch(unit)
        if signal is _OVER:
            signal, self._outcome = self._outcome, None
        if signal is _DONE:
            self.finished = True
        elif isinstance(signal, _Raised):
            self.finished = self.failed = True
            raise signal.error
        return self._outputs

    # --- the function's side (inside the greenlet) -------------------------------------------------

    def _run(self) -> None:
        try:
            out = self.returned = self._fn(_Inputs(self))
            for row in out:
                self._outputs.append(row)
        except greenlet.GreenletExit:   # the Pulled was dropped unfinished: its greenlet ends
            raise
        except BaseException as e:  # noqa: BLE001  (re-raised on the driver's side)
            self._outcome = _Raised(e)
            return
        self._outcome = _DONE

    def _next_unit(self) -> Any:
        """Called by the function's iterator: back to the driver until it feeds a unit."""
        if self._ended:
            raise StopIteration
        unit = self._runner.parent.switch(_NEED)
        if self._ended:
            raise StopIteration
        self.pulled += 1
        return unit


class _Workers(threading.local):
    """A thread's idle greenlets, each able to run one `Pulled` function after another.

    A function run on a fresh greenlet runs slower: Python gives each greenlet a stack of
    its own for frames, allocated anew at its first call. `KeyedSum` of
    benches/tws_overhead.py, driven by a `Pulled` per key over 10,000 keys of 100 rows (no
    Spark, best of 5): 2.08 s on a new greenlet per key, 1.78 s on reused ones, 1.68 s called
    directly."""

    KEEP = 4   # idle greenlets kept per thread: one Pulled runs at a time per operator

    def __init__(self):
        self.idle: list[greenlet.greenlet] = []

    def take(self) -> greenlet.greenlet:
        worker = self.idle.pop() if self.idle else greenlet.greenlet(_serve)
        worker.parent = greenlet.getcurrent()   # where its function's pulls and outputs go
        return worker


_workers = _Workers()


def _serve(pulled: Pulled) -> Any:
    """A worker greenlet's life: run each function handed to it to its end, then wait idle
    (holding nothing of the function's: its outcome is the Pulled's)."""
    me = greenlet.getcurrent()
    while True:
        pulled._run()
        pulled = None
        if len(_workers.idle) >= _Workers.KEEP:
            return _OVER
        _workers.idle.append(me)
        pulled = me.parent.switch(_OVER)


class _Inputs:
    """The iterator the user's function pulls from."""

    def __init__(self, pulled: Pulled):
        self._pulled = pulled

    def __iter__(self) -> "_Inputs":
        return self

    def __next__(self) -> Any:
        return self._pulled._next_unit()


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error

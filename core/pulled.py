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
_OVER = object()     # switched to the driver: the function returned or raised (`_Channel.outcome` says which)


class Pulled:
    """`fn(inputs) -> iterable of outputs`, fed one unit at a time.

    `start()` runs `fn` up to its first pull, `feed(unit)` hands it one unit and runs it
    up to its next pull, `end()` tells it the input is exhausted and runs it to the end;
    each returns the outputs yielded meanwhile. An exception raised by `fn` propagates
    from the call during which it was raised; the function is finished after it.

    A greenlet belongs to the thread that created it: one `Pulled` is driven from one
    thread (the replay engine's), from `start()` to `end()`. The function runs on a greenlet
    taken from that thread's idle ones (`_workers`), which goes back to them once the function
    has returned or raised. The greenlet holds only the `_Channel`, never the Pulled: a Pulled
    dropped while its function is suspended in a pull is freed, and with it the greenlet,
    which greenlet ends by raising GreenletExit in the function (its `finally` runs)."""

    def __init__(self, fn: Callable[[Iterator[Any]], Iterable[Any]]):
        self._channel = _Channel(fn)
        self.started = False
        self.finished = False
        self.failed = False                # the function raised: it can take nothing more
        self._runner: greenlet.greenlet | None = None   # the greenlet it runs on, from its first step

    @property
    def pulled(self) -> int:
        """Units handed to the function so far."""
        return self._channel.pulled

    @property
    def returned(self) -> Any:
        """What fn returned: for a generator, its frame holds the state."""
        return self._channel.returned

    def frame_of(self, code: Any) -> Any:
        """The frame running `code` in the function while it waits for its next unit (the
        outermost, for a recursive one), or None: a plain function's locals, as a generator's
        `gi_frame` gives a generator's."""
        runner = self._runner
        frame = runner.gr_frame if runner is not None and not self.finished and code is not None else None
        found = None
        while frame is not None:
            if frame.f_code is code:
                found = frame
            frame = frame.f_back
        return found

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
        self._channel.ended = True
        if self.finished:
            return []
        self.started = True
        return self._resume(None)

    def close(self) -> None:
        """Its consumer stopped pulling its outputs (Spark's `take(n)`): close the function as
        PySpark closes a generator it stops reading, with GeneratorExit, raised where it waits
        for its next unit, so its `finally` runs. What it yields meanwhile is dropped, as PySpark
        drops it; what it raises, but GeneratorExit, propagates."""
        if not self.started or self.finished or self._runner is None:
            return
        self._channel.outputs = []
        signal = self._runner.throw(GeneratorExit)
        if signal is _OVER:
            signal, self._channel.outcome = self._channel.outcome, None
        self.finished = True
        if isinstance(signal, _Raised) and not isinstance(signal.error, GeneratorExit):
            self.failed = True
            raise signal.error
        if signal is _NEED:   # (it took GeneratorExit for the end of its input, and pulls again)
            raise RuntimeError("the function ignored GeneratorExit")

    def _resume(self, unit: Any) -> list[Any]:
        channel = self._channel
        channel.outputs = []
        if self._runner is None:   # its first step: the function starts on an idle greenlet
            self._runner = _workers.take()
            signal = self._runner.switch(channel)
        else:
            signal = self._runner.switch(unit)
        if signal is _OVER:
            signal, channel.outcome = channel.outcome, None
        if signal is _DONE:
            self.finished = True
        elif isinstance(signal, _Raised):
            self.finished = self.failed = True
            raise signal.error
        return channel.outputs


class _Channel:
    """What a function's greenlet shares with its `Pulled`: the function, the outputs it
    yielded since the last step, and how it ended."""

    __slots__ = ("fn", "outputs", "ended", "pulled", "returned", "outcome")

    def __init__(self, fn: Callable[[Iterator[Any]], Iterable[Any]]):
        self.fn = fn
        self.outputs: list[Any] = []
        self.ended = False
        self.pulled = 0
        self.returned: Any = None
        self.outcome: Any = None   # _DONE or _Raised, once the function is over

    # --- the function's side (inside the greenlet) -------------------------------------------------

    def run(self) -> None:
        try:
            out = self.returned = self.fn(_Inputs(self))
            for row in out:
                self.outputs.append(row)
        except greenlet.GreenletExit:   # the Pulled was dropped unfinished: its greenlet ends
            raise
        except BaseException as e:  # noqa: BLE001  (re-raised on the driver's side)
            self.outcome = _Raised(e)
            return
        self.outcome = _DONE

    def next_unit(self) -> Any:
        """Called by the function's iterator: back to the driver until it feeds a unit."""
        if self.ended:
            raise StopIteration
        unit = greenlet.getcurrent().parent.switch(_NEED)
        if self.ended:
            raise StopIteration
        self.pulled += 1
        return unit


class _Workers(threading.local):
    """A thread's idle greenlets, each able to run one `Pulled` function after another.

    A function run on a fresh greenlet runs slower: Python gives each greenlet a stack of
    its own for frames, allocated anew at its first call. `KeyedSum` of
    benches/tws_overhead.py, driven by a `Pulled` per key over 10,000 keys of 100 rows (no
    Spark, best of 5): 2.08 s on a new greenlet per key, 1.78 s on reused ones, 1.61–1.68 s
    called directly."""

    KEEP = 4   # idle greenlets kept per thread: one Pulled runs at a time per operator

    def __init__(self):
        self.idle: list[greenlet.greenlet] = []

    def take(self) -> greenlet.greenlet:
        worker = self.idle.pop() if self.idle else greenlet.greenlet(_serve)
        worker.parent = greenlet.getcurrent()   # where its function's pulls and outputs go
        return worker


_workers = _Workers()


def _serve(channel: _Channel) -> Any:
    """A worker greenlet's life: run each function handed to it to its end, then wait idle.
    It keeps no reference to itself or to the last function: an idle greenlet is held by
    `_workers` alone, a busy one by its Pulled alone."""
    while True:
        channel.run()
        channel = None
        if len(_workers.idle) >= _Workers.KEEP:
            return _OVER
        _workers.idle.append(greenlet.getcurrent())
        channel = greenlet.getcurrent().parent.switch(_OVER)


class _Inputs:
    """The iterator the user's function pulls from."""

    def __init__(self, channel: _Channel):
        self._channel = channel

    def __iter__(self) -> "_Inputs":
        return self

    def __next__(self) -> Any:
        return self._channel.next_unit()


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error

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

from typing import Any, Callable, Iterable, Iterator

import greenlet

_NEED = object()     # switched to the driver: the function wants the next unit
_DONE = object()     # switched to the driver: the function's output is exhausted


class Pulled:
    """`fn(inputs) -> iterable of outputs`, fed one unit at a time.

    `start()` runs `fn` up to its first pull, `feed(unit)` hands it one unit and runs it
    up to its next pull, `end()` tells it the input is exhausted and runs it to the end;
    each returns the outputs yielded meanwhile. An exception raised by `fn` propagates
    from the call during which it was raised; the function is finished after it.

    A greenlet belongs to the thread that created it: one `Pulled` is driven from one
    thread (the replay engine's), from `start()` to `end()`."""

    def __init__(self, fn: Callable[[Iterator[Any]], Iterable[Any]]):
        self._fn = fn
        self._outputs: list[Any] = []
        self._ended = False
        self.started = False
        self.finished = False
        self.failed = False                # the function raised: it can take nothing more
        self.pulled = 0                    # units handed to the function so far
        self.returned: Any = None          # what fn returned: for a generator, its frame holds the state
        self._runner = greenlet.greenlet(self._run)

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
        signal = self._runner.switch(unit)
        if signal is _DONE:
            self.finished = True
        elif isinstance(signal, _Raised):
            self.finished = self.failed = True
            raise signal.error
        return self._outputs

    # --- the function's side (inside the greenlet) -------------------------------------------------

    def _run(self, _first: Any) -> Any:
        try:
            out = self.returned = self._fn(_Inputs(self))
            for row in out:
                self._outputs.append(row)
        except BaseException as e:  # noqa: BLE001  (re-raised on the driver's side)
            return _Raised(e)
        return _DONE

    def _next_unit(self) -> Any:
        """Called by the function's iterator: back to the driver until it feeds a unit."""
        if self._ended:
            raise StopIteration
        unit = self._runner.parent.switch(_NEED)
        if self._ended:
            raise StopIteration
        self.pulled += 1
        return unit


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

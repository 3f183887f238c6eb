"""How a Python worker collects cyclic garbage while a tt task runs in it.

A task's operators keep their state in the worker's memory: a join holds every row of its
side. CPython's collector walks every live container at each full collection, and makes one
after ten collections of the middle generation (once the objects that survived those have
grown by a quarter). On TPC-H W2 (benches/tpch.py) each worker made about 23 full collections
a run, walking the joins' tables again and again: about a third of the workers' CPU. While a
task runs, a full collection comes ten times more rarely (`FULL_EVERY`); the two young
generations are collected as before, so short-lived cyclic garbage (a caught exception's
frames) is freed as soon as it was. The setting is put back when the last task running in
the process ends (`task_started` and `task_ended` count them).
"""

from __future__ import annotations

import gc

#: Middle-generation collections between two full ones while a task runs (CPython's default: 10).
FULL_EVERY = 100

_running = 0
_before: tuple[int, ...] | None = None


def task_started() -> None:
    global _running, _before
    if _running == 0:
        _before = gc.get_threshold()
        gc.set_threshold(_before[0], _before[1], max(_before[2], FULL_EVERY))
    _running += 1


def task_ended() -> None:
    global _running
    _running = max(0, _running - 1)
    if _running == 0 and _before is not None:
        gc.set_threshold(*_before)


__all__ = ["FULL_EVERY", "task_started", "task_ended"]

"""A function an unmodified PySpark job hands to Spark, as an operator of the one runtime.

`tt record` wraps the function a job passes to `mapInPandas` (docs/HOOKS.md); in
the executor and in the replay engine alike it runs as an `IteratorOperator`, so
the runner, the logs, interactions, steps and the TUI treat it like any operator.
Spark's iterator API is pull-based and the runtime pushes one unit per step:
`core/pulled.py` bridges the two, so a step is one unit (a batch for
`mapInPandas`) and the outputs the function yields before pulling the next unit
are that unit's.

Its state is what a user would look at: the attributes of a callable instance (or
of a bound method's instance), its closure cells, and the locals of its
generator's frame. A suspended generator cannot be saved, so an instance is put
back at a position by replaying its inputs from the start of its partition
(`restore_by_replay`); the replay engine and the checkpoint planner honour that.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable

from . import values
from .operator import Operator
from .pulled import Pulled

#: The kind of a hooked operator in the DAG (the PySpark method it was handed to), and the
#: unit of one of its steps as the debugger names it.
UNITS = {"mapInPandas": "batch"}
HOOKED_KINDS = frozenset(UNITS)


class IteratorOperator(Operator):
    """`fn(iterator of units) -> iterator of outputs`, one unit per step."""

    #: A running generator cannot be pickled: restore this instance by replaying its inputs.
    restore_by_replay = True

    def __init__(self, fn: Callable, kind: str = "mapInPandas", site: str = ""):
        self._fn = fn
        self._kind = kind
        self._site = site          # file:line of the call in the job, shown beside the name
        self._pulled: Pulled | None = None

    @property
    def done(self) -> bool:
        """The function returned: it pulls no more units (Spark stops feeding it too)."""
        return self._pulled is not None and self._pulled.finished

    @property
    def failed(self) -> bool:
        """The function raised: only a fresh start can bring it back."""
        return self._pulled is not None and self._pulled.failed

    def process(self, row: Any, port: int = 0) -> list:
        p = self._pulled
        if p is None:  # outputs yielded before the first pull are the first unit's
            p = self._pulled = Pulled(self._fn)
            outs = p.start()
            return outs + p.feed(row) if not p.finished else outs
        return p.feed(row)

    def finish(self) -> list:
        if self._pulled is None:
            self._pulled = Pulled(self._fn)
        return self._pulled.end()

    def state(self) -> dict:
        fn = self._fn
        owner = getattr(fn, "__self__", None) if inspect.ismethod(fn) else fn
        out: dict = {}
        if owner is not None and not inspect.isroutine(owner) and isinstance(getattr(owner, "__dict__", None), dict):
            out.update(values.public_attrs(vars(owner)))
        cells = _closure(fn)
        if cells:
            out["closure"] = cells
        frame_locals = self._frame_locals()
        if frame_locals:
            out["locals"] = frame_locals
        return out

    def _frame_locals(self) -> dict:
        p = self._pulled
        gen = p.returned if p is not None else None
        frame = getattr(gen, "gi_frame", None)
        if frame is None:
            return {}
        out = {}
        for name, value in frame.f_locals.items():
            if name == "self" or name.startswith("_") or _skipped(value) or type(value).__name__ == "_Inputs":
                continue
            out[name] = value  # a DataFrame is shown as its shape (values.encode)
        return out

    def __getstate__(self) -> dict:
        if self._pulled is not None:
            raise TypeError(f"{self._tt_name or self._kind}: a running generator cannot be saved; "
                            f"tt restores it by replaying its inputs (restore_by_replay)")
        return self.__dict__

    def __repr__(self) -> str:
        return f"<{self._kind} {self._tt_name or name_of(self._fn)}>"


def name_of(fn: Any) -> str:
    """The name a hooked function goes by: its own, or its class's for a callable instance."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or name == "<lambda>":
        name = type(fn).__name__ if not inspect.isroutine(fn) else "lambda"
    return name


def _closure(fn: Any) -> dict:
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None)
    if code is None or not cells:
        return {}
    out = {}
    for name, cell in zip(code.co_freevars, cells):
        try:
            value = cell.cell_contents
        except ValueError:  # not yet bound
            continue
        if not name.startswith("_") and not _skipped(value):
            out[name] = value
    return out


def _skipped(value: Any) -> bool:
    """Code, not state: modules, functions, classes."""
    return isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type,
                              types.MethodType))


__all__ = ["IteratorOperator", "HOOKED_KINDS", "UNITS", "name_of"]

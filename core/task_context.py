"""What `pyspark.TaskContext.get()` answers a hooked function's step, recorded and in replay.

Jobs ask the running task who it is: `TaskContext.get().partitionId()` names a sink's output
file, `stageId()` and `attemptNumber()` go into a log line, `getLocalProperty(...)` reads the
job group or the streaming batch id. Spark sets that context in its Python worker only; a
replay (`tt debug`, `tt verify`) runs the step in a process with none, where `get()` gives
None, and a step that recorded fine raised `AttributeError` in replay.

So each task tells the coordinator its context (`facts`, in its hello: stage, partition,
attempt numbers, CPUs, resources and local properties, in the shape of PySpark's own
`TaskContext.from_json`), the run keeps it per attempt (`task_contexts`), and in replay
`TaskContext.get` is patched (`install`: at once where PySpark's module is loaded, else as it
is imported; core never imports it) to give, inside a replayed step, a TaskContext holding the
recorded facts of the attempt the instance replays. Outside a replayed step it answers as
PySpark does.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from decimal import Decimal
from typing import Any

from .operator import CONTEXT

MODULE = "pyspark.taskcontext"


def facts(tc: Any) -> dict | None:
    """A running task's TaskContext as JSON-able facts (None outside a task)."""
    if tc is None:
        return None
    cpu_amount = getattr(tc, "cpuAmount", None)   # (PySpark 4.3 and later)
    resources = tc.resources() or {}
    out = {"stageId": tc.stageId(), "partitionId": tc.partitionId(), "attemptNumber": tc.attemptNumber(),
           "taskAttemptId": tc.taskAttemptId(), "cpus": tc.cpus(),
           "resources": {k: {"name": r.name, "addresses": list(r.addresses)} for k, r in resources.items()},
           # (all of them: PySpark has no public call that lists them)
           "localProperties": dict(getattr(tc, "_localProperties", None) or {})}
    amount = cpu_amount() if callable(cpu_amount) else None
    if amount is not None:
        out["cpuAmount"] = str(amount)
    return out


def install() -> None:
    """Patch `TaskContext.get` now if PySpark's module is loaded, else as soon as it is (a step
    may import PySpark itself). A replay engine calls it before it loads any step's code."""
    if not _patch() and not any(isinstance(f, _Watch) for f in sys.meta_path):
        sys.meta_path.insert(0, _Watch())


def _patch() -> bool:
    """Patch the loaded module's `TaskContext.get` (once); whether it is loaded."""
    global _original
    cls = getattr(sys.modules.get(MODULE), "TaskContext", None)
    if cls is None:
        return False
    if getattr(cls.__dict__.get("get"), "__func__", None) is not _get:
        _original = cls.__dict__["get"].__func__
        cls.get = classmethod(_get)
    return True


class _Watch(importlib.abc.MetaPathFinder):
    """Patches PySpark's TaskContext as its module is imported, then leaves `sys.meta_path`."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            run = loader.exec_module

            def exec_module(module: Any) -> None:
                run(module)
                _patch()
            loader.exec_module = exec_module
        return spec


_original: Any = None


def _get(cls: type) -> Any:
    runner = CONTEXT.runner
    if getattr(runner, "task_context", None) is not None and cls.__name__ == "TaskContext":   # (set by a replay only)
        return _context(cls, runner)
    return _original(cls)


def _context(cls: type, runner: Any) -> Any:
    """The runner's recorded facts as a TaskContext (made once an instance, not PySpark's
    singleton: the instances of a replay interleave)."""
    made = getattr(runner, "_task_context_object", None)
    if made is None:
        f = runner.task_context
        resources = {}
        info = getattr(sys.modules.get("pyspark.resource"), "ResourceInformation", None)   # (PySpark's TaskContext loads it)
        if f.get("resources") and info is not None:
            resources = {k: info(v["name"], v["addresses"]) for k, v in f["resources"].items()}
        made = object.__new__(cls)
        cls.__init__(made, stageId=f["stageId"], partitionId=f["partitionId"], attemptNumber=f["attemptNumber"],
                     taskAttemptId=f["taskAttemptId"], cpus=f["cpus"], resources=resources,
                     localProperties=dict(f.get("localProperties") or {}),
                     **({"cpuAmount": Decimal(f["cpuAmount"])} if "cpuAmount" in f and hasattr(cls, "_cpuAmount")
                        else {}))
        runner._task_context_object = made
    return made


__all__ = ["facts", "install"]

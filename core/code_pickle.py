"""Pickle operators with their code's file names, so a replayed exception points at the job's source.

cloudpickle (since 3.1.3) writes every code object it pickles by value with the file name
`<dynamic-code>`, to make its output deterministic. A replayed operator's traceback then
shows no file and no source line: the one thing a user wants from a post-mortem. `dumps`
pickles as cloudpickle does but keeps each code object's `co_filename`, a PySpark broadcast
variable's value, and an accumulator as a task starts with it (core/shared_variables.py); the
pickle loads with plain `cloudpickle.loads` (or `pickle.loads`) wherever tt is importable.

A code object pickled by value is the bytecode of the Python that made it: another version
unpickles it and crashes running it (a run recorded with 3.11, replayed by 3.12: a segmentation
fault at the first tuple). So a run names the Python that pickled its code (`python`, in its
meta) and a replay in another version stops first, in one line (`require_python`).
"""

from __future__ import annotations

import io
import os
import sys
import types
from typing import Any

import cloudpickle

from .errors import CodeImportError, RunFileError
from .shared_variables import (is_spark_accumulator_class, is_spark_broadcast_class, reduce_spark_accumulator,
                               reduce_spark_broadcast)


def python() -> dict:
    """The Python that pickles a run's code (the recorder's, whose version PySpark requires of
    its workers too)."""
    return {"implementation": sys.implementation.name, "version": ".".join(map(str, sys.version_info[:3]))}


def same_python(a: dict, b: dict) -> bool:
    """Whether code pickled by Python `a` runs in Python `b` (`python()`): the same implementation
    and minor version."""
    return a["implementation"] == b["implementation"] and _minor(a) == _minor(b)


def _minor(of: dict) -> str:
    return ".".join(of["version"].split(".")[:2])


def require_python(recorded: dict | None, run: Any) -> None:
    """Stop where this Python cannot run the code `run` pickled under `recorded` (`python()`):
    another implementation, or another minor version. A run recorded before tt kept it names
    none, and is replayed as before."""
    if not recorded or same_python(recorded, python()):
        return
    here, minor = python(), _minor(recorded)
    raise RunFileError(f"{run} was recorded with Python {minor} ({recorded['implementation']} {recorded['version']}); "
                       f"this tt runs on {here['implementation']} {here['version']}, which cannot run the job's code "
                       f"pickled there: replay it with tt installed in a Python {minor} (tt inspect reads it from any)")


def _code_in_file(make: Any, args: tuple, filename: str) -> types.CodeType:
    """Unpickle a code object and give it back the file it was compiled from."""
    code = make(*args)
    return code.replace(co_filename=filename) if code.co_filename != filename else code


class _Pickler(cloudpickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.CodeType:
            reduce = self.dispatch_table.get(types.CodeType)
            if reduce is not None:
                make, args = reduce(obj)
                return _code_in_file, (make, args, obj.co_filename)
        if is_spark_broadcast_class(type(obj)):   # its value with it, for a replay (core/shared_variables.py)
            reduced = reduce_spark_broadcast(obj)
            if reduced is not None:
                return reduced
        if is_spark_accumulator_class(type(obj)):   # a task's own, from its zero (core/shared_variables.py)
            return reduce_spark_accumulator(obj)
        return super().reducer_override(obj)


def loads(data: bytes, what: str, folder: str | None = None) -> Any:
    """`cloudpickle.loads(data)` of `what`'s code (an operator, a key function). Code pickled by
    reference to a module of the job's (`from helpers import Detector`) needs that module where
    it is replayed. `tt record` ran the job with its folder on `sys.path`, so that `folder`,
    where it exists here, is searched too (last); else one line says which module is missing."""
    try:
        return cloudpickle.loads(data)
    except ModuleNotFoundError as e:
        if folder and os.path.isdir(folder) and folder not in sys.path:
            sys.path.append(folder)
            return loads(data, what, folder)
        where = f"add the folder that holds it to PYTHONPATH (the job was in {folder})" if folder else \
            "add the folder that holds it to PYTHONPATH"
        raise CodeImportError(f"{what}'s code needs the module {e.name!r}, which this Python cannot import and the "
                              f"run does not store: {where}; a replay then runs it as its file reads now") from None


def dumps(obj: Any) -> bytes:
    """`cloudpickle.dumps(obj)`, keeping the file names of the code it pickles by value."""
    with io.BytesIO() as f:
        _Pickler(f, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return f.getvalue()

"""The job's own modules as they ran: replay imports them from the run file, not from the disk.

The recorder stores the source of each module the job imported from its folder
(recorder/job_modules.py): code pickled by reference to one of them (`helpers.to_usd`
called from a job's function) would otherwise run as the file reads now, after the user
edited it, and a replay would show states the run never had. `serve` puts a finder first on
`sys.meta_path` that imports those names from the run's copy, so the replayed code is the
recorded code, also on a machine that has the run but not the job's files.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType


class _RecordedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads the modules of the run being replayed (one run at a time per process)."""

    def __init__(self) -> None:
        self.modules: dict[str, tuple[str, bool, str]] = {}   # name -> (path, package, source)
        self.run: dict[str, tuple[str, bool, str]] = {}       # the run's, of which `modules` are served

    def find_spec(self, name: str, path: object = None, target: object = None):
        m = self.modules.get(name)
        if m is None:
            return None
        file, package, _ = m
        spec = importlib.machinery.ModuleSpec(name, self, origin=file, is_package=package)
        spec.has_location = True   # `__file__` is the recorded path: tracebacks show its recorded lines
        if package:
            spec.submodule_search_locations = [os.path.dirname(file)]
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module: ModuleType) -> None:
        file, _, source = self.modules[module.__name__]
        exec(compile(source, file, "exec", dont_inherit=True), module.__dict__)

    def get_source(self, name: str) -> str:
        """For `inspect` and `linecache`: the recorded source."""
        return self.modules[name][2]


_FINDER = _RecordedFinder()


def serve(modules: dict[str, tuple[str, bool, str]]) -> list[str]:
    """Import `modules` ({name: (path, package, source)}, `RunReader.job_modules`) from their
    recorded source from now on, in place of what a previous run served; returns the names
    served. A name this process imported otherwise already (the recording's own process, a
    test) keeps its module: replacing it under code that holds it would mix two versions."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    if modules != _FINDER.run:   # (a session's engines of one run share its modules)
        for name in _FINDER.modules:   # what the previous run served goes
            if getattr(sys.modules.get(name), "__loader__", None) is _FINDER:
                del sys.modules[name]
        _FINDER.run = modules
        _FINDER.modules = {n: m for n, m in modules.items() if n not in sys.modules}
    return list(_FINDER.modules)

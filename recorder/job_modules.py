"""The job's own modules, stored with the run so that replay imports them as they ran.

A job's function that calls into a module of the user's (`import helpers`, `helpers.to_usd(...)`)
is pickled with a reference to that module, not its code, and replay imports it again. From
the disk, that is whatever the file holds when the run is replayed: after the user fixed the
bug in it, a jump showed a state the recording never had, without a word, and `tt verify`
blamed "the environment". So the recorder stores the source of every module the job imported
that is not an installed package's, under the file's path in `job_files` and its module name
in `meta.job_modules`, and signs it with the operators' code; replay imports those modules from
the run file (replay/recorded_modules.py), on a machine without the files too. That is a module
from the job's folder or a folder below it, and one the job imported from anywhere else but an
installed package (the standard library, a site-packages, PySpark and py4j wherever they lie):
a folder on PYTHONPATH (a project's `src/`), a zip Spark ships (`sc.addPyFile`, `--py-files`),
which Spark deletes when the application ends. Those from outside the job's folder count only
once imported after the recording began (`since`): a process that records a job beside other
work (a test, a notebook) has imported modules of its own before.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

import orjson

#: at most this many modules are stored (a job folder that is a whole code base: the rest is
#: imported from the disk at replay, as before, and the recording says so)
MAX_MODULES = 200


def job_modules(folder: Path | None, since: frozenset[str] = frozenset()
                ) -> tuple[dict[str, tuple[str, bool, str]], list[str]]:
    """({module name: (path, package, source)}, names left out) of the modules this process
    imported through `folder` on `sys.path` (`helpers` from folder/helpers.py, `pkg.util` from
    folder/pkg/util.py), and of those not in `since` (the names imported before the recording
    began) that are not an installed package's, from wherever they came (a folder on PYTHONPATH,
    a zip). Not tt's, not `__main__` (pickled by value already). The form `RunReader.job_modules`
    gives back."""
    if folder is None:
        return {}, []
    installed = _installed()
    root = folder.resolve()
    if _is_installed(root, installed):
        root = Path.cwd().resolve()   # a notebook's kernel (ipykernel_launcher.py): its modules are the working folder's
    inside = str(root).rstrip(os.sep) + os.sep
    real_dirs: dict[str, str] = {}   # a folder as imported -> as resolved: modules share few folders
    found: dict[str, tuple[str, bool, str]] = {}
    for name, module in sorted(sys.modules.items()):
        if name == "__main__" or name.partition(".")[0] in _NEVER or module is None:
            continue
        f = getattr(module, "__file__", None)
        if not isinstance(f, str) or not f.endswith(".py"):
            continue
        try:
            real = _resolved(f, real_dirs)
        except OSError:
            continue
        real_path = Path(real)
        if _is_installed(real_path, installed):
            continue
        if not (real.startswith(inside) and _imported_through(real_path, root, name)) and name in since:
            continue
        text = _source(module, name, Path(f))
        if text is None:
            continue
        found[name] = (f, os.path.basename(f) == "__init__.py" and hasattr(module, "__path__"), text)
    names = list(found)
    return {n: found[n] for n in names[:MAX_MODULES]}, names[MAX_MODULES:]


#: top-level packages never stored, wherever they lie (a Spark distribution's python/ folder, its zips)
_NEVER = frozenset({"tt", "pyspark", "py4j"})


def _source(module: Any, name: str, path: Path) -> str | None:
    """A module's source: its file's, or what its loader gives (a zip's member: `zipimport`)."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    try:
        text = module.__loader__.get_source(name)
    except Exception:  # noqa: BLE001  (a loader without sources, a zip gone since)
        return None
    return text if isinstance(text, str) else None


def _resolved(file: str, real_dirs: dict[str, str]) -> str:
    """`os.path.realpath(file)`, its folder resolved once for all the modules in it: a process
    with pandas and PySpark imported holds about a thousand modules, and resolving each path
    whole (a system call per part of it) took 22 ms of every recording's start."""
    if os.path.islink(file):
        return os.path.realpath(file)
    folder, base = os.path.split(file)
    real = real_dirs.get(folder)
    if real is None:
        real = real_dirs[folder] = os.path.realpath(folder)
    return os.path.join(real, base)


def _imported_through(file: Path, root: Path, name: str) -> bool:
    """Whether module `name` is `file` as `root` on `sys.path` makes it importable."""
    if not file.is_relative_to(root):
        return False
    parts = file.relative_to(root).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) == name


def _installed() -> list[Path]:
    paths = sysconfig.get_paths()
    return [Path(paths[k]).resolve() for k in ("purelib", "platlib", "stdlib", "platstdlib") if k in paths]


def _is_installed(path: Path, installed: list[Path]) -> bool:
    """Whether `path` (resolved) lies in this Python's library folders or any site-packages."""
    return any(path.is_relative_to(p) for p in installed) or bool(
        {"site-packages", "dist-packages"}.intersection(path.parts))


def rows(modules: dict[str, tuple[str, bool, str]]) -> list[tuple]:
    """The statements that store `modules` in the run file."""
    names = {n: {"path": path, "package": package} for n, (path, package, _) in modules.items()}
    return [("INSERT OR REPLACE INTO job_files VALUES (?,?)", [(path, text) for path, _, text in modules.values()]),
            ("INSERT OR REPLACE INTO meta VALUES ('job_modules', ?)", [(orjson.dumps(names).decode(),)])]

"""The versions of the libraries the job's Python workers had loaded, against this machine's.

A replay runs the job's code with the libraries installed where it runs. A pandas or numpy of
another version there may compute otherwise (a changed default, a fixed bug), and `tt verify`
then finds a state that differs from the recording with nothing in the job to blame. So each
task's hello names the packages its worker has loaded and their versions (`loaded`), and its end
again (a function may import one in its body, where it first needs it), the run
keeps each one a task named (`RunReader.libraries`; the recorder warns where two workers had
two versions), and `tt inspect` and `tt verify`'s account of a difference name those of another
version here (`differing`).
"""

from __future__ import annotations

import importlib.util
import sys

MISSING = "missing"   # `here`: not installed here
#: top-level module -> its distribution, where the two names differ
_DISTRIBUTIONS = {"dateutil": "python-dateutil", "sklearn": "scikit-learn", "yaml": "PyYAML", "PIL": "Pillow",
                  "cv2": "opencv-python", "bs4": "beautifulsoup4", "google": "protobuf"}


_seen: dict[str, str | None] = {}   # module name -> the version it said when first seen (None: none, or not a package's)
_last: tuple[tuple[int, int], dict[str, str]] = ((-1, 0), {})   # (`modules_stamp()`, `loaded()`'s answer) when it last listed them


def modules_stamp() -> tuple[int, int]:
    """What changes when a module is loaded, unloaded or put in another's place under its name:
    how many there are and the sum of their ids (in C: 25 µs over 718 modules). A worker asks
    `loaded` and `nondeterministic._loaded_namespaces` at every task; each lists the modules
    again only where this changed."""
    modules = list(sys.modules.values())
    return len(modules), sum(map(id, modules))


def loaded() -> dict[str, str]:
    """The top-level packages loaded in this process that say their version (`__version__`),
    but the standard library's and tt: {name: version}. A module is asked once per process,
    when it is first seen loaded: a worker runs many tasks, each asking twice, and the modules
    it has loaded (738, 176 of them top-level, in a PySpark 4.3 worker running a `mapInPandas`
    function) change little between them; while none came, went or was replaced
    (`modules_stamp`), the last answer is given again (listing them took 74 µs, twice a task)."""
    global _last
    stamp = modules_stamp()
    if stamp == _last[0]:
        return dict(_last[1])
    for name in sys.modules.keys() - _seen.keys():   # (the set difference in C)
        module = sys.modules.get(name)
        skip = "." in name or name.startswith("_") or name == "tt" or name in sys.stdlib_module_names
        _seen[name] = None if skip or module is None else _own_version(module)
    answer = dict(sorted((name, v) for name, v in list(_seen.items()) if v is not None and name in sys.modules))
    _last = (stamp, answer)
    return dict(answer)


def _own_version(module) -> str | None:
    """`module.__version__` where the module sets it, not where a module `__getattr__` answers
    (Click's and MarkupSafe's warn that it is deprecated)."""
    version = (getattr(module, "__dict__", None) or {}).get("__version__")
    return version if isinstance(version, str) else None


def here(name: str) -> str | None:
    """The version of package `name` here: loaded, or installed; `MISSING` where it is not
    installed, None where it is but does not say its version."""
    loaded_here = _own_version(sys.modules[name]) if name in sys.modules else None
    if loaded_here is not None:
        return loaded_here
    import importlib.metadata   # (here: a worker only lists what it loaded; the import costs it 4.6 ms)

    try:
        return importlib.metadata.version(_DISTRIBUTIONS.get(name, name))
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return None if importlib.util.find_spec(name) is not None else MISSING
    except (ImportError, ValueError):
        return MISSING


def differing(recorded: dict[str, str]) -> list[tuple[str, str, str]]:
    """(name, the workers' version, this machine's) for each package of `recorded` that is of
    another version here, or missing."""
    out = []
    for name, version in recorded.items():
        now = here(name)
        if now is not None and now != version:
            out.append((name, version, now))
    return out


def described(differ: list[tuple[str, str, str]]) -> str:
    """`pandas 2.1.4 (here 2.3.3), scipy 1.11.0 (here missing)`."""
    return ", ".join(f"{name} {version} (here {now})" for name, version, now in differ)


__all__ = ["loaded", "here", "differing", "described", "MISSING"]

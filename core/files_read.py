"""Files a hooked function's step reads, logged when recorded and served back in replay.

A job's functions often read a file in the executor: a rules file, a lookup table, a model.
A replay runs elsewhere (a laptop, after `tt pack`), or later, after the file changed: it
raised `FileNotFoundError` where the run had not, or read other rules and showed states the
run never had. So `open()` (`builtins.open` and `io.open`, patched once per process by
`nondeterministic.install`) goes through the runner where a hooked function's step opens a
regular file for reading, and with it whatever reads through `open`: `pathlib.Path.read_text`,
`pandas.read_csv` and `json.load` of such a file, `numpy.load`.

The recording logs what the step read, as it logs an environment variable's value
(`Runner.read_environ`, under the name `open(/absolute/path)`): once per file and instance, and
again where the file has changed since. What is logged is the file's size and digest (xxh3-128),
or, for a file that could not be opened, its `errno`, raised again in replay
(`FileNotFoundError`). The bytes of a file of up to `KEPT_BYTES` go into the run once, by their
digest, whatever number of instances read them (`take_contents`: the task sends them with its
logs, into the run's `file_contents`); replay hands the step a file object over them
(`_LoggedFile`, `ReplayRunner.file_contents`), whatever this machine holds at that path. A larger
file's bytes are not kept: a model of gigabytes in the run would be the run's input copied again.
Replay opens the file here if it is the same, and otherwise stops with one line naming the file
and what differs (`ReplayDivergence`); the task's end names such files (`large`: meta
`files_read`, which `tt inspect` lists), and `tt pack` copies them into `file_contents` where they
are, so that the run travels without them.

A relative path is the executor's: it is joined to the worker's folder, logged as a process
fact (`os.getcwd()`), so a replay run from elsewhere finds the file read. A text-mode `open`
without an encoding decodes as the worker's locale said
(`locale.getpreferredencoding(False)`, logged as a process fact), in replay too. A file the job
gave its executors (`SparkContext.addFile`) is found in replay too: `SparkFiles.get` answers with
the executor's root directory, logged (`install_spark_files`).

What a step asks of a path without opening it, a stat result or a folder's listing, is logged
too (core/file_info.py). pyarrow's readers (Parquet's `read_table` and `ParquetFile`, CSV's
`read_csv` and `open_csv`, JSON's `read_json`, Feather's and ORC's `read_table`) open a local
file in C++; a step's call is handed the file opened through the same log
(`install_pyarrow_reads`).

Not covered: files opened for writing or updating (the first a step writes is said, and a
replay writes a scratch copy: core/outside_effects.py), by descriptor or with an `opener`, anything under /proc, /sys and
/dev, and files read by other C code (pyarrow's dataset readers, a folder `read_table` reads as
a dataset, a pyarrow reader bound by name before its task started: `from pyarrow.csv import
read_csv` in a module the job imports first in a step).
"""

from __future__ import annotations

import builtins
import functools
import io
import locale
import os
import stat
import sys
from typing import Any, Callable

from . import outside_effects
from .errors import ReplayDivergence
from .file_info import SYSTEM, absolute, real_stat
from .operator import CONTEXT

KEPT_BYTES = 1 << 20   # a file up to 1 MiB is logged by its bytes; a larger one by its size and digest
_WRITES = frozenset("wax+")
ENCODING = "locale.getpreferredencoding(False)"   # the process fact a text-mode `open` decodes by

_original: dict[str, Callable] = {}   # "open" -> `builtins.open` before `install`
_digests: dict[tuple[str, int, int], str] = {}   # (path, size, mtime_ns) -> xxh3-128 of a large file, this process
_large: dict[str, dict] = {}   # path -> {"size", "xxh3"}: the large files this process's recorded steps read
_kept: dict[str, dict] = {}    # path -> {"size", "xxh3"}: the small ones, whose bytes the run keeps (first read)
_unsent: dict[str, bytes] = {}   # xxh3 -> the bytes of a small file a recorded step read, until a task sends them
_sent: set[str] = set()          # ... and the digests sent (`take_contents`)


def install(users_step: Callable[..., bool], since: int) -> tuple[Callable, Callable]:
    """Patch `builtins.open` and `io.open` (`nondeterministic.install`, under its lock, once): a
    read in a step of a hooked operator recorded with version `since` or later goes through the
    runner. Returns (the original, its stand-in)."""
    if "open" in _original:
        return _original["open"], builtins.open
    original = _original["open"] = builtins.open

    @functools.wraps(original)   # (`io.open` by name, its doc; `__wrapped__`, as `logs.callable_name` reads)
    def open(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None, closefd=True, opener=None):
        runner = CONTEXT.runner
        if type(mode) is str and not _WRITES.isdisjoint(mode):   # a write: said, not logged (core/outside_effects.py)
            file = outside_effects.written(file, mode, users_step)   # (in a replay, a scratch copy)
            return original(file, mode, buffering, encoding, errors, newline, closefd, opener)
        return _opened(file, mode, buffering, encoding, errors, newline, closefd, opener, 3)

    _step.update(original=original, users_step=users_step, since=since)
    builtins.open = io.open = open
    return original, open


_step: dict[str, Any] = {}   # what `install` was given, for the readers that open through it (pyarrow's)


def _opened(file: Any, mode: Any, buffering: int, encoding: Any, errors: Any, newline: Any, closefd: bool,
            opener: Any, depth: int | None) -> Any:
    """A read by the patched `open`: through the runner where the call `depth` frames up is a
    step's (the log's record of the file, or in replay the file the recording read); `depth`
    None: the caller found it is."""
    original, runner = _step["original"], CONTEXT.runner
    if (runner is None or not runner.reads_logged or opener is not None or not closefd or type(mode) is not str
            or not isinstance(file, (str, bytes, os.PathLike))
            or (depth is not None and not _step["users_step"](depth, _step["since"]))):
        return original(file, mode, buffering, encoding, errors, newline, closefd, opener)
    path = absolute(runner, file)
    if path.startswith(SYSTEM):
        return original(file, mode, buffering, encoding, errors, newline, closefd, opener)
    if "b" not in mode and encoding is None:
        encoding = runner.read_environ(ENCODING, lambda _: locale.getpreferredencoding(False))
    read = runner.read_environ(f"open({path})", _recorded if not runner.replays else _contents)
    if not runner.replays or read is None:
        return original(file, mode, buffering, encoding, errors, newline, closefd, opener)
    return _served(runner, path, read, mode, encoding, errors, newline, original)


#: pyarrow's readers that open a local file given its path in C++, past `open`: (module, function,
#: whether the reader it returns goes on reading the file after the call: then it keeps it open)
_PYARROW_READERS = (("pyarrow.parquet.core", "read_table", False), ("pyarrow.csv", "read_csv", False),
                    ("pyarrow.csv", "open_csv", True), ("pyarrow.json", "read_json", False),
                    ("pyarrow.feather", "read_table", False), ("pyarrow.feather", "read_feather", False),
                    ("pyarrow.orc", "read_table", False))


def install_pyarrow_reads() -> None:
    """Patch pyarrow's readers of the modules loaded (`nondeterministic.prepare`, at each task's
    start): given a local file's path, `pyarrow.parquet.read_table` and `ParquetFile`,
    `pyarrow.csv.read_csv` and `open_csv`, `pyarrow.json.read_json`, `pyarrow.feather`'s and
    `pyarrow.orc`'s `read_table` read it in C++, past `open`, so a replay read the file as it is
    now. A step's call now opens the file through `open`'s log and hands pyarrow the file object:
    the recording logs it, a replay serves what it read."""
    if "original" not in _step:
        return
    for name, function, streams in _PYARROW_READERS:
        module = sys.modules.get(name)
        key = f"{name}.{function}"
        if module is None or key in _original or not callable(getattr(module, function, None)):
            continue
        original = _original[key] = getattr(module, function)
        setattr(module, function, _reading(original, streams))
        if name == "pyarrow.parquet.core":
            outer = sys.modules.get("pyarrow.parquet")   # (the package's own name for it)
            if getattr(outer, function, None) is original:
                setattr(outer, function, getattr(module, function))
            _patch_parquet_file(module)


def _reading(original: Callable, streams: bool) -> Callable:
    """`original`, a pyarrow reader, handed a step's local file opened through `open`'s log."""
    @functools.wraps(original)
    def read(source, *args, **kwargs):
        file = _step_file(source, kwargs)
        if file is None:
            return original(source, *args, **kwargs)
        if streams:   # (the file is closed with the reader, when it is let go)
            return original(file, *args, **kwargs)
        with file:
            return original(file, *args, **kwargs)
    return read


def _patch_parquet_file(pq: Any) -> None:
    parquet_file = pq.ParquetFile.__init__

    @functools.wraps(parquet_file)
    def __init__(self, source, *args, **kwargs):
        file = _step_file(source, kwargs)
        parquet_file(self, source if file is None else file, *args, **kwargs)
    pq.ParquetFile.__init__ = __init__


def _step_file(source: Any, kwargs: dict) -> Any:
    """`source` opened through `open`'s log where a step reads a local file by its path (the
    caller of the patched reader); None where pyarrow reads it as given."""
    runner = CONTEXT.runner
    if (runner is None or not runner.reads_logged or kwargs.get("filesystem") is not None
            or not isinstance(source, (str, os.PathLike)) or "://" in os.fspath(source)
            or not _step["users_step"](3, _step["since"]) or os.path.isdir(source)):
        return None
    return _opened(source, "rb", -1, None, None, None, True, None, None)   # (a step's: asked above)


SPARK_FILES_ROOT = "pyspark.SparkFiles.getRootDirectory()"   # the process fact `SparkFiles.get` joins to


def install_spark_files(users_step: Callable[..., bool], since: int) -> None:
    """Patch `SparkFiles.get` and `getRootDirectory` once PySpark is loaded
    (`nondeterministic.prepare`): a step's `SparkFiles.get(name)` (a file the job gave its
    executors with `addFile`) joins `name` to the executor's root directory, logged as a process
    fact, which `getRootDirectory()` answers. A replay has no Spark to ask, and both raised
    there; now they give the executor's paths, whose files were logged when the step opened them."""
    module = sys.modules.get("pyspark.core.files")
    spark_files = getattr(module, "SparkFiles", None)
    if spark_files is None or "SparkFiles.get" in _original:
        return
    original = _original["SparkFiles.get"] = spark_files.get   # (bound to the class)
    root_of = _original["SparkFiles.getRootDirectory"] = spark_files.getRootDirectory

    def logged_root(cls) -> str | None:
        """The executor's root directory, logged, where a step asks; None elsewhere."""
        runner = CONTEXT.runner
        if runner is None or not runner.reads_logged or cls is not spark_files or not users_step(3, since):
            return None
        return runner.read_environ(SPARK_FILES_ROOT, lambda _: root_of.__func__(cls))

    def get(cls, filename):
        root = logged_root(cls)
        if root is None:
            return original.__func__(cls, filename)
        return os.path.abspath(os.path.join(root, filename))

    def getRootDirectory(cls):
        root = logged_root(cls)
        return root_of.__func__(cls) if root is None else root
    spark_files.get = classmethod(functools.wraps(original.__func__)(get))
    spark_files.getRootDirectory = classmethod(functools.wraps(root_of.__func__)(getRootDirectory))


def take_contents() -> dict[str, bytes]:
    """The bytes of the small files this process's recorded steps read that no task has sent yet,
    by digest: a recording task sends them with its logs (recorder/task.py)."""
    taken = dict(_unsent)
    _unsent.clear()
    _sent.update(taken)
    return taken


def large() -> dict[str, dict]:
    """The files too large to keep that this process's recorded steps read, path -> `{"size",
    "xxh3"}`: a replay needs them where it runs (the task's end names them: `tt inspect`)."""
    return dict(_large)


def kept() -> dict[str, dict]:
    """The small files this process's recorded steps read, path -> `{"size", "xxh3"}` as first
    read: the run keeps their bytes, so a replay needs none of them, and `tt inspect` names them."""
    return dict(_kept)


def here(path: str, read: dict) -> str:
    """Whether a large file a run read (`{"size", "xxh3"}`) is here as it was: `unchanged`,
    `changed` or `missing`."""
    found = _contents(f"open({path})")
    if found == read:
        return "unchanged"
    return "missing" if found is None or (type(found) is dict and "errno" in found) else "changed"


def _contents(name: str, kept: dict | None = None) -> Any:
    """What a step reading file `open(PATH)` read (the value logged under that name): its size and
    xxh3-128, `{"size", "xxh3"}`, or `{"errno"}` where it could not be opened; None where it is not
    a regular file (a FIFO: not read here, and opened as it is). `kept`: where a file of up to
    `KEPT_BYTES` goes by its digest, its bytes."""
    path = name[len("open("):-1]
    try:
        info = real_stat(path)
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > KEPT_BYTES:
            return {"size": info.st_size, "xxh3": _digest(path, info)}
        with _plain_open(path) as f:   # (read whole each time: a file rewritten within the clock's tick keeps its time)
            data = f.read()
    except OSError as e:
        return {"errno": e.errno}
    import xxhash

    digest = xxhash.xxh3_128(data).hexdigest()
    if kept is not None:
        kept[digest] = data
    return {"size": len(data), "xxh3": digest}


def _recorded(name: str) -> Any:
    """`_contents` as a recording step logs it: a small file's bytes kept to be sent (once a
    process), a large one's identity kept for the task's end (`large`)."""
    kept: dict[str, bytes] = {}
    read = _contents(name, kept)
    for digest, data in kept.items():
        if digest not in _sent:
            _unsent[digest] = data
    if type(read) is dict and "xxh3" in read:
        (_large if read["size"] > KEPT_BYTES else _kept).setdefault(name[len("open("):-1], read)
    return read


def _digest(path: str, info: os.stat_result) -> str:
    """xxh3-128 of a large file's bytes, remembered by its size and modification time."""
    key = (path, info.st_size, info.st_mtime_ns)
    digest = _digests.get(key)
    if digest is None:
        import xxhash

        h = xxhash.xxh3_128()
        with _plain_open(path) as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        digest = _digests[key] = h.hexdigest()
    return digest


def _plain_open(path: str) -> Any:
    """`path` opened for reading bytes, by `open` as it was before `install` (if it ran)."""
    return _original.get("open", builtins.open)(path, "rb")


def _served(runner: Any, path: str, read: dict, mode: str, encoding: Any, errors: Any, newline: Any,
            original: Callable) -> Any:
    """In replay: what the step opens, from what the recording read (`_contents`): the bytes the
    run holds of it, or the file here where it is the same."""
    if "errno" in read:
        raise OSError(read["errno"], os.strerror(read["errno"]), path)
    data = runner.file_contents(read["xxh3"])
    if data is not None:
        raw = _LoggedFile(data, path)
        if "b" in mode:
            return raw
        text = io.TextIOWrapper(raw, encoding=encoding, errors=errors, newline=newline)
        text.mode = mode
        return text
    here = _contents(f"open({path})")
    if here != read:
        if here is None or "errno" in here:
            what = "not a regular file here" if here is None else os.strerror(here["errno"]).lower() + " here"
        else:
            what = f"{here['size']:,} bytes here" + (", other contents" if here["size"] == read["size"] else "")
        kept = "too large to keep in the run file" if read["size"] > KEPT_BYTES else "not in the run file"
        raise ReplayDivergence(
            f"{runner.label} input #{runner.count} reads {path}, {read['size']:,} bytes when recorded "
            f"({kept}), {what}: put the recorded file there to replay this step, or `tt pack` the run where it is",
            op=runner.name, instance=runner.instance, position=runner.count)
    return original(path, mode, -1, encoding, errors, newline)


class _LoggedFile(io.BytesIO):
    """A file's bytes as the recording read them, opened for reading (`name` as `open` gives it)."""

    def __init__(self, data: bytes, name: str):
        super().__init__(data)
        self.name, self.mode = name, "rb"

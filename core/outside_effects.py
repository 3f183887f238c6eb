"""What a hooked function's step does outside itself: said, never logged.

**Network connections.** A function that asks a service (an HTTP lookup, a database, a cache)
gets answers that tt does not log: a replay connects again, fails where it runs offline, and may
get other answers from a peer that has changed since, so the states after that step can differ
from the recording's. Nothing said so: the run looked as trustworthy as one whose every answer
was logged. So `socket.socket.connect` and `connect_ex`, patched once per process by
`nondeterministic.install`, note the first connection an instance's steps make while recording.

**Files written.** A sink (`foreachPartition`) or a function that writes a file as it goes
(`open(path, "a")`, `DataFrame.to_csv(path)`) wrote it again in every replay: `tt debug` and
`tt verify` run the step again, and a job's output file got the replay's lines after its own
(a `tt verify` doubled them). tt does not log what a step writes. `open()` for writing
(core/files_read.py, which patches it) notes the first file an instance's steps write while
recording (`note_write`), and in a replay opens a scratch copy in its place (`scratch`): under
one folder a replaying process makes, at the file's absolute path, removed when the process
ends. What the step reads back through `open` is served from the log, as any read.

A note goes on its runner (`take` hands the notes to its task, which sends them with its next
logs; the coordinator says a note once a run, whatever the number of tasks that made it); the
run keeps it among its warnings, which `tt record` prints, `tt inspect` and `tt verify` say
again, and `tt debug` says when its replay engine is ready (as it does any warning of the
recording's). A connection or a write made by PySpark, by tt itself, or by a library outside a
step is not the function's (`nondeterministic.users_step`) and passes unnoted; a replay's pass
unnoted too.

`os.open` with a flag that writes (`O_WRONLY`, `O_RDWR`, `O_CREAT`, `O_TRUNC`, `O_APPEND`) and
pyarrow's writers on a local path (`ParquetWriter` and so `parquet.write_table`, `csv.write_csv`,
`feather.write_feather`, `orc.ORCWriter` and so `orc.write_table`, `ipc.new_file` and
`ipc.new_stream`: their C++ code opens the file itself) are noted and redirected the same way
(`install`, `install_pyarrow`): a replay that stopped part way through a writer's steps left the
job's file cut short, and `tt verify` rewrote a sink's CSV and Feather files.
A replayed step's `os.replace`, `os.rename` (`shutil.move`, `Path.replace`), `os.remove`,
`os.unlink`, `os.mkdir` (`os.makedirs`), `os.rmdir`, `shutil.rmtree`, `os.truncate`,
`os.chmod`, `os.utime`, `os.link` and `os.symlink` act on the scratch copies: a sink that
writes a temporary file and moves it onto its name, or clears and makes its folder, works in
replay, and what the recording moved, removed, made, cut short or linked stays as the job
left it.

Not covered: datagrams sent without `connect` (`sendto`), connections made by C code, and files
written by other C code (pyarrow's `csv.CSVWriter`, a C++ class, and its dataset writers), which
a replay writes again where they are.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import socket
import sys
import tempfile
from typing import Any, Callable

from .operator import CONTEXT

_installed = False


def install(users_step: Callable[..., bool]) -> None:
    """Patch `socket.socket.connect` and `connect_ex`, and the `os` and `shutil` calls that write,
    move or remove files (`nondeterministic.install`, under its lock, once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    for name in ("connect", "connect_ex"):
        setattr(socket.socket, name, _noting(getattr(socket.socket, name), users_step))
    os.open = _os_open(os.open, users_step)
    os.replace, os.rename = _moving(os.replace, users_step), _moving(os.rename, users_step)
    os.remove, os.unlink = _removing(os.remove, users_step), _removing(os.unlink, users_step)
    os.mkdir, os.rmdir = _folder(os.mkdir, users_step, made=True), _folder(os.rmdir, users_step, made=False)
    shutil.rmtree = _removing_tree(shutil.rmtree, users_step)
    os.truncate = _changing(os.truncate, users_step, copy=True)
    os.chmod, os.utime = _changing(os.chmod, users_step, copy=False), _changing(os.utime, users_step, copy=False)
    os.link, os.symlink = _linking(os.link, users_step, hard=True), _linking(os.symlink, users_step, hard=False)


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _os_open(original: Callable, users_step: Callable[..., bool]) -> Callable:
    """`os.open` with a flag that writes: as `open` for writing (`written`)."""
    @functools.wraps(original)
    def open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & _WRITE_FLAGS and dir_fd is None:
            # (as `open(path, "x")`, "r+" or "w" would: `scratch` starts a copy from the file where it reads too)
            path = written(path, "x" if flags & os.O_EXCL else "+" if flags & os.O_RDWR and not flags & os.O_TRUNC
                            else "w", users_step)
        return original(path, flags, mode, dir_fd=dir_fd)
    return open


def written(path: Any, mode: str, users_step: Callable[..., bool], depth: int = 3) -> Any:
    """Where a write to `path` by a step goes: the path itself while recording (the first noted:
    `note_write`), its scratch copy in a replay; the path as given where no step writes. The
    patched `open`, `os.open` and `ParquetWriter` call it (`depth`: the frame of their caller)."""
    runner = CONTEXT.runner
    if (runner is None or not runner.reads_logged or not isinstance(path, (str, bytes, os.PathLike))
            or not (runner.replays or runner.write_note is None) or not users_step(depth=depth)):
        return path
    absolute = os.path.abspath(os.fsdecode(path))   # (`file_info.absolute` logs)
    if runner.replays:
        return scratch(absolute, mode)
    note_write(runner, absolute)
    return path


def _replayed_step(path: Any, users_step: Callable[..., bool]) -> bool:
    """Whether a replay is running a step that made the call (the caller of the patched function
    that asks) on `path`."""
    runner = CONTEXT.runner
    return (runner is not None and runner.replays and isinstance(path, (str, bytes, os.PathLike))
            and users_step(depth=3))


def _scratched(path: Any) -> str | None:
    """Where `path`'s scratch copy is, made or not (None before a replay wrote one)."""
    if not _scratch_root:
        return None
    return os.path.join(_scratch_root[0], os.path.abspath(os.fsdecode(path)).lstrip(os.sep))


def _moving(original: Callable, users_step: Callable[..., bool]) -> Callable:
    """`os.replace` or `os.rename`: in a replayed step, of the scratch copies (a sink that writes
    a temporary file and moves it onto its name raised `FileNotFoundError` in replay, its
    temporary file being a scratch copy); a file the replay holds no copy of was moved by the
    recording, and is left where it is."""
    @functools.wraps(original)
    def move(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        if src_dir_fd is None and dst_dir_fd is None and _replayed_step(src, users_step):
            here = _scratched(src)
            if here is None or not os.path.lexists(here):
                return None
            return original(here, scratch(os.path.abspath(os.fsdecode(dst)), "w"))
        return original(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
    return move


def _removing(original: Callable, users_step: Callable[..., bool]) -> Callable:
    """`os.remove` or `os.unlink`: in a replayed step, of the scratch copy; the job's own file,
    which the recording removed, is left."""
    @functools.wraps(original)
    def remove(path, *, dir_fd=None):
        if dir_fd is None and _replayed_step(path, users_step):
            here = _scratched(path)
            return original(here) if here is not None and os.path.lexists(here) else None
        return original(path, dir_fd=dir_fd)
    return remove


def _folder(original: Callable, users_step: Callable[..., bool], made: bool) -> Callable:
    """`os.mkdir` (`os.makedirs`) or `os.rmdir`: in a replayed step, of the scratch copies. The
    recording made the job's folder, and a replay found it there (`FileExistsError` where the
    recording had none); it removed one, which a replay leaves."""
    @functools.wraps(original)
    def folder(path, *args, dir_fd=None, **kwargs):
        if dir_fd is None and _replayed_step(path, users_step):
            here = _scratched(path) if not made else scratch(os.path.abspath(os.fsdecode(path)), "w")
            if made:
                os.makedirs(here, exist_ok=True)   # (made again when the step is replayed again)
            elif here is not None and os.path.isdir(here):
                original(here)
            return None
        return original(path, *args, dir_fd=dir_fd, **kwargs)
    return folder


def _removing_tree(original: Callable, users_step: Callable[..., bool]) -> Callable:
    """`shutil.rmtree`: in a replayed step, of the scratch copies only (it removes a folder's files
    by descriptor, past `os.remove`): the job's folder, as the recording left it, stays."""
    @functools.wraps(original)
    def rmtree(path, *args, **kwargs):
        if _replayed_step(path, users_step):
            here = _scratched(path)
            if here is not None and os.path.isdir(here):
                original(here, ignore_errors=True)
            return None
        return original(path, *args, **kwargs)
    return rmtree


def _changing(original: Callable, users_step: Callable[..., bool], copy: bool) -> Callable:
    """`os.truncate`, `os.chmod` or `os.utime` of a path: in a replayed step, of its scratch copy
    (`copy`: made from the job's file first, as `open(path, "r+")` would; else only where the
    replay wrote one). The job's file stays as the recording left it: a replayed sink that
    truncated it cut the job's output short."""
    @functools.wraps(original)
    def change(path, *args, **kwargs):
        if kwargs.get("dir_fd") is None and _replayed_step(path, users_step):   # (a path, not a descriptor)
            here = scratch(os.path.abspath(os.fsdecode(path)), "+") if copy else _scratched(path)
            if here is None or not os.path.lexists(here):
                return None
            return original(here, *args, **kwargs)
        return original(path, *args, **kwargs)
    return change


def _linking(original: Callable, users_step: Callable[..., bool], hard: bool) -> Callable:
    """`os.link` or `os.symlink`: in a replayed step, the new name is made among the scratch
    copies (a hard link there to the scratch copy of its source, or to a copy of the job's file),
    not beside the job's files."""
    @functools.wraps(original)
    def link(src, dst, *args, **kwargs):
        if not args and kwargs.get("dir_fd") is None and kwargs.get("src_dir_fd") is None and \
                kwargs.get("dst_dir_fd") is None and _replayed_step(dst, users_step):
            here = scratch(os.path.abspath(os.fsdecode(dst)), "x")
            if hard:
                source = scratch(os.path.abspath(os.fsdecode(src)), "+")
                if not os.path.lexists(source):
                    raise FileNotFoundError(2, "No such file or directory", os.fsdecode(src))
                return original(source, here, **kwargs)
            return original(src, here, **kwargs)
        return original(src, dst, *args, **kwargs)
    return link


#: pyarrow's writers that open a local path in C++, past `open`: (module, function or class, the
#: path's parameter and its place among the call's arguments, after `self` for a class; a
#: `filesystem` argument's place, where it takes one: a path on a filesystem it is given is not local)
_PYARROW_WRITERS = (("pyarrow.parquet.core", "ParquetWriter", "where", 0, 2),
                    ("pyarrow.csv", "write_csv", "output_file", 1, None),
                    ("pyarrow.feather", "write_feather", "dest", 1, None), ("pyarrow.orc", "ORCWriter", "where", 0, None),
                    ("pyarrow.ipc", "RecordBatchFileWriter", "sink", 0, None),
                    ("pyarrow.ipc", "RecordBatchStreamWriter", "sink", 0, None))


def install_pyarrow(users_step: Callable[..., bool]) -> None:
    """Patch pyarrow's writers of the modules loaded (`nondeterministic.prepare`, at each task's
    start): given a local path (and, for `ParquetWriter`, no filesystem), their C++ code opens
    the file, past `open`. A step's path goes through `written`, as `open`'s does. Functions
    that write through these classes (`pyarrow.parquet.write_table`, `pyarrow.orc.write_table`,
    `pyarrow.ipc.new_file`) go with them; `pyarrow.csv.CSVWriter`, a C++ class, does not."""
    for name, what, parameter, at, filesystem in _PYARROW_WRITERS:
        target = getattr(sys.modules.get(name), what, None)
        if target is None:
            continue
        is_class = isinstance(target, type)
        original = target.__init__ if is_class else target
        if getattr(original, "_tt_writes", False):
            continue
        patched = _writing(original, parameter, at + is_class, None if filesystem is None else filesystem + is_class,
                           users_step)
        if is_class:
            target.__init__ = patched
        else:
            setattr(sys.modules[name], what, patched)


def _writing(original: Callable, parameter: str, at: int, filesystem: int | None,
             users_step: Callable[..., bool]) -> Callable:
    """`original`, whose argument `parameter` (or its `at`-th) is where it writes, writing a
    step's local path where `written` says."""
    @functools.wraps(original)
    def write(*args, **kwargs):
        where = kwargs.get(parameter) if parameter in kwargs else args[at] if len(args) > at else None
        given = kwargs.get("filesystem") if filesystem is None or len(args) <= filesystem else args[filesystem]
        if isinstance(where, (str, os.PathLike)) and "://" not in os.fspath(where) and given is None:
            where = written(where, "w", users_step)
            if parameter in kwargs:
                kwargs[parameter] = where
            else:
                args = (*args[:at], where, *args[at + 1:])
        return original(*args, **kwargs)
    write._tt_writes = True
    return write


def _noting(original: Callable, users_step: Callable[..., bool]) -> Callable:
    def call(self, address):
        runner = CONTEXT.runner
        if (runner is not None and runner.reads_logged and not runner.replays and runner.network_note is None
                and users_step(depth=2)):
            runner.network_note = (
                f"{runner.name}: a step connected to {_peer(address)}; tt does not log what a network peer "
                f"answers, so a replay connects again: offline it fails, and a peer that answers otherwise "
                f"gives other states than the recording's (tt verify compares them)")
        return original(self, address)
    call.__name__ = call.__qualname__ = original.__name__
    call.__doc__ = original.__doc__
    return call


def _peer(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)   # a Unix socket's path


def note_write(runner: Any, path: str) -> None:
    """A recorded step of `runner` opened `path` for writing: noted where it is the first."""
    if runner.write_note is None:
        runner.write_note = (
            f"{runner.name}: a step wrote {path}; tt does not log what a step writes, and a replay (tt debug, "
            f"tt verify) writes a scratch copy of it instead, which it removes")


_scratch_root: list[str] = []   # the folder this process's replays write into, once made


def scratch(path: str, mode: str) -> str:
    """Where a replayed step's `open(path, mode)` for writing opens instead: the same absolute
    path under a folder of this process's. A mode that also reads (`r+`, `a+`) starts from the
    file as it is here, where it is; an exclusive create (`x`) from nothing, as each replay of the
    step creates it again."""
    if not _scratch_root:
        _scratch_root.append(tempfile.mkdtemp(prefix="tt-replay-writes-"))
        atexit.register(shutil.rmtree, _scratch_root[0], True)
    target = os.path.join(_scratch_root[0], path.lstrip(os.sep))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if "x" in mode and os.path.lexists(target):
        os.remove(target)
    elif "+" in mode and not os.path.exists(target) and os.path.isfile(path):
        shutil.copyfile(path, target)
    return target


def take(runners: list) -> list[str]:
    """The notes of `runners` (a task's recording instances) not sent yet; each once a task (the
    coordinator says each once a run)."""
    notes = []
    for r in runners:
        for attribute in ("network_note", "write_note"):
            note = getattr(r, attribute)
            if note:
                notes.append(note)
                setattr(r, attribute, "")
    return notes


__all__ = ["install", "install_pyarrow", "note_write", "scratch", "take", "written"]

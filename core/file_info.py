"""What a hooked function's step asks of paths without reading a file: stat results and listings.

A job's function checks `os.path.exists(rules)` before it opens them, sizes a file with
`os.path.getsize`, or reads every file of a folder it lists (`os.listdir`, `glob.glob`,
`os.walk`). A replay on another machine, or after the folder changed, took the other branch,
raised `FileNotFoundError`, or listed other files, and never asked for the bytes the run holds
(core/files_read.py). So `os.stat`, `os.lstat`, `os.listdir` and `os.scandir` go through the
runner where a hooked function's step calls them on a path (patched once per process by
`nondeterministic.install`, for runs of its version 6 on), and with them what calls them:
`os.path.exists`, `isfile`, `isdir`, `islink`, `lexists`, `getsize`, `getmtime`, pathlib's `exists`,
`is_file`, `stat` and `iterdir`, `glob.glob` and `os.walk`.

Each answer is logged as an environment variable's value is (`Runner.read_environ`), once per
path and instance and again where it changed, under `stat(/abs/path)`, `lstat(...)`,
`listdir(...)` or `scandir(...)`: a stat result's fields, a folder's names in the order the
system gave them (with each entry's kind, for `scandir`), or the `errno` of a path that was not
there, raised again. Recording and replay alike hand the step what is logged: an
`os.stat_result` made of its fields, the names, or `LoggedEntry`s standing for `os.DirEntry`s
(whose `stat()` is a logged `os.stat` of its path).

A relative path is the executor's folder's (`os.getcwd()`, a process fact). A descriptor, a
`dir_fd`, and the system's folders (/proc, /sys, /dev) go to the real calls.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from .operator import CONTEXT

SYSTEM = ("/proc/", "/sys/", "/dev/")   # not where a job's data lives (and some files never end)
CWD = "os.getcwd()"   # the process fact a relative path is read from

_original: dict[str, Callable] = {}   # "stat", "lstat", "listdir", "scandir" -> the function before `install`


def absolute(runner: Any, file: Any) -> str:
    """The absolute, normalized path a step names (`str`, `bytes` or a path object): a relative
    one is the executor's folder's, a process fact (`CWD`)."""
    path = os.fsdecode(file)
    if not os.path.isabs(path):
        path = os.path.join(runner.read_environ(CWD, lambda _: os.getcwd()), path)
    return os.path.normpath(path)


def real_stat(path: Any) -> os.stat_result:
    """`os.stat` as it was before `install` (tt's own look at a file, never logged)."""
    return _original.get("stat", os.stat)(path)


def install(users_step: Callable[..., bool], since: int) -> list[tuple[Callable, Callable]]:
    """Patch `os.stat`, `os.lstat`, `os.listdir` and `os.scandir` (`nondeterministic.install`,
    under its lock, once): a step of a hooked operator recorded with version `since` or later
    gets its answers through the runner. Returns each (original, stand-in)."""
    if _original:
        return []

    def asked(path: Any, dir_fd: Any) -> Any:
        """The runner, where this call is a step's question about a path; None for the real call."""
        runner = CONTEXT.runner
        if (runner is None or not runner.reads_logged or dir_fd is not None
                or not isinstance(path, (str, bytes, os.PathLike)) or not users_step(depth=3, since=since)):
            return None
        return runner

    def stat(path, *, dir_fd=None, follow_symlinks=True):
        runner = asked(path, dir_fd)
        if runner is None:
            return _original["stat"](path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
        return _stat(runner, path, "stat" if follow_symlinks else "lstat")

    def lstat(path, *, dir_fd=None):
        runner = asked(path, dir_fd)
        if runner is None:
            return _original["lstat"](path, dir_fd=dir_fd)
        return _stat(runner, path, "lstat")

    def listdir(path=None):
        runner = asked("." if path is None else path, None)
        if runner is None:
            return _original["listdir"](path)
        names = _logged(runner, "." if path is None else path, "listdir")
        return [os.fsencode(n) for n in names] if isinstance(path, bytes) else list(names)

    def scandir(path=None):
        runner = asked("." if path is None else path, None)
        if runner is None:
            return _original["scandir"](path)
        given = "." if path is None else os.fspath(path)
        return LoggedListing([LoggedEntry(given, *entry) for entry in _logged(runner, given, "scandir")])

    patched = []
    for name, stand_in in (("stat", stat), ("lstat", lstat), ("listdir", listdir), ("scandir", scandir)):
        original = _original[name] = getattr(os, name)
        stand_in = functools.wraps(original)(stand_in)
        setattr(os, name, stand_in)   # (`os.walk` looks `scandir` up in the module's globals: this one)
        patched.append((original, stand_in))
    return patched


def _stat(runner: Any, path: Any, kind: str) -> os.stat_result:
    """A step's `os.stat` (`kind` "stat") or `os.lstat` ("lstat") of `path`, from the log."""
    value = _logged(runner, path, kind)
    return value if type(value) is os.stat_result else os.stat_result(value["fields"], value["more"])


def _logged(runner: Any, path: Any, kind: str) -> Any:
    """What call `kind` answered of `path` as the runner logs it (`_answer`; for `os.listdir`,
    names; for `os.scandir`, [name, is directory, is file, is link] each), its errno raised
    again; the real answer for the system's folders."""
    where = absolute(runner, path)
    if where.startswith(SYSTEM):
        return _here(kind, os.fspath(path))
    value = runner.read_environ(f"{kind}({where})", _answer)
    if type(value) is dict and "errno" in value:
        raise OSError(value["errno"], os.strerror(value["errno"]), os.fspath(path))
    return value


def _answer(name: str) -> Any:
    """What the call `name` (`stat(PATH)`, `lstat(...)`, `listdir(...)`, `scandir(...)`) answers
    here, as it is logged: a stat result as `{"fields": [...], "more": {...}}` (its ten items and
    its named fields beyond them: the times in nanoseconds, the blocks), a listing as
    `_here` gives it, or `{"errno"}`."""
    kind, path = name[:-1].split("(", 1)
    try:
        value = _here(kind, path)
    except OSError as e:
        return {"errno": e.errno}
    if type(value) is not os.stat_result:
        return value
    fields, more = value.__reduce__()[1]
    return {"fields": list(fields), "more": more}


def _here(kind: str, path: Any) -> Any:
    """What call `kind` answers of `path` here: its stat result (`stat`, `lstat`), folder
    `path`'s names in the system's order (`listdir`), or with each entry's kind (`scandir`):
    [name, is a directory, is a file (both through a link), is a link]."""
    if kind != "scandir":
        return _original[kind](path)
    out = []
    with _original["scandir"](path) as entries:
        for e in entries:
            out.append([e.name, e.is_dir(), e.is_file(), e.is_symlink()])
    return out


class LoggedEntry:
    """An `os.DirEntry` as a logged `scandir` gave it: its name, path and kind; `stat()` and
    `inode()` ask `os.stat`/`os.lstat` of its path (logged as any step's)."""

    __slots__ = ("name", "path", "_dir", "_file", "_link")

    def __init__(self, folder: Any, name: str, is_dir: bool, is_file: bool, is_link: bool):
        if isinstance(folder, bytes):
            self.name = os.fsencode(name)
        else:
            self.name = name
        self.path = os.path.join(folder, self.name)
        self._dir, self._file, self._link = is_dir, is_file, is_link

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._dir and (follow_symlinks or not self._link)

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._file and (follow_symlinks or not self._link)

    def is_symlink(self) -> bool:
        return self._link

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        kind = "stat" if follow_symlinks else "lstat"
        runner = CONTEXT.runner   # (a step's entry: asked during a step, logged as its `os.stat` is)
        if runner is None or not runner.reads_logged:
            return _original[kind](self.path)
        return _stat(runner, self.path, kind)

    def inode(self) -> int:
        return self.stat(follow_symlinks=False).st_ino

    def __fspath__(self) -> Any:
        return self.path

    def __repr__(self) -> str:
        return f"<LoggedEntry {self.name!r}>"


class LoggedListing:
    """What a logged `os.scandir` returns: its entries' iterator, usable in a `with` as the real one."""

    def __init__(self, entries: list[LoggedEntry]):
        self._entries = iter(entries)

    def __iter__(self) -> "LoggedListing":
        return self

    def __next__(self) -> LoggedEntry:
        return next(self._entries)

    def __enter__(self) -> "LoggedListing":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._entries = iter(())

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

Not covered: datagrams sent without `connect` (`sendto`), connections made by C code, and files
written by C code (pyarrow's writers: `DataFrame.to_parquet`) or through `os.open`, which a replay
writes again where they are.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
from typing import Any, Callable

from .operator import CONTEXT

_installed = False


def install(users_step: Callable[..., bool]) -> None:
    """Patch `socket.socket.connect` and `connect_ex` (`nondeterministic.install`, under its
    lock, once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    for name in ("connect", "connect_ex"):
        setattr(socket.socket, name, _noting(getattr(socket.socket, name), users_step))


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


__all__ = ["install", "note_write", "scratch", "take"]

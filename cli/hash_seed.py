"""`tt` runs a replay with the hash seed the job's Python workers ran with.

CPython salts the hash of a str with a seed it takes when it starts (PYTHONHASHSEED, random
where unset), and a set of strings iterates in the order of their hashes. PySpark starts its
Python workers with the driver's PYTHONHASHSEED, else 0; a replay in a shell that sets none ran
with a random one, so a job's function that walks `set(words)` met the words in another order
than when recorded (a job keeping each partition's words in the order it met them failed
`tt verify` 3 runs of 3). A process cannot
change its seed: so a command that replays starts itself again, at once, with the seed the run
recorded (`RunReader.hash_seed`), and `tt record` and `tt demo` with the one the workers will
get, so that the debugger they open on the run (`--tui`, the demo's) replays alike. Starting
again costs `tt verify` 0.1 s here (0.31–0.35 s, against 0.19–0.21 s with the seed set);
a shell that exports PYTHONHASHSEED=0, as PySpark's own `bin/pyspark` does, pays none.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: commands that replay a run, and commands that record one (and may open the debugger on it)
REPLAYING = frozenset({"debug", "verify", "replay", "lineage", "checkpoint"})
RECORDING = frozenset({"record", "demo"})


def rerun_with_hash_seed(argv: list[str]) -> None:
    """Exec `tt ARGV` again with the hash seed it must replay with, where this process has
    another; return where it has it, or where it cannot tell (no run file named: the command
    then says what is wrong)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in RECORDING:
        want = os.environ.get("PYTHONHASHSEED") or "0"   # what PySpark gives the workers
    elif command in REPLAYING:
        want = _recorded(argv[argv.index(command) + 1:])
    else:
        return
    if want is None or not want.isdigit() or os.environ.get("PYTHONHASHSEED") == want:
        return
    script = sys.argv[0] if sys.argv and Path(sys.argv[0]).is_file() else ""
    again = [script] if script and Path(script).name != "__main__.py" else ["-m", "tt"]   # as it was started
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *again, *argv], {**os.environ, "PYTHONHASHSEED": want})


def _recorded(args: list[str]) -> str | None:
    """The hash seed of the run file among `args` (the first existing file), if it has one."""
    from ..store.reader import RunReader

    path = next((a for a in args if not a.startswith("-") and Path(a).is_file()), None)
    if path is None:
        return None
    try:
        reader = RunReader(path)
        try:
            return reader.hash_seed
        finally:
            reader.close()
    except Exception:   # noqa: BLE001  (not a run file: the command says so, in one line)
        return None

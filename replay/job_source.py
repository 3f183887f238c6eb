"""The job's source as it ran, for the tracebacks a replay shows.

A replayed operator that raises has its traceback formatted on the debugging machine,
which may not have the job's files (a laptop over SSH) or may have newer ones. The run
stores the job's Python files (`job_files`, keyed by the path they had when recorded);
`serve` puts them into linecache under those paths, so a traceback shows the lines
that ran, not what the disk holds now (or nothing).
"""

from __future__ import annotations

import linecache
from pathlib import PurePath

from ..store.reader import RunReader


def recorded_paths(reader: RunReader) -> dict[str, str]:
    """{path when recorded: source}. Runs recorded before the paths were kept store them
    relative to the job's folder; they are placed there when the job's own file is among them."""
    files = reader.job_files()
    relative = {p: t for p, t in files.items() if not PurePath(p).is_absolute()}
    out = {p: t for p, t in files.items() if p not in relative}
    job = reader.run.get("job") or ""
    if relative and PurePath(job).is_absolute() and PurePath(job).name in relative:
        root = PurePath(job).parent
        out.update((str(root / p), t) for p, t in relative.items())
    return out


def job_folder(reader: RunReader) -> str | None:
    """The folder the job's file was in when recorded (its modules beside it), if the run says."""
    job = PurePath(reader.run.get("job") or "")
    if job.is_absolute():
        return str(job.parent)
    return next((str(PurePath(p).parent) for p in recorded_paths(reader) if PurePath(p).name == job.name), None)


def serve(reader: RunReader) -> int:
    """Put the run's job files into linecache (a no-mtime entry: `checkcache` keeps it, and a
    file on disk with other lines does not replace it); how many."""
    files = recorded_paths(reader)
    for path, text in files.items():
        lines = text.splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        linecache.cache[path] = (len(text), None, lines, path)
    return len(files)

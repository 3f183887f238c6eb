"""Row positions of a file source: which rows of which files a chunk of input was.

A source read from Parquet files is not copied into the run file: each chunk of
its rows is stored as references, a list of (file id, row positions), the
positions as runs of consecutive rows. Spark hands a task the rows of a file in
position order, so a whole split is one run and a filter leaves few; only the
gaps cost bytes. A counted chunk (format 4) holds no positions at all: only its
task and how many of the task's rows came before it; replay derives them from
the task's splits and the scan's filter (store/sources.py).

This module runs in Spark's Python workers and in replay: numpy is the only
thing it needs beyond the standard library, and it imports it when called.
"""

from __future__ import annotations

import struct
from typing import Any

from ..core import errors

_HEAD = struct.Struct("<IIq")   # format version, source node, segments
_SEG = struct.Struct("<qq")      # file id, runs
_WIDTHS = struct.Struct("<BB")   # format 2: bytes per gap, bytes per length (1, 2, 4 or 8)
_DIGEST = 16                     # format 3: the chunk's values digest (store/row_digest.py) after the header
_COUNTED = struct.Struct("<qqq")  # format 4, after the digest: task, rows before the chunk, rows
VERSION = 3
COUNTED = 4                      # a counted chunk: no positions, they follow from the task's splits
READS = (1, 2, 3, 4)


def runs(rows: Any) -> tuple[Any, Any]:
    """(starts, lengths) of the runs of consecutive values in an int64 array."""
    import numpy as np

    if len(rows) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    first = np.concatenate(([0], breaks))
    last = np.concatenate((breaks - 1, [len(rows) - 1]))
    return rows[first], rows[last] - rows[first] + 1


def segments(rows: Any, files: Any) -> list[tuple[int, Any]]:
    """Split a chunk's positions where the file changes: [(file id, positions)]."""
    import numpy as np

    if len(rows) == 0:
        return []
    cut = np.flatnonzero(np.diff(files) != 0) + 1
    bounds = np.concatenate(([0], cut, [len(rows)]))
    return [(int(files[a]), rows[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def pack(source: int, parts: list[tuple[int, Any]], digest: bytes | None = None) -> bytes:
    """A chunk's references: the source node, the digest of the rows' values when given
    (format 3; format 2 without), then per file its runs.

    Starts are stored as the gap after the previous run, so that zstd sees small numbers;
    the gaps, then the lengths, each as the narrowest unsigned ints that hold them, byte
    planes apart (`_planes`). The caller compresses (store/blobs.py)."""
    import numpy as np

    if digest is not None:
        _check_digest(digest)
    out = [_HEAD.pack(VERSION if digest is not None else 2, source, len(parts)), digest or b""]
    for fid, rows in parts:
        starts, lengths = runs(np.asarray(rows, dtype=np.int64))
        gaps = np.diff(starts, prepend=0) - np.concatenate(([0], lengths[:-1]))
        g, n = _narrow(gaps), _narrow(lengths)
        out.append(_SEG.pack(fid, len(starts)))
        out.append(_WIDTHS.pack(g.itemsize, n.itemsize))
        out.append(_planes(g))
        out.append(_planes(n))
    return b"".join(out)


def pack_counted(source: int, task: int, before: int, count: int, digest: bytes) -> bytes:
    """A counted chunk (format 4): the task's rows `before` to `before + count` of the rows its
    splits give after the scan's filter (recorder/sources.py); replay derives the positions."""
    _check_digest(digest)
    return _HEAD.pack(COUNTED, source, 0) + digest + _COUNTED.pack(task, before, count)


def _check_digest(digest: bytes) -> None:
    if len(digest) != _DIGEST:
        raise ValueError(f"a chunk's digest has {_DIGEST} bytes, not {len(digest)}")


def counted(data: bytes) -> tuple[int, int, int] | None:
    """(task, rows before, rows) of a counted chunk; None for one that lists its positions."""
    if _HEAD.unpack_from(data, 0)[0] != COUNTED:
        return None
    return _COUNTED.unpack_from(data, _HEAD.size + _DIGEST)


def rows_in(data: bytes) -> int:
    """How many rows a chunk's positions name (a hooked unit's chunk counts one tuple, not its rows)."""
    found = counted(data)
    if found is not None:
        return found[2]
    return sum(len(rows) for _, rows in unpack(data)[1])


def _planes(a: Any) -> bytes:
    """The bytes of `a`, lowest byte of every value first, then the next: a byte shuffle, so the
    high bytes, nearly all zero, compress to almost nothing (a third off W2's positions)."""
    import numpy as np

    return a.view(np.uint8).reshape(-1, a.itemsize).T.tobytes()


def _unplanes(data: bytes, at: int, width: int, count: int) -> Any:
    import numpy as np

    planes = np.frombuffer(data, dtype=np.uint8, count=width * count, offset=at).reshape(width, count)
    return np.ascontiguousarray(planes.T).view(_DTYPES[width]).reshape(count).astype(np.int64)


def _narrow(a: Any) -> Any:
    """`a` (non-negative int64) as the narrowest little-endian unsigned ints that hold it."""
    top = int(a.max()) if len(a) else 0
    width = next(w for w in (1, 2, 4, 8) if w == 8 or top < 1 << (8 * w))
    return a.astype(_DTYPES[width])


def source_of(data: bytes) -> int:
    """The source node a packed chunk's positions belong to (its header alone)."""
    return _HEAD.unpack_from(data, 0)[1]


def content_digest(data: bytes) -> bytes | None:
    """The digest of the chunk's values the recording task took (format 3), or None."""
    version = _HEAD.unpack_from(data, 0)[0]
    return bytes(data[_HEAD.size:_HEAD.size + _DIGEST]) if version >= 3 else None


def unpack(data: bytes) -> tuple[int, list[tuple[int, Any]]]:
    """(source node, [(file id, positions as an int64 array)]) of a packed chunk (format 1, 2 or 3)."""
    import numpy as np

    version, source, n = _HEAD.unpack_from(data, 0)
    if version not in READS:
        raise errors.RunFileError(f"row references in format {version}, this tt reads {READS[-1]}; upgrade tt")
    if version == COUNTED:
        raise ValueError("a counted chunk's positions come from its files (store/sources.py SourceReader)")
    at, parts = _HEAD.size + (_DIGEST if version >= 3 else 0), []
    for _ in range(n):
        fid, count = _SEG.unpack_from(data, at)
        at += _SEG.size
        if version == 1:   # (gap, length) pairs of int64
            pairs = np.frombuffer(data, dtype="<i8", count=2 * count, offset=at).reshape(count, 2)
            at += 16 * count
            gaps, lengths = pairs[:, 0], pairs[:, 1]
        else:
            gw, lw = _WIDTHS.unpack_from(data, at)
            at += _WIDTHS.size
            gaps = _unplanes(data, at, gw, count)
            at += gw * count
            lengths = _unplanes(data, at, lw, count)
            at += lw * count
        ends = np.cumsum(gaps + lengths)
        starts = ends - lengths
        parts.append((fid, expand(starts, lengths)))
    return source, parts


_DTYPES = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<i8"}


def expand(starts: Any, lengths: Any) -> Any:
    """Every position of the runs, in order."""
    import numpy as np

    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, np.int64)
    # each run's first element steps from the last run's end; the rest step by one
    steps = np.ones(total, np.int64)
    heads = np.concatenate(([0], np.cumsum(lengths[:-1])))
    steps[heads] = starts - np.concatenate(([0], starts[:-1] + lengths[:-1] - 1))
    return np.cumsum(steps)

"""`tt pack`: copy the rows a run reads by reference into the run file, and the large files its
functions read (core/files_read.py).

A run that read Parquet sources by reference needs those files to replay. Packing
reads every referenced chunk back (checked against the recorded file identity)
and stores it as a copied chunk with the same place in the Input log, so that
the run travels without its data and replays exactly as before: replay cannot
tell a packed chunk from one copied while recording.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Callable

import orjson

from ..core import files_read
from ..core.errors import RunFileError
from . import blobs, schema
from .positions import source_of
from .sources import SourceReader


def pack(run: Path, out: Path | None = None,
         progress: Callable[[int, int], None] | None = None) -> dict:
    """Copy referenced rows into `run` (in place) or into a new file `out`; returns what was done.
    All or nothing: the chunks are replaced in one transaction after every file is checked."""
    name = Path(run).name   # (what errors name: the run the user gave, not its copy)
    if out is not None:
        out = Path(out)
        if out.exists():
            raise RunFileError(f"{out} exists; choose another file with -o, or remove it")
        src = schema.open_existing(run)
        try:
            src.execute("PRAGMA query_only=OFF")   # (VACUUM INTO writes only the copy, but query_only refuses it)
            src.execute("VACUUM INTO ?", (str(out),))
        except sqlite3.Error as e:
            raise RunFileError(f"cannot write {out}: {e}") from None
        finally:
            src.close()
        run = out
    conn = schema.open_existing(run, write=True)
    try:
        return _pack(conn, name, progress)
    except BaseException:
        if out is not None:   # (a copy that could not be packed is not left behind as if it were)
            conn.close()
            for leftover in (out, Path(f"{out}-wal"), Path(f"{out}-shm")):
                leftover.unlink(missing_ok=True)
        raise
    finally:
        schema.settle(conn)
        conn.close()


def _pack(conn: sqlite3.Connection, name: str, progress: Callable[[int, int], None] | None) -> dict:
    reader = SourceReader(conn, name)
    reader.check_all()   # every file first: a changed one stops the pack before anything is written
    schema.add_tables(conn)
    read = _files_to_pack(conn, name)
    codecs = sorted(blobs.BY_REFERENCE)
    chunks = conn.execute(f"SELECT rowid, n, codec FROM entry_chunks WHERE codec IN ({', '.join('?' * len(codecs))})",
                          codecs).fetchall()
    rows, packed_sources = 0, set()
    conn.execute("BEGIN IMMEDIATE")
    try:
        for done, (rowid, n, codec) in enumerate(chunks, 1):
            (data,) = conn.execute("SELECT data FROM entry_chunks WHERE rowid=?", (rowid,)).fetchone()
            positions = blobs.decompress(data)
            packed_sources.add(source_of(positions))
            if codec == blobs.REF_BATCH:   # a hooked unit (n = 1): the batch its function was handed
                batch = reader.batch(positions)
                packed, count = (blobs.ARROW_BATCH, blobs.pack_arrow(batch)), batch.num_rows
            elif codec == blobs.REF_PANDAS:   # ... or the DataFrame, kept as a copied one is
                frame = reader.frame(positions)
                if blobs.nested(frame) and not blobs.round_trips(frame):   # (a pickle only the recorder seals)
                    raise RunFileError(f"{name}: a mapInPandas DataFrame read by reference holds arrays, maps or "
                                       f"structs that tt pack cannot copy as they are yet; keep its source files "
                                       f"reachable, or record the job again with --copy-sources")
                packed, count = (blobs.PANDAS, blobs.pack_pandas(frame)), len(frame)
            else:
                table = reader.table(positions)
                if table.num_rows != n:
                    raise RunFileError(f"a chunk of {n} referenced rows read back as {table.num_rows}; the run "
                                       f"file or its source files are damaged")
                packed, count = (blobs.ARROW, blobs.pack_arrow(table)), n
            conn.execute("UPDATE entry_chunks SET codec=?, data=? WHERE rowid=?", (*packed, rowid))
            rows += count
            if progress is not None:
                progress(done, len(chunks))
        for source, info in conn.execute("SELECT source, info FROM source_scans WHERE format IS NOT NULL").fetchall():
            if source not in packed_sources:   # (its rows were all copied while recording)
                continue
            conn.execute("UPDATE source_scans SET info=? WHERE source=?",
                         (orjson.dumps({**orjson.loads(info or "{}"), "packed": True}).decode(), source))
        for path, digest in read:
            data = _read(name, path, digest)
            conn.execute("INSERT OR IGNORE INTO file_contents VALUES (?,?,?)", (digest, len(data), blobs.compress(data)))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return {"chunks": len(chunks), "rows": rows, "files": len(reader.files), "files_read": len(read)}


def _files_to_pack(conn: sqlite3.Connection, name: str) -> list[tuple[str, str]]:
    """The large files the job's functions read (meta `files_read`, core/files_read.py) that the
    run does not hold yet, as (path, xxh3), each checked here first: one that is missing or changed
    stops the pack before anything is written."""
    row = conn.execute("SELECT value FROM meta WHERE key='files_read'").fetchone()
    packed = {d for (d,) in conn.execute("SELECT xxh3 FROM file_contents")}
    out = []
    for path, read in sorted(orjson.loads(row[0]).items() if row else ()):
        if read["xxh3"] in packed:
            continue
        here = files_read.here(path, read)
        if here != "unchanged":
            raise RunFileError(f"{name}: {path}, which the job's functions read, is {here} here since the run; "
                               f"run tt pack where it is as it was")
        out.append((path, read["xxh3"]))
    return out


def _read(name: str, path: str, digest: str) -> bytes:
    """A file's bytes, checked against the digest the run holds (it may have changed since it was checked)."""
    import xxhash

    with open(path, "rb") as f:
        data = f.read()
    if xxhash.xxh3_128(data).hexdigest() != digest:
        raise RunFileError(f"{name}: {path} changed while tt pack read it; run tt pack again")
    return data

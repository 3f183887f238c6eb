"""The run.db schema, its version, and opening a file safely.

One SQLite file per run, in WAL mode so that `tt debug` can read a run while
`tt record` is still writing it. Every table is plain enough to read with the
`sqlite3` shell or `sqlite-utils`; ids are operator node ids and instance
numbers, names live in `operators`.

Attempts: a Spark task (stage, partition) may run several times (failures,
retries, recomputation). Log rows carry the attempt that wrote them; readers use
one *visible* attempt per task (`visible_attempts` view): the committed one, or
for a run that never finished, the attempt that got furthest (the last one on a
tie). A task whose operator raised on every retry thus shows its last failed
attempt: its logs end with the failing input, and its `failures` row says where
(the post-mortem log). `failures` keeps one row per failed attempt; readers group
them (`RunReader.failures`).
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..core.errors import RunFileError

APP_ID = 0x74740001  # "tt" + format 1, in SQLite's application_id header field
SCHEMA_VERSION = 3
SAME_AS = "$same_as"   # a task context's localProperties that name the attempt holding the same ones (`task_contexts`)
#: The oldest format this tt reads without migrating: later formats only add tables, which
#: readers treat as empty when a file lacks them.
READS_FROM = 1

# Version 2: sources read by reference (store/sources.py). Their entry chunks hold row
# positions (codec 'ref'), and these tables say which files and columns they point into.
_SOURCES = """
CREATE TABLE IF NOT EXISTS source_scans (
    source INTEGER PRIMARY KEY,    -- the source node
    format TEXT,                   -- 'parquet'
    columns TEXT,                  -- JSON: the file columns read, in the order the operator saw them
    arrow_schema BLOB,             -- the Arrow schema the operator saw (from the first task's batch)
    info TEXT                      -- JSON for tt inspect: paths, filters; "packed": copied by tt pack
);
CREATE TABLE IF NOT EXISTS source_files (
    id INTEGER PRIMARY KEY, source INTEGER, uri TEXT,
    size INTEGER, mtime_ms INTEGER,
    footer BLOB,                   -- blake2b-128 of the Parquet footer; NULL if the driver could not read it
    UNIQUE (source, uri)
);
"""

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS run (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    status TEXT NOT NULL,          -- recording | complete | failed | interrupted
    job TEXT, argv TEXT, started REAL, finished REAL, error TEXT,
    master TEXT, spark_version TEXT, theta TEXT, options TEXT, plan TEXT,
    input_bytes INTEGER, signature TEXT, recorder_pid INTEGER, recorder_host TEXT
);
CREATE TABLE IF NOT EXISTS operators (
    id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, kind TEXT, class TEXT,
    stage INTEGER, instances INTEGER, in_g INTEGER, is_theta INTEGER, code BLOB
);
CREATE TABLE IF NOT EXISTS edge_keys (edge INTEGER PRIMARY KEY, code BLOB);
CREATE TABLE IF NOT EXISTS job_files (path TEXT PRIMARY KEY, text TEXT);  -- absolute (relative to the job's folder before 2026-11-25)
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY, stage INTEGER, partition INTEGER, number INTEGER,
    spark_attempt INTEGER, status TEXT, started REAL, ended REAL, host TEXT,
    tuples INTEGER DEFAULT 0
);
CREATE TABLE IF NOT EXISTS interactions (
    k INTEGER PRIMARY KEY, time REAL, trigger TEXT, detail TEXT
);
CREATE TABLE IF NOT EXISTS states (          -- content-addressed: barriers refer to the hash
    hash BLOB PRIMARY KEY, size INTEGER, data BLOB
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS barriers (
    attempt INTEGER, op INTEGER, instance INTEGER, k INTEGER, position INTEGER, state BLOB,
    PRIMARY KEY (attempt, op, k)
);
CREATE TABLE IF NOT EXISTS initial_states (op INTEGER PRIMARY KEY, state BLOB);
CREATE TABLE IF NOT EXISTS finals (
    attempt INTEGER, op INTEGER, instance INTEGER, position INTEGER, last_k INTEGER, state BLOB,
    PRIMARY KEY (attempt, op)
);
CREATE TABLE IF NOT EXISTS log_chunks (
    attempt INTEGER, op INTEGER, instance INTEGER, kind TEXT, edge INTEGER,
    start INTEGER, n INTEGER, data BLOB
);
CREATE TABLE IF NOT EXISTS entry_chunks (
    attempt INTEGER, op INTEGER, instance INTEGER, port INTEGER, src INTEGER,
    start INTEGER, n INTEGER, codec TEXT, data BLOB
);
CREATE TABLE IF NOT EXISTS failures (
    attempt INTEGER, op INTEGER, instance INTEGER, position INTEGER,
    error TEXT, traceback TEXT, row TEXT, time REAL
);
CREATE TABLE IF NOT EXISTS stage_stats (   -- executors' processing time, for the replay cost model
    stage INTEGER PRIMARY KEY, inputs INTEGER, busy REAL
);
CREATE TABLE IF NOT EXISTS checkpoint_plans (
    id INTEGER PRIMARY KEY, policy TEXT, tau REAL, created REAL,
    active INTEGER DEFAULT 0,      -- jumps use the active plan
    info TEXT                      -- JSON: chosen interactions, costs, predicted and measured jumps
);
CREATE TABLE IF NOT EXISTS checkpoints (
    plan INTEGER, op INTEGER, instance INTEGER,
    seq INTEGER,                   -- order of the instance's checkpoints: delta chains follow it
    k INTEGER,                     -- the interaction it was taken at (-1: the instance's end)
    attempt INTEGER,               -- 0: taken by a local replay; else the task attempt (online)
    position INTEGER, kind TEXT, size INTEGER, data BLOB,
    PRIMARY KEY (plan, op, instance, attempt, seq)
);
CREATE TABLE IF NOT EXISTS lineage_index (   -- derived, rebuilt at will: replay/lineage_index.py
    op INTEGER, instance INTEGER, part TEXT, seq INTEGER, data BLOB,
    PRIMARY KEY (op, instance, part, seq)
);
CREATE TABLE IF NOT EXISTS file_contents (   -- content-addressed: files the job's functions read (core/files_read.py)
    xxh3 TEXT PRIMARY KEY,         -- as the logged reads name them (xxh3-128, hex)
    size INTEGER,
    data BLOB                      -- the file's bytes, compressed (store/blobs.py): a small one's as
) WITHOUT ROWID;                   -- recorded, a large one's where `tt pack` copied it
CREATE TABLE IF NOT EXISTS reruns (   -- committed tasks Spark ran again, run in shadow (Coordinator._compare_rerun)
    attempt INTEGER, op INTEGER, instance INTEGER,
    another_action INTEGER,        -- 1: another Spark stage (a second action); 0: a recomputed or speculated task
    position INTEGER,              -- the inputs it consumed
    state BLOB,                    -- its end state's hash, as `finals` has it
    outputs TEXT,                  -- core/output_digest.py: what it emitted, in order
    PRIMARY KEY (attempt, op)
);
CREATE TABLE IF NOT EXISTS outputs (   -- what a recorded hooked instance emitted, for `tt verify` (replay/outputs.py)
    attempt INTEGER, op INTEGER,
    digest TEXT,                   -- core/output_digest.py: "count:every:xxh3-128:batches_every"
    PRIMARY KEY (attempt, op)
);
CREATE TABLE IF NOT EXISTS task_contexts (   -- what each attempt's TaskContext told (core/task_context.py)
    attempt INTEGER PRIMARY KEY,
    context TEXT                   -- JSON, in the shape of PySpark's TaskContext.from_json; its
);                                 -- localProperties {"$same_as": A} where attempt A's are the same
""" + _SOURCES + """
CREATE INDEX IF NOT EXISTS log_chunks_by_instance ON log_chunks (op, instance, kind, attempt, start);
CREATE INDEX IF NOT EXISTS entry_chunks_by_channel ON entry_chunks (op, instance, port, src, attempt, start);
CREATE INDEX IF NOT EXISTS barriers_by_k ON barriers (k, op, instance);
CREATE INDEX IF NOT EXISTS attempts_by_task ON attempts (stage, partition);
CREATE VIEW IF NOT EXISTS visible_attempts AS
    SELECT a.* FROM attempts a
    WHERE a.status != 'shadow' AND a.id = (
        SELECT b.id FROM attempts b
        WHERE b.stage = a.stage AND b.partition = a.partition AND b.status != 'shadow'
        ORDER BY (b.status = 'committed') DESC, b.tuples DESC, b.id DESC LIMIT 1);
"""

# Migrations from version N to N+1, applied in order when an older file is opened
# for writing. Version 1 is the first; add (version, sql) pairs here.
# Version 3: a task context's localProperties may name the attempt that holds the same ones
# (`SAME_AS`), which a tt reading up to version 2 would hand a replayed step as they are; a file
# of version 2 needs no change.
MIGRATIONS: list[tuple[int, str]] = [(2, _SOURCES), (3, "")]


def create(path: str | Path):
    """A new, empty run file (the caller has checked that it may be written), as a
    sqlite_utils Database. Only writers import sqlite_utils: it imports pandas, which
    would cost `tt debug` half a second of start-up."""
    import sqlite_utils

    path = Path(path)
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists():
            p.unlink()
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    db = sqlite_utils.Database(conn)
    # The header fields first, while the journal is still a rollback journal: in WAL
    # mode page 1 would sit in the -wal file, and readers check the file's header.
    # One transaction: in autocommit each CREATE would be synced to disk on its own (30 ms in all).
    conn.executescript(f"BEGIN; PRAGMA application_id={APP_ID}; PRAGMA user_version={SCHEMA_VERSION};"
                       f"{_TABLES}; INSERT INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');"
                       "INSERT INTO meta VALUES ('app', 'tt'); COMMIT;")
    db.enable_wal()
    conn.execute("PRAGMA synchronous=NORMAL")
    return db


def open_existing(path: str | Path, *, write: bool = False) -> sqlite3.Connection:
    """Open a run file, or raise a one-line `RunFileError` saying why it cannot be."""
    path = Path(path)
    if not path.exists():
        raise RunFileError(f"{path}: no such file")
    if path.is_dir():
        raise RunFileError(f"{path} is a directory, not a run file")
    with open(path, "rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        raise RunFileError(f"{path} is not a tt run file (not an SQLite database)")
    app_id = int.from_bytes(header[68:72], "big")
    if app_id != APP_ID:
        raise RunFileError(f"{path} is an SQLite database but not a tt run file")
    try:
        if write:
            conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        else:
            conn = _reading(path)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute("SELECT status FROM run").fetchall()
    except sqlite3.DatabaseError as e:
        raise RunFileError(f"{path} is damaged: {e}") from None
    if version > SCHEMA_VERSION:
        raise RunFileError(f"{path} was written by a newer tt (format {version}; this tt reads up to "
                           f"{SCHEMA_VERSION}); upgrade tt to open it")
    if version < SCHEMA_VERSION and (write or version < READS_FROM):
        if not write:
            raise RunFileError(f"{path} uses an older format ({version}); run `tt migrate {path}`")
        migrate(conn, version)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def _reading(path: Path) -> sqlite3.Connection:
    """A connection that only reads. A run file is in WAL mode, and SQLite makes a -wal and a
    -shm file beside it for any reader; it removes them when the last connection closes, but
    not a `mode=ro` one's, so every `tt inspect` left two files beside a finished run. Where
    this user may write the file and its folder and its log holds nothing (a finished run's),
    the reader opens it read-write with `query_only` (SQLite refuses any write on it).
    Elsewhere `mode=ro`: a log that holds pages is a live recorder's, or a dead one's that
    `RunReader` folds in itself (a last connection closed read-write would fold it too, a
    live recorder's included)."""
    wal = Path(f"{path}-wal")
    if ((not wal.exists() or wal.stat().st_size == 0)
            and os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        conn = sqlite3.connect(str(path), check_same_thread=False)
        conn.execute("PRAGMA query_only=ON")
        return conn
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)


@contextmanager
def writing(path: str | Path) -> Iterator[sqlite3.Connection]:
    """One write transaction on a finished run file (`tt checkpoint`, the lineage index): all of
    it stays, or none of it; tables a file recorded by an older tt lacks are added first."""
    conn = open_existing(path, write=True)
    try:
        add_tables(conn)
        conn.execute("BEGIN")
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        settle(conn)
        conn.close()


def add_tables(conn: sqlite3.Connection) -> None:
    """Add the tables a file recorded by an older tt lacks (they only ever add tables)."""
    conn.executescript(_TABLES)


def settle(conn: sqlite3.Connection) -> None:
    """Fold the write-ahead log into the file, so that the .db alone is the whole run
    (users copy run files around; a copy without its -wal file would lose data)."""
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error:
        pass  # a reader still has it open; the next writer settles it


def migrate(conn: sqlite3.Connection, version: int) -> None:
    for target, sql in MIGRATIONS:
        if target > version:
            conn.executescript(sql)
            conn.execute(f"PRAGMA user_version={target}")
            conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(target),))

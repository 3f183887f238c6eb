"""Typed read queries over a run file: everything the debugger and `tt inspect` ask.

An interaction k is *complete* when every instance in G(θ) has a known state at
k: it took barrier k (a `barriers` row), or it finished before barrier k reached
it (its `finals` row, in a committed attempt, covers every k after its last
barrier). A run interrupted at any moment lists only its complete interactions.
"""

from __future__ import annotations

import collections
import os
import socket
import sqlite3
import sys
from array import array
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

import orjson

from ..core import logs, state_deltas
from ..core.errors import RunFileError
from ..core.scopes import LogArrays
from . import blobs, join_lineage, positions, schema, trust
from .dests import unpack_dests


_noted: set[str] = set()


def _note_once(line: str) -> None:
    if line not in _noted:
        _noted.add(line)
        print(line, file=sys.stderr)


@dataclass(frozen=True)
class Interaction:
    k: int
    time: float
    trigger: str       # start | periodic | condition | user | end
    detail: dict


@dataclass(frozen=True)
class InstanceAt:
    position: int
    state: bytes | None  # state hash; None when only replay can tell


@dataclass(frozen=True)
class OperatorInfo:
    id: int
    name: str
    kind: str
    cls: str
    stage: int
    instances: int
    in_g: bool
    is_theta: bool


def ranges(ks: list[int]) -> str:
    """Ascending interaction numbers as runs: `0-3,5,7-9`."""
    if not ks:
        return ""
    parts, start, prev = [], ks[0], ks[0]
    for k in ks[1:] + [None]:
        if k is not None and k == prev + 1:
            prev = k
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if k is not None:
            start = prev = k
    return ",".join(parts)


class RunReader:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.conn: sqlite3.Connection = schema.open_existing(self.path)
        self._snapshots: dict[int, dict | None] = {}
        self._states: dict[bytes, Any] = {}  # rebuilt states (deltas resolve through their bases)
        # Whether the user trusts this run (--trust): None until a replay engine says (`vouch`).
        self.trust: bool | None = None
        self.wal_note: str | None = None  # why a write-ahead log could not be folded in, if it could not
        self._sources = None  # a SourceReader, made when a chunk stored by reference is first read
        self._fold_wal()

    def close(self) -> None:
        self.conn.close()

    # --- the write-ahead log ----------------------------------------------------

    def wal_bytes(self) -> int:
        """Bytes in the run file's write-ahead log (data a copy of the .db alone would lack)."""
        try:
            return Path(str(self.path) + "-wal").stat().st_size
        except OSError:
            return 0

    def _fold_wal(self) -> None:
        """A run no recorder holds any more, whose data still sits in its -wal file (a
        recorder killed with -9 never folds it in): fold it into the .db, so that the
        .db alone, which is what users copy, is the whole run. A live recorder's run is
        left alone (it folds its own at the end), and so is a file this user may not write."""
        if self.wal_bytes() == 0:
            return
        try:
            row = self.conn.execute("SELECT status FROM run").fetchone()
            if row is not None and row[0] == "recording" and self._recorder_alive():
                return
        except sqlite3.Error:
            return
        wal = Path(str(self.path) + "-wal")
        if not (os.access(self.path, os.W_OK) and os.access(wal, os.W_OK)
                and os.access(self.path.parent, os.W_OK)):
            self.wal_note = (f"{self.path.name} is read-only, so its -wal file cannot be folded into it; "
                             f"copy both files together")
            _note_once(f"tt: note: {self.path} is missing data that sits in {wal.name}: {self.wal_note}")
            return
        try:
            rw = sqlite3.connect(str(self.path), isolation_level=None, timeout=0.5)
            try:
                busy = rw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                rw.close()
        except sqlite3.Error as e:
            busy = str(e)
        if busy and self.wal_bytes():
            self.wal_note = "it could not be folded in just now (the file is busy); copy both files together"

    def refresh(self) -> None:
        """Forget cached answers (a live run may have grown)."""
        self._snapshots.clear()
        for name in ("run", "plan", "operators", "visible", "interactions_all"):
            self.__dict__.pop(name, None)

    # --- the run ------------------------------------------------------------

    @cached_property
    def run(self) -> dict:
        row = self.conn.execute("SELECT * FROM run").fetchone()
        if row is None:
            raise RunFileError(f"{self.path} holds no run (the recording never started)")
        cols = [d[0] for d in self.conn.execute("SELECT * FROM run LIMIT 0").description]
        out = dict(zip(cols, row))
        for key in ("argv", "options", "plan"):
            out[key] = orjson.loads(out[key]) if out[key] else None
        return out

    def _meta(self, key: str, default: Any = None) -> Any:
        """The run's meta value `key` (JSON), `default` where the run has none (recorded before tt kept it)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return orjson.loads(row[0]) if row else default

    @property
    def state_encoding(self) -> int:
        """How the run's states are encoded (`values.ENCODING` when it was recorded); 1 for a run
        recorded before tt kept it."""
        return int(self._meta("state_encoding", 1))

    @property
    def hash_seed(self) -> str | None:
        """The PYTHONHASHSEED the job's Python workers ran with (None: random), which a replay
        runs with (cli/hash_seed.py); PySpark's own, "0", for a run recorded before tt kept it."""
        return self._meta("hash_seed", "0")

    @property
    def python(self) -> dict | None:
        """The Python that pickled the run's code (`code_pickle.python`), which a replay must run
        in; None for a run recorded before tt kept it."""
        return self._meta("python", None)

    @property
    def libraries(self) -> dict[str, str]:
        """The packages the job's Python workers had loaded, with their versions
        (core/libraries.py); none for a run recorded before tt kept them."""
        return self._meta("libraries", {})

    @property
    def files_read(self) -> dict[str, dict]:
        """The files too large to keep that the job's functions read, path -> `{"size", "xxh3"}`:
        a replay reads them where it runs (core/files_read.py); none for a run before tt logged reads."""
        return self._meta("files_read", {})

    @property
    def files_kept(self) -> dict[str, dict]:
        """The small files the job's functions read, path -> `{"size", "xxh3"}` as first read:
        the run holds their bytes (`file_contents`), so a replay needs none of them here; none in
        a run recorded before tt named them."""
        return self._meta("files_kept", {})

    def file_digests(self) -> set[str]:
        """The digests (xxh3-128) of the files read by the job's functions whose bytes the run
        holds (`file_contents`): the small ones, and the large ones `tt pack` copied in; none in a
        run file from before it kept them."""
        try:
            return {d for (d,) in self.conn.execute("SELECT xxh3 FROM file_contents")}
        except sqlite3.OperationalError:
            return set()

    @property
    def timezone(self) -> str | None:
        """The local time zone the job's Python workers ran in, as a `TZ` value, which a replay
        runs in (core/local_time.py); None for a run recorded before tt kept it, or where the
        workers' could not be told."""
        return self._meta("timezone", None)

    @property
    def timezone_facts(self) -> dict | None:
        """What the first task's worker told of its zone, its file's POSIX rule and the offsets it
        told at a few instants (`core.local_time.facts`), which a replay checks its own by; None for
        a run recorded before tt kept them."""
        return self._meta("timezone_facts", None)

    def when_counts(self) -> tuple[int, int] | None:
        """(θ's inputs the `--when` condition was tested on, those it raised on) over the committed
        tasks; None for a run without `--when`, or recorded before tt counted them."""
        counts = self._meta("when_counts", None)
        return (int(counts[0]), int(counts[1])) if counts else None

    def warnings(self) -> list[str]:
        """What the recording warned of (`tt record` printed them too), e.g. input partitions of a
        hooked function that ran unrecorded."""
        return self._meta("warnings", [])

    def reruns(self) -> list[dict]:
        """The committed tasks Spark ran again (in shadow), per operator: {"attempt", "op",
        "instance", "another_action", "position", "outputs"} (core/output_digest.py); none in a run
        file from before tt kept them."""
        try:
            rows = self.conn.execute("SELECT attempt, op, instance, another_action, position, outputs FROM reruns "
                                     "ORDER BY op, instance, attempt").fetchall()
        except sqlite3.OperationalError:
            return []
        return [{"attempt": a, "op": op, "instance": i, "another_action": bool(another), "position": pos,
                 "outputs": outputs} for a, op, i, another, pos, outputs in rows]

    def recorded_outputs(self) -> dict[tuple[int, int], str]:
        """What each recorded hooked instance emitted, by (op, instance), for its visible attempt:
        a digest (core/output_digest.py); none in a run file from before tt kept them."""
        try:
            rows = self.conn.execute("SELECT attempt, op, digest FROM outputs").fetchall()
        except sqlite3.OperationalError:
            return {}
        by_attempt = {(attempt, op): digest for attempt, op, digest in rows}
        out = {}
        for op, i in self.g_instances():
            att = self.attempt_of(op, i)
            if att is not None and (att[0], op) in by_attempt:
                out[(op, i)] = by_attempt[(att[0], op)]
        return out

    def task_context(self, attempt: int) -> dict | None:
        """What the attempt's `TaskContext` told (core/task_context.py); None in a run file from
        before tt kept it. Local properties the recorder stored once for many attempts
        (`schema.SAME_AS`) are read from the attempt that holds them."""
        try:
            row = self.conn.execute("SELECT context FROM task_contexts WHERE attempt=?", (attempt,)).fetchone()
        except sqlite3.OperationalError:
            return None
        context = orjson.loads(row[0]) if row and row[0] else None
        properties = context.get("localProperties") if isinstance(context, dict) else None
        same_as = properties.get(schema.SAME_AS) if isinstance(properties, dict) and len(properties) == 1 else None
        if type(same_as) is int:
            held = self.task_context(same_as) if same_as != attempt else None
            context["localProperties"] = (held or {}).get("localProperties", {})
        return context

    @property
    def status(self) -> str:
        """complete | failed | interrupted | recording (still being written) | incomplete (recorder died)."""
        status = self.run["status"]
        if status == "recording" and not self._recorder_alive():
            return "incomplete"
        return status

    def _recorder_alive(self) -> bool:
        pid, host = self.run.get("recorder_pid"), self.run.get("recorder_host")
        if not pid or host != socket.gethostname():
            return True  # cannot tell from here; assume it may still be writing
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    @cached_property
    def plan(self) -> dict:
        plan = self.run["plan"]
        if not plan:
            raise RunFileError(f"{self.path}: the dataflow never started, there is nothing to debug")
        return plan

    @cached_property
    def operators(self) -> list[OperatorInfo]:
        rows = self.conn.execute(
            "SELECT id, name, kind, class, stage, instances, in_g, is_theta FROM operators ORDER BY id")
        return [OperatorInfo(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), bool(r[7])) for r in rows]

    def operator(self, name_or_id) -> OperatorInfo:
        for op in self.operators:
            if op.name == name_or_id or op.id == name_or_id:
                return op
        from ..core.errors import UsageError
        names = ", ".join(o.name for o in self.operators)
        raise UsageError(f"unknown operator {name_or_id!r}; operators are: {names}")

    @property
    def theta(self) -> OperatorInfo:
        return next(o for o in self.operators if o.is_theta)

    def g_instances(self) -> list[tuple[int, int]]:
        return [(o.id, i) for o in self.operators if o.in_g for i in range(o.instances)]

    # --- trust ------------------------------------------------------------------

    def vouch(self, trusted: bool) -> None:
        """Record whether the user trusts this run (passed --trust). The first replay
        engine on this reader decides; later ones (a session's private engines pass
        trust=True because the check was made already) do not change it."""
        if self.trust is None:
            self.trust = bool(trusted)

    @cached_property
    def run_id(self) -> str:
        return trust.run_id_of(self.run.get("signature"))

    @cached_property
    def signed_by_me(self) -> bool:
        """Whether the run's code signature checks out with the local key."""
        return trust.is_trusted(self.run.get("signature"), self.signed_code())

    def signed_code(self) -> list[bytes]:
        """What the run's signature covers: the operators' code, the key functions', and the
        job's modules that replay imports from the run file (runs since 2026-12-03)."""
        return ([self.code(o.id) for o in self.operators] + list(self.edge_keys().values())
                + trust.module_code(self.job_modules()))

    def open_blob(self, kind: str, data: bytes) -> bytes:
        """A stored blob that is about to be unpickled (recorded tuples of the pickle codec,
        log_result values, checkpoints): its seal is checked here, and only here.

        A run signed with the local key must have every such blob sealed with it (else it
        was altered), unless the user trusts the run. A run not signed with the local key
        cannot reach this point without the user's trust: replay refuses its code first
        (`require_trust`), and the log browser decodes its pickles only with --trust."""
        trusted = trust.user_trusts(self.trust)
        if not trusted and self.trust is None and not self.signed_by_me:
            trusted = True
        return trust.open_blob(self.path, self.run_id, kind, data, trusted)

    def code(self, op_id: int) -> bytes:
        return self.conn.execute("SELECT code FROM operators WHERE id=?", (op_id,)).fetchone()[0]

    def edge_keys(self) -> dict[int, bytes]:
        return dict(self.conn.execute("SELECT edge, code FROM edge_keys"))

    def job_files(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT path, text FROM job_files"))

    def job_modules(self) -> dict[str, tuple[str, bool, str]]:
        """{module name: (path, package, source)} of the job's own modules as they ran, which
        replay imports from here (recorder/job_modules.py); none in runs before 2026-12-03."""
        modules = self._meta("job_modules", {})
        if not modules:
            return {}
        files = self.job_files()
        return {name: (m["path"], bool(m["package"]), files[m["path"]])
                for name, m in modules.items() if m["path"] in files}

    # --- attempts -----------------------------------------------------------

    @cached_property
    def visible(self) -> dict[tuple[int, int], tuple[int, str]]:
        """(stage, partition) -> (attempt id, status) of the attempt readers use."""
        rows = self.conn.execute("SELECT stage, partition, id, status FROM visible_attempts")
        return {(s, p): (a, st) for s, p, a, st in rows}

    def attempt_of(self, op_id: int, instance: int) -> tuple[int, str] | None:
        op = self.operators[op_id]
        return self.visible.get((op.stage, instance))

    # --- interactions -------------------------------------------------------

    @cached_property
    def interactions_all(self) -> list[Interaction]:
        rows = self.conn.execute("SELECT k, time, trigger, detail FROM interactions ORDER BY k")
        return [Interaction(k, t, trig, orjson.loads(d) if d else {}) for k, t, trig, d in rows]

    def interactions(self) -> list[Interaction]:
        """The complete interactions, in order (I_0 is the initial state)."""
        return [i for i in self.interactions_all if self.instances_at(i.k) is not None]

    def no_states_at(self, k: int) -> str:
        """Why interaction k has no states to show (`instances_at` gave None), in one line: it
        was never taken, or not every instance of G(θ) recorded its state there (a run that
        stopped first, a task's end that never came)."""
        complete = ranges([i.k for i in self.interactions()]) or "none"
        if all(i.k != k for i in self.interactions_all):
            return f"{self.path} has no interaction {k}; its complete ones: {complete}"
        return (f"interaction {k} is not complete in {self.path} (not every instance of G(θ) "
                f"recorded its state there); complete ones: {complete}")

    def instances_at(self, k: int) -> dict[tuple[int, int], InstanceAt] | None:
        """Per G(θ) instance, its position and state at interaction k; None if incomplete."""
        if k in self._snapshots:
            return self._snapshots[k]
        snap = self._resolve(k)
        if snap is not None or self.run["status"] != "recording":
            self._snapshots[k] = snap
        return snap

    def _resolve(self, k: int) -> dict | None:
        if not -2**63 <= k < 2**63:   # (no such interaction; SQLite's integers are 64-bit)
            return None
        if self.conn.execute("SELECT 1 FROM interactions WHERE k=?", (k,)).fetchone() is None:
            return None
        if k == 0:
            initial = dict(self.conn.execute("SELECT op, state FROM initial_states"))
            return {(op, i): InstanceAt(0, initial.get(op)) for op, i in self.g_instances()}
        out = {}
        by_task: dict[int, dict[int, tuple[int, Any]]] = {}
        at_k = {(a, op): (pos, st) for a, op, pos, st in self.conn.execute(
            "SELECT attempt, op, position, state FROM barriers WHERE k=?", (k,))}
        for op, i in self.g_instances():
            att = self.attempt_of(op, i)
            if att is None:
                return None
            attempt, status = att
            row = at_k.get((attempt, op))
            if row is not None:
                out[(op, i)] = InstanceAt(row[0], row[1])
                continue
            if status != "committed":
                return None
            fin = by_task.setdefault(attempt, {
                r[0]: (r[1], r[2], r[3]) for r in self.conn.execute(
                    "SELECT op, position, last_k, state FROM finals WHERE attempt=?", (attempt,))})
            if op not in fin or fin[op][1] >= k:
                return None
            out[(op, i)] = InstanceAt(fin[op][0], fin[op][2])
        return out

    def state(self, state_hash: bytes | None) -> Any:
        """The stored (JSON-encoded) state for a hash; deltas are rebuilt from their base."""
        if state_hash is None:
            return None
        if isinstance(state_hash, str):
            state_hash = bytes.fromhex(state_hash)
        cached = self._states.get(state_hash)
        if cached is not None:
            return cached
        chain = []
        h = state_hash
        while True:
            row = self.conn.execute("SELECT data FROM states WHERE hash=?", (h,)).fetchone()
            if row is None:
                raise RunFileError(f"{self.path} is missing a state blob (damaged file?)")
            stored = orjson.loads(blobs.decompress(row[0]))
            chain.append((h, stored))
            if not state_deltas.is_delta(stored):
                break
            h = bytes.fromhex(stored["$delta"]["base"])
            if h in self._states:
                chain.append((h, self._states[h]))
                break
        value = chain[-1][1]
        if len(chain) > 1:
            value = state_deltas.apply_chain(value, [stored for _, stored in reversed(chain[:-1])])
        self._remember_state(state_hash, value)
        return value

    def _remember_state(self, h: bytes, value: Any) -> None:
        self._states[h] = value
        while len(self._states) > 64:
            self._states.pop(next(iter(self._states)))

    def final(self, op_id: int, instance: int) -> InstanceAt | None:
        att = self.attempt_of(op_id, instance)
        if att is None:
            return None
        row = self.conn.execute("SELECT position, state FROM finals WHERE attempt=? AND op=?",
                                (att[0], op_id)).fetchone()
        return InstanceAt(row[0], row[1]) if row else None

    # --- logs ---------------------------------------------------------------

    def _chunks(self, op_id: int, instance: int, kind: str, edge: int = -1) -> Iterator[bytes]:
        return (data for data, _ in self._chunks_n(op_id, instance, kind, edge))

    def _chunks_n(self, op_id: int, instance: int, kind: str, edge: int = -1) -> Iterator[tuple[bytes, int]]:
        att = self.attempt_of(op_id, instance)
        if att is None:
            return iter(())
        rows = self.conn.execute(
            "SELECT data, n FROM log_chunks WHERE op=? AND instance=? AND kind=? AND attempt=? AND edge=? "
            "ORDER BY start", (op_id, instance, kind, att[0], edge))
        return ((blobs.decompress(r[0]), r[1]) for r in rows)

    def input_runs(self, op_id: int, instance: int) -> list[tuple[int, int, int]]:
        runs: list[tuple[int, int, int]] = []
        for data in self._chunks(op_id, instance, "in"):
            for port, src, n in logs.unpack_runs(data):
                if runs and runs[-1][0] == port and runs[-1][1] == src:
                    runs[-1] = (port, src, runs[-1][2] + n)
                else:
                    runs.append((port, src, n))
        return runs

    def output_counts(self, op_id: int, instance: int) -> array:
        out = array("I")
        for data in self._chunks(op_id, instance, "out"):
            out.frombytes(data)
        return out

    def made_from(self, op_id: int, instance: int) -> array:
        """An operator outside G(θ) recorded with --lineage that keeps rows (core/runtime.py
        `LineageRunner`): for each of its outputs in order, n, then the n input positions of the
        kept rows it was made from; a join's worked out from its inputs' keys (`JoinLineageRunner`,
        store/join_lineage.py). Empty for any other."""
        keys = array("q")
        for data in self._chunks(op_id, instance, "keys"):
            keys.frombytes(data)
        if keys:
            return join_lineage.made_from_keys(self.input_runs(op_id, instance), keys,
                                               self.output_counts(op_id, instance))
        out = array("I")
        for data in self._chunks(op_id, instance, "made"):
            out.frombytes(data)
        return out

    def keyed_joins(self) -> list[tuple[int, int]]:
        """The (op, instance) of the joins outside G(θ) that logged their inputs' keys (--lineage)."""
        return [tuple(r) for r in self.conn.execute(
            "SELECT DISTINCT op, instance FROM log_chunks WHERE kind='keys' ORDER BY op, instance")]

    def dests(self, op_id: int, instance: int, edge: int) -> array:
        """The destination instance of each output this instance sent on a shuffle edge."""
        out = array("I")
        for data, n in self._chunks_n(op_id, instance, "dest", edge):
            out.extend(unpack_dests(data, n))
        return out

    def results(self, op_id: int, instance: int) -> list[logs.LoggedResult]:
        out: list[logs.LoggedResult] = []
        att = self.attempt_of(op_id, instance)
        if att is None:
            return out
        rows = self.conn.execute(
            "SELECT data FROM log_chunks WHERE op=? AND instance=? AND kind='res' AND attempt=? AND edge=-1 "
            "ORDER BY start", (op_id, instance, att[0]))
        for (data,) in rows:
            out.extend(logs.unpack_results(blobs.decompress(self.open_blob("res", data))))
        return out

    def entry_chunks(self, op_id: int, instance: int) -> list[tuple[int, int, int, int, str, bytes]]:
        """Recorded tuples entering this instance: (port, src, start, n, codec, data); pickled
        chunks are checked (`open_blob`)."""
        att = self.attempt_of(op_id, instance)
        if att is None:
            return []
        return [(port, src, start, n, codec, self._entry_blob(codec, data)) for port, src, start, n, codec, data in
                self.conn.execute(
                    "SELECT port, src, start, n, codec, data FROM entry_chunks WHERE op=? AND instance=? "
                    "AND attempt=? ORDER BY port, src, start", (op_id, instance, att[0]))]

    def _entry_blob(self, codec: str, data: bytes) -> bytes:
        return data if codec in blobs.INERT else self.open_blob("entry", data)

    def entry_index(self, op_id: int, instance: int) -> list[tuple[int, int, int, int, int, str]]:
        """Like `entry_chunks` without the data: (rowid, port, src, start, n, codec)."""
        att = self.attempt_of(op_id, instance)
        if att is None:
            return []
        return list(self.conn.execute(
            "SELECT rowid, port, src, start, n, codec FROM entry_chunks WHERE op=? AND instance=? "
            "AND attempt=? ORDER BY port, src, start", (op_id, instance, att[0])))

    def entry_tuples(self, codec: str, rowid: int) -> list:
        """One chunk's tuples, decoded; rows stored by reference are read from their files."""
        if codec == blobs.REF:
            return self.sources().rows(blobs.decompress(self.entry_data(rowid)))
        if codec == blobs.REF_BATCH:
            return [self.sources().batch(blobs.decompress(self.entry_data(rowid)))]
        if codec == blobs.REF_PANDAS:
            return [self.sources().frame(blobs.decompress(self.entry_data(rowid)))]
        return blobs.unpack_tuples(codec, self.entry_data(rowid))

    def entry_tuples_where(self, codec: str, rowid: int, equal: dict[str, Any]) -> tuple[int, list[int], list]:
        """(n, offsets, rows): one chunk's rows that may hold `equal` (`SourceReader.rows_where`,
        for rows read by reference; every row of any other chunk)."""
        if codec == blobs.REF:
            return self.sources().rows_where(blobs.decompress(self.entry_data(rowid)), equal)
        rows = self.entry_tuples(codec, rowid)
        return len(rows), list(range(len(rows))), rows

    def entry_tuple(self, codec: str, rowid: int, offset: int) -> Any:
        """One chunk's `offset`-th tuple; a row stored by reference is read alone from its file."""
        if codec == blobs.REF:
            return self.sources().row(blobs.decompress(self.entry_data(rowid)), offset)
        return self.entry_tuples(codec, rowid)[offset]

    def entry_rows(self, wanted: list[tuple[int, int]]) -> list:
        """`entry_tuple` of each (rowid, offset) of chunks stored by reference, their row groups
        read at once (`SourceReader.rows_at`)."""
        data: dict[int, bytes] = {}
        for rowid, _ in wanted:
            if rowid not in data:
                data[rowid] = blobs.decompress(self.entry_data(rowid))
        return self.sources().rows_at([(data[rowid], k) for rowid, k in wanted])

    def sources(self) -> Any:
        """The reader of this run's sources read by reference (store/sources.py)."""
        if self._sources is None:
            from .sources import SourceReader

            self._sources = SourceReader(self.conn if self.has_table("source_scans") else None, self.path.name)
        return self._sources

    def source_scans(self) -> list[dict]:
        """Per source read by reference: its node, columns, info and files."""
        if not self.has_table("source_scans"):
            return []
        files = collections.defaultdict(list)
        for fid, source, uri, size, mtime, footer in self.conn.execute(
                "SELECT id, source, uri, size, mtime_ms, footer FROM source_files ORDER BY id"):
            files[source].append({"id": fid, "uri": uri, "size": size, "mtime_ms": mtime,
                                  "footer": footer.hex() if footer else None})
        out = []
        for source, fmt, columns, info in self.conn.execute(
                "SELECT source, format, columns, info FROM source_scans ORDER BY source"):
            out.append({"source": source, "format": fmt, "columns": orjson.loads(columns),
                        "info": orjson.loads(info or "{}"), "files": files[source]})
        return out

    def has_table(self, name: str) -> bool:
        return self.conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                                 (name,)).fetchone() is not None

    def entry_place(self, rowid: int, offset: int) -> tuple[str, int]:
        """(file URI, row number) of a chunk recorded by reference's `offset`-th row."""
        return self.sources().where(blobs.decompress(self.entry_data(rowid)), offset)

    def entry_spans(self, rowid: int) -> list[tuple[str, int, int, int]]:
        """Where a hooked unit recorded by reference came from: (file URI, first row, last row,
        rows) per file (`Sources.spans`)."""
        return self.sources().spans(blobs.decompress(self.entry_data(rowid)))

    def entry_data(self, rowid: int) -> bytes:
        """One chunk's data for `blobs.unpack_tuples`; a pickled chunk is checked (`open_blob`)."""
        codec, data = self.conn.execute("SELECT codec, data FROM entry_chunks WHERE rowid=?", (rowid,)).fetchone()
        return self._entry_blob(codec, data)

    def entry_channels(self, op_id: int, instance: int) -> list[tuple[int, int]]:
        att = self.attempt_of(op_id, instance)
        if att is None:
            return []
        return [tuple(r) for r in self.conn.execute(
            "SELECT DISTINCT port, src FROM entry_chunks WHERE op=? AND instance=? AND attempt=?",
            (op_id, instance, att[0]))]

    # --- checkpoints ------------------------------------------------------------

    def plans(self) -> list[dict]:
        try:
            rows = self.conn.execute("SELECT id, policy, tau, created, active, info FROM checkpoint_plans ORDER BY id")
        except sqlite3.OperationalError:  # a run file from before checkpoints existed
            return []
        return [{"id": i, "policy": p, "tau": t, "created": c, "active": bool(a),
                 "info": orjson.loads(info) if info else {}} for i, p, t, c, a, info in rows]

    def active_plan(self) -> dict | None:
        return next((p for p in reversed(self.plans()) if p["active"]), None)

    def checkpoint_index(self, plan: int) -> dict[tuple[int, int], list[tuple[int, int, int, str, int, int]]]:
        """Per instance, its usable checkpoints in order: (seq, k, position, kind, size, rowid)."""
        out: dict[tuple[int, int], list] = {}
        try:
            rows = self.conn.execute(
                "SELECT op, instance, attempt, seq, k, position, kind, size, rowid FROM checkpoints "
                "WHERE plan=? ORDER BY op, instance, seq", (plan,)).fetchall()
        except sqlite3.OperationalError:  # a run file from before checkpoints existed
            return out
        for op, i, attempt, seq, k, pos, kind, size, rowid in rows:
            if attempt:
                vis = self.attempt_of(op, i)
                if vis is None or vis[0] != attempt:
                    continue
            out.setdefault((op, i), []).append((seq, k, pos, kind, size, rowid))
        return out

    def checkpoint_data(self, rowid: int) -> bytes:
        """One checkpoint, checked (`open_blob`) and ready for `core.checkpoint.restore`."""
        data = self.conn.execute("SELECT data FROM checkpoints WHERE rowid=?", (rowid,)).fetchone()[0]
        return blobs.decompress(self.open_blob("checkpoint", data))

    def checkpointed(self) -> set[int]:
        """Interactions every instance of G(θ) has a checkpoint for, in the active plan."""
        plan = self.active_plan()
        if plan is None:
            return set()
        return set(plan["info"].get("checkpoints", []))

    def failures(self) -> list[dict]:
        """Operator failures, one per distinct failure (operator, instance, input, error),
        however many attempts Spark made: `attempts` counts them; `attempt`, `row`,
        `traceback` and `time` are the first attempt's; `visible` says whether a visible
        attempt ended with it (then the run's log ends with the failing tuple, which replay
        can step when the operator is in G(θ): `in_g`); `unrecorded`, that every attempt that
        ended with it was a run Spark made again of a recorded task, which logs nothing
        (`Coordinator._rerun_failed`)."""
        cur = self.conn.execute(
            "SELECT f.attempt, o.name, f.instance, f.position, f.error, f.traceback, f.row, f.time, "
            "f.attempt IN (SELECT id FROM visible_attempts), o.in_g, "
            "COALESCE((SELECT a.status = 'shadow' FROM attempts a WHERE a.id = f.attempt), 0) "
            "FROM failures f JOIN operators o ON o.id = f.op ORDER BY f.time, f.rowid")
        cols = ["attempt", "op", "instance", "position", "error", "traceback", "row", "time", "visible", "in_g",
                "unrecorded"]
        out: dict[tuple, dict] = {}
        for r in cur:
            f = dict(zip(cols, r))
            key = (f["op"], f["instance"], f["position"], f["error"])
            seen = out.get(key)
            if seen is None:
                out[key] = {**f, "visible": bool(f["visible"]), "in_g": bool(f["in_g"]),
                            "unrecorded": bool(f["unrecorded"]), "attempts": 1}
            else:
                seen["attempts"] += 1
                seen["visible"] = seen["visible"] or bool(f["visible"])
                seen["unrecorded"] = seen["unrecorded"] and bool(f["unrecorded"])
        return list(out.values())

    def failure_points(self) -> list[dict]:
        """Failures of visible attempts, first first: where each failed instance's log ends.

        Each is {"op" (id), "instance", "position", "error", "traceback", "row", "attempt"};
        `position` is the failing input's number (the tuple is input #position)."""
        cur = self.conn.execute(
            "SELECT f.attempt, f.op, f.instance, f.position, f.error, f.traceback, f.row FROM failures f "
            "WHERE f.attempt IN (SELECT id FROM visible_attempts) ORDER BY f.time, f.rowid")
        cols = ["attempt", "op", "instance", "position", "error", "traceback", "row"]
        return [dict(zip(cols, r)) for r in cur]

    # --- sizes --------------------------------------------------------------

    def sizes(self) -> dict[str, int]:
        """Bytes stored per kind of record (payload bytes, not SQLite pages)."""
        q = self.conn.execute
        out = {
            "interactions": q("SELECT COALESCE(SUM(LENGTH(detail)),0) + 24*COUNT(*) FROM interactions").fetchone()[0]
            + q("SELECT 40*COUNT(*) FROM barriers").fetchone()[0],
        }
        for kind, label in (("in", "input_log"), ("out", "output_log"), ("dest", "output_log_dests"),
                            ("res", "logged_results"), ("made", "lineage_made"), ("keys", "lineage_keys")):
            out[label] = q("SELECT COALESCE(SUM(LENGTH(data)),0) FROM log_chunks WHERE kind=?", (kind,)).fetchone()[0]
        out["recorded_tuples"] = q(f"SELECT COALESCE(SUM(LENGTH(data)),0) FROM entry_chunks WHERE codec NOT IN "
                                   f"({_BY_REFERENCE_SQL})").fetchone()[0]
        out["row_references"], out["referenced_rows"] = q(
            f"SELECT COALESCE(SUM(LENGTH(data)),0), COALESCE(SUM(n),0) FROM entry_chunks WHERE codec IN "
            f"({_BY_REFERENCE_SQL})").fetchone()
        for (data,) in q("SELECT data FROM entry_chunks WHERE codec IN (?, ?)", (blobs.REF_BATCH, blobs.REF_PANDAS)):
            out["referenced_rows"] += positions.rows_in(blobs.decompress(data)) - 1   # (a unit's n is 1)
        out["states"] = q("SELECT COALESCE(SUM(LENGTH(data)),0) FROM states").fetchone()[0]
        try:   # (the files the job's functions read: core/files_read.py)
            out["files_read"] = q("SELECT COALESCE(SUM(LENGTH(data)),0) FROM file_contents").fetchone()[0]
        except sqlite3.OperationalError:   # a run file from before it kept them
            out["files_read"] = 0
        out["code"] = q("SELECT COALESCE(SUM(LENGTH(code)),0) FROM operators").fetchone()[0]
        out["file"] = self.path.stat().st_size + sum(
            Path(str(self.path) + s).stat().st_size for s in ("-wal",) if Path(str(self.path) + s).exists())
        return out

    def referenced(self) -> dict[int, tuple[int, int]]:
        """Per source read by reference: (rows kept as positions, bytes of those positions)."""
        out: dict[int, tuple[int, int]] = {}
        for data, n, codec in self.conn.execute(
                f"SELECT data, n, codec FROM entry_chunks WHERE codec IN ({_BY_REFERENCE_SQL})"):
            raw = blobs.decompress(data)
            source = positions.source_of(raw)
            rows, size = out.get(source, (0, 0))
            out[source] = (rows + (n if codec == blobs.REF else positions.rows_in(raw)), size + len(data))
        return out

    def copied_units(self) -> dict[int, int]:
        """Per source, how many of the tuples (or hooked units) it sent into G(θ) are copied
        into the run file rather than kept as positions: for a source read by reference, those
        of a task whose rows were not where its partition says (a union or a coalesce after a
        hooked call)."""
        out: dict[int, int] = {}
        for edge in (self.run["plan"] or {}).get("edges", []):   # (a run that never started has no plan)
            if self.operators[edge["src"]].kind != "source":
                continue
            (n,) = self.conn.execute(
                f"SELECT COALESCE(SUM(n), 0) FROM entry_chunks WHERE op=? AND port=? "
                f"AND codec NOT IN ({_BY_REFERENCE_SQL})", (edge["dst"], edge["port"])).fetchone()
            out[edge["src"]] = out.get(edge["src"], 0) + n
        return out

    def control_log_bytes(self) -> int:
        """Interactions + Input/Output logs + logged results (the paper's log size)."""
        s = self.sizes()
        return (s["interactions"] + s["input_log"] + s["output_log"] + s["output_log_dests"] + s["logged_results"]
                + s["lineage_made"])


_BY_REFERENCE_SQL = ", ".join(f"'{c}'" for c in sorted(blobs.BY_REFERENCE))   # (an SQL list)


class NumpyLogArrays(LogArrays):
    """`core.scopes.LogArrays` with numpy: a sender has one output count per input and one
    destination per row it shuffled, hundreds of thousands in a task. It returns memoryviews
    of int64 arrays (`_q`), and running sums as `RunningSums`, which the core reads as it reads
    its own arrays (indexes, len, bisect)."""

    @staticmethod
    def running_sums(counts: array) -> "RunningSums":
        return RunningSums(counts)

    @staticmethod
    def by_destination(dests: array, n: int) -> tuple[memoryview, list[memoryview]]:
        import numpy as np

        ds = np.asarray(dests)   # (uint32, the log's own buffer: compared without a copy)
        rank = np.empty(len(ds), np.int64)
        if n <= 16:   # a pass per destination is faster than a stable sort (3 ms for 300,000 rows to 4)
            rows = [np.flatnonzero(ds == d) for d in range(n)]
            for found in rows:
                rank[found] = np.arange(len(found), dtype=np.int64)
            return _q(rank), [_q(found) for found in rows]
        order = np.argsort(ds, kind="stable")
        starts = np.concatenate(([0], np.cumsum(np.bincount(ds, minlength=n)[:n])))
        rank[order] = np.arange(len(ds), dtype=np.int64) - starts[ds[order]]
        return _q(rank), [_q(order[starts[d]:starts[d + 1]]) for d in range(n)]

    @staticmethod
    def sent_to(dests: array, dest: int) -> memoryview:
        import numpy as np

        return _q(np.flatnonzero(np.asarray(dests) == dest))


class RunningSums:
    """0, then the running sums of an instance's output counts (`LogArrays.running_sums`), summed
    a block at a time as they are read. A lineage query reads a few of them (a bisect, a tuple's
    outputs) over instances of hundreds of thousands of inputs: summing all of them, into memory
    the process had not touched, took 16 ms of W2's back query (13 instances, 2.19M counts); the
    blocks' totals alone are one pass that writes nothing. (Iterated, as `==` does, through
    `__getitem__` until its IndexError.)"""

    __slots__ = ("_counts", "_starts", "_blocks")
    BLOCK = 1 << 14

    def __init__(self, counts: Any):
        import numpy as np

        self._counts = c = np.asarray(counts)
        totals = np.add.reduceat(c, np.arange(0, len(c), self.BLOCK), dtype=np.int64)
        self._starts = [0, *np.cumsum(totals, dtype=np.int64).tolist()]   # the sum before each block
        self._blocks: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self._counts) + 1

    def __getitem__(self, i: int) -> int:
        n = len(self._counts)
        if i < 0:
            i += n + 1
        if not 0 <= i <= n:
            raise IndexError("running sum index out of range")
        b, r = divmod(i, self.BLOCK)
        if r == 0:
            return self._starts[b]
        block = self._blocks.get(b)
        if block is None:
            import numpy as np

            block = self._blocks[b] = np.cumsum(self._counts[b * self.BLOCK:(b + 1) * self.BLOCK], dtype=np.int64)
        return self._starts[b] + block.item(r - 1)

    def __eq__(self, other: Any) -> bool:
        return list(self) == list(other)


def _q(a) -> memoryview:
    """A numpy array as the core reads its arrays (indexes, len, slices, bisect), without a copy:
    copying into an `array` took a third of a lineage query's first look at a shuffle."""
    import numpy as np

    return memoryview(np.ascontiguousarray(a, dtype=np.int64))


def file_contents(run: Path, digest: str) -> bytes:
    """The bytes of a file the job's functions read that `run` holds (`RunReader.file_digests`),
    read through a connection of its own: a replay reads it when a step opens the file
    (core/files_read.py), whichever reader is open then."""
    conn = schema.open_existing(Path(run))
    try:
        row = conn.execute("SELECT data FROM file_contents WHERE xxh3=?", (digest,)).fetchone()
    finally:
        conn.close()
    if row is None:
        raise RunFileError(f"{run} no longer holds the file whose digest is {digest}; it changed while it was replayed")
    return blobs.decompress(row[0])

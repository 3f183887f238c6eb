"""What runs inside a Spark task: one stage of the dataflow on one partition.

`StageFunction` is the callable handed to `DataFrame.mapInArrow`. Its input is
either a source DataFrame's Arrow batches, or the *envelope* rows of a shuffle,
sorted by `(epoch, route, src, seq)`; its output is envelope rows: one row per
batch of tuples for one consumer (a shuffle edge or a sink) and one destination
instance, the tuples pickled in `payload`.

Barriers (Algorithm 1) across a shuffle need no marker rows: every envelope row
carries the *epoch* of its producer (the number of barriers it had taken), and
the receiving side reads its input sorted by epoch. When the first row of epoch
e arrives, every channel has delivered all rows before barrier e, so the
instance is aligned; Spark's external sort keeps that alignment within bounded
memory however large a partition is. Tuples from outside G(θ) carry epoch -1
and are consumed first.
"""

from __future__ import annotations

import itertools
import os
import pickle
import socket
import threading
from time import monotonic, perf_counter   # (bound at import: through the module, a patched call looks up the stack, core/nondeterministic.py)
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from ..core import files_read, libraries, local_time, outside_effects, task_context, values
from ..core.errors import first_line
from ..core.kept_inputs import KeptDigests
from ..core.state_deltas import StateEncoder, whole
from ..core.graph import SINK, SOURCE, Graph, stable_hash
from ..core.hooked import HOOKED_KINDS
from ..core.logs import kept_apart, pack_results, pack_runs
from ..core.output_digest import OutputDigest
from ..core.runtime import (INF, InstanceLog, LineageRunner, OperatorFailure, RecordingRunner, Runner,
                            JoinLineageRunner, SourceLineageRunner, StoredLineageRunner, ThetaRunner, capture_target,
                            narrow_target)
from ..core.operator import CONTEXT
from ..store import blobs, positions, row_digest
from ..store.dests import pack_dests
from . import cycle_collector
from .client import Connecting, ControlClient
from .key_sums import key_sums

ENVELOPE_DDL = "route int, dest int, epoch int, src int, seq long, payload binary"
#: How a hooked operator's unit is stored, by the operator's kind; rows (the RDD APIs) are
#: pickled in chunks with the other logged rows.
UNIT_CODECS = {"mapInPandas": blobs.PANDAS, "mapInArrow": blobs.ARROW_BATCH,
               "applyInPandas": blobs.PANDAS_GROUP, "cogroup.applyInPandas": blobs.PANDAS_GROUP,
               "applyInArrow": blobs.ARROW_GROUP, "cogroup.applyInArrow": blobs.ARROW_GROUP}


_PLACED_ROWS = 64   # rows of a hooked task's first unit read back to check where its rows are (`_placed`)
#: A hooked unit's codec when it is read by reference (a plain Parquet scan's mapInArrow or mapInPandas).
_REFERENCED_CODEC = {blobs.ARROW_BATCH: blobs.REF_BATCH, blobs.PANDAS: blobs.REF_PANDAS}


class _ArrowRows:
    """How a task reads the rows of a source read by reference: an Arrow batch (a tt.Dataflow
    source's, a hooked mapInArrow unit), whose schema the task sends (`_send_schema`)."""

    frame = False

    @staticmethod
    def count(batch: Any) -> int:
        return batch.num_rows

    @staticmethod
    def width(batch: Any) -> int:
        return batch.num_columns

    @staticmethod
    def column(batch: Any, i: int) -> Any:
        return batch.column(i).to_numpy()

    @staticmethod
    def columns(batch: Any, n: int) -> Any:
        return batch.select(list(range(n)))

    @staticmethod
    def rows(batch: Any, n: int) -> Any:
        return batch.slice(0, n)

    digest = staticmethod(row_digest.digest)


class _FrameRows:
    """The same for a hooked mapInPandas unit, a pandas DataFrame (its Arrow schema the driver
    stored: `RecordingSession.referenced_units`), digested as a frame."""

    frame = True
    count = staticmethod(len)

    @staticmethod
    def width(frame: Any) -> int:
        return frame.shape[1]

    @staticmethod
    def column(frame: Any, i: int) -> Any:
        return frame.iloc[:, i].to_numpy()

    @staticmethod
    def columns(frame: Any, n: int) -> Any:
        return frame.iloc[:, :n]

    @staticmethod
    def rows(frame: Any, n: int) -> Any:
        return frame.iloc[:n]

    digest = staticmethod(row_digest.frame_digest)


def _unit_rows(unit: Any) -> int:
    """Rows in a hooked unit: a DataFrame or batch, or a group `(key, *frames)`."""
    if isinstance(unit, tuple):
        return sum(len(x) for x in unit[1:])
    return len(unit)
ROWS_PER_PAYLOAD = 512          # tuples per envelope row
ENVELOPES_PER_BATCH = 64        # envelope rows per output Arrow batch
FLUSH_ROWS = 50_000             # send logs at least this often (inputs since last flush)
FLUSH_SECONDS = 2.0             # ... and at least this often, in seconds (`_flush_seconds`)
FLUSH_BYTES = 8 << 20


def _flush_seconds(default: float) -> float:
    """`FLUSH_SECONDS`, or the interval `TT_FLUSH_SECONDS` sets, for a run whose pace is not its
    own: benches/instructions.py runs the Python workers under valgrind, many times slower, where
    a task flushing every 2 s flushed as often as the machine's load let it, and each flush packs
    the Arrow batches its StatefulProcessor rows lie in, the one it shares with the flush before
    once more (recorder/teed_batches.py): the same keyed TWS recording counted 12.91 G
    instructions on a quiet machine, 13.14 G on a busy one."""
    try:
        seconds = float(os.environ.get("TT_FLUSH_SECONDS", default))
    except ValueError:
        return default
    return seconds if seconds > 0 else default


FLUSH_SECONDS = _flush_seconds(FLUSH_SECONDS)


@dataclass(frozen=True)
class Recording:
    """How a task reaches the coordinator; shipped inside the stage function."""

    address: tuple[str, int]
    secret: str
    run_id: str
    when: str | None = None


def envelope_schema():
    import pyarrow as pa

    return pa.schema([("route", pa.int32()), ("dest", pa.int32()), ("epoch", pa.int32()),
                      ("src", pa.int32()), ("seq", pa.int64()), ("payload", pa.binary())])


class StageFunction:
    """Picklable entry point: `df.mapInArrow(StageFunction(...), ENVELOPE_DDL)`."""

    def __init__(self, graph: Graph, stage_id: int, recording: Recording | None, run_token: str,
                 offset: int = 0, limit: int | None = None):
        self.graph = graph
        self.stage_id = stage_id
        self.recording = recording
        # Spark matches cached plans by their pickled functions: without a token, a
        # second run of the same dataflow would silently reuse the first one's output.
        self.run_token = run_token
        # Where this stage's partitions sit among the task set's (see execute.task_numbering):
        # the instance is TaskContext.partitionId() - offset, below limit when one is set.
        self.offset = offset
        self.limit = limit
        # a source read by reference: its batches end with position columns (recorder/sources.py)
        self.source_ref = None

    def __call__(self, batches: Iterator) -> Iterator:
        from pyspark import TaskContext

        tc = TaskContext.get()
        attempt = {"spark_attempt": tc.taskAttemptId(), "number": tc.attemptNumber()}
        partition = self.instance(tc.partitionId())
        connecting = connect(self.graph, self.stage_id, partition, self.recording, attempt)
        batches = _first_pulled(batches, connecting)   # while the coordinator answers
        task = StageTask(self.graph, self.stage_id, partition, self.recording, attempt, connecting)
        task.source_ref = self.source_ref
        yield from task.run_arrow(batches)

    def instance(self, partition_id: int) -> int:
        """This stage's instance run by the Spark task on partition `partition_id`."""
        i = partition_id - self.offset
        if i < 0 or (self.limit is not None and i >= self.limit):
            # Spark ran a part of the union with other partitions than planned: numbering
            # the instances anyway would mix two stages' instances up
            planned = (f"{self.offset}..{self.offset + self.limit - 1}" if self.limit is not None
                       else f"{self.offset} and up")
            raise RuntimeError(f"tt: stage {self.stage_id} ran in task partition {partition_id}, outside "
                               f"its planned partitions {planned}")
        return i

    def rows(self, index: int, rows: Iterator) -> Iterator[tuple]:
        """For RDD sources: the same stage, fed Python rows, yielding envelope tuples."""
        from pyspark import TaskContext

        tc = TaskContext.get()
        attempt = {"spark_attempt": tc.taskAttemptId(), "number": tc.attemptNumber()}
        connecting = connect(self.graph, self.stage_id, index, self.recording, attempt)
        rows = _first_pulled(rows, connecting)
        task = StageTask(self.graph, self.stage_id, index, self.recording, attempt, connecting)
        for batch in task.run_rows(rows):
            yield from zip(*batch)


def connect(graph: Graph, stage_id: int, partition: int, recording: Recording | None,
            attempt: dict) -> Connecting | None:
    """Start the task's handshake with the coordinator (None when nothing records)."""
    if recording is None:
        return None
    return Connecting(recording.address, recording.secret, _hello(graph, stage_id, partition, recording, attempt))


def _hello(graph: Graph, stage_id: int, partition: int, recording: Recording, attempt: dict) -> dict:
    """What a task tells the coordinator of itself; `hash_seed`: the PYTHONHASHSEED its worker runs
    with (PySpark gives its workers the driver's, else 0), which replay must run with too: the
    order of a set of strings, which a job's code may iterate over, follows it; `timezone`: the
    local time zone it runs in, which replay runs in too, and `timezone_facts`, what a replay
    checks it tells local time in it as here by (core/local_time.py); `libraries`: the
    packages its worker has loaded, with their versions (core/libraries.py); `context`: its
    TaskContext, which a replayed step gets from `TaskContext.get()` (core/task_context.py)."""
    from pyspark import TaskContext

    return {"run": recording.run_id, "stage": graph.stages[stage_id].id, "partition": partition,
            "host": f"{socket.gethostname()}:{os.getpid()}", "hash_seed": os.environ.get("PYTHONHASHSEED"),
            "timezone": _ZONE, "timezone_facts": _ZONE_FACTS, "libraries": libraries.loaded(),
            "context": task_context.facts(TaskContext.get()), **attempt}


_ZONE, _ZONE_FACTS = local_time.zone(), local_time.facts()   # (once a worker: they read a link and a file)


def _first_pulled(items: Iterable, connecting: Connecting | None) -> Iterator:
    """`items` with its first item pulled now: Spark reads or fetches it while the
    coordinator answers the task's handshake (a source's first batch, a shuffle's first
    payloads). If Spark fails meanwhile, the connection is closed before the error goes on."""
    it = iter(items)
    try:
        first = next(it)
    except StopIteration:
        return it
    except BaseException:
        if connecting is not None:
            connecting.abandon()
        raise
    return itertools.chain((first,), it)


class _Pipeline(threading.local):
    """The hooked tasks of G(θ) open in this thread for one Spark task attempt, upstream first.

    PySpark chains an RDD's functions (mapPartitions, then filter, then map) in one Python
    worker, each pulling from the one before: when the first of them takes a barrier before
    its next input, every later one has processed all it was handed. So only the first takes
    interactions from the coordinator, and the later ones take the same barriers at that
    moment (`StageTask._take_barriers`); on their own they would take them whenever their own
    client heard of them, a cut that is not consistent (a filter having seen rows its upstream
    had not yet produced)."""

    attempt: Any = None   # (never a Spark attempt id: the first join starts the list)
    tasks: list


_PIPELINE = _Pipeline()


def _no_interaction() -> None:
    """A finished task's answer to an interaction (`StageTask._release`)."""


class Outbox:
    """Buffers outputs per (route, destination) and packs them into envelope rows."""

    def __init__(self, partition: int):
        self.partition = partition
        self.epoch = 0   # the task's interactions reported so far (`StageTask.epoch`)
        self.cols: list[list] = [[], [], [], [], [], []]
        self.bytes = 0
        self.seq: dict[tuple[int, int], int] = {}
        self.routes: list[tuple[int, list[list], bool]] = []  # (route, buffers, in G(θ))

    def shuffle_target(self, route: int, key, n_dest: int, in_g: bool, dests_log):
        bufs: list[list] = [[] for _ in range(n_dest)]
        self.routes.append((route, bufs, in_g))
        pack = self._pack
        src = self.partition
        if key is None:  # unkeyed merge of two stages: forward by sending instance
            d_fixed = src % n_dest
            buf = bufs[d_fixed]

            def emit(row):
                buf.append(row)
                if dests_log is not None:
                    dests_log.append(d_fixed)
                if len(buf) >= ROWS_PER_PAYLOAD:
                    pack(route, d_fixed, buf, in_g)
            return emit

        def emit(row):
            d = stable_hash(key(row)) % n_dest
            b = bufs[d]
            b.append(row)
            if dests_log is not None:
                dests_log.append(d)
            if len(b) >= ROWS_PER_PAYLOAD:
                pack(route, d, b, in_g)

        def emit_many(rows) -> bool:
            """`emit` each of a source's batch: their destinations first, logged in one `fromlist`
            (1M rows into 4 destinations, Spark-free, best of 9: logging them cost +86 ms appended
            row by row, +42 ms by `extend`; `fromlist` takes 10,000 in 90 µs, `extend` in 244).
            False, having done nothing, where the key function raised: the caller then emits row
            by row, to fail at that row."""
            try:
                ds = [stable_hash(key(row)) % n_dest for row in rows]
            except Exception:
                return False
            if dests_log is not None:
                dests_log.fromlist(ds)
            for row, d in zip(rows, ds):
                b = bufs[d]
                b.append(row)
                if len(b) >= ROWS_PER_PAYLOAD:
                    pack(route, d, b, in_g)
            return True
        emit.many = emit_many
        return emit

    def sink_target(self, route: int, in_g: bool):
        buf: list = []
        self.routes.append((route, [buf], in_g))
        pack = self._pack
        src = self.partition

        def emit(row):
            buf.append(row)
            if len(buf) >= ROWS_PER_PAYLOAD:
                pack(route, src, buf, in_g, dest=src)
        return emit

    def _pack(self, route: int, d: int, buf: list, in_g: bool, dest: int | None = None) -> None:
        payload = pickle.dumps(buf, protocol=5)
        buf.clear()
        dest = d if dest is None else dest
        key = (route, dest)
        seq = self.seq.get(key, 0)
        self.seq[key] = seq + 1
        c = self.cols
        c[0].append(route)
        c[1].append(dest)
        c[2].append(self.epoch if in_g else -1)
        c[3].append(self.partition)
        c[4].append(seq)
        c[5].append(payload)
        self.bytes += len(payload)

    def close_epoch(self) -> None:
        """Pack what G(θ) produced before a barrier, so no row straddles two epochs."""
        for route, bufs, in_g in self.routes:
            if in_g:
                for d, b in enumerate(bufs):
                    if b:
                        self._pack(route, d, b, in_g, dest=self.partition if route < 0 else None)

    def close(self) -> None:
        for route, bufs, in_g in self.routes:
            for d, b in enumerate(bufs):
                if b:
                    self._pack(route, d, b, in_g, dest=self.partition if route < 0 else None)

    def take(self, force: bool = False) -> list[list] | None:
        if not self.cols[0] or (not force and len(self.cols[0]) < ENVELOPES_PER_BATCH
                                and self.bytes < FLUSH_BYTES):
            return None
        cols, self.cols, self.bytes = self.cols, [[], [], [], [], [], []], 0
        return cols


def _defined_in(cls: type, name: str) -> type | None:
    """The class `cls` takes attribute `name` from: a join's `join_key` speaks for its own
    `process` only (a subclass that processes otherwise falls back on `emitted_from`)."""
    return next((c for c in cls.__mro__ if name in vars(c)), None)


def _logging_runner(node, in_g: bool) -> type[RecordingRunner]:
    """The runner of an instance that keeps Input and Output logs: in G(θ), or outside it with
    `tt record --lineage`, where it logs ids and counts only, and what it can of lineage."""
    if in_g:
        return RecordingRunner
    if node.kind == SOURCE:
        return SourceLineageRunner     # where its rows went
    if node.op.join_key is not None and _defined_in(type(node.op), "join_key") is _defined_in(type(node.op), "process"):
        return JoinLineageRunner       # and each input's key, which tells what each output was made from
    if node.op.stores_inputs and node.op.emitted_from is not None:
        return StoredLineageRunner     # and the stored rows each output was made from
    if node.op.kept_in is not None and node.op.emitted_from is not None:
        return LineageRunner           # and what each output was made from
    return RecordingRunner


class StageTask:
    def __init__(self, graph: Graph, stage_id: int, partition: int, recording: Recording | None,
                 attempt: dict, connecting: Connecting | None = None):
        """`attempt` carries Spark's attempt ids, and for a streaming task its `slot`
        ([micro-batch, partition]): the coordinator then says which instance it runs.
        `connecting`: the handshake `connect` started, if the caller started it early."""
        self.g = graph
        self.stage = graph.stages[stage_id]
        self.partition = partition
        self.outbox = Outbox(partition)
        self.client = None
        self.mode = "off"
        self.sticky: list[tuple[int, int]] = []   # (k, position) barriers a re-run must repeat
        self.when_from = 0
        self.k_now = 0
        self.new_checkpoints: list[tuple[dict, bytes]] = []
        self.state_encoder = StateEncoder()  # interaction states: deltas against the previous one
        self.kept_digests = KeptDigests(key_sums)    # ... and a join's stored rows as digests (core/kept_inputs.py)
        self.checkpointer = None   # a CheckpointWriter when the recording checkpoints online
        self.checkpoint_seq: dict[int, int] = {}
        self.busy = 0.0            # seconds spent processing since the last flush (replay cost model)
        self.warned = False
        self.downstream: list[StageTask] = []   # hooked tasks chained after this one (`_Pipeline`)
        self.chained = False   # chained after another: it takes barriers only with that one
        self.in_worker = attempt.get("spark_attempt") is not None   # (not a partition without rows, run on the driver)
        if connecting is not None:
            self._welcomed(connecting.client())
        elif recording is not None:   # (a hooked stage's task, opened at its first unit: nothing to overlap)
            self._welcomed(ControlClient(recording.address, recording.secret,
                                         _hello(graph, stage_id, partition, recording, attempt)))
        self.runners: dict[int, Runner] = {}
        self.recorders: list[RecordingRunner] = []   # G(θ): logs, snapshots, checkpoints
        self.loggers: list[RecordingRunner] = []     # every instance with logs: G(θ), and --lineage's
        self.theta: ThetaRunner | None = None
        self.pending_barriers: list[dict] = []
        self.new_states: dict[str, tuple[bytes, int]] = {}  # hash -> (compressed JSON, full size)
        self.output_digests: dict[int, OutputDigest] = {}    # op -> what it emitted (`_digest_outputs`)
        self.sent_states: set[str] = set()
        self.last_state: dict[int, tuple[int, str, bool]] = {}  # node -> (position, hash, by rows) of its last snapshot
        self.entry_seq: dict[tuple[int, int, int], int] = {}
        self.arrow_entries: list[tuple[int, int, int, Any]] = []  # (node, port, src, batch)
        self.unit_entries: list[tuple[int, int, int, str, bytes]] = []  # (node, port, src, codec, packed unit): hooked
        self.blob_entries: list[tuple[int, int, int, int, bytes]] = []  # (node, port, src, n, payload)
        self.ref_entries: list[tuple[int, int, int, int, bytes]] = []  # (node, port, src, n, positions)
        self.source_ref = None       # a TaskRef when the source is read by reference
        self._rows = _ArrowRows      # how its referenced source's rows are read (`_FrameRows`: mapInPandas)
        self._units_placed: bool | None = None   # its units lie where its partition says (`_placed`)
        self.warning: str | None = None          # for the coordinator, with the next flush
        self.schema_sent = False     # the referenced source's Arrow schema went to the coordinator
        self.source_rows = 0         # a counted source's rows so far (recorder/sources.py)
        self.source_schema: bytes | None = None  # ... and is due in the next flush
        self.last_flush = monotonic()
        self.since_flush = 0
        self._build(recording.when if recording else None)
        self._released = False
        cycle_collector.task_started()   # until `_release`

    @property
    def epoch(self) -> int:
        """The interactions G(θ)'s instances in this task have reported so far (kept by the
        outbox, which stamps every envelope of G(θ) with it)."""
        return self.outbox.epoch

    # --- set-up ---------------------------------------------------------------

    def _welcomed(self, client: ControlClient) -> None:
        self.client = client
        w = client.welcome
        self.partition = self.outbox.partition = w.get("partition", self.partition)
        self.mode = w["mode"]  # record | shadow | off
        self.sticky = [tuple(x) for x in w.get("sticky", [])]
        self.when_from = w.get("when_from", 0)
        self.k_now = w.get("k_now", 0)
        if w.get("checkpoints") is not None and self.mode == "record":
            from ..core.checkpoint import CheckpointWriter

            self.checkpointer = CheckpointWriter()
            self.client.checkpoints.update(w["checkpoints"])

    def _build(self, when_src: str | None) -> None:
        g, p = self.g, self.partition
        logging = self.mode in ("record", "shadow")
        for nid in self.stage.nodes:
            node = g.nodes[nid]
            if not (logging and nid in g.logged):
                self.runners[nid] = Runner(node.name, p, node.op, nid)
                continue
            log = InstanceLog([e for e in node.outputs if g.edges[e].shuffle])
            multi = len(node.inputs) > 1 and nid != self.stage.head
            if nid in g.in_g and g.takes_barriers(nid):
                when = None
                if when_src and self.mode == "record" and nid == g.theta:
                    from .triggers import compile_condition
                    when = compile_condition(when_src)
                r = ThetaRunner(node.name, p, node.op, nid, log, multi, on_barrier=self._on_barrier,
                                on_trigger=self._on_trigger, when=when, when_from=self.when_from)
                self.theta = r
            else:
                r = _logging_runner(node, nid in g.in_g)(node.name, p, node.op, nid, log, multi)
            if nid == self.stage.source or (len(node.inputs) == 1 and nid != self.stage.head):
                r.implicit_channel = (0, p)
            if nid in g.in_g:
                self.recorders.append(r)
            self.loggers.append(r)
            self.runners[nid] = r
        source = self.stage.source
        for nid in self.stage.nodes:
            node, r = g.nodes[nid], self.runners[nid]
            logged = isinstance(r, RecordingRunner)
            if node.kind == SINK:
                r.targets.append(self.outbox.sink_target(-1 - nid, nid in g.in_g))
            for eid in node.outputs:
                e = g.edges[eid]
                if e.shuffle:
                    dests = r.log.dests[eid] if logged else None
                    r.targets.append(self.outbox.shuffle_target(
                        eid, e.key, g.nodes[e.dst].instances, nid in g.in_g, dests))
                    continue
                dst = self.runners[e.dst]
                t = narrow_target(dst, e.port)
                if isinstance(dst, RecordingRunner) and g.is_entry(e) and nid != source:
                    t = capture_target(t, dst.log.entry.setdefault((e.port, p), []))
                r.targets.append(t)
        if self.theta is not None:
            if self.sticky:
                self.theta.barrier_at = self.sticky[0][1]
            if self.mode == "record":
                self.client.on_interaction = self._wake_theta
        self._digest_outputs()

    def _digest_outputs(self) -> None:
        """What an instance emits, digested for `tt verify` (core/output_digest.py): a shadow's
        (a run Spark made again, compared with the replay of the recorded one), and a recorded
        hooked function's, compared with its replay: where its code reads something no log
        gives back, its states can agree and its rows not. Not a Dataflow operator's (its
        outputs follow from its logged inputs and verified state), which W1/W2 would pay for."""
        if self.mode not in ("record", "shadow"):
            return
        for r in self.recorders:
            if self.mode == "shadow" or self.g.nodes[r.node_id].kind in HOOKED_KINDS:
                r.targets.append(self.output_digests.setdefault(r.node_id, OutputDigest()))

    def _wake_theta(self) -> None:
        self.theta.barrier_at = 0

    def join_pipeline(self, spark_attempt: int) -> None:
        """A hooked task in G(θ) chained after another in this thread and Spark task (`_Pipeline`)
        takes its barriers from that one, not from the coordinator."""
        if self.theta is None or self.mode != "record":
            return
        if _PIPELINE.attempt != spark_attempt:
            _PIPELINE.attempt, _PIPELINE.tasks = spark_attempt, []
        _PIPELINE.tasks = [t for t in _PIPELINE.tasks if not t._released]
        if _PIPELINE.tasks:
            _PIPELINE.tasks[-1].downstream.append(self)
            self.chained = True
            self.client.on_interaction = _no_interaction
        _PIPELINE.tasks.append(self)

    def _source_captures(self) -> list[tuple[int, int]]:
        """(node, port) whose recorded input is the source's Arrow batch itself."""
        g, src = self.g, self.stage.source
        out = []
        if src in g.in_g:
            out.append((src, 0))
        for eid in g.nodes[src].outputs:
            e = g.edges[eid]
            if not e.shuffle and isinstance(self.runners[e.dst], RecordingRunner) and g.is_entry(e):
                out.append((e.dst, e.port))
        return out

    def _lineage_captures(self) -> list[tuple[int, int]]:
        """(node, port) outside G(θ) fed by a source read by reference, with `--lineage`: the
        rows' file positions are kept (never the rows), so lineage names a source row's file and row."""
        g, src = self.g, self.stage.source
        if self.source_ref is None or self.mode != "record":
            return []
        own = [(src, 0)] if src in g.lineage else []   # a source logged where its rows went (a shuffle)
        return own + [(g.edges[e].dst, g.edges[e].port) for e in g.nodes[src].outputs
                      if not g.edges[e].shuffle and g.edges[e].dst in g.lineage]

    def _replays_from_source(self) -> bool:
        """Whether replay rebuilds what this stage's source shuffles into G(θ) from the source's
        own logs (`Graph.by_reference`): then a batch whose positions cannot be kept is copied."""
        return self.mode == "record" and any(e in self.g.by_reference for e in self.g.nodes[self.stage.source].outputs)

    # --- running ----------------------------------------------------------------

    def run_arrow(self, batches: Iterator) -> Iterator:
        import pyarrow as pa

        schema = envelope_schema()
        for cols in self._run(batches, arrow=True):
            yield pa.RecordBatch.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)

    def run_rows(self, rows: Iterator) -> Iterator[list[list]]:
        def as_batches():
            chunk = []
            for row in rows:
                chunk.append(row)
                if len(chunk) >= 4096:
                    yield chunk
                    chunk = []
            if chunk:
                yield chunk
        yield from self._run(as_batches(), arrow=False)

    def run_units(self, units: Iterator) -> Iterator:
        """A hooked stage (a source, then the hooked function): each unit Spark hands the
        function is one step of its operator, and what the function yields goes back to
        Spark as it comes. The function's own exception is re-raised, so the job sees
        what it would see without tt."""
        self.open_units()
        try:
            for unit in units:
                if self._unit_head.op.done:
                    break  # the function returned without pulling the rest
                yield from self.feed_unit(unit)
        except GeneratorExit:
            self.cut_units()
            raise
        yield from self.end_units()

    def cut_units(self) -> None:
        """Spark stopped pulling the stage's outputs before its input ran out: `rdd.take(n)`
        and `first()` pull a partition's rows through a generator of PySpark's that stops at n,
        and PySpark closes the rest. The function never sees the end of its input, so the task
        ends where it stopped, without END steps: its logs and its end state as they are (the
        function's generator suspended in its last pull), which replay stops at too. Then the
        function is closed as PySpark closes it (its `finally` runs), which is no step."""
        if self._released:
            return
        try:
            self._finish(cut=True)
            close = getattr(self._unit_head.op, "close", None)
            if close is not None:
                close()
        finally:
            self._release()

    def open_units(self) -> None:
        """Ready a hooked stage to be fed its units one at a time (`feed_unit`, `end_units`):
        the grouped APIs call the function once per group, so Spark pushes, not pulls."""
        head_id = next(n for n in self.stage.nodes if n != self.stage.source)
        head = self._unit_head = self.runners[head_id]
        self._unit_out: list = []
        head.targets.append(self._unit_out.append)
        self._unit_codec = UNIT_CODECS.get(self.g.nodes[head_id].kind)  # None: a row, logged with the others
        if self._unit_codec == blobs.PANDAS:
            self._rows = _FrameRows
        logged = isinstance(head, RecordingRunner) and self.mode == "record"
        self._unit_log = head.log.entry.setdefault((0, self.partition), []) if logged else None

    def feed_unit(self, unit: Any, logged: tuple | None = None) -> list:
        """One step of the hooked operator; what it produced meanwhile. `logged`: what the log
        keeps in place of a row unit, made of values nothing changes (recorder/teed_batches.py)."""
        head, codec = self._unit_head, self._unit_codec
        where = None
        if self.source_ref is not None:   # a unit of a Parquet scan: its rows' positions (and its digest)
            unit, where = self._split_positions(unit, self._unit_log is not None)
            if where is None and self._unit_log is not None:   # its scan has no file for this task's partition
                self._misplaced()
            elif where is not None and not self._placed(where, unit):
                where = None
        if self._unit_log is not None:
            if codec is None:   # packed later; the function may change its unit
                self._unit_log.append(kept_apart(unit, packed_by_pickle=True, frames=True) if logged is None else logged)
            elif where is not None:
                self.unit_entries.append((head.node_id, 0, self.partition, _REFERENCED_CODEC[codec], where))
            else:   # packed now: the function may write into a DataFrame it is handed
                self.unit_entries.append((head.node_id, 0, self.partition, *blobs.pack_unit(codec, unit)))
        try:
            t0 = perf_counter()
            self.runners[self.stage.source].feed_rows((unit,), 0)   # a Source hands it straight on
            self.busy += perf_counter() - t0
            self.since_flush += 1 if codec is None else _unit_rows(unit)
            self._after_input()
        except OperatorFailure as f:
            self._failed_units(f)
        out = self._unit_out[:]
        self._unit_out.clear()
        return out

    def end_units(self) -> list:
        """The input is exhausted: the END steps, the logs' last flush; what was produced meanwhile.
        Nothing more once the task is over (its function raised: `_failed_units`)."""
        if self._released:
            return self._unit_out
        try:
            self._end_all()
            self._finish()
        except OperatorFailure as f:
            self._failed_units(f)
        finally:
            self._release()
        return self._unit_out

    def _end_all(self) -> None:
        """The input is exhausted: every operator of the stage takes its END step, in order."""
        for nid in self.stage.nodes:
            self.runners[nid].end()
            self._after_input()

    def _failed_units(self, f: OperatorFailure):
        """The hooked function raised: log it, then raise its own exception to Spark."""
        try:
            self._fail(f)
        finally:
            self._release()
        raise f.error.with_traceback(f.error.__traceback__) from None

    def _run(self, batches: Iterator, arrow: bool) -> Iterator[list[list]]:
        try:
            if self.stage.source is not None:
                yield from self._run_source(batches, arrow)
            else:
                yield from self._run_shuffled(batches)
            self._end_all()
            self.outbox.close()
            cols = self.outbox.take(force=True)
            if cols:
                yield cols
            self._finish()
        except OperatorFailure as f:
            self._fail(f)
            raise
        finally:
            self._release()

    def _release(self) -> None:
        """The task is over (ended or failed): close its channel to the coordinator, let go of
        its runners, and put the cycle collector's setting back (recorder/cycle_collector.py).
        θ's runner and the control client call back into the task (barriers, interactions), so
        they and the task held each other: the operators' state, a join's every row, outlived
        the task as cyclic garbage, which PySpark's worker collects after each task
        (`gc.collect()` in pyspark/daemon.py) by walking all of it: 0.3 to 0.6 s a W2 join task.
        Let go, it is freed as the task ends."""
        if self._released:
            return
        self._released = True
        CONTEXT.runner = None
        if self.client is not None:
            self.client.close()
            self.client.on_interaction = _no_interaction   # (it woke θ when an interaction came)
        cycle_collector.task_ended()
        self.runners, self.recorders, self.loggers, self.theta, self.downstream = {}, [], [], None, []
        self._unit_head = None

    def _run_source(self, batches: Iterator, arrow: bool) -> Iterator[list[list]]:
        src = self.runners[self.stage.source]
        captures = self._source_captures() if self.mode == "record" else []
        # (node, port, copied when its positions cannot be kept): G(θ)'s recorded inputs always; the
        # --lineage positions only where replay rebuilds a shuffle into G(θ) from them
        replayed = self._replays_from_source()
        kept = [(nid, port, True) for nid, port in captures] + [
            (nid, port, replayed and nid == self.stage.source) for nid, port in self._lineage_captures()]
        for batch in batches:
            if arrow:
                refs = None
                if self.source_ref is not None:
                    batch, refs = self._split_positions(batch, bool(kept))
                for nid, port, copied in kept:
                    if refs is not None:
                        self.ref_entries.append((nid, port, self.partition, batch.num_rows, refs))
                    elif copied:
                        self.arrow_entries.append((nid, port, self.partition, batch))
                rows = batch.to_pylist()
            else:
                rows = batch
                if captures:   # packed later; the operators may change the rows they get
                    copies = [kept_apart(r, packed_by_pickle=True) for r in rows]
                    for nid, port in captures:
                        self.runners[nid].log.entry.setdefault((port, self.partition), []).extend(copies)
            t0 = perf_counter()
            src.feed_rows(rows, 0)
            self.busy += perf_counter() - t0
            self.since_flush += len(rows)
            self._after_input()
            cols = self.outbox.take()
            if cols:
                yield cols

    def _split_positions(self, batch: Any, logged: bool) -> tuple[Any, bytes | None]:
        """A referenced source's batch (or a hooked mapInPandas unit's DataFrame) without its
        position columns, and the positions packed with the digest of its values (None when
        the batch must be copied: a file the driver did not list)."""
        import numpy as np

        ref, read = self.source_ref, self._rows
        if ref.counted:   # no position column: the task's n-th row is its splits' n-th row that passes the filter
            if not logged:
                return batch, None
            n = read.count(batch)
            before, self.source_rows = self.source_rows, self.source_rows + n
            if not read.frame:
                self._send_schema(batch)
            return batch, blobs.compress(positions.pack_counted(ref.source, self.partition, before, n,
                                                                read.digest(batch)))
        width = read.width(batch) - (2 if ref.hashes else 1)
        rows = read.column(batch, width)
        data = read.columns(batch, width)
        if not logged:
            return data, None
        if ref.hashes:
            hashes, which = np.unique(read.column(batch, width + 1), return_inverse=True)
            ids = [ref.hashes.get(int(h)) for h in hashes]
            if None in ids:
                return data, None
            files = np.asarray(ids, np.int64)[which]
        else:
            fid = ref.file_of(self.partition)
            if fid is None:
                return data, None
            files = np.full(len(rows), fid, np.int64)
        if not read.frame:
            self._send_schema(data)
        # the values' digest: replay proves the rows it reads back are these (store/row_digest.py)
        return data, blobs.compress(positions.pack(ref.source, positions.segments(rows, files), read.digest(data)))

    def _placed(self, where: bytes, unit: Any) -> bool:
        """Whether this task's units lie where its partition says in the scan: the first rows of
        its first unit are read back from their file as replay will read them (the start of one
        row group, `SourceReader.head`) and compared; when they are other rows, or the scan has
        no such partition (Spark ran the call's partitions under other numbers, or together),
        the task's units are copied."""
        if self._units_placed is None:
            from ..store import sources

            read = self._rows
            if not read.count(unit):
                return True   # (no rows, no place: the next unit is checked)
            scan = self.source_ref.scan
            if scan["schema"] is None:   # (a batch's own: the driver has none to give)
                scan = {**scan, "schema": unit.schema.serialize().to_pybytes()}
            placed = False
            if self.partition in self.source_ref.files:
                try:
                    head = sources.SourceReader.of_scan(scan).head(blobs.decompress(where), _PLACED_ROWS)
                    if read.frame:
                        head = sources.frame_builder.build(head, scan["info"].get("pandas") or {})
                    placed = read.digest(head) == read.digest(read.rows(unit, read.count(head)))
                except Exception as e:   # noqa: BLE001  (SourceFileError, or files this executor cannot read)
                    self.warning = (f"{self._unit_head.name}: a task could not read its scan's files back to "
                                    f"check where its rows are ({type(e).__name__}: {first_line(e)}): its units "
                                    f"are copied into the run file")
            if placed:
                self._units_placed = True
            else:
                self._misplaced()
        return self._units_placed

    def _misplaced(self) -> None:
        """This task's units are copied into the run file: said once (a reason said already stands)."""
        if self._units_placed is not False:
            self._units_placed = False
            self.warning = self.warning or (
                f"{self._unit_head.name}: the rows of a task of its scan were not where the task's partition "
                f"says (a union or a coalesce after the call?): that task's units are copied into the run file")

    def _send_schema(self, data: Any) -> None:
        """The referenced source's Arrow schema goes to the coordinator once (with the next flush)."""
        if not self.schema_sent:
            self.schema_sent = True
            self.source_schema = data.schema.serialize().to_pybytes()

    def _run_shuffled(self, batches: Iterator) -> Iterator[list[list]]:
        g = self.g
        head = self.runners[self.stage.head]
        ports = {eid: g.edges[eid].port for eid in self.stage.inputs}
        logged = isinstance(head, RecordingRunner)
        entry = ({eid for eid in self.stage.inputs if g.is_entry(g.edges[eid]) and eid not in g.by_reference}
                 if logged and self.mode == "record" else set())
        feed_rows = head.feed_rows
        hid = head.node_id
        for batch in batches:
            t0 = perf_counter()
            routes, epochs, srcs, payloads = (batch.column(i).to_pylist() for i in (0, 2, 3, 5))
            for route, epoch, src, payload in zip(routes, epochs, srcs, payloads):
                if epoch > self.epoch and self.theta is None:
                    self._take_barriers(list(range(self.epoch + 1, epoch + 1)))
                rows = pickle.loads(payload)
                port = ports[route]
                if logged:
                    head.log.inputs.add(port, src, len(rows))
                    if route in entry:
                        self.blob_entries.append((hid, port, src, len(rows), payload))
                feed_rows(rows, port)
                self.since_flush += len(rows)
            self.busy += perf_counter() - t0
            self._after_input()
            cols = self.outbox.take()
            if cols:
                yield cols

    # --- barriers -------------------------------------------------------------

    def _on_barrier(self, position: int) -> None:
        """θ is about to consume input #position and a barrier is due."""
        ks = []
        while self.sticky and self.sticky[0][1] <= position:
            ks.append(self.sticky.pop(0)[0])
        self.theta.barrier_at = self.sticky[0][1] if self.sticky else INF
        if self.mode == "record" and not self.chained:
            # (a chained task takes them with the task before it, at that one's cut, even one that
            # woke it before it joined the chain: taken here, before its next input, it would leave
            # rows that task had already handed it in flight inside one thread)
            pending = self.client.pending
            while pending:
                ks.append(pending.popleft())
        self._take_through(ks)

    def _on_trigger(self, position: int, row: Any) -> None:
        k = self.client.trigger({"op": self.theta.node_id, "instance": self.partition,
                                 "position": position, "row": values.render(values.encode(row), 200)})
        pending = self.client.pending
        ks = [k]
        while pending:
            ks.append(pending.popleft())
        while self.sticky and self.sticky[0][1] <= position:
            ks.append(self.sticky.pop(0)[0])
        self._take_through(ks)

    def _take_through(self, ks: list[int]) -> None:
        """Take every barrier up to the newest of `ks`.

        Interaction indices are dense and ordered by the coordinator, so barrier k
        implies all earlier ones: a broadcast of k-1 may reach this task after the
        reply to its own trigger k (they travel on different coordinator threads),
        and it must then be taken here, at the same position, not dropped.
        """
        top = max(ks, default=0)
        if top > self.epoch:
            self._take_barriers(list(range(self.epoch + 1, top + 1)))

    def _take_barriers(self, ks: list[int]) -> None:
        """Every instance in G(θ) in this task reports its state for interactions `ks`."""
        self.outbox.close_epoch()
        if self.mode == "record":
            for r in self.recorders:
                h = self._state_hash(r)
                self.pending_barriers.append({"k": ks, "op": r.node_id, "i": self.partition,
                                              "pos": r.count, "state": h})
        elif self.mode == "shadow":   # hashed as the recorded run hashed them, so its end hash compares (`_finish`)
            for r in self.recorders:
                self._state_hash(r)
        if self.checkpointer is not None:
            flagged = [k for k in ks if k in self.client.checkpoints]
            if flagged:
                self._checkpoint(flagged[-1])
        self.outbox.epoch = ks[-1]
        self.flush()
        for t in self.downstream:   # chained after this one in the same thread (`_Pipeline`)
            if not t._released:
                t._take_through(ks)

    def _checkpoint(self, k: int) -> None:
        """Save every instance of G(θ) in this task (online checkpointing; k = -1 at the end)."""
        for r in self.recorders:
            kind, data = self.checkpointer.take(r.node_id, r.op)
            packed = blobs.compress(data)
            seq = self.checkpoint_seq.get(r.node_id, 0)
            self.checkpoint_seq[r.node_id] = seq + 1
            self.new_checkpoints.append(({"op": r.node_id, "i": self.partition, "k": k, "seq": seq,
                                          "pos": r.count, "kind": kind}, packed))

    def _state_hash(self, r: Runner, end: bool = False) -> str:
        """The hash of `r`'s state as stored (the stored bytes queued to send): at an interaction,
        or at its task's `end`, where a join's stored rows are digested (core/kept_inputs.py `ROWS`)."""
        rows_until_end = getattr(r.op, "appends_each_input", False)
        by_rows = rows_until_end and not end
        last = self.last_state.get(r.node_id)
        if last is not None and last[0] == r.count and (by_rows or not last[2]):
            return last[1]  # state changes only by consuming an input: nothing to encode
        changed_keys, appended_rows = getattr(r.op, "changed_keys", None), getattr(r.op, "appended_rows", None)
        if by_rows:   # its stored rows by their keys and rows (the join counts nothing per input)
            inputs = ({r.implicit_channel[0]: r.count} if r.implicit_channel is not None   # (one port: no runs logged)
                      else r.log.inputs.per_port(r.count))
            state, kept_bytes = self.kept_digests.rows(r.node_id, r.op, r.op.state(), inputs)
            h, data, size = whole(state)
        elif r.count == 0 or rows_until_end:
            # from scratch: the end of an operator stored by rows until then, or
            # the state before any input (a task that starts after an interaction takes it first),
            # whole: asking `changed_keys()` here would have the operator count its changes from
            # its first input on (HashJoin: a dict update per row stored; in py-spy profiles of
            # TPC-H W2 at 1 interaction/10 s, 144 samples over 3 runs, 48 without), where its first
            # snapshot with inputs, whole and from scratch as an instance's first always was, needs none
            state, _, kept_bytes = KeptDigests(self.kept_digests.sums).summarize(
                r.node_id, r.op, r.op.state(), None, self._counted(r))
            h, data, size = whole(state)
        else:
            changed = changed_keys and changed_keys()
            appended = appended_rows() if changed_keys and appended_rows else None   # (as that changed_keys() took them)
            state, changed, kept_bytes = self.kept_digests.summarize(r.node_id, r.op, r.op.state(), changed,
                                                                     self._counted(r), appended)
            h, data, size = self.state_encoder.encode(r.node_id, state, changed)
        size += kept_bytes   # the planner's figure: what a checkpoint of the state would weigh
        if data and self.mode == "record" and h not in self.sent_states and h not in self.new_states:
            self.new_states[h] = (blobs.compress(data), size)
        self.last_state[r.node_id] = (r.count, h, by_rows)
        return h

    def _counted(self, r: Runner) -> frozenset:
        """The kept-inputs fields of `r`'s operator (the i-th keeps port i's tuples) whose port
        brings tuples through a shuffle from outside G(θ): they are in the run file and no other
        code holds them, so the field is digested by its keys' row counts (core/kept_inputs.py)."""
        g, node = self.g, self.g.nodes[r.node_id]
        edges = [g.edges[e] for e in node.inputs]
        return frozenset(name for port, name in enumerate(getattr(r.op, "kept_inputs", ()))
                         if port < len(edges) and edges[port].shuffle and g.is_entry(edges[port]))

    # --- logs -----------------------------------------------------------------

    def _after_input(self) -> None:
        if self.mode != "record":
            if self.since_flush >= FLUSH_ROWS:
                self._discard_logs()
                self.since_flush = 0
            return
        every = FLUSH_SECONDS if self.checkpointer is None else FLUSH_SECONDS / 4  # online policy: fresher figures
        if (self.since_flush >= FLUSH_ROWS or monotonic() - self.last_flush >= every
                or len(self.arrow_entries) > 16 or len(self.blob_entries) > 256 or len(self.unit_entries) > 16
                or len(self.ref_entries) > 256):
            self.flush()

    def _collect(self) -> tuple[list[dict], list[bytes]]:
        records: list[dict] = []
        out_blobs: list[bytes] = []

        def blob(data: bytes) -> int:
            out_blobs.append(data)
            return len(out_blobs) - 1

        p = self.partition
        for r in self.loggers:
            r.settle_log()
            log = r.log
            rec: dict = {"op": r.node_id, "i": p, "start": log.start, "end": r.count}
            if log.counts:
                rec["out"] = blob(blobs.compress(log.counts.tobytes()))
                del log.counts[:]
            for e, d in log.dests.items():
                if d:
                    n_dest = self.g.nodes[self.g.edges[e].dst].instances
                    rec.setdefault("dest", {})[str(e)] = [blob(blobs.compress(pack_dests(d, n_dest))), len(d)]
                    del d[:]
            if r.implicit_channel is not None:
                explicit = sum(n for _, _, n in log.inputs.runs)
                if r.count - log.start > explicit:
                    log.inputs.runs.insert(0, [*r.implicit_channel, r.count - log.start - explicit])
            runs = log.inputs.take(r.count - log.start)
            if runs:
                rec["in"] = blob(blobs.compress(pack_runs(runs)))
            if log.results:
                rec["res"] = blob(blobs.compress(pack_results(log.results)))
                log.results = []
            if log.made:
                rec["made"] = blob(blobs.compress(log.made.tobytes()))
                del log.made[:]
            if log.keys:
                rec["keys"] = blob(blobs.compress(log.keys.tobytes()))
                del log.keys[:]
            entries = []
            for (port, src), rows in log.entry.items():
                if rows:
                    entries.append([port, src, self._entry_start(r.node_id, port, src, len(rows)),
                                    len(rows), blobs.PICKLE, blob(blobs.pack_rows(rows))])
                    rows.clear()
            if entries:
                rec["entry"] = entries
            log.start = r.count
            records.append(rec)
        extra = []
        for nid, port, src, batch in self.arrow_entries:
            extra.append([nid, port, src, self._entry_start(nid, port, src, batch.num_rows),
                          batch.num_rows, blobs.ARROW, blob(blobs.pack_arrow(batch))])
        for nid, port, src, n, payload in self.blob_entries:
            extra.append([nid, port, src, self._entry_start(nid, port, src, n), n, blobs.PICKLE,
                          blob(blobs.compress(payload))])
        for nid, port, src, codec, data in self.unit_entries:
            extra.append([nid, port, src, self._entry_start(nid, port, src, 1), 1, codec, blob(data)])
        for nid, port, src, n, data in self.ref_entries:
            extra.append([nid, port, src, self._entry_start(nid, port, src, n), n, blobs.REF, blob(data)])
        self.arrow_entries, self.blob_entries, self.unit_entries, self.ref_entries = [], [], [], []
        if extra:
            records.append({"entry_for": extra})
        if self.source_schema is not None:
            records.append({"source_schema": [self.source_ref.source, blob(self.source_schema)]})
            self.source_schema = None
        return records, out_blobs

    def _entry_start(self, nid: int, port: int, src: int, n: int) -> int:
        key = (nid, port, src)
        start = self.entry_seq.get(key, 0)
        self.entry_seq[key] = start + n
        return start

    def _header(self, kind: str) -> tuple[dict, list[bytes]]:
        records, out_blobs = self._collect()
        states = {}
        for h, (data, raw) in self.new_states.items():
            states[h] = [len(out_blobs), raw]
            out_blobs.append(data)
        files = {}   # the bytes of the small files its steps read, once a worker (core/files_read.py)
        for digest, data in files_read.take_contents().items():
            files[digest] = [len(out_blobs), len(data)]
            out_blobs.append(blobs.compress(data))
        checkpoints = []
        for meta, data in self.new_checkpoints:
            checkpoints.append({**meta, "blob": len(out_blobs)})
            out_blobs.append(data)
        self.new_checkpoints = []
        self.sent_states.update(self.new_states)
        self.new_states = {}
        header = {"t": kind, "records": records, "barriers": self.pending_barriers, "states": states,
                  "checkpoints": checkpoints, "busy": round(self.busy, 6)}
        if files:
            header["files"] = files
        warnings = outside_effects.take(self.loggers)   # (a step's connection, a file it wrote: core/outside_effects.py)
        if self.warning is not None:
            warnings.append(self.warning)
            self.warning = None
        when = getattr(self.theta, "when", None)
        if when is not None and when.first_error and not self.warned:
            from ..core.hooked import WHEN_ROWS   # (here: a Dataflow's task need not import the hooks)
            kind = self.g.nodes[self.g.theta].kind
            shape = WHEN_ROWS.get(kind)
            warnings.append(when.first_error + (f"; θ is a {kind}, whose unit `row` is {shape}" if shape else ""))
            self.warned = True
        if warnings:
            header["warnings"] = warnings
        self.pending_barriers = []
        self.busy = 0.0
        self.since_flush = 0
        self.last_flush = monotonic()
        return header, out_blobs

    def flush(self) -> None:
        if self.mode != "record":
            self._discard_logs()
            return
        header, out_blobs = self._header("log")
        self.client.send(header, out_blobs)

    def _discard_logs(self) -> None:
        for r in self.loggers:
            r.settle_log()
            log = r.log
            del log.counts[:]
            for d in log.dests.values():
                del d[:]
            log.inputs.take()
            log.results = []
            del log.made[:]
            del log.keys[:]
            for rows in log.entry.values():
                rows.clear()
            log.start = r.count
        self.arrow_entries, self.blob_entries, self.unit_entries, self.pending_barriers = [], [], [], []
        self.ref_entries = []

    def _finish(self, cut: bool = False) -> None:
        """The task's end: its last logs and end states (`cut`: Spark stopped pulling before its
        input ran out, and a later run that goes further replaces it: `Coordinator._end`)."""
        if self.mode not in ("record", "shadow"):
            return
        finals = [{"op": r.node_id, "i": self.partition, "pos": r.count, "last_k": self.epoch,
                   "state": self._state_hash(r, end=True)} for r in self.recorders]
        for f in finals:   # what it emitted, for `tt verify` (`_digest_outputs`)
            if f["op"] in self.output_digests:
                f["outputs"] = self.output_digests[f["op"]].hexdigest()
        if self.mode == "shadow":
            # Spark ran a committed task again: for another action on the same RDD or DataFrame,
            # or to recompute a lost or speculated partition. Its end, hashed along the same barriers
            # as the recorded run's, tells the coordinator whether Spark got what tt replays, and
            # what it emitted tells `tt verify`
            self._discard_logs()
            self.client.end({"finals": finals}, [])
            return
        if self.checkpointer is not None:
            self._checkpoint(-1)  # the end state: kept if a checkpointed interaction needs it
        header, out_blobs = self._header("end")
        header["finals"] = finals
        if cut:
            header["cut"] = True
        when = getattr(self.theta, "when", None)
        if when is not None:   # on how many of θ's inputs `--when` was tested, and raised (recorder/triggers.py)
            tested = self.theta.count - self.theta.finished - self.when_from   # (the END step is counted, not tested)
            header["when"] = [max(0, tested), when.raised]
        # and the packages its worker has loaded by now: a function may import one in its body,
        # after the hello named those loaded before (core/libraries.py)
        if self.in_worker:
            header["libraries"] = libraries.loaded()
        if large := files_read.large():   # and the files its steps read that are too large to keep (core/files_read.py)
            header["files_read"] = large
        if kept := files_read.kept():     # and those the run keeps, by path (`tt inspect` names them)
            header["files_kept"] = kept
        self.client.end(header, out_blobs)

    def _fail(self, f: OperatorFailure) -> None:
        """An operator raised: flush the logs up to and including the failing input, then
        the failure, and wait until the coordinator has them before the task dies.

        The failing instance (if it is in G(θ)) logs input #position in its Input log
        (its channel), and the tuple itself is in the recorded entry tuples when it
        entered G(θ) there (they are captured before they are fed). It logs no output
        count for it: replay knows where the run failed and re-raises there
        (`replay/engine.py`, post-mortem). A shadow (a run Spark made again of a recorded
        task) logs nothing, but says where it failed: the recorded run did not raise there."""
        if self.mode == "shadow":
            self._send_failure({"t": "log"}, [], f, logged=False)
            return
        if self.mode != "record":
            return
        from ..core.logs import END

        r = f.runner
        failing = r if isinstance(r, RecordingRunner) and r in self.recorders else None
        try:
            if failing is not None:
                if f.row is None and f.port == END[0]:
                    failing.log.inputs.add(*END)                  # finish() raised
                elif failing.multi_port:
                    failing.log.inputs.add(f.port, failing.instance)
                # (an implicit channel is implied by the count; a shuffled head logged the batch)
                failing.count += 1                                # the failing input is logged too
            try:
                header, out_blobs = self._header("log")
            finally:
                if failing is not None:
                    failing.count -= 1
            self._send_failure(header, out_blobs, f, logged=failing is not None)
        except OSError:
            pass  # the coordinator is gone; Spark reports the failure anyway

    def _send_failure(self, header: dict, out_blobs: list[bytes], f: OperatorFailure, logged: bool) -> None:
        r = f.runner
        header["failure"] = {"op": r.node_id, "i": r.instance, "position": r.count,
                             "error": f"{type(f.error).__name__}: {f.error}", "traceback": f.tb,
                             "row": values.render(values.encode(f.row), 500), "logged": logged}
        try:
            self.client.send(header, out_blobs)
            # Spark may abort the job as soon as this task dies: wait until the coordinator
            # has queued the failure for the run file (it answers at once), not longer.
            try:
                self.client._replies.get(timeout=FAILURE_ACK_SECONDS)
            except Exception:
                pass
        except OSError:
            pass  # the coordinator is gone; Spark reports the failure anyway


FAILURE_ACK_SECONDS = 30.0

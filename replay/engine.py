"""The local replay engine: G(θ) rebuilt from a run file, moved to any position.

A *position* is, for every instance in G(θ), how many of its logged inputs it has
consumed. Each instance re-consumes its inputs in logged order (the Input log),
taking recorded tuples for channels that enter G(θ) from outside and the
replayed outputs of its producer for the others. Operators run through the same
`Runner.feed` as in Spark; only the targets differ: outputs go to per-channel
queues, so that every step can be taken on its own.

Scheduling is demand driven: consumers drain what is available, and a producer
is advanced only while a blocked consumer waits on it. In-flight tuples stay few
(a sorted shuffle makes every consumer want the same producer at the same time),
so a jump over millions of tuples runs in bounded memory.
"""

from __future__ import annotations

import bisect
import collections
import time
from array import array
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import cloudpickle
import orjson

from ..core import code_pickle, kept_inputs, local_time, task_context, values
from ..core.errors import ReplayDivergence, RunFileError, TTError, where_raised
from ..core.graph import Graph
from ..core.hooked import HookedOperator
from ..core.logs import END
from ..core.runtime import OperatorFailure, ReplayRunner, ResultSource
from ..store import blobs
from ..store.reader import RunReader, file_contents
from ..store.trust import require_trust
from . import job_source, recorded_modules
from .entries import DecodedChunk, ShuffledEntryReader, SourceShuffles

Key = tuple[int, int]  # (node id, instance)


class RecordedFailure(TTError):
    """Replay reached the tuple on which an operator raised when the run was recorded,
    and the operator raised again. The instance is left as it was before that tuple
    (its state, its queues, its position), so the session stays usable."""

    def __init__(self, label: str, position: int, error: BaseException, tb: str, recorded: str):
        self.label = label            # FE:1:999
        self.position = position
        self.error = error
        self.error_type = type(error).__name__
        self.traceback = tb
        self.recorded = recorded      # "ZeroDivisionError: division by zero", as stored
        same = recorded.split(":", 1)[0].strip() == self.error_type
        where = where_raised(tb)
        super().__init__(f"{label} raised {self.error_type}: {error} "
                         + ("(as in the recording)" if same else f"(when recorded: {recorded})")
                         + (f", at {where}" if where else ""))


@dataclass
class Failure:
    """Where a failed run failed (post-mortem): input #position of an instance raised."""

    label: str             # FE:1:999
    op: str
    instance: int
    position: int
    error: str             # "ZeroDivisionError: division by zero", as recorded
    traceback: str
    row: str               # the tuple, rendered when recorded
    steppable: bool        # the run file holds the failing tuple, in G(θ): replay can re-raise it
    reason: str = ""       # why it is not steppable
    in_g: bool = True      # its instance is replayed (the reason then is not "not in G(θ)")


def recorded_failures(engine: "Engine") -> list[Failure]:
    """The operator failures a failed run's log ends with, first first, each saying whether the
    replay holds its failing tuple (`steppable`: `Instance._feed_failing` then re-raises) and why
    not: the debugger opens just before one, `tt verify` feeds every steppable one."""
    reader, out = engine.reader, []
    for f in reader.failure_points():
        name = engine.graph.nodes[f["op"]].name
        inst = engine.instances.get((f["op"], f["instance"]))
        steppable = inst is not None and inst.failed_at == f["position"]
        reason = ("" if steppable else
                  f"{name} is not in G(θ) (θ = {reader.theta.name}): record with --watch {name}" if inst is None
                  else "the run file does not hold the failing tuple (it was recorded by an older tt)")
        out.append(Failure(f"{name}:{f['instance']}:{f['position']}", name, f["instance"], f["position"],
                           f["error"], f["traceback"] or "", f["row"] or "", steppable, reason, inst is not None))
    return out


class EntryReader:
    """Recorded tuples of one channel into G(θ), read and decoded a chunk at a time."""

    def __init__(self, reader: RunReader, chunks: list[tuple[int, int, str, int]]):
        self.reader = reader
        self.chunks = sorted(chunks)  # (start, n, codec, rowid)
        self.starts = [c[0] for c in self.chunks]
        self._cached: tuple[int, DecodedChunk] | None = None

    def _chunk(self, seq: int) -> tuple[int, DecodedChunk]:
        c = self._cached
        if c is not None and c[0] <= seq < c[0] + len(c[1].rows):
            return c
        idx = bisect.bisect_right(self.starts, seq) - 1
        if idx < 0:
            raise RunFileError(f"recorded tuple #{seq} is missing from the run file")
        start, n, codec, rowid = self.chunks[idx]
        if seq >= start + n:
            raise RunFileError(f"recorded tuple #{seq} is missing from the run file")
        self._cached = (start, DecodedChunk(lambda: self.reader.entry_tuples(codec, rowid)))
        return self._cached

    def get(self, seq: int) -> Any:
        """The seq-th tuple, to look at (`DecodedChunk.peek`)."""
        start, chunk = self._chunk(seq)
        return chunk.peek(seq - start)

    def take(self, seq: int) -> Any:
        """The seq-th tuple, for an operator to consume (`DecodedChunk.take`)."""
        start, chunk = self._chunk(seq)
        return chunk.take(seq - start)

    def place(self, seq: int) -> tuple[str, int] | None:
        """(file, row number) of the seq-th tuple when it was recorded by reference."""
        idx = bisect.bisect_right(self.starts, seq) - 1
        if idx < 0:
            return None
        start, n, codec, rowid = self.chunks[idx]
        if codec != blobs.REF or seq >= start + n:
            return None
        return self.reader.entry_place(rowid, seq - start)

    def spans(self, seq: int) -> list[tuple[str, int, int, int]] | None:
        """Where the seq-th tuple's rows are in the files, when it is a hooked unit recorded by
        reference (a mapInPandas batch: one chunk of positions): (file, first row, last row, rows)."""
        idx = bisect.bisect_right(self.starts, seq) - 1
        if idx < 0:
            return None
        start, n, codec, rowid = self.chunks[idx]
        if codec not in (blobs.REF_PANDAS, blobs.REF_BATCH) or seq >= start + n:
            return None
        return self.reader.entry_spans(rowid)

    def __len__(self) -> int:
        return max((s + n for s, n, _, _ in self.chunks), default=0)


class Instance:
    """One operator instance of G(θ) during replay."""

    def __init__(self, engine: "Engine", node, i: int):
        self.engine = engine
        self.node = node
        self.i = i
        self.key: Key = (node.id, i)
        self.label = f"{node.name}:{i}"
        reader = engine.reader
        self.runs = reader.input_runs(node.id, i)
        starts, pos = array("q"), 0
        for _, _, n in self.runs:
            starts.append(pos)
            pos += n
        self.run_starts = starts
        self.total = pos
        # the END step (the end of input, which calls `finish()`) is logged as one more input:
        # positions count it, tuples do not
        last = self.runs[-1] if self.runs else None
        self.tuple_total = pos - last[2] if last is not None and (last[0], last[1]) == END else pos
        self.counts = reader.output_counts(node.id, i)
        self.results = reader.results(node.id, i)
        by_channel: dict[tuple[int, int], list] = collections.defaultdict(list)
        for rowid, port, src, start, n, codec in reader.entry_index(node.id, i):
            by_channel[(port, src)].append((start, n, codec, rowid))
        self.entry = {ch: EntryReader(reader, chunks) for ch, chunks in by_channel.items()}
        g = engine.graph
        for e in g.in_edges(node):   # from a source read by reference through a shuffle: rebuilt
            if e.id in g.by_reference:
                n_src = g.nodes[e.src].instances
                for src in range(n_src):
                    self.entry[(e.port, src)] = ShuffledEntryReader(engine.shuffles, e.src, src, e.id,
                                                                    node.instances, i)
        self.internal_ports = {e.port for e in g.in_edges(node) if e.src in g.in_g}
        self._shuffle_edges = [e.id for e in g.out_edges(node) if e.shuffle]
        self._dests: dict[int, array] | None = None
        # post-mortem: the input on which the operator raised when recorded (the last logged one)
        self.failure: dict | None = engine.failures.get(self.key)
        fp = self.failure["position"] if self.failure else None
        self.failed_at: int | None = fp if fp is not None and fp < self.total else None
        attempt = reader.attempt_of(node.id, i)
        self.task_context = reader.task_context(attempt[0]) if attempt is not None else None
        self.reset()

    @property
    def tuples(self) -> int:
        """Tuples consumed so far (the position, without the END step)."""
        return min(self.runner.count, self.tuple_total)

    @property
    def dests(self) -> dict[int, array]:
        """Destination of each output per shuffle edge (read when first needed)."""
        if self._dests is None:
            reader = self.engine.reader
            self._dests = {e: reader.dests(self.node.id, self.i, e) for e in self._shuffle_edges}
        return self._dests

    def reset(self, op: Any = None) -> None:
        op = op if op is not None else code_pickle.loads(self.engine.code[self.node.id], self.node.name,
                                                         self.engine.job_folder)
        self.runner = ReplayRunner(self.node.name, self.i, op, self.node.id,
                                   ResultSource(self.results, self.engine.file_contents))
        self.runner.task_context = self.task_context
        counts = self.counts
        self.runner.expected_counts = lambda pos: counts[pos] if pos < len(counts) else None
        self.queues: dict[tuple[int, int], collections.deque] = collections.defaultdict(collections.deque)
        self.consumed: dict[tuple[int, int], int] = collections.defaultdict(int)
        self.run_idx = 0
        self.run_off = 0
        self.sent: dict[int, int] = collections.defaultdict(int)  # outputs so far per shuffle edge
        # tuples sent so far per channel (edge, destination instance): after a restore from an
        # uncoordinated recovery line, what a receiver already consumed is sent again and dropped
        self.produced: dict[tuple[int, int], int] = collections.defaultdict(int)

    @property
    def count(self) -> int:
        return self.runner.count

    def queue_signature(self) -> tuple:
        return tuple(sorted((ch, len(q)) for ch, q in self.queues.items() if q))

    def queues_changed_since(self, saved: tuple) -> bool:
        return self.queue_signature() != saved[-1] if len(saved) > 9 else True

    def channel_at(self, position: int) -> tuple[int, int] | None:
        if position >= self.total:
            return None
        idx = bisect.bisect_right(self.run_starts, position) - 1
        port, src, _ = self.runs[idx]
        return port, src

    def next_channel(self) -> tuple[int, int] | None:
        if self.run_idx >= len(self.runs):
            return None
        port, src, _ = self.runs[self.run_idx]
        return port, src

    def available(self) -> bool:
        ch = self.next_channel()
        if ch is None:
            return False
        if ch == END or ch[0] not in self.internal_ports:
            return True
        return bool(self.queues.get(ch))

    def peek(self) -> Any:
        """The next input this instance will consume, if it is available."""
        ch = self.next_channel()
        if ch is None or ch == END:
            return None
        if ch[0] not in self.internal_ports:
            return self.entry[ch].get(self.consumed[ch])
        q = self.queues.get(ch)
        return q[0] if q else None

    def consume(self) -> None:
        ch = self.next_channel()
        hook = self.engine.on_consume
        if hook is not None:
            hook(self, self.runner.count, ch)
        position = self.runner.count
        row = None
        saved = self.save() if position == self.failed_at else None  # post-mortem: undo a re-raise
        if ch == END:
            if saved is not None:
                self._feed_failing(None, END[0], saved)
            else:
                self.runner.end()
        else:
            port = ch[0]
            if port in self.internal_ports:
                row = self.queues[ch].popleft()
            else:
                entry = self.entry.get(ch)
                if entry is None:
                    raise RunFileError(f"{self.label}: the recorded tuples of channel {ch} are missing")
                row = entry.take(self.consumed[ch])
            self.consumed[ch] += 1
            if position == self.failed_at:
                self._feed_failing(row, port, saved)
            else:
                self.runner.feed(row, port)
        self.run_off += 1
        if self.run_off >= self.runs[self.run_idx][2]:
            self.run_idx += 1
            self.run_off = 0
        after = self.engine.after_consume
        if after is not None:
            after(self, position, row)

    def _feed_failing(self, row: Any, port: int, saved: tuple) -> None:
        """Input #failed_at, on which the operator raised when recorded (the run's last logged
        input here): it must raise again. Either way the instance goes back to before it."""
        try:
            if port == END[0] and row is None:
                self.runner.end()
            else:
                self.runner.feed(row, port)
        except OperatorFailure as f:
            self._undo(saved)
            raise RecordedFailure(f"{self.label}:{self.failed_at}", self.failed_at, f.error, f.tb,
                                  self.failure["error"]) from None
        except BaseException:
            self._undo(saved)
            raise
        self._undo(saved)
        raise ReplayDivergence(
            f"{self.label}:{self.failed_at} raised {self.failure['error']} when recorded, but not in replay "
            f"(the operator is not deterministic?)", op=self.node.name, instance=self.i, position=self.failed_at)

    def _undo(self, saved: tuple) -> None:
        self.restore(saved)
        self.engine._wire(self)

    def state(self, like: Any = None) -> Any:
        """The operator's state, JSON-encoded as stored in run files; with `like`, a stored state,
        its kept-inputs fields summarized where that one's are (core/kept_inputs.py)."""
        state = self.runner.op.state()
        return orjson.loads(values.dumps(state if like is None else kept_inputs.like_recorded(like, state)))

    @property
    def restored_by_replay(self) -> bool:
        """A hooked generator cannot be saved: it is put back by replaying its inputs (core/hooked.py)."""
        return getattr(self.runner.op, "restore_by_replay", False)

    def _replay_to(self, position: int) -> None:
        """Feed the operator its recorded inputs (a hooked operator has no other) up to `position`:
        onward from where it stands when it is not past it (and has not raised), else from a
        fresh start. Nothing is sent
        on (the outputs were delivered the first time) and no engine hook sees it."""
        if self.runner.count > position or getattr(self.runner.op, "failed", False):
            self.reset()
        engine = self.engine
        hooks = engine.on_consume, engine.after_consume
        engine.on_consume = engine.after_consume = None
        targets, self.runner.targets = self.runner.targets, []
        try:
            while self.runner.count < position:
                self.consume()
        finally:
            engine.on_consume, engine.after_consume = hooks
            self.runner.targets = targets

    def pickled_op(self) -> bytes | None:
        """The operator object, pickled; None when it is put back by replaying its inputs: a
        hooked generator, or a hooked function whose state took something that cannot be
        pickled (a lock, a connection made in the executor)."""
        if self.restored_by_replay:
            return None
        try:
            return code_pickle.dumps(self.runner.op)
        except Exception:  # noqa: BLE001  (pickle raises TypeError, PicklingError, and more)
            if isinstance(self.runner.op, HookedOperator):
                return None
            raise

    def save(self) -> tuple:
        """Everything needed to put this instance back where it is now."""
        r = self.runner
        return (self.pickled_op(), r.count, r.finished, self.run_idx, self.run_off,
                dict(self.consumed), cloudpickle.dumps({ch: list(q) for ch, q in self.queues.items() if q}),
                dict(self.sent), (r.results._pos, r.results._call), dict(self.produced), self.queue_signature())

    def restore(self, saved: tuple) -> None:
        op_bytes, count, finished, run_idx, run_off, consumed, queues, sent, results, produced, _ = saved
        if op_bytes is None:
            self._replay_to(count)
            self.reset(op=self.runner.op)  # the replayed operator, with the saved cursors below
        else:
            self.reset(op=code_pickle.loads(op_bytes, self.node.name, self.engine.job_folder))
        self.runner.count, self.runner.finished = count, finished
        self.run_idx, self.run_off = run_idx, run_off
        self.consumed.update(consumed)
        for ch, rows in cloudpickle.loads(queues).items():
            self.queues[ch].extend(rows)
        self.sent.update(sent)
        self.produced.update(produced)
        self.runner.results._pos, self.runner.results._call = results

    def restore_at(self, position: int, op: Any = None, produced: dict | None = None) -> None:
        """Put this instance at `position` with operator object `op` (None: a fresh one),
        nothing in flight: counters and cursors are derived from the logs (`produced`, per
        channel (edge, sender, receiver), may be passed in when already known)."""
        if self.restored_by_replay:
            self._replay_to(position)
            op = self.runner.op
        self.reset(op=op)
        r = self.runner
        r.count = position
        if position >= self.total:
            self.run_idx, self.run_off = len(self.runs), 0
            r.finished = bool(self.runs) and (self.runs[-1][0], self.runs[-1][1]) == END
        else:
            idx = bisect.bisect_right(self.run_starts, position) - 1
            self.run_idx, self.run_off = idx, position - self.run_starts[idx]
        left = position
        for port, src, n in self.runs:
            if left <= 0:
                break
            take = min(n, left)
            if (port, src) != END:
                self.consumed[(port, src)] += take
            left -= take
        if produced is None:
            produced = self.produced_before(position)
        outputs = sum(self.counts[:position])
        for e in self._shuffle_edges:
            self.sent[e] = outputs
        for (e, _, d), n in produced.items():
            self.produced[(e, d)] = n

    def produced_before(self, position: int) -> dict[tuple[int, int, int], int]:
        """Tuples sent per channel (edge, this instance, receiver) before input #position."""
        outputs = sum(self.counts[:position])
        out = {}
        for e in self.engine.graph.out_edges(self.node):
            if e.shuffle:
                for d, n in collections.Counter(self.dests[e.id][:outputs]).items():
                    out[(e.id, self.i, d)] = n
            else:
                out[(e.id, self.i, self.i)] = outputs
        return out


class _Reporter:
    """Calls `progress(steps)` at most every 50 ms (it may raise to cancel); returns the steps not yet reported."""

    def __init__(self, progress: Callable[[int], None] | None):
        self.progress = progress
        self.last = time.monotonic()

    def __call__(self, steps: int) -> int:
        if self.progress is None:
            return steps
        now = time.monotonic()
        if now - self.last < 0.05:
            return steps
        self.last = now
        self.progress(steps)
        return 0


class SavedPosition:
    """A restore point of the whole engine (kept in memory by the debug session). `in_order`:
    the original order passes through it (see `Engine.in_order`)."""

    def __init__(self, position: dict[Key, int], parts: dict[Key, tuple], in_order: bool = False):
        self.position = position
        self.parts = parts
        self.in_order = in_order

    def nbytes(self) -> int:
        return sum(len(p[0] or b"") + len(p[6]) for p in self.parts.values())  # op and queue pickles

    def covers(self, target: dict[Key, int]) -> bool:
        """Whether replaying forward from here can reach `target`."""
        return all(self.position[k] <= t for k, t in target.items())


class Engine:
    def __init__(self, reader: RunReader, *, trust: bool = False):
        self.reader = reader
        code_pickle.require_python(reader.python, reader.path)   # (before any of its code is unpickled)
        job_source.serve(reader)   # a replayed traceback shows the job's lines as they ran
        ops = reader.operators
        self.code = {o.id: reader.code(o.id) for o in ops}
        keys_code = reader.edge_keys()
        require_trust(reader.path, reader.run.get("signature"), reader.signed_code(), trust)
        reader.vouch(trust)  # recorded tuples, log_result values and checkpoints: see RunReader.open_blob
        recorded_modules.serve(reader.job_modules())   # the job's modules import as they ran
        task_context.install()   # a step's TaskContext.get() gives its recorded attempt's
        # and tell local time as the workers did (`zone_note`: where this machine cannot)
        self.zone_note = local_time.use(reader.timezone, reader.timezone_facts).note
        values.use_encoding(reader.state_encoding)   # its states encode as it stored them
        # the bytes of the files its functions read, where it holds them (`ReplayRunner.file_contents`)
        digests = reader.file_digests()
        self.file_contents = lambda digest: file_contents(reader.path, digest) if digest in digests else None
        self.job_folder = job_source.job_folder(reader)   # where the job's other modules were
        keys = {e: code_pickle.loads(c, f"the key function of edge {e}", self.job_folder)
                for e, c in keys_code.items()}
        self.graph = Graph.from_description(reader.plan, {}, keys)
        for o in ops:  # the plan may predate a fix of source instances; operators is authoritative
            self.graph.nodes[o.id].instances = o.instances
        self.dirty: set[Instance] = set()
        # whether the engine stands where the original order passes: true at the start, kept by
        # `run_in_order`, cleared by any other move. A reverse step or a search back replays in
        # that order from such a start only: from one `advance_to` reached (an instance drained
        # ahead of the others), it would stop in a state that never was, and not where the same
        # action stops from the start.
        self.in_order = True
        self.on_consume: Callable[[Instance, int, tuple], None] | None = None   # before a consume
        self.after_consume: Callable[[Instance, int, Any], None] | None = None  # after, with the row
        self.instances: dict[Key, Instance] = {}
        self.shuffles = SourceShuffles(reader)   # sources read by reference that shuffle into G(θ)
        # where visible attempts failed (post-mortem): (op, instance) -> failure
        self.failures: dict[Key, dict] = {}
        for f in reader.failure_points():
            self.failures.setdefault((f["op"], f["instance"]), f)
        for op_id, i in reader.g_instances():
            self.instances[(op_id, i)] = Instance(self, self.graph.nodes[op_id], i)
        if any(c[2] in blobs.INERT for inst in self.instances.values() for r in inst.entry.values()
               for c in r.chunks[:1]):
            import pyarrow  # noqa: F401  (now, while the engine loads, not during the first jump)
        # consumers first: the scheduler drains downstream before pulling upstream
        self.order = sorted(self.instances.values(), key=lambda x: (-x.node.id, x.i))
        for inst in self.instances.values():
            self._wire(inst)

    # --- wiring ---------------------------------------------------------------

    def _wire(self, inst: Instance) -> None:
        g = self.graph
        targets = []
        for e in g.out_edges(inst.node):
            if e.shuffle:
                targets.append(self._shuffle_target(inst, e))
            else:
                dst = self.instances[(e.dst, inst.i)]
                targets.append(self._queue_target(inst, e.id, dst, (e.port, inst.i)))
        inst.runner.targets = targets

    def _deliver(self, src: Instance, key: tuple[int, int], dst: Instance, ch: tuple[int, int], row: Any) -> None:
        """Queue `row` at `dst`, unless it is a resend of a tuple `dst` consumed before a restore."""
        seq = src.produced[key]
        src.produced[key] = seq + 1
        if seq < dst.consumed[ch]:
            return
        dst.queues[ch].append(row)
        self.dirty.add(dst)

    def _queue_target(self, src: Instance, edge: int, dst: Instance, ch: tuple[int, int]) -> Callable[[Any], None]:
        deliver, key = self._deliver, (edge, dst.i)
        return lambda row: deliver(src, key, dst, ch, row)

    def _shuffle_target(self, inst: Instance, edge) -> Callable[[Any], None]:
        g, deliver = self.graph, self._deliver
        dsts = {}
        ch = (edge.port, inst.i)
        logged = []  # the recorded destinations, read at the first output (not when wiring)

        def route(row):
            d = g.route(edge, row, inst.i)
            if not logged:
                logged.append(inst.dests.get(edge.id))
            n = inst.sent[edge.id]
            rec = logged[0]
            if rec is not None and n < len(rec) and rec[n] != d:
                raise ReplayDivergence(
                    f"{inst.label} input #{inst.count} sent output {n} to {g.nodes[edge.dst].name}:{d} in "
                    f"replay but to instance {rec[n]} when recorded (the key function is not "
                    f"deterministic?)", op=inst.node.name, instance=inst.i, position=inst.count)
            inst.sent[edge.id] = n + 1
            dst = dsts.get(d)
            if dst is None:
                dst = dsts[d] = self.instances[(edge.dst, d)]
            deliver(inst, (edge.id, d), dst, ch, row)
        return route

    def reset(self) -> None:
        """Every instance back to its initial state (interaction 0)."""
        for inst in self.instances.values():
            inst.reset()
        for inst in self.instances.values():
            self._wire(inst)
        self.dirty.clear()
        self.in_order = True

    def save(self, previous: "SavedPosition | None" = None) -> "SavedPosition":
        """A restore point at the current position (instances that did not move since
        `previous` share its saved bytes, so saving after a small step is cheap)."""
        parts = {}
        for key, inst in self.instances.items():
            old = previous.parts.get(key) if previous is not None else None
            if old is not None and old[1] == inst.count and not inst.queues_changed_since(old):
                parts[key] = old
            else:
                parts[key] = inst.save()
        return SavedPosition(self.position, parts, self.in_order)

    def restore(self, snap: "SavedPosition") -> None:
        for key, inst in self.instances.items():
            inst.restore(snap.parts[key])
        for inst in self.instances.values():
            self._wire(inst)
        self.dirty.clear()
        self.in_order = snap.in_order

    def restore_line(self, line: dict[Key, tuple], produced: dict[Key, dict] | None = None) -> None:
        """Put every instance at its restore point: `line[key] = (position, operator or None)`."""
        for key, inst in self.instances.items():
            position, op = line[key]
            inst.restore_at(position, op, (produced or {}).get(key))
        for inst in self.instances.values():
            self._wire(inst)
        self.dirty.clear()
        self.in_order = all(position == 0 for position, _ in line.values())

    # --- moving -----------------------------------------------------------------

    @contextmanager
    def hooks(self, on_consume: Callable[[Instance, int, tuple], None] | None = None,
              after_consume: Callable[[Instance, int, Any], None] | None = None) -> Iterator["Engine"]:
        """Inside the block, `on_consume(instance, position, channel)` runs before every consume
        and `after_consume(instance, position, row)` after it (after the hooks of an enclosing
        block, which keep running)."""
        saved = self.on_consume, self.after_consume
        self.on_consume, self.after_consume = _chain(saved[0], on_consume), _chain(saved[1], after_consume)
        try:
            yield self
        finally:
            self.on_consume, self.after_consume = saved

    @property
    def position(self) -> dict[Key, int]:
        return {k: inst.count for k, inst in self.instances.items()}

    def advance_to(self, targets: dict[Key, int], progress: Callable[[int], None] | None = None,
                   pull: bool = False) -> None:
        """Consume logged inputs until every instance in `targets` has consumed that many.

        Instances not in `targets` stay where they are, unless `pull` is set: then
        they advance just as far as their consumers need (the smallest consistent
        position at which the targets hold).
        """
        insts = self.instances
        for key, t in targets.items():
            inst = insts[key]
            if t < inst.count:
                raise ValueError(f"{inst.label} is already past position {t}; reset first")
            if t > inst.total:
                raise RunFileError(f"{inst.label} has {inst.total} logged inputs; cannot reach {t}")

        def limit(inst: Instance) -> int:      # how far draining may take an instance
            return targets.get(inst.key, inst.count)

        def pull_limit(inst: Instance) -> int:  # how far a consumer's demand may take it
            return targets.get(inst.key, inst.total if pull else inst.count)

        order = [x for x in self.order if x.count < limit(x)]
        if order:
            self.in_order = False
        dirty = self.dirty
        dirty.update(order)
        ptr, steps = 0, 0
        report = _Reporter(progress)
        while True:
            while dirty:
                x = dirty.pop()
                lim = limit(x)
                while x.count < lim and x.available():
                    x.consume()
                    steps += 1
                    if steps & 255 == 0:
                        steps = report(steps)
            while ptr < len(order) and order[ptr].count >= limit(order[ptr]):
                ptr += 1
            if ptr == len(order):
                break
            self._pull(order[ptr], pull_limit)
            steps = report(steps + 1)

    def run_in_order(self, rank: Callable[[Instance], Any], sources: list[Instance],
                     progress: Callable[[int], None] | None = None,
                     within: Callable[[Instance, Any], bool] | None = None) -> None:
        """Go forward as the original execution did: one input of a source instance at
        a time, the one of lowest `rank`, each followed by whatever it makes possible
        downstream. Ends when every instance has consumed all its logged inputs.
        `within(instance, epoch)`: whether another instance may take its next input while the
        next source input's rank begins with `epoch` (None once every source is done)."""
        sources_set = set(sources)
        others = [x for x in self.order if x not in sources_set]
        dirty = self.dirty
        dirty.update(others)
        steps = 0
        report = _Reporter(progress)
        held: set[Instance] = set()   # others `within` stopped, to try again once the epoch moves
        epoch = None
        while True:
            live = [x for x in sources if x.count < x.total]
            nxt = min(live, key=rank) if live else None
            now = rank(nxt)[0] if nxt is not None and within is not None else None
            if now != epoch:
                epoch = now
                dirty.update(held)
                held.clear()
            while dirty:
                x = dirty.pop()
                if x in sources_set:
                    continue
                while x.count < x.total and x.available():
                    if within is not None and not within(x, epoch):
                        held.add(x)
                        break
                    x.consume()
                    steps += 1
                    if steps & 255 == 0:
                        steps = report(steps)
            if nxt is None:   # (the others take no source's input: `live` and `nxt` still hold)
                if any(x.count < x.total and x.available() for x in others):
                    dirty.update(others)
                    continue
                return
            nxt.consume()
            steps = report(steps + 1)

    def _pull(self, inst: Instance, limit: Callable[[Instance], int]) -> None:
        """Advance the producer `inst` waits on until a tuple for it arrives."""
        ch = inst.next_channel()
        if ch is None or ch == END or ch[0] not in inst.internal_ports:
            self.dirty.add(inst)
            return
        edge = self.graph.edges[inst.node.inputs[ch[0]]]
        prod = self.instances[(edge.src, ch[1])]
        q = inst.queues[ch]
        while not q:
            if prod.count >= limit(prod) or prod.next_channel() is None:
                raise RunFileError(
                    f"cannot replay {inst.label}: its next input comes from {prod.label}, which would have to "
                    f"go past position {limit(prod)} (the logs are inconsistent)")
            if prod.available():
                prod.consume()
            else:
                self._pull(prod, limit)
        self.dirty.add(inst)

    def step(self, inst: Instance) -> None:
        """Consume exactly one input at `inst` (it must be available)."""
        self.in_order = False
        inst.consume()

    # --- interactions -------------------------------------------------------------

    def jump(self, k: int, progress: Callable[[int], None] | None = None) -> None:
        snap = self.reader.instances_at(k)
        if snap is None:
            raise RunFileError(self.reader.no_states_at(k))
        targets = {key: at.position for key, at in snap.items()}
        if any(self.instances[key].count > t for key, t in targets.items()):
            self.reset()
        self.advance_to(targets, progress)

    def states(self) -> dict[Key, Any]:
        return {k: inst.state() for k, inst in self.instances.items()}


def _chain(first: Callable | None, second: Callable | None) -> Callable | None:
    """One hook that calls `first`, then `second` (either may be None)."""
    if first is None or second is None:
        return first or second

    def both(*args) -> None:
        first(*args)
        second(*args)
    return both

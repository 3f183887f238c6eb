"""The pipelined runtime: operator instances that consume one tuple per step.

A `Runner` is one operator instance. `feed(row, port)` is one computation step:
the operator processes the tuple, the runner counts it, and hands each output to
its *targets*. The same runner code runs inside Spark executors (targets call the
next runner directly, depth first, or buffer rows for a shuffle) and in the local
replay engine (targets append to channel queues so that each step can be taken
separately). Only targets and logging differ between the two drivers.

`RecordingRunner` adds the logs of an instance in G(θ); `ThetaRunner` adds the
barrier and condition checks of the interesting operator. The per-tuple path is
kept short on purpose: it is the hot loop of every recorded job.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from time import perf_counter
from typing import Any, Callable

from . import nondeterministic
from .errors import OperatorError, ReplayDivergence, users_traceback
from .logs import END, InputRuns, LoggedResult, callable_name, kept_apart, new_counts, new_dests
from .operator import CONTEXT, Operator, Source, call_adapter
from .values import INT64

INF = float("inf")
#: `RecordingRunner.feed_many` checks for a barrier after slices of rows that take about this long
_SLICE_SECONDS = 0.001
_SLICE_ROWS = 4096   # (and are never longer)
#: an Output log entry of 1 (a source's every input), as bytes: a batch's entries are `frombytes` of it times its rows
_ONE_OUTPUT = array(new_counts().typecode, [1]).tobytes()


class OperatorFailure(Exception):
    """Raised through the pipeline when an operator's code raises."""

    def __init__(self, runner: "Runner", port: int, row: Any, error: BaseException):
        super().__init__(f"{runner.label} raised {type(error).__name__}: {error} on input #{runner.count}")
        self.runner = runner
        self.port = port
        self.row = row
        self.error = error
        self.tb = users_traceback(error)   # from the job's own frame on

    def to_error(self) -> OperatorError:
        return OperatorError(str(self), op=self.runner.name, instance=self.runner.instance,
                             position=self.runner.count, error=repr(self.error), tb=self.tb)


def _materialize(outs: Any) -> list | tuple:
    if type(outs) is dict:
        raise TypeError("process() returned a dict; yield rows (or return a list of rows)")
    return list(outs)


class Runner:
    """One operator instance, without logging (recording off).

    `feed` (and `feed_many`, its loop over a source's batch) is repeated in the subclasses
    on purpose: it is the per-tuple hot loop of every job, and a shared helper would cost a
    call per tuple.
    """

    def __init__(self, name: str, instance: int, op: Operator, node_id: int = -1):
        self.name = name
        self.instance = instance
        self.node_id = node_id
        self.op = op
        self.call = call_adapter(op)
        if getattr(op, "logs_nondeterministic", False):   # a hooked function (core/nondeterministic.py)
            nondeterministic.prepare(op.fields_owner())
        self.count = 0          # inputs consumed so far, the END step included
        self.finished = False
        self.targets: list[Callable[[Any], None]] = []

    @property
    def label(self) -> str:
        return f"{self.name}:{self.instance}"

    def feed(self, row: Any, port: int) -> None:
        CONTEXT.runner = self
        try:
            outs = self.call(row, port)
            if outs is not None and type(outs) is not list and type(outs) is not tuple:
                outs = _materialize(outs)
        except Exception as e:
            raise OperatorFailure(self, port, row, e) from e
        self.count += 1
        if outs:
            targets = self.targets
            for o in outs:
                for t in targets:
                    t(o)

    def feed_rows(self, rows: list, port: int) -> None:
        """`feed` each row in turn (a source's batch, a shuffle's payload): in one loop where
        the runner has one (`feed_many`). A built-in Source with one target (it passes rows on
        unchanged, keeps no state and logs nothing) hands them straight to it: a source
        row then costs one Python call less, two when the target is a runner of this task
        (its `feed_many`: no `narrow_target` hop, no call of `feed` per row; one row, a hooked
        operator's unit, straight to its `feed`); a shuffle takes the whole batch (`_emitted_many`)."""
        if type(self) is Runner and type(self.op) is Source and len(self.targets) == 1:
            CONTEXT.runner = self
            target = self.targets[0]
            narrow = getattr(target, "narrow", None)
            if narrow is not None:
                runner, to_port = narrow
                if len(rows) == 1:   # (a transformWithState key: `feed_many`'s loops are for batches)
                    self.count += 1
                    runner.feed(rows[0], to_port)
                else:
                    runner.feed_many(rows, to_port, self)
            elif not _emitted_many(self, target, rows):
                for self.count, row in enumerate(rows, self.count + 1):
                    target(row)
            return
        self.feed_many(rows, port, _UNCOUNTED)

    def feed_many(self, rows: list, port: int, upstream: "Runner") -> None:
        """`feed` each of `rows`, which `upstream` (a source, passing rows on unchanged) hands
        on; `upstream.count` counts each row before its outputs flow, as its own loop would.

        A plain runner does it in one loop, without a call of `feed` per row: 1M rows from a
        source into one operator, Spark-free, best of 7, 152 → 95 ms (`RecordingRunner.feed_many`:
        215 → 146 ms)."""
        if type(self) is not Runner:
            return self._feed_each(rows, port, upstream)
        call, targets = self.call, self.targets
        count, up = self.count, upstream.count
        CONTEXT.runner = self
        for row in rows:
            up += 1
            try:
                outs = call(row, port)
                if outs is not None and type(outs) is not list and type(outs) is not tuple:
                    outs = _materialize(outs)
            except Exception as e:
                upstream.count = up
                raise OperatorFailure(self, port, row, e) from e
            count += 1
            self.count = count
            if outs:
                upstream.count = up
                for o in outs:
                    for t in targets:
                        t(o)
                CONTEXT.runner = self
        upstream.count = up

    def _feed_each(self, rows: list, port: int, upstream: "Runner") -> None:
        feed = self.feed
        for upstream.count, row in enumerate(rows, upstream.count + 1):
            feed(row, port)

    def end(self) -> None:
        """The END step: `finish()` may emit; afterwards the instance takes no input."""
        outs = self._finish_outputs()
        self.count += 1
        self.finished = True
        self._emit_all(outs)

    def _finish_outputs(self) -> list:
        CONTEXT.runner = self
        try:
            outs = self.op.finish()
            return list(outs) if outs is not None else []
        except ReplayDivergence:
            raise
        except Exception as e:
            raise OperatorFailure(self, END[0], None, e) from e

    def _emit_all(self, outs) -> None:
        for o in outs:
            for t in self.targets:
                t(o)

    def log_result(self, fn, args, kwargs):
        return fn(*args, **kwargs)

    def log_value(self, name: str, value: Any, immutable: bool = False) -> None:
        """Log what a call named `name` gave, where the caller made the call itself (a hooked
        state handle: core/state_handle.py; `immutable`: the caller knows nothing can change
        `value`, which is then kept as it is). An instance outside G(θ) logs nothing."""

    environ_reads: tuple[int, dict] | None = None   # (position, {name: reads of it in that step}): `environ_reads`
    reads_logged = False   # whether `read_environ` logs (an instance in G(θ)) or serves (a replay) what it reads
    replays = False        # ... serves (core/files_read.py: a file read is then handed over, not opened)

    def read_environ(self, name: str, read: Callable[[str], str | None]) -> str | None:
        """The value of environment variable `name` (None: unset) that a hooked function's step
        reads (core/nondeterministic.py); `read` reads this process's. An instance outside G(θ)
        logs nothing."""
        return read(name)

    def set_in_recording(self, name: str) -> bool:
        """Whether a replay served variable `name` as set at its last read in this step, so that
        deleting it succeeds in this process, which may lack it (`nondeterministic`). Only a
        replay serves."""
        return False


def _emitted_many(source: Runner, target: Callable[[Any], None], rows: list) -> bool:
    """Hand a source's batch to its one target at once where that is a shuffle's
    (`Outbox.shuffle_target`'s `many`); the source counts the batch first, as nothing reads its
    count until the batch is sent. False where the target takes rows one by one, or the
    shuffle's key function raised on a row: nothing was sent then."""
    many = getattr(target, "many", None)
    if many is None:
        return False
    start = source.count
    source.count += len(rows)
    if many(rows):
        return True
    source.count = start
    return False


class _Uncounted:
    """The `upstream` of `feed_many` for rows no runner of this task passed on (a shuffle's):
    the counts it is given are never read."""

    __slots__ = ("count",)

    def __init__(self):
        self.count = 0


_UNCOUNTED = _Uncounted()


class InstanceLog:
    """What one instance in G(θ) (or outside it, with `tt record --lineage`) has logged since the last flush."""

    __slots__ = ("start", "counts", "dests", "inputs", "results", "entry", "made", "keys", "_call_pos", "_call_n")

    def __init__(self, shuffle_edges: list[int]):
        self.start = 0                        # position of the first unflushed input
        self.counts = new_counts()            # outputs per input
        self.dests = {e: new_dests() for e in shuffle_edges}
        self.inputs = InputRuns()
        self.results: list[tuple] = []         # (position, call, name, value): `logs.pack_results`
        self.entry: dict[tuple[int, int], list] = {}  # (port, src) -> rows, recorded tuples
        self.made = array("I")                # LineageRunner: per output, n, then n input positions
        self.keys = array("q")                # JoinLineageRunner: per input, its key (an int, or its hash)
        self._call_pos = -1   # the input of the last logged result, and that result's number within
        self._call_n = 0      # the input (`RecordingRunner.log_value` counts them)


class RecordingRunner(Runner):
    """An instance in G(θ): also logs output counts, channels and logged results."""

    def __init__(self, name, instance, op, node_id, log: InstanceLog, multi_port: bool):
        super().__init__(name, instance, op, node_id)
        self.log = log
        self.multi_port = multi_port  # several narrow input edges: log the port per tuple
        # a runner with one narrow input logs no per-tuple channel: its runs are implied
        self.implicit_channel: tuple[int, int] | None = None

    reads_logged = True
    barrier_at: float = INF   # only θ takes barriers (ThetaRunner); checked here, not in a second call per tuple
    slice_rows = 1            # `feed_many`'s slice, as its last call left it (a shuffle's payloads are 512 rows)
    when: Any = None   # θ's `--when` condition (ThetaRunner)
    when_from = 0

    def feed(self, row, port):
        if self.count >= self.barrier_at:
            self.on_barrier(self.count)
        CONTEXT.runner = self
        try:
            outs = self.call(row, port)
            if outs is not None and type(outs) is not list and type(outs) is not tuple:
                outs = _materialize(outs)
        except Exception as e:
            raise OperatorFailure(self, port, row, e) from e
        self.count += 1
        log = self.log
        if self.multi_port:
            log.inputs.add(port, self.instance)
        if outs:
            log.counts.append(len(outs))
            targets = self.targets
            for o in outs:
                for t in targets:
                    t(o)
        else:
            log.counts.append(0)

    def feed_many(self, rows, port, upstream):
        """`Runner.feed_many` with `feed`'s logging and θ's `--when` check, in one loop (a subclass
        that logs otherwise, or an instance that logs ports, feeds row by row).

        Two things `feed` does per row are done here per slice of rows. A barrier is checked
        between slices, which last about a millisecond (`_SLICE_SECONDS`): a slice grows from
        one row, call after call, while its rows are quick, and shrinks again, so a slow
        operator still checks after each row. An interaction that arrives mid-slice is taken
        when the slice ends, as one that arrived a moment later would be; a barrier at a fixed
        position (a re-run's) ends a slice there. And an input that emits nothing is logged as
        a 0 only when the next one emits or the slice ends, a run of zeros at once. On TPC-H W1
        (θ: an aggregate that emits only at the end) at 1 interaction/10 s, the Python workers'
        CPU went from 0.60 s above recording off's 25 s to 0.23 s below it (medians of 6 and 5
        alternating rounds: within the noise); Spark-free, 1M rows of a silent operator, from
        +44 to +7 ms.

        θ's `--when` condition is tested on a slice's rows before the slice runs, up to the
        first that meets it (a condition reads only its row: the operator has not seen it yet,
        as in `_feed_when`); the slice then ends with that row, whose interaction is triggered
        once its outputs have flowed. Through `feed` row by row, a condition that never held
        cost TPC-H W2's workers (θ = J1, scale 0.1, counted by valgrind) 4,189 instructions an
        input of J1's; so, 1,409, the condition's own bytecode and its loop over the rows
        (`first_hit`, recorder/triggers.py)."""
        if (len(rows) < 8 or self.multi_port   # (a few rows, a hooked function's unit: `feed` costs less)
                or getattr(self.feed, "__func__", None) not in _SLICED_FEEDS):
            return self._feed_each(rows, port, upstream)
        call, targets, counts = self.call, self.targets, self.log.counts   # (a flush empties counts in place)
        append, zeros, width = counts.append, counts.frombytes, counts.itemsize
        when = self.when
        count, up = self.count, upstream.count
        n, i, size = len(rows), 0, self.slice_rows
        CONTEXT.runner = self
        while i < n:
            if count >= self.barrier_at:   # (the control thread sets it)
                upstream.count = up
                self.on_barrier(count)
                CONTEXT.runner = self
            due = self.barrier_at - count   # ≥ 1, but for an interaction that came since the test
            stop = i + (size if due >= size else max(1, int(due)))
            started = perf_counter()
            # (the slice's first row that meets `--when`, from position `when_from` on: -1 for none)
            hit = when.first_hit(rows, max(i, i + self.when_from - count), min(stop, n)) if when is not None else -1
            if hit >= 0:
                stop = hit + 1
            logged = count   # counts holds an entry for each input before `logged`
            try:
                for row in rows[i:stop]:
                    up += 1
                    try:
                        outs = call(row, port)
                        if outs is not None and type(outs) is not list and type(outs) is not tuple:
                            outs = _materialize(outs)
                    except Exception as e:
                        upstream.count = up
                        raise OperatorFailure(self, port, row, e) from e
                    count += 1
                    self.count = count
                    if outs:
                        if count - 1 > logged:
                            zeros(bytes(width * (count - 1 - logged)))
                        append(len(outs))
                        logged = count
                        upstream.count = up
                        for o in outs:
                            for t in targets:
                                t(o)
                        CONTEXT.runner = self
            finally:   # (a failing input too: the log is complete up to it)
                if count > logged:
                    zeros(bytes(width * (count - logged)))
            took = perf_counter() - started   # (not the trigger's snapshots)
            if hit >= 0:
                upstream.count = up
                self.on_trigger(count, rows[hit])
                CONTEXT.runner = self
            if took < _SLICE_SECONDS:
                if size < _SLICE_ROWS:
                    size *= 2
            elif took > 4 * _SLICE_SECONDS and size > 1:
                size //= 2
            i = stop
        self.slice_rows = size
        upstream.count = up

    def end(self):
        outs = self._finish_outputs()
        self.count += 1
        self.finished = True
        self.log.inputs.add(*END)
        self.log.counts.append(len(outs))
        self._ended(outs)
        self._emit_all(outs)

    def _ended(self, outs: list) -> None:
        """What `finish()` emitted, before it goes downstream."""

    def settle_log(self) -> None:
        """Write into the log what the runner noted apart, before the log is read (a flush)."""

    def log_result(self, fn, args, kwargs):
        value = fn(*args, **kwargs)
        self.log_value(callable_name(fn), value)
        return value

    def log_value(self, name, value, immutable=False):
        log, position = self.log, self.count
        if position != log._call_pos:   # the input's first (counted here, not in a call: two a key of a processor)
            log._call_pos, log._call_n = position, 0
        else:
            log._call_n += 1
        log.results.append((position, log._call_n, name, value if immutable else kept_apart(value)))   # as `pack_results` packs it

    environ_read: dict | None = None   # name -> the value this instance's steps last read (`read_environ`)
    network_note: str | None = None   # a step's first connection, until sent; then "" (core/outside_effects.py)
    write_note: str | None = None     # the first file a step wrote, as `network_note`

    def read_environ(self, name, read):
        """Log a variable's value where this instance reads it first, or reads another value than
        it last did: once per name, not per read, and apart from the numbered calls
        (`ENVIRON_CALL`), so a library that reads a name once per process, at whatever step,
        replays too (`ResultSource.environ`). With the value goes which read of the name in
        this step it was (`environ_reads`): a step that sets a variable between two reads of it
        gets the first value at its first read again."""
        value = read(name)
        nth = environ_reads(self, name)
        seen = self.environ_read
        if seen is None:
            seen = self.environ_read = {}
        if name not in seen or seen[name] != value:
            seen[name] = value
            self.log.results.append((self.count, ENVIRON_CALL, ENVIRON, [name, value, nth]))
        return value


class SourceLineageRunner(RecordingRunner):
    """A source outside G(θ) that feeds a shuffle, with `tt record --lineage`: lineage needs
    which instance each row went to (the shuffle's dests); its one output per row is logged
    per batch, not per row."""

    def feed_rows(self, rows: list, port: int) -> None:
        CONTEXT.runner = self
        targets = self.targets
        if len(targets) != 1 or not _emitted_many(self, targets[0], rows):
            for self.count, row in enumerate(rows, self.count + 1):
                for t in targets:
                    t(row)
        self.log.counts.frombytes(_ONE_OUTPUT * len(rows))   # (`extend` of a `repeat`: 90 times slower)


class LineageRunner(RecordingRunner):
    """An operator outside G(θ) with `tt record --lineage` that says where it keeps rows and
    what its outputs are made of (`kept_in`; `emitted_from` for `finish()`): the built-in join
    and aggregate. Its state is never replayed, so besides its Input and Output logs it logs,
    for each output, the input positions of the kept rows the output was made from (a join's
    output: the stored row it matched; an aggregate's row: every input of its group)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # state path -> the positions of the inputs kept there: one int until a second comes (most
        # keys of a join hold one row: an array each would cost more than the join's own list)
        self.kept: dict[tuple, int | array] = {}

    def feed(self, row, port):
        position = self.count
        RecordingRunner.feed(self, row, port)
        keep, match = self.op.kept_in(row, port)
        kept = self.kept
        if keep is not None:
            at = kept.get(keep)
            if at is None:
                kept[keep] = position
            elif type(at) is int:
                kept[keep] = array("I", (at, position))
            else:
                at.append(position)
        n = self.log.counts[-1]
        if n:   # output j: made from item j of `match` (a join's j-th stored row of the other side)
            at = _positions(kept.get(match)) if match is not None else ()
            made = self.log.made
            for j in range(n):
                if j < len(at):
                    made.append(1)
                    made.append(at[j])
                else:
                    made.append(0)

    def _ended(self, outs: list) -> None:
        """`finish()`'s outputs, made from what `emitted_from` names (an aggregate's groups)."""
        if not outs:
            return
        made, kept = self.log.made, self.kept
        for paths in self.op.emitted_from(None, -1, len(outs)):
            at = len(made)
            made.append(0)
            for path in paths:
                positions = _positions(kept.get(path[:2]))
                if not positions:
                    continue
                if len(path) == 3:
                    made.append(positions[path[2]])
                    made[at] += 1
                else:
                    made.extend(positions)
                    made[at] += len(positions)


class StoredLineageRunner(RecordingRunner):
    """`LineageRunner` for an operator that keeps its inputs themselves in its state and names
    them with `emitted_from` (`Operator.stores_inputs`; the built-in join logs less still:
    `JoinLineageRunner`). Remembering each input's position by the object's identity costs one
    dict entry per input; what an output was made from is looked up only for calls that emitted
    something (a join's probes)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.position_of: dict[int, int] = {}   # id(input row) -> its position; the state keeps it alive

    def feed(self, row, port):
        self.position_of[id(row)] = self.count
        RecordingRunner.feed(self, row, port)
        n = self.log.counts[-1]
        if n:
            op, made, position_of = self.op, self.log.made, self.position_of
            for paths in op.emitted_from(row, port, n):
                at = len(made)
                made.append(0)
                for field, key, *item in paths:
                    stored = getattr(op, field).get(key, ())
                    for r in (stored[item[0]:item[0] + 1] if item else stored):
                        p = position_of.get(id(r))
                        if p is not None:
                            made.append(p)
                            made[at] += 1


class JoinLineageRunner(RecordingRunner):
    """`--lineage` for a symmetric hash join outside G(θ) (`Operator.join_key`: the built-in
    join): each input's key, and nothing else, as LOG.io logs ids. Which stored row an output was
    made from follows from the keys, the ports and the output counts, which the reader works
    out (store/join_lineage.py). Remembering every input by identity instead, as
    `StoredLineageRunner` does, cost a dict entry per input: 0.44 s of 2.19 s for 460,000
    W2-like join inputs fed by hand; an int key in an array, 0.07 s.

    The built-in join hands each key to a list once its outputs are made (`HashJoin.keys_logged_to`),
    and `feed_many` notes only the inputs that emitted (most of a join's inputs emit nothing:
    W2's J1, 1.5M inputs, 111,000 outputs). `settle_log` writes both into the log as it is
    read, a key per input and a count per input, before a flush reads it. On TPC-H W2 these two
    logs were what `--lineage` cost: the workers' CPU +0.34 s a run over recording without it,
    +0.07 s with them left out (4 alternating runs of each); so, all of `--lineage` +0.135 s
    (the median of 20 rounds' differences)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.keys: list = []               # keys the join handed over since `settle_log`
        self.emitted_at = array("Q")       # positions of the inputs that emitted since then,
        self.emitted_n = array("I")        # and how many outputs each
        logging = getattr(self.op, "keys_logged_to", None)
        process = logging(self.keys.append) if logging is not None else None
        self.join_logs_keys = process is not None
        if process is not None:
            self.call = process

    def feed(self, row, port):
        self.settle_log()
        RecordingRunner.feed(self, row, port)   # (its count logged)
        if not self.join_logs_keys:
            k = self.op.join_key()
            try:   # an int key as it is (an array of int64 refuses any other, and a bigger one)
                self.log.keys.append(k)
            except (OverflowError, TypeError):
                self.log.keys.append(_logged_key(k))

    def feed_many(self, rows, port, upstream):
        """`feed` for each row in one loop (a shuffle's payload: a join's every input comes so),
        logging as the plain runner's loop does nothing: the join logs the key, an input that
        emitted is noted apart."""
        if self.multi_port or self.barrier_at != INF or not self.join_logs_keys:
            return self._feed_each(rows, port, upstream)
        call, targets = self.call, self.targets
        at, emitted = self.emitted_at.append, self.emitted_n.append   # (`settle_log` empties them in place)
        count, up = self.count, upstream.count
        CONTEXT.runner = self
        for row in rows:
            up += 1
            try:
                outs = call(row, port)
                if outs is not None and type(outs) is not list and type(outs) is not tuple:
                    outs = _materialize(outs)
            except Exception as e:
                upstream.count = up
                raise OperatorFailure(self, port, row, e) from e
            count += 1
            self.count = count
            if outs:
                at(count - 1)
                emitted(len(outs))
                upstream.count = up
                for o in outs:
                    for t in targets:
                        t(o)
                CONTEXT.runner = self
        upstream.count = up

    def end(self):
        self.settle_log()
        super().end()

    def settle_log(self) -> None:
        """Write the keys and the noted outputs into the log: a key per input the join took, a
        count per input (0 for one not noted) from the first the log has none of to the last
        taken. (A failing input is not taken: the join hands its key over once its outputs are made.)"""
        log = self.log
        if self.keys:
            try:
                keys = array("q", self.keys)
            except (OverflowError, TypeError):
                keys = array("q", map(_logged_key, self.keys))
            log.keys.extend(keys)
            del self.keys[:]
        missing = self.count - log.start - len(log.counts)
        if missing > 0:
            log.counts.frombytes(bytes(log.counts.itemsize * missing))
            for position, n in zip(self.emitted_at, self.emitted_n):
                log.counts[position - log.start] = n
            del self.emitted_at[:]
            del self.emitted_n[:]


def _logged_key(key: Any) -> int:
    """A join key the int64 key log refuses: one equal to an int64 (a float, a Decimal) as that
    int, any other as its hash, so that keys the join finds equal log alike (the hash of -1, or
    of an int beyond 2**61, is not its value)."""
    try:
        i = int(key)
        if i == key and -INT64 <= i < INT64:
            return i
    except (TypeError, ValueError, OverflowError):   # (not a number, NaN, an infinity)
        pass
    return hash(key)


def _positions(kept: int | array | None) -> tuple | array:
    return () if kept is None else (kept,) if type(kept) is int else kept


class ThetaRunner(RecordingRunner):
    """The interesting operator θ: takes barriers between tuples.

    `barrier_at` is the position before which the next barrier must be taken; the
    recorder's control thread sets it to 0 when an interaction arrives, and to a
    fixed position when a re-run must repeat the first run's barriers. `when` is the
    compiled `--when` condition (recorder/triggers.py: called on a tuple, and its
    `first_hit` on a slice of a batch); a matching tuple triggers an interaction right
    after it has been processed (and its outputs have flowed downstream).
    """

    def __init__(self, *args, on_barrier: Callable[[int], None],
                 on_trigger: Callable[[int, Any], None], when: Any,
                 when_from: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.barrier_at: float = INF
        self.on_barrier = on_barrier
        self.on_trigger = on_trigger
        self.when = when
        self.when_from = when_from  # re-runs: conditions below this position already fired
        if when is not None:
            self.feed = self._feed_when

    def _feed_when(self, row, port):
        """`feed`, then an interaction if the `--when` condition holds for `row`."""
        if self.count >= self.when_from and self.when(row):
            RecordingRunner.feed(self, row, port)   # takes a pending barrier first
            self.on_trigger(self.count, row)
        else:
            RecordingRunner.feed(self, row, port)

    def end(self):
        if self.count >= self.barrier_at:
            self.on_barrier(self.count)
        super().end()


_SLICED_FEEDS = (RecordingRunner.feed, ThetaRunner._feed_when)   # the `feed`s `RecordingRunner.feed_many` does in its loop


class ReplayRunner(Runner):
    """An instance in the local replay: serves logged results, checks output counts."""

    reads_logged = replays = True
    task_context: dict | None = None   # what the recorded attempt's TaskContext told (core/task_context.py)

    def __init__(self, name, instance, op, node_id, results: "ResultSource"):
        super().__init__(name, instance, op, node_id)
        self.results = results
        self.expected_counts: Callable[[int], int] | None = None  # position -> logged output count

    def feed(self, row, port):
        CONTEXT.runner = self
        try:
            outs = self.call(row, port)
            if outs is not None and type(outs) is not list and type(outs) is not tuple:
                outs = _materialize(outs)
        except ReplayDivergence:
            raise
        except Exception as e:
            raise OperatorFailure(self, port, row, e) from e
        finally:
            CONTEXT.runner = None
        n = len(outs) if outs else 0
        if self.expected_counts is not None:
            self._check(n)
        self.count += 1
        for o in outs or ():
            for t in self.targets:
                t(o)

    def end(self):
        try:
            outs = self._finish_outputs()
        finally:
            CONTEXT.runner = None
        if self.expected_counts is not None:
            self._check(len(outs))
        self.count += 1
        self.finished = True
        self._emit_all(outs)

    def _check(self, n: int) -> None:
        logged = self.expected_counts(self.count)
        if logged is not None and logged != n:
            raise ReplayDivergence(
                f"{self.label} input #{self.count} produced {n} output(s) in replay but "
                f"{logged} when recorded", op=self.name, instance=self.instance, position=self.count)

    def log_result(self, fn, args, kwargs):
        return self.results.next(self, callable_name(fn))

    def read_environ(self, name, read):
        """The value the recording read at this input, from its log; this process's where the
        recording logged none of the name (an older run, a name it keeps out: `nondeterministic`)."""
        logged = self.results.environ(name, self.count, environ_reads(self, name))
        return read(name) if logged is UNLOGGED else logged

    def set_in_recording(self, name):
        last = environ_reads(self, name, count=False) - 1   # (as of the step's last read of it, or before it: -1)
        logged = self.results.environ(name, self.count, last)
        return logged is not UNLOGGED and logged is not None

    def file_contents(self, digest: str) -> bytes | None:
        """The bytes of a file a step read (xxh3-128 `digest`), where the run holds them: a small
        one's, or a large one `tt pack` copied in (core/files_read.py); None where it does not."""
        return self.results.file_contents(digest)

    def log_value(self, name, value, immutable=False):
        """Only a handle with Spark behind it logs values: in replay there is none."""
        raise ReplayDivergence(f"{self.label} input #{self.count}: {name} asked Spark in replay",
                               op=self.name, instance=self.instance, position=self.count)


#: A logged result that is an environment variable's value, `[name, value, nth]` (None: unset), logged
#: at the input that read it, its `nth` read of the name (`RecordingRunner.read_environ`), numbered
#: apart from the calls
ENVIRON, ENVIRON_CALL = "os.environ", -1
UNLOGGED = object()   # `ResultSource.environ`: the recording logged no value of the name


def environ_reads(runner: Runner, name: str, count: bool = True) -> int:
    """How many times `runner`'s current step read variable `name` before (0 for its first read);
    with `count`, this is a read too."""
    reads = runner.environ_reads
    if reads is None or reads[0] != runner.count:
        reads = runner.environ_reads = (runner.count, {})
    nth = reads[1].get(name, 0)
    if count:
        reads[1][name] = nth + 1
    return nth


class ResultSource:
    """Logged results of one instance, served back in order during replay; and the values of the
    environment variables it read, served by position (`environ`). `file_contents`: a digest -> the
    bytes of the file the run holds under it, or None (`ReplayRunner.file_contents`)."""

    def __init__(self, results: list[LoggedResult], file_contents: Callable[[str], bytes | None] | None = None):
        self.file_contents = file_contents or _no_contents
        self._by_key = {(r.position, r.call): r for r in results if r.call != ENVIRON_CALL}
        # name -> ([(position, nth read in its step)], [values]), in log order
        self._environ: dict[str, tuple[list[tuple[int, int]], list]] = {}
        for r in results:
            if r.call == ENVIRON_CALL:
                name, value, *nth = r.value
                at, got = self._environ.setdefault(name, ([], []))
                at.append((r.position, nth[0] if nth else 0))
                got.append(value)
        self._pos = -1
        self._call = 0

    def environ(self, name: str, position: int, nth: int = 0) -> Any:
        """What the recording read of variable `name` at its `nth` read of input `position`: the
        value logged last at or before that read (a read logs only a first or changed value), or
        the first logged, for a read that comes sooner in replay (a library that reads once a
        process, first at another step); `UNLOGGED` for a name never logged."""
        logged = self._environ.get(name)
        if logged is None:
            return UNLOGGED
        at, got = logged
        return got[max(0, bisect_right(at, (position, nth)) - 1)]

    def next(self, runner: Runner, name: str):
        pos = runner.count
        if pos != self._pos:
            self._pos, self._call = pos, 0
        else:
            self._call += 1
        r = self._by_key.get((pos, self._call))
        if r is None:
            raise ReplayDivergence(
                f"{runner.label} input #{pos} calls log_result({name}) (call {self._call}) in replay, "
                f"but no such call was logged when recording; the operator's code calls it differently",
                op=runner.name, instance=runner.instance, position=pos)
        if r.name != name:
            raise ReplayDivergence(
                f"{runner.label} input #{pos} call {self._call} is log_result({name}) in replay but "
                f"log_result({r.name}) was logged", op=runner.name, instance=runner.instance, position=pos)
        return kept_apart(r.value)   # a replay that goes back over the call gets it as logged


def _no_contents(digest: str) -> None:
    """`ResultSource.file_contents` of a run that holds no file's bytes."""
    return None


def narrow_target(runner: Runner, port: int) -> Callable[[Any], None]:
    """Deliver to a runner in the same task, depth first. (`narrow` names the runner and port,
    for `Runner.feed_rows`, which hands them a whole batch: `feed_many`.)"""
    feed = runner.feed

    def deliver(row):
        feed(row, port)

    deliver.narrow = (runner, port)
    return deliver


def capture_target(target: Callable[[Any], None], buffer: list) -> Callable[[Any], None]:
    """Record tuples entering G(θ) from outside it, then deliver them. What is recorded is a copy
    where the row could change (`kept_apart`): the buffer is packed later, after G(θ) processed
    the row, and an operator may write into the row it gets."""
    append = buffer.append

    def deliver(row):
        append(kept_apart(row, packed_by_pickle=True))
        target(row)

    return deliver


__all__ = ["INF", "Runner", "RecordingRunner", "ThetaRunner", "ReplayRunner", "ResultSource", "ENVIRON", "ENVIRON_CALL",
           "InstanceLog", "OperatorFailure", "narrow_target", "capture_target"]

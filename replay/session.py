"""The debug session: the one API over a recorded run.

Jump to an interaction, see what waits on every channel of every instance in
G(θ), and step: *over* a tuple (its whole scope is processed), *into* it (only
its operator processes it; its outputs wait downstream), *out* (the rest of the
current scope), *back* (the position before the last action), *until* a
condition on a tuple or a state holds, or back to the *last change* of a field.
Every action says whether it is possible now, and why not when it is not. The
TUI and the CLI are thin views on this class.

Tuples that entered G(θ) anywhere but at θ (the other side of a join, say), and
tuples emitted by an END step, are *free*: whenever they are in the way of a
step, they are consumed as logged, and the result says so.
"""

from __future__ import annotations

import ast
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson

from ..core import snapshots, values
from ..core.errors import Cancelled, ReplayDivergence, UsageError
from ..core.logs import END
from ..core.scopes import Overlap, Provenance, ScopeNode, TupleRef
from ..store.reader import RunReader
from .checkpoints import Restorer
from .engine import Engine, EngineSnapshot, Instance, Key, RecordedFailure

SNAPSHOT_BUDGET = 256 << 20   # bytes of in-memory restore points
SAVE_EVERY = 0.25             # seconds of replay between the restore points a long action leaves behind
FRESH = ("jump", "reverse_step")   # actions after which `step_back` steps back over θ's previous input


@dataclass
class Availability:
    ok: bool
    reason: str = ""
    blocker: str | None = None  # the tuple (or root) in the way

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class Pending:
    ref: TupleRef
    label: str           # OP:INSTANCE:POSITION
    port: int
    sender: str          # "FE:0", or "recorded" for tuples entering G(θ) here
    free: bool           # consumed as logged when in the way
    row: Any             # JSON-encoded payload (None for END)
    next: bool           # the instance's next logged input
    end: bool = False


@dataclass
class StepResult:
    action: str
    target: str | None
    ok: bool = True
    note: str = ""
    consumed: list[str] = field(default_factory=list)
    free_consumed: list[str] = field(default_factory=list)
    changed: dict[str, dict] = field(default_factory=dict)  # instance -> field -> [old, new]
    position: dict[str, int] = field(default_factory=dict)
    interaction: int | None = None
    seconds: float = 0.0
    raised: dict | None = None  # post-mortem: the operator re-raised what it raised when recorded

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


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


@dataclass
class _HistoryEntry:
    position: dict[Key, int]            # where the session was before `action`
    frames: list[TupleRef]
    action: str
    snapshot: EngineSnapshot | None     # an exact restore point there, when one was worth taking


class DebugSession:
    def __init__(self, run: str | Path | RunReader, *, trust: bool = False):
        self.reader = run if isinstance(run, RunReader) else RunReader(run)
        self.engine = Engine(self.reader, trust=trust)
        self.graph = self.engine.graph
        self.provenance = Provenance(self.graph, self._logs, self._barriers())
        self.restorer = Restorer(self.engine)       # checkpoints of the active plan, if any
        self.frames: list[TupleRef] = []           # step-into stack
        self.history: list[_HistoryEntry] = []
        self._restore_points: list[EngineSnapshot] = []
        self._last_saved: EngineSnapshot | None = None
        # costs that decide when a restore point is worth taking (seconds, measured as we go)
        self._save_seconds = 0.0
        self._seconds_per_input = 5e-6
        # per instance: (position, snapshots.remember(state)) to diff the next step against
        self._memos: dict[Key, tuple[int, dict]] = {}
        self._lock = threading.RLock()
        self.last_result: StepResult | None = None
        self._jumped: int | None = None            # the interaction last jumped to (see `at_interaction`)
        self.failure: Failure | None = self._failure()

    # --- set-up -------------------------------------------------------------------

    def _logs(self, op: int, i: int):
        inst = self.engine.instances[(op, i)]
        return inst.runs, inst.counts, inst.dests

    def _barriers(self) -> dict[Key, list[int]]:
        theta = self.graph.theta
        out: dict[Key, list[int]] = {}
        for inter in self.reader.interactions():
            if inter.k == 0 or inter.trigger == "end":
                continue
            snap = self.reader.snapshot(inter.k)
            for (op, i), at in snap.items():
                if op == theta:
                    out.setdefault((op, i), []).append(at.position)
        return out

    def _failure(self) -> Failure | None:
        """The operator failure a failed run's log ends with, if any (the first one, when
        several tasks failed; every failing instance re-raises when replay reaches it)."""
        points = self.reader.failure_points()
        if not points:
            return None
        in_g = [f for f in points if (f["op"], f["instance"]) in self.engine.instances]
        f = (in_g or points)[0]
        key = (f["op"], f["instance"])
        name = self.graph.nodes[f["op"]].name
        inst = self.engine.instances.get(key)
        steppable = inst is not None and inst.failed_at == f["position"]
        if inst is None:
            reason = (f"{name} is not in G(θ) (θ = {self.reader.theta.name}): record with --watch {name} "
                      f"to step the failing tuple")
        elif not steppable:
            reason = "the run file does not hold the failing tuple (it was recorded by an older tt)"
        else:
            reason = ""
        return Failure(f"{name}:{f['instance']}:{f['position']}", name, f["instance"], f["position"],
                       f["error"], f["traceback"] or "", f["row"] or "", steppable, reason)

    def failure_targets(self) -> dict[Key, int]:
        """Where the recorded run stopped: every instance as far as its log goes, and each
        failed instance just before the input it raised on (which then waits there)."""
        targets = {}
        for key, inst in self.engine.instances.items():
            targets[key] = inst.failed_at if inst.failed_at is not None else inst.total
        return targets

    def goto_failure(self, progress: Callable[[int, int], None] | None = None,
                     cancel: threading.Event | None = None) -> StepResult:
        """Post-mortem: go to just before the tuple on which the recorded run failed; that
        tuple waits at the failed instance, and stepping into (or over) it re-raises."""
        f = self.failure
        if f is None:
            return self._refused("goto_failure", None, "this run did not fail in an operator")
        if not f.steppable:
            return self._refused("goto_failure", f.label, f"the run failed at {f.label} ({f.error}), but {f.reason}")
        result = self._act("jump", f.label, self.failure_targets(), None, progress=progress, cancel=cancel,
                           clear_frames=True)
        result.action = "goto_failure"
        result.note = (f"the run failed here: {f.label} raised {f.error}; step into it to re-raise it "
                       f"(the state shown is from just before it)")
        return result

    def refresh(self) -> bool:
        """Pick up what a live recording wrote since; True if new interactions completed.

        The engine is rebuilt over the longer logs and put back where it was.
        """
        with self._lock:
            before = [i.k for i in self.reader.interactions()]
            self.reader.refresh()
            after = [i.k for i in self.reader.interactions()]
            if after == before:
                return False
            position = self.engine.position
            trust = True  # already established when the session opened
            self.engine = Engine(self.reader, trust=trust)
            self.provenance = Provenance(self.graph, self._logs, self._barriers())
            self.restorer = Restorer(self.engine)
            self._restore_points, self._last_saved, self.history, self._memos = [], None, [], {}
            self.engine.advance_to({k: v for k, v in position.items() if k in self.engine.instances})
            return True

    # --- names --------------------------------------------------------------------

    def label(self, key_or_ref) -> str:
        if isinstance(key_or_ref, TupleRef):
            return key_or_ref.label(self.graph)
        op, i = key_or_ref
        return f"{self.graph.nodes[op].name}:{i}"

    def parse_ref(self, text: str) -> TupleRef:
        """'FE:0:42' -> input #42 of FE's instance 0."""
        parts = text.strip().split(":")
        if len(parts) != 3:
            raise UsageError(f"bad tuple {text!r}; write OP:INSTANCE:POSITION, e.g. FE:0:42")
        op = self.reader.operator(parts[0])
        if not op.in_g:
            raise UsageError(f"{op.name} is not in G(θ) (θ = {self.reader.theta.name}); it cannot be stepped")
        try:
            i, pos = int(parts[1]), int(parts[2])
        except ValueError:
            raise UsageError(f"bad tuple {text!r}; instance and position are numbers") from None
        if not 0 <= i < op.instances:
            raise UsageError(f"{op.name} has instances 0..{op.instances - 1}, not {i}")
        total = self.engine.instances[(op.id, i)].total
        if not 0 <= pos < total:
            raise UsageError(f"{op.name}:{i} has inputs #0..#{total - 1}, not #{pos}")
        return TupleRef(op.id, i, pos)

    def parse_instance(self, text: str) -> Key:
        name, _, i = text.partition(":")
        op = self.reader.operator(name)
        try:
            key = (op.id, int(i))
        except ValueError:
            raise UsageError(f"bad instance {text!r}; write OP:INSTANCE, e.g. {op.name}:0") from None
        if key not in self.engine.instances:
            raise UsageError(f"{text} is not an instance in G(θ)")
        return key

    # --- where we are -------------------------------------------------------------

    @property
    def position(self) -> dict[str, int]:
        return {self.label(k): c for k, c in self.engine.position.items()}

    def interactions(self):
        return self.reader.interactions()

    def at_interaction(self) -> int | None:
        """The interaction the session is at, if any. Several can share one position (periodic
        ones before the first tuple arrives, or after the last): then the one jumped to, if it
        is one of them, else the first, so that every view and `tt replay` name it alike."""
        pos = self.engine.position
        at = [inter.k for inter in self.reader.interactions()
              if all(pos[key] == p.position for key, p in self.reader.snapshot(inter.k).items())]
        if not at:
            return None
        return self._jumped if self._jumped in at else at[0]

    def states(self) -> dict[str, Any]:
        return {self.label(k): inst.state() for k, inst in self.engine.instances.items()}

    def state(self, instance: str) -> Any:
        return self.engine.instances[self.parse_instance(instance)].state()

    def progress(self) -> dict:
        """How far into the run the session stands (for progress lines), in tuples consumed."""
        done = sum(inst.tuples for inst in self.engine.instances.values())
        total = sum(inst.tuple_total for inst in self.engine.instances.values())
        return {"interaction": self.at_interaction(), "tuples": done, "total": total,
                "percent": 100.0 * done / total if total else 100.0}

    # --- what waits -----------------------------------------------------------------

    def pending(self, instance: str | None = None, limit: int = 20) -> list[Pending]:
        """Per instance, the tuples waiting on its channels, in the order it will consume them."""
        keys = [self.parse_instance(instance)] if instance else list(self.engine.instances)
        out = []
        for key in keys:
            inst = self.engine.instances[key]
            idx = self.provenance.index(*key)
            items = []
            for ch, q in inst.queues.items():
                for j, row in enumerate(list(q)[:limit]):
                    pos = idx.position_of(ch, inst.consumed[ch] + j)
                    if pos is not None:
                        items.append((pos, ch, row))
            for ch, entry in inst.entry.items():
                seq = inst.consumed[ch]
                for j in range(limit):
                    pos = idx.position_of(ch, seq + j)
                    if pos is None:
                        break
                    items.append((pos, ch, None))
            if inst.next_channel() == END:
                items.append((inst.count, END, None))
            items.sort(key=lambda x: x[0])
            for pos, ch, row in items[:limit]:
                ref = TupleRef(key[0], key[1], pos)
                if ch == END:
                    out.append(Pending(ref, self.label(ref), -1, "end of input", True, None, pos == inst.count, True))
                    continue
                internal = ch[0] in inst.internal_ports
                if not internal:
                    row = inst.entry[ch].get(self.provenance.index(*key).channel_at(pos)[2])
                sender = self.label((self.graph.edges[inst.node.inputs[ch[0]]].src, ch[1])) if internal \
                    else "recorded"
                out.append(Pending(ref, self.label(ref), ch[0], sender, self._free(ref),
                                   values.encode(row), pos == inst.count))
        return out

    def _free(self, ref: TupleRef) -> bool:
        return not self.provenance.is_theta_root(self.provenance.root(ref))

    # --- planning steps (from the logs, without moving) --------------------------------

    def _plan(self, required: dict[Key, int], allowed: set[TupleRef]) -> dict[Key, int] | Availability:
        """Targets that consume `required` while consuming only `allowed` or free tuples."""
        engine, prov = self.engine, self.provenance
        targets = {k: v for k, v in required.items()}
        checked = {k: engine.instances[k].count for k in engine.instances}
        work = list(required)
        while work:
            key = work.pop()
            end = targets[key]
            for q in range(checked[key], end):
                ref = TupleRef(key[0], key[1], q)
                if ref not in allowed and not self._free(ref):
                    return self._blocked(ref, allowed)
                origin = prov.origin(ref)
                if origin is not None:
                    okey = (origin.op, origin.instance)
                    if engine.instances[okey].count <= origin.position and origin.position + 1 > targets.get(okey, 0):
                        if origin not in allowed and not self._free(origin):
                            return Availability(False, f"{self.label(ref)} has not been produced yet: "
                                                f"{self.label(origin)} has to be processed first",
                                                self.label(origin))
                        targets[okey] = origin.position + 1
                        work.append(okey)
            checked[key] = max(checked[key], end)
        return targets

    def _blocked(self, ref: TupleRef, allowed: set[TupleRef]) -> Availability:
        """Why `ref` cannot be consumed as part of a step on `allowed`."""
        prov = self.provenance
        root = prov.root(ref)
        mine = [prov.root(r) for r in allowed][:1]
        where = self.label((ref.op, ref.instance))
        if mine and prov.is_theta_root(mine[0]) and prov.rank(root) > prov.rank(mine[0]):
            return Availability(False, f"its scope overlaps that of the later tuple {self.label(root)}: {where} "
                                f"consumed {self.label(ref)} (from {self.label(root)}) first", self.label(root))
        return Availability(False, f"{where} must first consume {self.label(ref)}, from the scope of "
                            f"{self.label(root)}, which is still in progress; step over or out of it first",
                            self.label(root))

    def _scope_targets(self, ref: TupleRef, done_ok: bool = False) -> tuple[dict[Key, int], set[TupleRef]]:
        scope = self.provenance.scope_set(ref)
        required: dict[Key, int] = {}
        for r in scope:
            key = (r.op, r.instance)
            if self.engine.instances[key].count <= r.position:
                required[key] = max(required.get(key, 0), r.position + 1)
        return required, scope

    def can_step_into(self, ref: TupleRef | str) -> Availability:
        ref = self._ref(ref)
        inst = self.engine.instances[(ref.op, ref.instance)]
        if ref.position < inst.count:
            return Availability(False, f"{self.label(ref)} was already consumed")
        plan = self._plan({(ref.op, ref.instance): ref.position + 1}, {ref})
        return plan if isinstance(plan, Availability) else Availability(True)

    def can_step_over(self, ref: TupleRef | str) -> Availability:
        ref = self._ref(ref)
        inst = self.engine.instances[(ref.op, ref.instance)]
        if ref.position < inst.count:
            return Availability(False, f"{self.label(ref)} was already consumed")
        required, scope = self._scope_targets(ref)
        plan = self._plan(required, scope)
        if isinstance(plan, Availability):
            return Availability(False, f"no step-over for {self.label(ref)}: {plan.reason}", plan.blocker)
        return Availability(True)

    def can_step_out(self) -> Availability:
        frame = self._frame()
        if frame is None:
            return Availability(False, "not inside a tuple's scope (step into a tuple first)")
        required, scope = self._scope_targets(frame)
        plan = self._plan(required, scope)
        return plan if isinstance(plan, Availability) else Availability(True)

    def can_step_back(self) -> Availability:
        if self._undoable() is not None or self._previous_theta_input() is not None:
            return Availability(True)
        return Availability(False, "at the start of the run: nothing to step back over")

    def _undoable(self) -> _HistoryEntry | None:
        """The last action, which a step back undoes, unless it put the session at a fresh
        position (a jump, or a step back over θ's previous input) or there is none."""
        if self.history and self.history[-1].action.split(" ", 1)[0] not in FRESH:
            return self.history[-1]
        return None

    def _previous_theta_input(self) -> TupleRef | None:
        """θ's input consumed last in the original order (the highest rank θ has consumed)."""
        theta = self.graph.theta
        consumed = [TupleRef(theta, i, inst.count - 1) for (op, i), inst in self.engine.instances.items()
                    if op == theta and inst.count > 0]
        return max(consumed, key=self.provenance.rank, default=None)

    def _ref(self, ref: TupleRef | str) -> TupleRef:
        return self.parse_ref(ref) if isinstance(ref, str) else ref

    def _frame(self) -> TupleRef | None:
        """The innermost stepped-into tuple whose scope is not complete yet."""
        while self.frames:
            frame = self.frames[-1]
            required, _ = self._scope_targets(frame)
            if required:
                return frame
            self.frames.pop()  # that scope was completed by other steps
        return None

    # --- acting ---------------------------------------------------------------------------

    def jump(self, k: int, progress: Callable[[int, int], None] | None = None,
             cancel: threading.Event | None = None) -> StepResult:
        snap = self.reader.snapshot(k)
        if snap is None:
            complete = [i.k for i in self.reader.interactions()]
            raise UsageError(f"interaction {k} is not complete; choose one of {complete[0]}..{complete[-1]}"
                             if complete else "this run has no complete interaction")
        targets = {key: at.position for key, at in snap.items()}
        self._jumped = k
        return self._act("jump", str(k), targets, None, progress=progress, cancel=cancel, clear_frames=True)

    def step_into(self, ref: TupleRef | str) -> StepResult:
        ref = self._ref(ref)
        ok = self.can_step_into(ref)
        if not ok:
            return self._refused("step_into", self.label(ref), ok.reason)
        plan = self._plan({(ref.op, ref.instance): ref.position + 1}, {ref})
        result = self._act("step_into", self.label(ref), plan, {ref})
        if result.raised is None:
            self.frames.append(ref)
        return result

    def step_over(self, ref: TupleRef | str) -> StepResult:
        ref = self._ref(ref)
        ok = self.can_step_over(ref)
        if not ok:
            return self._refused("step_over", self.label(ref), ok.reason)
        required, scope = self._scope_targets(ref)
        return self._act("step_over", self.label(ref), self._plan(required, scope), scope)

    def step_out(self) -> StepResult:
        ok = self.can_step_out()
        frame = self._frame()
        if not ok:
            return self._refused("step_out", None, ok.reason)
        required, scope = self._scope_targets(frame)
        result = self._act("step_out", self.label(frame), self._plan(required, scope), scope)
        if self.frames and self.frames[-1] == frame:
            self.frames.pop()
        return result

    def step_back(self, progress=None, cancel: threading.Event | None = None) -> StepResult:
        """Undo the last action (a step, a run until, a last change); at a fresh position (after
        a jump, or after stepping back that way) step back over θ's previous input instead, as
        rr's reverse-next does from any point."""
        if self._undoable() is None:
            return self._reverse_step(progress, cancel)
        t0 = time.perf_counter()
        before = dict(self.engine.position)
        entry = self.history.pop()
        self._return_to(entry)
        self.frames = list(entry.frames)
        result = StepResult("step_back", entry.action, note=f"back to before {entry.action}")
        self._finish(result, before, t0)
        return result

    def _reverse_step(self, progress=None, cancel=None) -> StepResult:
        """Go to just before θ's previous input (in the original order), everything before
        it processed: replay from the nearest restore point (in memory, a checkpoint, or the
        start) and stop there."""
        ref = self._previous_theta_input()
        if ref is None:
            return self._refused("step_back", None, "at the start of the run: nothing to step back over")
        label = self.label(ref)
        engine = self.engine
        with self._lock:
            t0 = time.perf_counter()
            entry = self._begin(f"reverse_step {label}", engine.instances)
            bound = dict(entry.position)
            bound[(ref.op, ref.instance)] = ref.position
            try:
                self._restore_nearest(bound)
                self._run_canonical(stop_at=ref, tick=self._tick(progress, cancel))
            except BaseException:
                self._abandon(entry)
                raise
            self.frames = []
            self._maybe_save()
            result = StepResult("step_back", f"step_over {label}",
                                note=f"back to just before {label}: replayed from the nearest restore point")
            self._finish(result, entry.position, t0)
            return result

    def _restore_nearest(self, bound: dict[Key, int]) -> None:
        """Restore the latest point at or before `bound` on every instance: a restore point in
        memory, a checkpoint line, or the start."""
        base = self._best_base(bound)
        base_done = sum(base.position.values()) if base is not None else 0
        line, line_done = self.restorer.line_for(bound) if self.restorer else (None, 0)
        if line is not None and line_done > base_done:
            self.restorer.load(line)
        else:
            self._restore_or_reset(base)

    def _return_to(self, entry: _HistoryEntry) -> None:
        if entry.snapshot is not None:
            self.engine.restore(entry.snapshot)
            self._last_saved = entry.snapshot
        else:
            self._move_to(entry.position)

    def _refused(self, action: str, target: str | None, reason: str) -> StepResult:
        result = StepResult(action, target, ok=False, note=reason, position=self.position,
                            interaction=self.at_interaction())
        self.last_result = result
        return result

    def _act(self, action: str, target: str | None, targets: dict[Key, int], allowed: set[TupleRef] | None, *,
             progress=None, cancel=None, clear_frames=False) -> StepResult:
        with self._lock:
            t0 = time.perf_counter()
            entry = self._begin(f"{action} {target or ''}".strip(), () if action == "jump" else targets)
            consumed: list[TupleRef] = []
            if action != "jump":  # (a jump reports no tuples: keep its replay loop free of the hook)
                self.engine.on_consume = lambda inst, pos, ch: consumed.append(TupleRef(inst.node.id, inst.i, pos))
            raised: RecordedFailure | None = None
            try:
                self._move_to(targets, progress, cancel, from_here=action != "jump")
            except RecordedFailure as e:  # post-mortem: the failing tuple raised again; the engine
                raised = e                # stands just before it, as recorded
                if consumed and self.label(consumed[-1]) == e.label:
                    consumed.pop()
            except (Cancelled, ReplayDivergence):
                self._abandon(entry)
                raise
            finally:
                self.engine.on_consume = None
            if raised is not None and self.engine.position == entry.position:
                self.history.pop()  # nothing moved: nothing to step back from
            if consumed:
                rate = (time.perf_counter() - t0) / len(consumed)
                self._seconds_per_input = 0.7 * self._seconds_per_input + 0.3 * rate
            if action == "jump":
                self._maybe_save()  # now, while a long action is under way, not at the next step
            if clear_frames:
                self.frames = []
            result = StepResult(action, target)
            if raised is not None:
                result.ok = False
                result.note = str(raised) + ("; the state is as it was just before it" if not consumed else
                                             "; stopped just before it")
                result.raised = {"tuple": raised.label, "error": raised.error_type, "message": str(raised.error),
                                 "recorded": raised.recorded, "traceback": raised.traceback}
            if action != "jump":
                result.consumed = [self.label(r) for r in consumed]
                result.free_consumed = [self.label(r) for r in consumed if allowed is not None and r not in allowed]
                if result.free_consumed:
                    result.note = (f"consumed as logged: {len(result.free_consumed)} tuple(s) from outside "
                                   f"θ's scopes (e.g. {result.free_consumed[0]})")
            self._finish(result, entry.position, t0)
            return result

    def _begin(self, label: str, planned=()) -> _HistoryEntry:
        """Remember where the session is before an action (and what to diff against)."""
        entry = _HistoryEntry(dict(self.engine.position), list(self.frames), label, self._maybe_save())
        self.history.append(entry)
        for key in planned:
            self._memo_fresh(key)
        return entry

    def _abandon(self, entry: _HistoryEntry) -> None:
        """An action was cancelled or diverged: back to where it started, as if never taken."""
        self.history.pop()
        self._return_to(entry)

    def _memo_fresh(self, key: Key) -> None:
        inst = self.engine.instances[key]
        memo = self._memos.get(key)
        if memo is None or memo[0] != inst.count:
            state = inst.runner.op.state()
            self._memos[key] = (inst.count, snapshots.remember(state) if type(state) is dict else {})

    def _finish(self, result: StepResult, before: dict[Key, int], t0: float) -> None:
        """Fill in the result: what changed in the states (changed keys only), where we are."""
        for key, count in self.engine.position.items():
            if before.get(key) == count:
                continue
            memo = self._memos.pop(key, None)
            if result.action == "jump":
                continue
            state = self.engine.instances[key].runner.op.state()
            if memo is not None and memo[0] == before[key] and type(state) is dict:
                change, _, fields = snapshots.delta(memo[1], state)
                self._memos[key] = (count, fields)
                diff = _display_diff(memo[1], change) if change else {}
            else:
                diff = {"…": ["(state changed; open it to see it)", None]}
            if diff:
                result.changed[self.label(key)] = diff
        result.position = self.position
        result.interaction = self.at_interaction()
        result.seconds = round(time.perf_counter() - t0, 4)
        self.last_result = result

    # --- moving the engine ------------------------------------------------------------------

    def _maybe_save(self) -> EngineSnapshot | None:
        """A restore point here, unless replaying to here from the latest one is cheaper
        than taking it (big states are costly to save; a few steps are cheap to redo)."""
        here = self.engine.position
        covering = [s for s in self._restore_points if s.covers(here)]
        if covering:
            redo = min(sum(here[k] - s.position[k] for k in here) for s in covering)
            if redo * self._seconds_per_input < self._save_seconds:
                return None
        t = time.perf_counter()
        snap = self.engine.save(self._last_saved)
        self._save_seconds = 0.5 * self._save_seconds + 0.5 * (time.perf_counter() - t)
        self._last_saved = snap
        self._restore_points.append(snap)
        while len(self._restore_points) > 2 and sum(s.nbytes() for s in self._restore_points) > SNAPSHOT_BUDGET:
            self._restore_points.pop(1)  # keep the oldest (cheap base) and the newest
        return snap

    def _move_to(self, targets: dict[Key, int], progress=None, cancel=None, from_here: bool = False) -> None:
        """Restore the closest starting point (in memory or a checkpoint), then replay forward.

        `from_here`: when the targets lie ahead, replay forward from the current position, not
        from a restore point between it and them (a step reports every tuple it consumed)."""
        engine = self.engine
        full = {k: targets.get(k, engine.instances[k].count) for k in engine.instances}
        here = sum(engine.instances[k].count for k in engine.instances)
        behind = any(engine.instances[k].count > t for k, t in targets.items())
        base = self._best_base(full)
        base_done = sum(base.position.values()) if base is not None else 0
        line, line_done = self.restorer.line_for(full) if self.restorer else (None, 0)
        if from_here and not behind:
            line, line_done, base, base_done = None, -1, None, -1
        best = max(line_done, base_done, -1 if behind else here)
        if best == here and not behind:
            pass  # replaying forward from here is cheapest
        elif line is not None and line_done == best and line_done > 0:
            self.restorer.load(line)
        elif base is not None and base_done == best:
            engine.restore(base)
        else:
            engine.reset()
        total = sum(max(0, t - engine.instances[k].count) for k, t in targets.items())
        engine.advance_to(targets, self._tick(progress, cancel, total))

    def _tick(self, progress=None, cancel=None, total: int = 0) -> Callable[[int], None]:
        """The engine's progress callback for an action: reports progress, raises `Cancelled`
        when asked to, and leaves a restore point every `SAVE_EVERY` seconds of replay (at least
        ten times what a save costs), so that stepping back or searching back after a long
        action replays a short stretch, not the whole action."""
        report = _ticker(progress, cancel, total)
        due = [time.perf_counter() + max(SAVE_EVERY, 10 * self._save_seconds)]

        def tick(steps: int) -> None:
            report(steps)
            if time.perf_counter() >= due[0]:
                self._maybe_save()
                due[0] = time.perf_counter() + max(SAVE_EVERY, 10 * self._save_seconds)
        return tick

    def _best_base(self, target: dict[Key, int]) -> EngineSnapshot | None:
        usable = [s for s in self._restore_points if s.covers(target)]
        if not usable:
            return None
        return max(usable, key=lambda s: sum(s.position.values()))

    # --- until / last change ------------------------------------------------------------------

    def run_until(self, condition: str, progress=None, cancel=None) -> StepResult:
        """Go forward, step by step, until `condition` holds after a step.

        The condition sees `row` (the tuple just consumed), `op`, `instance`,
        `position`, and every operator of G(θ) by name: `FD.blacklist` is the
        stepping instance's field when an FD instance stepped, `FD[1].blacklist`
        is instance 1's. Example: "'Bob' in FD.blacklist".
        """
        check = _compile_condition(condition, {n.name for n in self.graph.nodes if n.id in self.graph.in_g})
        self._check_fields(check)
        engine = self.engine
        hit: list[TupleRef] = []

        class _Hit(Exception):
            pass

        def after(inst: Instance, pos: int, row: Any) -> None:
            if check(self, inst, pos, row):
                hit.append(TupleRef(inst.node.id, inst.i, pos))
                raise _Hit

        theta = self.graph.theta
        sources = [inst for (op, _), inst in engine.instances.items() if op == theta]

        def rank(inst: Instance):
            return (self.provenance.epoch(inst.i, inst.count), inst.i, inst.count)

        tick = self._tick(progress, cancel)

        with self._lock:
            t0 = time.perf_counter()
            entry = self._begin(f"run_until {condition}", engine.instances)
            engine.after_consume = after
            raised: RecordedFailure | None = None
            try:
                engine.run_in_order(rank, sources, tick)
            except _Hit:
                pass
            except RecordedFailure as e:  # post-mortem: the run ends where it failed
                raised = e
            except (Cancelled, ReplayDivergence):
                engine.after_consume = None
                self._abandon(entry)
                raise
            finally:
                engine.after_consume = None
            self._maybe_save()
            result = StepResult("run_until", condition)
            if hit:
                result.note = f"stopped after {self.label(hit[0])}: the condition holds" + check.errors(False)
            elif raised is not None:
                result.ok = False
                result.note = f"the condition never held before {raised.label}, where the run failed: {raised}"
                result.raised = {"tuple": raised.label, "error": raised.error_type, "message": str(raised.error),
                                 "recorded": raised.recorded, "traceback": raised.traceback}
            elif check.raised and check.raised == check.evaluated:
                result.ok = False
                result.note = check.errors(True)
            else:
                result.ok = False
                result.note = "the condition never held before the end of the run" + check.errors(False)
            self._finish(result, entry.position, t0)
            return result

    def _check_fields(self, check, what: str = "condition") -> None:
        """Every `OP.field` and `OP[i].field` of a condition must name a field of OP's state
        where the run starts (else the condition could only ever be false, silently)."""
        for name, index, attr in check.fields:
            op = self.reader.operator(name)
            if index is not None and not 0 <= index < op.instances:
                raise UsageError(f"bad {what} {check.source!r}: {name} has instances 0..{op.instances - 1}, "
                                 f"not {index}")
            insts = [inst for (o, i), inst in self.engine.instances.items()
                     if o == op.id and (index is None or i == index)]
            if attr is None or any(_has_field(inst.runner.op, attr) for inst in insts):
                continue
            fields = sorted({f for inst in insts for f in _fields(inst.runner.op)})
            raise UsageError(f"bad {what} {check.source!r}: unknown field {attr!r} of "
                             f"{name if index is None else f'{name}[{index}]'} "
                             f"(fields: {', '.join(fields) or 'none, its state is empty'})")

    def last_change(self, instance: str, field_path: str, progress=None,
                    cancel: threading.Event | None = None) -> StepResult:
        """Go back to just before the last step that changed `instance`'s `field_path`.

        `field_path` is a dotted path into the state, e.g. "blacklist" or
        "blacklist.Bob". Like UDB's `last`: you land where the original execution
        was just before that step (everything earlier has happened), and the next
        step of that instance redoes the change.
        """
        key = self.parse_instance(instance)
        engine = self.engine
        here = engine.instances[key].count
        current = _lookup(engine.instances[key].state(), field_path)
        # search back from the nearest restore point at or before here (the long actions that
        # brought us here left them along the way), then from earlier ones, then from the start
        at = engine.position
        bases = sorted((s for s in self._restore_points if s.position[key] < here and s.covers(at)),
                       key=lambda s: s.position[key], reverse=True)
        tick = self._tick(progress, cancel)
        with self._lock:
            t0 = time.perf_counter()
            entry = self._begin(f"last_change {instance}.{field_path}", engine.instances)
            found = None
            try:
                until = here   # each base scans only up to where the newer one began: every input once
                for base in [*bases, None]:
                    start = base.position[key] if base is not None else 0
                    if start >= until:
                        continue
                    self._restore_or_reset(base)
                    changes = self._changes_in_order(key, field_path, until, tick)
                    until = start
                    if changes:
                        found = changes[-1]
                        self._restore_or_reset(base)
                        self._run_canonical(stop_before=found[0], tick=tick)
                        break
                    if start == 0:
                        break
            except BaseException:
                self._abandon(entry)
                raise
            if found is None:
                self._abandon(entry)
                return self._refused("last_change", f"{instance}.{field_path}",
                                     f"{instance}.{field_path} never changed before this point "
                                     f"(it is {values.render(current)})")
            self.frames = []
            self._maybe_save()
            result = StepResult("last_change", f"{instance}.{field_path}",
                                note=f"{instance}.{field_path} last changed at "
                                     f"{self.label(TupleRef(*key, found[1]))}; you are just before it")
            self._finish(result, entry.position, t0)
            return result

    def _restore_or_reset(self, base: EngineSnapshot | None) -> None:
        if base is None:
            self.engine.reset()
        else:
            self.engine.restore(base)

    def _run_canonical(self, stop_before: int | None = None, after=None, tick=None,
                       stop_at: TupleRef | None = None) -> None:
        """Go forward in the original execution's order (θ's inputs by epoch, instance,
        position, each followed by what it makes possible), optionally stopping just
        before the `stop_before`-th consumed input (counting from 0), or just before
        the tuple `stop_at` would be consumed."""
        engine = self.engine
        theta = self.graph.theta
        sources = [inst for (op, _), inst in engine.instances.items() if op == theta]
        steps = [0]

        def rank(inst: Instance):
            return (self.provenance.epoch(inst.i, inst.count), inst.i, inst.count)

        def before(inst: Instance, pos: int, ch) -> None:
            if stop_before is not None and steps[0] == stop_before:
                raise _Stop
            if stop_at is not None and pos == stop_at.position and inst.key == (stop_at.op, stop_at.instance):
                raise _Stop
            steps[0] += 1
        engine.on_consume = before
        engine.after_consume = after
        try:
            engine.run_in_order(rank, sources, tick)
        except (_Stop, RecordedFailure):  # (a failed run's order ends where it failed)
            pass
        finally:
            engine.on_consume = None
            engine.after_consume = None

    def _changes_in_order(self, key: Key, field_path: str, until: int, tick=None) -> list[tuple[int, int]]:
        """(global step index, position) of the steps at `key` that changed the field,
        going forward in the original order until `key` has consumed `until` inputs."""
        engine = self.engine
        inst = engine.instances[key]
        prev = [_lookup(inst.state(), field_path)]
        changes: list[tuple[int, int]] = []
        counter = [0]

        def after(i: Instance, pos: int, row: Any) -> None:
            counter[0] += 1
            if (i.node.id, i.i) == key:
                v = _lookup(i.state(), field_path)
                if v != prev[0]:
                    changes.append((counter[0] - 1, pos))
                    prev[0] = v
                if i.count >= until:
                    raise _Stop
        if inst.count < until:
            self._run_canonical(after=after, tick=tick)
        return changes

    # --- evaluating expressions ------------------------------------------------------------

    def evaluate(self, expression: str, row: Any = None) -> list[tuple[str, Any]]:
        """The value of `expression` over the operators' states here: `(who, value)` pairs.

        `OP.field` is each instance of OP in turn (one value per instance, `who` is the
        instance), `OP[i].field` is instance i's, and `row` is the tuple passed in (the
        selected one, in the debugger). An expression that raises gives an `EvalError` as
        its value. Examples: "len(FD.blacklist)", "FE[1].highest.get('Bob')".
        """
        ops = {n.name for n in self.graph.nodes if n.id in self.graph.in_g}
        tree, names, refs, code, builtins = _parse(expression, ops, "expression", ("row",))
        fields = _condition_fields(tree, refs)
        self._check_fields(_Checked(expression, fields), "expression")
        each = sorted({name for name, index, _ in fields if index is None})   # OP.field: each instance
        if len(each) > 1:
            raise UsageError(f"bad expression {expression!r}: {' and '.join(each)} each have several instances; "
                             f"name all but one with OP[i], e.g. {each[1]}[0]")
        with self._lock:
            if each:
                op = self.reader.operator(each[0])
                insts = [self.engine.instances[(op.id, i)] for i in range(op.instances)]
            else:
                insts = [None]
            out = []
            for inst in insts:
                env = {r: _OpView(self, r, inst if inst is not None and r == inst.node.name else None) for r in refs}
                env["row"] = row
                try:
                    value = eval(code, {"__builtins__": builtins}, env)
                except Exception as e:  # noqa: BLE001  (the user's expression)
                    value = EvalError(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
                out.append((inst.label if inst is not None else expression, value))
            return out

    # --- scopes and lineage ------------------------------------------------------------------

    def scope(self, ref: TupleRef | str) -> ScopeNode:
        return self.provenance.scope(self._ref(ref))

    def overlaps(self) -> list[Overlap]:
        return self.provenance.overlaps()

    def trace(self, ref: TupleRef | str) -> list[TupleRef]:
        """The origin chain of a tuple, from the input it came from down to it."""
        ref = self._ref(ref)
        chain = [ref]
        while True:
            o = self.provenance.origin(chain[-1])
            if o is None:
                return list(reversed(chain))
            chain.append(o)

    def payloads(self, refs: set[TupleRef]) -> dict[TupleRef, Any]:
        """The tuples at `refs` (JSON-encoded), by one replay on a separate engine."""
        if not refs:
            return {}
        shadow = Engine(self.reader, trust=True)
        found: dict[TupleRef, Any] = {}

        def after(inst: Instance, pos: int, row: Any) -> None:
            ref = TupleRef(inst.node.id, inst.i, pos)
            if ref in refs:
                found[ref] = None if row is None else values.encode(row)
        shadow.after_consume = after
        targets: dict[Key, int] = {}
        failing = {r for r in refs if shadow.instances[(r.op, r.instance)].failed_at == r.position}
        for r in refs:  # (a failed run's failing tuple is read where it waits: consuming it raises)
            targets[(r.op, r.instance)] = max(targets.get((r.op, r.instance), 0), r.position + (r not in failing))
        for key in sorted(targets, reverse=True):   # consumers first: a producer capped at its own tuple
            if shadow.instances[key].count < targets[key]:   # could not feed a later consumer's
                shadow.advance_to({key: targets[key]}, pull=True)
        for r in failing:
            inst = shadow.instances[(r.op, r.instance)]
            if not inst.available():
                shadow._pull(inst, lambda i: i.failed_at if i.failed_at is not None else i.total)
            row = inst.peek()
            found[r] = None if row is None else values.encode(row)
        return found

    def payload(self, ref: TupleRef | str) -> Any:
        """The tuple itself (JSON-encoded), found by a replay that stops where it is consumed."""
        ref = self._ref(ref)
        key = (ref.op, ref.instance)
        inst = self.engine.instances[key]
        ch = self.provenance.index(*key).channel_at(ref.position)
        if (ch[0], ch[1]) == END:
            return None
        if ch[0] not in inst.internal_ports:
            return values.encode(inst.entry[(ch[0], ch[1])].get(ch[2]))
        for p in self.pending(self.label(key), limit=10_000):
            if p.ref == ref:
                return p.row
        shadow = Engine(self.reader, trust=True)
        shadow.advance_to({key: ref.position}, pull=True)
        q = shadow.instances[key].queues.get((ch[0], ch[1]))
        if not q:
            shadow._pull(shadow.instances[key], lambda i: i.total)
            q = shadow.instances[key].queues.get((ch[0], ch[1]))
        return values.encode(q[0]) if q else None


# --- helpers ---------------------------------------------------------------------------------

def _ticker(progress, cancel, total: int = 0):
    """The engine's progress callback: reports progress and raises `Cancelled` when asked to."""
    done = [0]

    def tick(steps: int) -> None:
        done[0] += steps
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled")
        if progress is not None:
            progress(done[0], total)
    return tick


def _display_diff(prev: dict, change: dict, limit: int = 50) -> dict:
    """A `snapshots.delta` as {field path: [old, new]} (JSON-encoded), changed keys only."""
    out: dict = {}

    def old_field(name: str) -> Any:
        v = prev.get(name, _MISSING)
        if v is _MISSING:
            return _MISSING
        return orjson.loads(v) if isinstance(v, bytes) else v

    for name, new in change["set"].items():
        out[name] = [old_field(name), new]
    for name, (changed, deleted) in change["dict"].items():
        before = prev.get(name) or {}
        keys = list(changed) + list(deleted)
        for x in keys[:limit]:
            out[f"{name}.{x}"] = [values.encode(before[x]) if x in before else _MISSING,
                                  values.encode(changed[x]) if x in changed else _MISSING]
        if len(keys) > limit:
            out[f"{name}.…"] = [f"{len(keys) - limit} more keys changed", None]
    for name in change["del"]:
        out[name] = [old_field(name), _MISSING]
    return out


def _lookup(state: Any, path: str) -> Any:
    value = state
    for part in [p for p in path.split(".") if p]:
        if isinstance(value, dict) and "$dict" in value and len(value) == 1:
            value = {str(k): v for k, v in value["$dict"]}
        if isinstance(value, dict):
            if part not in value:
                return _MISSING
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


_MISSING = "<missing>"


class _OpView:
    """`FD` in a condition: the stepping instance's attributes, or FD[i]'s."""

    def __init__(self, session: DebugSession, name: str, current: Instance | None):
        self._session, self._name, self._current = session, name, current

    def __getattr__(self, attr: str) -> Any:
        if self._current is None:
            raise _NotThisStep
        return getattr(self._current.runner.op, attr)

    def __getitem__(self, i: int) -> Any:
        op = self._session.reader.operator(self._name)
        return _InstanceView(self._session.engine.instances[(op.id, i)])


class _InstanceView:
    def __init__(self, inst: Instance):
        self._inst = inst

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inst.runner.op, attr)


class _NotThisStep(Exception):
    pass


@dataclass
class EvalError:
    """What an evaluated expression raised (shown in place of its value)."""
    message: str

    def __str__(self) -> str:
        return f"raised {self.message}"


@dataclass
class _Checked:
    """What `_check_fields` needs of a compiled condition or expression."""
    source: str
    fields: list


class _Stop(Exception):
    """Ends a forward run at a chosen step."""


_BUILTINS = ("len", "any", "all", "sum", "min", "max", "abs", "str", "int", "float", "isinstance",
             "dict", "list", "set", "tuple", "sorted", "round", "bool")


def _parse(source: str, op_names: set[str], what: str, names_allowed: tuple[str, ...]):
    """(tree, names, operator names used, code, builtins) of a condition or an expression; one
    line naming what is wrong when it does not parse or uses a name it cannot see."""
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as e:
        raise UsageError(f"bad {what} {source!r}: {e.msg}") from None
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    refs = names & op_names
    unknown = names - refs - {*names_allowed, "True", "False", "None", *_BUILTINS}
    if unknown:
        raise UsageError(f"bad {what} {source!r}: unknown name(s) {', '.join(sorted(unknown))}; use "
                         f"{', '.join(names_allowed)} or an operator of G(θ) ({', '.join(sorted(op_names))})")
    code = compile(tree, f"<{what}>", "eval")
    builtins = {k: __builtins__[k] if isinstance(__builtins__, dict) else getattr(__builtins__, k)
                for k in _BUILTINS}
    return tree, names, refs, code, builtins


def _compile_condition(source: str, op_names: set[str]):
    tree, names, refs, code, builtins = _parse(source, op_names, "condition",
                                               ("row", "op", "instance", "position"))

    def check(session: DebugSession, inst: Instance, pos: int, row: Any) -> bool:
        name = inst.node.name
        if refs and name not in refs and "row" not in names:
            return False
        env = {"row": row, "op": name, "instance": inst.i, "position": pos}
        for r in refs:
            env[r] = _OpView(session, r, inst if r == name else None)
        try:
            held = bool(eval(code, {"__builtins__": builtins}, env))
        except _NotThisStep:
            return False
        except Exception as e:  # noqa: BLE001  (the user's expression: any error counts as false, reported once)
            check.evaluated += 1
            check.raised += 1
            if check.first_error is None:
                check.first_error = (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__, pos, name, inst.i)
            return False
        check.evaluated += 1
        return held

    def errors(every: bool) -> str:
        """The first error the condition raised, once, as part of a one-line note."""
        if check.first_error is None:
            return ""
        error, pos, name, i = check.first_error
        if every:
            return (f"the condition {source!r} raised {error} every time it was evaluated ({check.evaluated} "
                    f"times, first after {name}:{i}:{pos}), so it never held")
        return (f" (it raised {error} on {check.raised} of {check.evaluated} evaluations, first after "
                f"{name}:{i}:{pos}; those count as false)")

    check.source = source
    check.evaluated = 0
    check.raised = 0
    check.first_error = None  # reported once, in the step's note
    check.errors = errors
    check.fields = _condition_fields(tree, refs)
    return check


def _condition_fields(tree: ast.AST, refs: set[str]) -> list[tuple[str, int | None, str | None]]:
    """(operator, instance or None, field or None) for each `OP.field`, `OP[i].field`, `OP[i]`."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in refs:
            out.append((node.value.id, None, node.attr))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in refs:
            index = node.slice.value if isinstance(node.slice, ast.Constant) and type(node.slice.value) is int \
                else None
            attr = None
            for parent in ast.walk(tree):
                if isinstance(parent, ast.Attribute) and parent.value is node:
                    attr = parent.attr
            out.append((node.value.id, index, attr))
    return out


def _has_field(op: Any, attr: str) -> bool:
    try:
        getattr(op, attr)
        return True
    except AttributeError:
        return attr in _fields(op)
    except Exception:  # noqa: BLE001  (a property that raises: the field exists)
        return True


def _fields(op: Any) -> list[str]:
    try:
        state = op.state()
    except Exception:  # noqa: BLE001
        return []
    return [str(k) for k in state] if isinstance(state, dict) else []

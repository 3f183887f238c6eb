"""The debug session: the one API over a recorded run, and the facade of replay/.

Jump to an interaction, see what waits on every channel of every instance in
G(θ), and step: *over* a tuple (its whole scope is processed), *into* it (only
its operator processes it; its outputs wait downstream), *out* (the rest of the
current scope), *back* (the position before the last action), *until* a
condition on a tuple or a state holds, or back to the *last change* of a field.
Every action says whether it is possible now, and why not when it is not. The
TUI and the CLI are thin views on this class.

The work is done by one module per concept: `stepping` plans steps from the
logs, `restore_points` moves the engine from the nearest start, `conditions`
compiles conditions and searches forward in the original order, `changes` lists
what an action changed. This class keeps the history (for step back) and the
stack of scopes stepped into, and turns each action into a `StepResult`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson

from ..core import values
from ..core.errors import Cancelled, ReplayDivergence, UsageError, where_raised
from ..core.logs import END
from ..core.scopes import Overlap, Provenance, ScopeNode, TupleRef
from ..core.state_handle import StoreView
from ..store.reader import NumpyLogArrays, RunReader
from . import conditions, partition_store
from .changes import ChangeTracker
from .conditions import Condition, EvalError, Search
from .engine import Engine, Failure, Instance, Key, RecordedFailure, SavedPosition, recorded_failures
from .restore_points import RestorePoints
from .state_paths import lookup_dotted
from .stepping import INTO, OUT, OVER, Availability, Planner
from .verify import differing_state

__all__ = ["Availability", "DebugSession", "EvalError", "Failure", "Pending", "StepResult"]

FRESH = ("jump", "reverse_step")   # actions after which `step_back` steps back over θ's previous input


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
    # where the action stopped: run until, after this tuple (the condition held); last change and
    # the failure, before it (it waits, and stepping it redoes the change or re-raises)
    stopped_at: TupleRef | None = None
    # an action that left the session at an interaction: where the replayed states there differ
    # from the recorded ones (the instance, field, both values: `verify.differing_state`); None
    # where they are equal, or where it stopped between interactions
    differs: dict | None = None
    # an action that left the session past an interaction where it found the replay differing
    # (what `differs` said there): the states shown are computed from that difference on
    diverged: dict | None = None
    # whether `changed` is what the action changed; False after a jump (and the actions made of
    # one: go to before a tuple, to the failure), which lists nothing: its states are new, whole
    diffed: bool = True

    def as_dict(self) -> dict:
        """JSON-able fields (`stopped_at` is a `TupleRef`: name it with `DebugSession.label`)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "stopped_at"}


@dataclass
class _Undo:
    """What a step back needs to undo one action."""

    position: dict[Key, int]            # where the session was before `action`
    scope_stack: list[TupleRef]
    action: str
    saved: SavedPosition | None         # the engine saved there, when that was worth it


def spark_after(reader: RunReader, graph: Any) -> frozenset[int]:
    """The hooked operators that take θ's rows, or rows made from them, through Spark's own
    operators (`plan["spark_edges"]`: from an operator to the source of the one after it), as
    operator ids."""
    edges: dict[int, list[int]] = {}
    for e in reader.plan.get("spark_edges", []):
        fed = [graph.edges[i].dst for i in graph.nodes[e["dst"]].outputs] if e["dst"] < len(graph.nodes) else []
        edges.setdefault(e["src"], []).extend(fed)
    found, todo = set(), [graph.theta]
    while todo:
        for op in edges.get(todo.pop(), []):
            if op not in found:
                found.add(op)
                todo.append(op)
    return frozenset(found)


def _keyed(store: dict) -> dict:
    """A partition's store as `{field: {key: encoded value}}`: its keys as they are (an int, a
    tuple), each value encoded once, so two stores compare key by key (`store_changes`)."""
    return {name: {k: values.encode(v) for k, v in field.items()} if isinstance(field, dict) else {}
            for name, field in store.items()}


def _viewed(op: Any) -> bool:
    """Whether a hooked operator keeps a StatefulProcessor's state view (core/state_handle.py)."""
    return isinstance(getattr(op, "view", None), StoreView)


class DebugSession:
    """One recorded run, replayed locally: where the replay stands, what waits, and every
    action a debugger offers on it. Calls from several threads take `lock` (the TUI's
    workers do); each action leaves the session at a consistent position, or where it
    was when it fails or is cancelled."""

    def __init__(self, run: str | Path | RunReader, *, trust: bool = False):
        self.reader = run if isinstance(run, RunReader) else RunReader(run)
        self.lock = threading.RLock()
        self.scope_stack: list[TupleRef] = []    # the scopes stepped into, innermost last
        self._closed_scope: TupleRef | None = None   # the last of them found complete, since the last action
        self.history: list[_Undo] = []
        self.last_result: StepResult | None = None
        self._jumped: int | None = None            # the interaction last jumped to (see `at_interaction`)
        self._compared: dict[int, dict | None] = {}   # interaction -> where its replayed states differ
        self._cut_positions: dict[Key, list[int | None]] | None = None   # (`_cuts`)
        self._build(Engine(self.reader, trust=trust))
        self.failure: Failure | None = self._failure()

    def _build(self, engine: Engine) -> None:
        """The engine, and everything that works on it."""
        self.engine = engine
        self.graph = engine.graph
        self.provenance = Provenance(self.graph, self._logs, self._barriers(), arrays=NumpyLogArrays)
        self.points = RestorePoints(engine)
        self.planner = Planner(self.graph, self.provenance, lambda: self.engine.position)
        self.search = Search(engine, self.provenance, self.points, self._cuts(), spark_after(self.reader, engine.graph))
        self.changes = ChangeTracker(engine)
        self._chains: dict[Key, list[Key] | None] = {}   # `partition_chain`, per instance
        self._stores_before: dict[Key, dict] = {}   # a step's streaming tasks: their partition's store before it

    # --- set-up -------------------------------------------------------------------

    def _logs(self, op: int, i: int):
        inst = self.engine.instances.get((op, i))
        if inst is not None:
            return inst.runs, inst.counts, inst.dests
        # outside G(θ): the logs `tt record --lineage` kept, for lineage (none without it)
        r, node = self.reader, self.graph.nodes[op]
        return (r.input_runs(op, i), r.output_counts(op, i),
                {e: r.dests(op, i, e) for e in node.outputs if self.graph.edges[e].shuffle})

    def _barriers(self) -> dict[Key, list[int]]:
        theta = self.graph.theta
        return {key: [p for p in cut if p is not None] for key, cut in self._cuts().items() if key[0] == theta}

    def _cuts(self) -> dict[Key, list[int | None]]:
        """Every instance's position at each interaction after the start (the end aside), in
        their order: None where an interaction lists it not. (A forward run keeps each instance
        within the epoch θ is in: `Search.in_order`.)"""
        if self._cut_positions is None:
            inters = [x for x in self.reader.interactions() if x.k != 0 and x.trigger != "end"]
            out: dict[Key, list[int | None]] = {key: [None] * len(inters) for key in self.engine.instances}
            for e, inter in enumerate(inters):
                for key, at in (self.reader.instances_at(inter.k) or {}).items():
                    if key in out:
                        out[key][e] = at.position
            self._cut_positions = out
        return self._cut_positions

    def _failure(self) -> Failure | None:
        """The operator failure a failed run's log ends with, if any (the first one in G(θ), when
        several tasks failed; every failing instance re-raises when replay reaches it)."""
        failures = recorded_failures(self.engine)
        f = next((f for f in failures if f.in_g), failures[0] if failures else None)
        if f is not None and not f.in_g:
            f.reason += " to step the failing tuple"
        return f

    def failure_targets(self) -> dict[Key, int]:
        """Where the recorded run stopped: every instance as far as its log goes, and each
        failed instance just before the input it raised on (which then waits there)."""
        targets = {}
        for key, inst in self.engine.instances.items():
            targets[key] = inst.failed_at if inst.failed_at is not None else inst.total
        return targets

    def refresh(self) -> bool:
        """Pick up what a live recording wrote since; True if new interactions completed.

        The engine is rebuilt over the longer logs and put back where it was.
        """
        with self.lock:
            before = [i.k for i in self.reader.interactions()]
            self.reader.refresh()
            after = [i.k for i in self.reader.interactions()]
            if after == before:
                return False
            position = self.engine.position
            self._build(Engine(self.reader, trust=True))   # (trust was established when the session opened)
            self.history = []
            self.engine.advance_to({k: v for k, v in position.items() if k in self.engine.instances})
            return True

    # --- names --------------------------------------------------------------------

    def label(self, key_or_ref) -> str:
        if isinstance(key_or_ref, TupleRef):
            return key_or_ref.label(self.graph)
        op, i = key_or_ref
        return f"{self.graph.nodes[op].name}:{i}"

    def parse_ref(self, text: str, lineage: bool = False) -> TupleRef:
        """'FE:0:42' -> input #42 of FE's instance 0. `lineage`: also a tuple of an operator
        outside G(θ) that kept its logs (`tt record --lineage`), which lineage can trace."""
        parts = text.strip().split(":")
        if len(parts) != 3:
            raise UsageError(f"bad tuple {text!r}; write OP:INSTANCE:POSITION, e.g. FE:0:42")
        op = self.reader.operator(parts[0])
        logged = lineage and op.id in self.graph.lineage
        if not op.in_g and not logged:
            if lineage:
                raise UsageError(f"{op.name} is not in G(θ) (θ = {self.reader.theta.name}): its tuples are not "
                                 f"logged; record with --lineage to trace them, or choose among the rows it sent "
                                 f"into G(θ) with `tt lineage RUN {op.name} --where EXPR`")
            raise UsageError(f"{op.name} is not in G(θ) (θ = {self.reader.theta.name}); it cannot be stepped")
        try:
            i, pos = int(parts[1]), int(parts[2])
        except ValueError:
            raise UsageError(f"bad tuple {text!r}; instance and position are numbers") from None
        if not 0 <= i < op.instances:
            raise UsageError(f"{op.name} has instances 0..{op.instances - 1}, not {i}")
        inst = self.engine.instances[(op.id, i)] if op.in_g else None
        total = inst.total if inst is not None else self.provenance.index(op.id, i).total
        if not 0 <= pos < total:
            ends = inst is not None and bool(inst.runs) and (inst.runs[-1][0], inst.runs[-1][1]) == END
            inputs = "no inputs" if total - ends <= 0 else f"inputs #0..#{total - ends - 1}"
            raise UsageError(f"{op.name}:{i} has {inputs}" + (f" and its end of input #{total - 1}" if ends else "")
                             + f", not #{pos}")
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
              if all(pos[key] == p.position for key, p in self.reader.instances_at(inter.k).items())]
        if not at:
            return None
        return self._jumped if self._jumped in at else at[0]

    def states(self) -> dict[str, Any]:
        return {self.label(k): self.instance_state(k) for k in self.engine.instances}

    def state(self, instance: str) -> Any:
        return self.instance_state(self.parse_instance(instance))

    def instance_state(self, key: Key) -> Any:
        """An instance's state as the debugger shows it: its operator's, and for a streaming
        StatefulProcessor's (or applyInPandasWithState function's) task after its partition's
        first micro-batch, the partition's store over its micro-batches so far
        (replay/partition_store.py, under `partition_store.FIELD`)."""
        state = self.engine.instances[key].state()
        chain = self.partition_chain(key)
        if chain is not None and isinstance(state, dict):
            state[partition_store.FIELD] = orjson.loads(values.dumps(self._store_of(chain)))
        return state

    def _store_of(self, chain: list[Key]) -> dict:
        """The partition's store as the tasks of `chain` (oldest first) left it."""
        ops = [self.engine.instances[k].runner.op for k in chain]
        return (partition_store.partition_store([op.view for op in ops]) if _viewed(ops[-1])
                else partition_store.group_state_store([op.store_layer() for op in ops]))

    def partition_chain(self, key: Key) -> list[Key] | None:
        """Of a streaming StatefulProcessor's task (one micro-batch on one partition), the tasks
        of that partition up to its micro-batch, oldest first, itself last; None for any other
        instance, and for a partition's first micro-batch (its own view is the whole store). An
        applyInPandasWithState function's task of the timed-out keys (the micro-batch's second
        Python run on the partition, `[batch, partition, 1]`) comes after the one of the keys
        with data, as Spark runs them."""
        if key in self._chains:   # (a task's chain never changes: later micro-batches come after it)
            return self._chains[key]
        inst, chain = self.engine.instances.get(key), []
        op = inst.runner.op if inst is not None else None
        if _viewed(op) or hasattr(op, "store_layer"):
            slots = (self.reader.plan.get("micro_batches") or {}).get(inst.node.name) or []
            node_id, i = key
            if i < len(slots):
                slot = slots[i]
                if _viewed(op):   # a processor's: the same partition and Python run
                    def mine(s): return s[1:] == slot[1:] and s[0] <= slot[0]
                    def order(s): return s[0]
                else:   # a GroupState function's: the partition's runs, the timed-out keys' after
                    def mine(s): return s[1] == slot[1] and (s[0], s[2:]) <= (slot[0], slot[2:])
                    def order(s): return s[0], s[2:]
                chain = sorted((j for j, s in enumerate(slots) if mine(s) and (node_id, j) in self.engine.instances),
                               key=lambda j: (order(slots[j]), j))
        self._chains[key] = [(key[0], j) for j in chain] if len(chain) > 1 else None
        return self._chains[key]

    def progress(self) -> dict:
        """How far into the run the session stands (for progress lines), in tuples consumed."""
        done = sum(inst.tuples for inst in self.engine.instances.values())
        total = sum(inst.tuple_total for inst in self.engine.instances.values())
        return {"interaction": self.at_interaction(), "tuples": done, "total": total,
                "percent": 100.0 * done / total if total else 100.0}

    # --- what waits -----------------------------------------------------------------

    def waiting_row(self, ref: TupleRef | str) -> Any:
        """The value of the tuple `ref` waiting at its instance, as its operator will get it (a
        DataFrame, not the line that shows it: `e`'s `row` in tt debug); None where it waits no more."""
        ref = self._ref(ref)
        inst = self.engine.instances.get((ref.op, ref.instance))
        if inst is None or ref.position < inst.count:
            return None
        waiting = self.pending(self.label((ref.op, ref.instance)), limit=ref.position - inst.count + 1, raw=True)
        return next((p.row for p in waiting if p.ref == ref), None)

    def pending(self, instance: str | None = None, limit: int = 20, raw: bool = False) -> list[Pending]:
        """Per instance, the tuples waiting on its channels, in the order it will consume them
        (`raw`: each row as its operator will get it, not encoded to be shown)."""
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
                    row = inst.entry[ch].get(idx.channel_at(pos)[2])
                sender = self.label((self.graph.edges[inst.node.inputs[ch[0]]].src, ch[1])) if internal \
                    else "recorded"
                out.append(Pending(ref, self.label(ref), ch[0], sender, self.planner.free(ref),
                                   row if raw else values.encode_readable(row), pos == inst.count))
        return out

    # --- what each step can do (planned once per position) -------------------------------

    def can_step_into(self, ref: TupleRef | str) -> Availability:
        return self.planner.plan(INTO, self._ref(ref)).availability

    def can_step_over(self, ref: TupleRef | str) -> Availability:
        return self.planner.plan(OVER, self._ref(ref)).availability

    def can_step_out(self) -> Availability:
        scope = self.open_scope()
        if scope is None:
            return Availability(False, self._no_scope())
        return self.planner.plan(OUT, scope).availability

    def _no_scope(self) -> str:
        """Why there is no scope to step out of. A tuple stepped into whose outputs went nowhere
        tt follows (a hooked operator's go to Spark) has a complete scope at once: "step into a
        tuple first", said right after one, sent the user in a circle."""
        closed = self._closed_scope
        if closed is None:
            return "not inside a tuple's scope (step into a tuple first)"
        return f"not inside a tuple's scope: {self.label(closed)}'s is complete (nothing of it waits downstream)"

    def can_step_back(self) -> Availability:
        if self._undoable() is not None or self._previous_theta_input() is not None:
            return Availability(True)
        return Availability(False, "at the start of the run: nothing to step back over")

    def open_scope(self) -> TupleRef | None:
        """The innermost stepped-into tuple whose scope is not complete yet."""
        while self.scope_stack:
            ref = self.scope_stack[-1]
            if self.planner.remaining(ref):
                return ref
            self.scope_stack.pop()  # that scope was completed by other steps
            self._closed_scope = ref
        return None

    def _undoable(self) -> _Undo | None:
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

    # --- acting ---------------------------------------------------------------------------

    def jump(self, k: int, progress: Callable[[int, int], None] | None = None,
             cancel: threading.Event | None = None) -> StepResult:
        at = self.reader.instances_at(k)
        if at is None:
            raise UsageError(self.reader.no_states_at(k))
        targets = {key: a.position for key, a in at.items()}
        self._jumped = k
        return self._act("jump", str(k), targets, None, progress=progress, cancel=cancel, clear_scopes=True)

    def _compare_recorded(self, result: StepResult, k: int) -> None:
        """Compare the replayed states at interaction k, where an action left the session, with
        the recorded ones, once a session (a replay is deterministic, or it is this that says
        otherwise), and say where they differ: what replay computes is what the debugger shows,
        and a run that replays otherwise than it ran (an environment variable or a file its code
        reads, an installed package changed since, hash order) must not look
        like the run. Any action that lands on an interaction compares (a jump, a step, a run
        until, a step back), as early as the session can tell. W2 at scale 1, its last
        interaction: 1–2 s, beside a minute of replay."""
        with self.lock:   # (compared where the action left the engine)
            if k not in self._compared:
                self._compared[k] = differing_state(self.reader, self.engine, k)
        differs = self._compared[k]
        if differs is not None:
            result.differs = differs
            said = (f"the replay differs from the recording: {differs['error']}; what is shown is not "
                    f"what ran (`tt verify {self.reader.path}` finds the input where they part)")
            result.note = f"{said}; {result.note}" if result.note else said

    def _past_divergence(self) -> dict | None:
        """The first interaction this session found replaying otherwise than recorded
        (`_compare_recorded`) whose differing instance now stands at or past its position there:
        a step after a jump that differed leaves the difference in place, and must not read as
        a replay of the run."""
        for k, differs in sorted(self._compared.items()):
            if differs is None:
                continue
            key = (self.reader.operator(differs["op"]).id, differs["instance"])
            at = (self.reader.instances_at(k) or {}).get(key)
            if at is not None and self.engine.position.get(key, -1) >= at.position:
                return differs
        return None

    def goto_before(self, ref: TupleRef | str, progress: Callable[[int, int], None] | None = None,
                    cancel: threading.Event | None = None) -> StepResult:
        """Just before `ref` is consumed, as a user would get there by hand: the last complete
        interaction before it, then its instance alone forward to it (`ref` then waits there).
        Only for an instance fed from outside G(θ) alone (θ's, or one that takes free tuples
        only): any other stops at the interaction, and the result's note says how far ahead
        `ref` is. (`w` in tt debug: Enter on a lineage leaf.)"""
        ref = self.parse_ref(ref) if isinstance(ref, str) else ref
        key, label = (ref.op, ref.instance), self.label(ref)
        inst = self.engine.instances.get(key)
        if inst is None:
            raise UsageError(f"{label} is not a tuple of an instance in G(θ)")
        before = [(i.k, snap) for i in self.reader.interactions()
                  if (snap := self.reader.instances_at(i.k)) is not None and snap[key].position <= ref.position]
        if not before:
            raise UsageError(f"no complete interaction comes before {label}")
        k, snap = before[-1]
        targets = {kk: a.position for kk, a in snap.items()}
        graph = self.engine.graph
        alone = not any(graph.edges[e].src in graph.in_g for e in graph.nodes[ref.op].inputs)
        if alone and ref.position <= inst.total:
            targets[key] = ref.position
        self._jumped = k if targets[key] == snap[key].position else None
        result = self._act("jump", label, targets, None, progress=progress, cancel=cancel, clear_scopes=True)
        result.action = "goto_before"
        result.stopped_at = ref
        ahead = ref.position - targets[key]
        where = self.label(key)
        result.note = (f"{label} waits at {where}: interaction {k}, then {where} alone up to it" if not ahead else
                       f"interaction {k}, the last before {label}; it waits behind {ahead} tuple(s) of {where} "
                       f"(run until, c, or step to reach it)")
        return result

    def step_into(self, ref: TupleRef | str) -> StepResult:
        plan = self.planner.plan(INTO, self._ref(ref))
        label = self.label(plan.ref)
        if not plan.ok:
            return self._refused("step_into", label, plan.availability.reason)
        result = self._act("step_into", label, plan.targets, plan.allowed)
        if result.raised is None:
            self.scope_stack.append(plan.ref)
        return result

    def step_over(self, ref: TupleRef | str) -> StepResult:
        plan = self.planner.plan(OVER, self._ref(ref))
        label = self.label(plan.ref)
        if not plan.ok:
            return self._refused("step_over", label, plan.availability.reason)
        return self._act("step_over", label, plan.targets, plan.allowed)

    def step_out(self) -> StepResult:
        scope = self.open_scope()
        if scope is None:
            return self._refused("step_out", None, self._no_scope())
        plan = self.planner.plan(OUT, scope)
        if not plan.ok:
            return self._refused("step_out", None, plan.availability.reason)
        result = self._act("step_out", self.label(scope), plan.targets, plan.allowed)
        if self.scope_stack and self.scope_stack[-1] == scope:
            self.scope_stack.pop()
        return result

    def step_back(self, progress=None, cancel: threading.Event | None = None) -> StepResult:
        """Undo the last action (a step, a run until, a last change); at a fresh position (after
        a jump, or after stepping back that way) step back over θ's previous input instead, as
        rr's reverse-next does from any point."""
        if self._undoable() is None:
            return self._reverse_step(progress, cancel)
        t0 = time.perf_counter()
        before = dict(self.engine.position)
        undo = self.history.pop()
        self._return_to(undo)
        self.scope_stack = list(undo.scope_stack)
        self._closed_scope = None
        result = StepResult("step_back", undo.action, note=f"back to before {undo.action}")
        self._finish(result, before, t0)
        return result

    def _reverse_step(self, progress=None, cancel=None) -> StepResult:
        """Go to just before θ's previous input (in the original order), everything before
        it processed: replay from the nearest start (saved in memory, a checkpoint, or the
        start of the run) and stop there."""
        ref = self._previous_theta_input()
        if ref is None:
            return self._refused("step_back", None, "at the start of the run: nothing to step back over")
        label = self.label(ref)
        with self.lock:
            t0 = time.perf_counter()
            undo = self._begin(f"reverse_step {label}", self.engine.instances)
            bound = dict(undo.position)
            bound[(ref.op, ref.instance)] = ref.position
            try:
                start = self.points.restore_nearest(bound, in_order=True)
                self.search.in_order(stop_at=ref, tick=self.points.tick(progress, cancel))
            except BaseException:
                self._abandon(undo)
                raise
            self.scope_stack = []
            self._closed_scope = None
            self.points.maybe_save()
            result = StepResult("step_back", f"step_over {label}",
                                note=f"back to just before {label}: replayed from {start}")
            self._finish(result, undo.position, t0)
            return result

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
                           clear_scopes=True)
        result.action = "goto_failure"
        result.stopped_at = self.parse_ref(f.label)
        where = where_raised(f.traceback)
        result.note = (f"the run failed here: {f.label} raised {f.error}" + (f" at {where}" if where else "")
                       + "; step into it to re-raise it (the state shown is from just before it)")
        return result

    def run_until(self, condition: str, progress=None, cancel=None) -> StepResult:
        """Go forward, step by step, until `condition` holds after a step.

        The condition sees `row` (the tuple just consumed), `op`, `instance`,
        `position`, and every operator of G(θ) by name: `FD.blacklist` is the
        stepping instance's field when an FD instance stepped, `FD[1].blacklist`
        is instance 1's. Example: "'Bob' in FD.blacklist".
        """
        parsed = conditions.parse(condition, self._operator_names(), "condition",
                                  ("row", "op", "instance", "position"))
        conditions.check_fields(parsed, self.engine, self.reader.operator, "condition")
        check = Condition(parsed, self._instance)
        with self.lock:
            t0 = time.perf_counter()
            held = self._holds_here(condition, parsed)
            undo = self._begin(f"run_until {condition}", self.engine.instances)
            hit, raised = None, None
            try:
                hit = self.search.until(check, self.points.tick(progress, cancel))
            except RecordedFailure as e:  # post-mortem: the run ends where it failed
                raised = e
            except (Cancelled, ReplayDivergence):
                self._abandon(undo)
                raise
            self.points.maybe_save()
            result = StepResult("run_until", condition, stopped_at=hit)
            if hit is not None:
                result.note = f"stopped after {self.label(hit)}: the condition holds" + check.errors(False)
                if held is not None:   # (a step on found it again: not where it came true)
                    result.note += (f"; it held already where this run started ({held}): the last change of "
                                    f"what it reads finds where it came true")
            elif raised is not None:
                result.ok = False
                result.note = f"the condition never held before {raised.label}, where the run failed: {raised}"
                result.raised = _raised(raised)
            elif check.always_raised:
                result.ok = False
                result.note = check.errors(True)
            elif not check.steps:   # (it is checked after a step: it may hold here, where no step is left)
                result.ok = False
                result.note = "no tuple is left to step here: the run ends at this position"
            else:
                result.ok = False
                result.note = "the condition never held before the end of the run" + check.errors(False)
            self._finish(result, undo.position, t0)
            return result

    def _holds_here(self, condition: str, parsed: Any) -> str | None:
        """Where `condition` holds at this position already (an instance, or the expression), for
        one that reads states alone (not the step's `row`, `op`, ...); None otherwise."""
        if not parsed.operators or parsed.names & {"row", "op", "instance", "position"}:
            return None
        try:
            found = self.evaluate(condition)
        except UsageError:   # (several operators each by OP.field: a step names the instance)
            return None
        return next((who for who, value in found if not isinstance(value, EvalError) and value), None)

    def last_change(self, instance: str, field_path: str, progress=None,
                    cancel: threading.Event | None = None) -> StepResult:
        """Go back to just before the last step that changed `instance`'s `field_path`.

        `field_path` is a dotted path into the state, e.g. "blacklist" or
        "blacklist.Bob". Like UDB's `last`: you land where the original execution
        was just before that step (everything earlier has happened), and the next
        step of that instance redoes the change.
        """
        key = self.parse_instance(instance)
        target = f"{instance}.{field_path}"
        if field_path.split(".")[0] == partition_store.FIELD:
            return self._refused("last_change", target, f"{partition_store.FIELD} is put together from the views of "
                                                        f"the partition's micro-batches, for reading: go back to the "
                                                        f"last change of a state variable of one micro-batch's task")
        state = self.engine.instances[key].state()
        top = field_path.split(".")[0]
        fields = conditions.unknown_field([self.engine.instances[key].runner.op], top) if state else None
        if fields is not None:   # (as a condition naming it is refused)
            raise UsageError(f"unknown field {top!r} of {instance} (fields: {', '.join(map(str, fields))})")
        current = lookup_dotted(state, field_path)
        with self.lock:
            t0 = time.perf_counter()
            undo = self._begin(f"last_change {target}", self.engine.instances)
            try:
                found = self.search.last_change(key, field_path, self.points.tick(progress, cancel))
            except BaseException:
                self._abandon(undo)
                raise
            if found is None:
                self._abandon(undo)
                return self._refused("last_change", target, f"{target} never changed before this point "
                                                            f"(it is {values.render(current)})")
            self.scope_stack = []
            self._closed_scope = None
            self.points.maybe_save()
            redo = TupleRef(*key, found)
            result = StepResult("last_change", target, stopped_at=redo,
                                note=f"{target} last changed at {self.label(redo)}; you are just before it")
            self._finish(result, undo.position, t0)
            return result

    def evaluate(self, expression: str, row: Any = None) -> list[tuple[str, Any]]:
        """The value of `expression` over the operators' states here: `(who, value)` pairs.

        `OP.field` is each instance of OP in turn (one value per instance, `who` is the
        instance), `OP[i].field` is instance i's, and `row` is the tuple passed in (the
        selected one, in the debugger). An expression that raises gives an `EvalError` as
        its value. Examples: "len(FD.blacklist)", "FE[1].highest.get('Bob')".
        """
        parsed = conditions.parse(expression, self._operator_names(), "expression", ("row",))
        conditions.check_fields(parsed, self.engine, self.reader.operator, "expression")
        each = sorted({name for name, index, _ in parsed.fields if index is None})   # OP.field: each instance
        if len(each) > 1:
            raise UsageError(f"bad expression {expression!r}: {' and '.join(each)} each have several instances; "
                             f"name all but one with OP[i], e.g. {each[1]}[0]")
        with self.lock:
            if each:
                op = self.reader.operator(each[0])
                insts = [self.engine.instances[(op.id, i)] for i in range(op.instances)]
            else:
                insts = [None]
            return conditions.evaluate(parsed, insts, self._instance, row)

    def _operator_names(self) -> set[str]:
        return {n.name for n in self.graph.nodes if n.id in self.graph.in_g}

    def _instance(self, name: str, i: int) -> Instance:
        return self.engine.instances[(self.reader.operator(name).id, i)]

    # --- the history, and a result per action -------------------------------------------------

    def _act(self, action: str, target: str | None, targets: dict[Key, int], allowed: set[TupleRef] | None, *,
             progress=None, cancel=None, clear_scopes=False) -> StepResult:
        """Move to `targets`; a step (not a jump) goes forward from here and lists what it consumed."""
        with self.lock:
            t0 = time.perf_counter()
            jump = action == "jump"
            undo = self._begin(f"{action} {target or ''}".strip(), () if jump else targets, stores=not jump)
            consumed: list[TupleRef] = []

            def note(inst: Instance, pos: int, ch) -> None:
                consumed.append(TupleRef(inst.node.id, inst.i, pos))
            raised: RecordedFailure | None = None
            try:   # (a jump reports no tuples: its replay loop runs without the hook)
                with self.engine.hooks(on_consume=None if jump else note):
                    self.points.move_to(targets, progress, cancel, from_here=not jump)
            except RecordedFailure as e:  # post-mortem: the failing tuple raised again; the engine
                raised = e                # stands just before it, as recorded
                if consumed and self.label(consumed[-1]) == e.label:
                    consumed.pop()
            except (Cancelled, ReplayDivergence):
                self._abandon(undo)
                raise
            if raised is not None and self.engine.position == undo.position:
                self.history.pop()  # nothing moved: nothing to step back from
            self.points.measured(len(consumed), time.perf_counter() - t0)
            if jump:
                self.points.maybe_save()  # now, while a long action is under way, not at the next step
            if clear_scopes:
                self.scope_stack = []
                self._closed_scope = None
            result = StepResult(action, target)
            if raised is not None:
                result.ok = False
                result.note = str(raised) + ("; the state is as it was just before it" if not consumed else
                                             "; stopped just before it")
                result.raised = _raised(raised)
            if not jump:
                result.consumed = [self.label(r) for r in consumed]
                result.free_consumed = [self.label(r) for r in consumed if allowed is not None and r not in allowed]
                if result.free_consumed:
                    result.note = (f"consumed as logged: {len(result.free_consumed)} tuple(s) from outside "
                                   f"θ's scopes (e.g. {result.free_consumed[0]})")
            self._finish(result, undo.position, t0)
            return result

    def _refused(self, action: str, target: str | None, reason: str) -> StepResult:
        result = StepResult(action, target, ok=False, note=reason, position=self.position,
                            interaction=self.at_interaction())
        self.last_result = result
        return result

    def _begin(self, label: str, moving=(), stores: bool = False) -> _Undo:
        """Remember where the session is before an action, and the states of the instances it moves;
        `stores`: and the partition stores of the streaming tasks among them (a step's targets,
        whose changes read their store; a forward run's tasks keep each its own view)."""
        undo = _Undo(dict(self.engine.position), list(self.scope_stack), label, self.points.maybe_save())
        self.history.append(undo)
        self._closed_scope = None
        for key in moving:
            self.changes.remember(key)
        self._stores_before = {}
        if stores:
            for key in moving:
                chain = self.partition_chain(key)
                if chain is not None:
                    self._stores_before[key] = _keyed(self._store_of(chain))
        return undo

    def _abandon(self, undo: _Undo) -> None:
        """An action was cancelled or diverged: back to where it started, as if never taken."""
        self.history.pop()
        self._return_to(undo)

    def _return_to(self, undo: _Undo) -> None:
        if undo.saved is not None:
            self.points.restore(undo.saved, as_base=True)
        else:
            self.points.move_to(undo.position)

    def _finish(self, result: StepResult, before: dict[Key, int], t0: float) -> None:
        """Fill in the result: what changed in the states (changed keys only), where we are."""
        result.diffed = result.action != "jump"
        result.changed = self.changes.changed(before, self.label, diff=result.diffed)
        for key, store in self._stores_before.items():   # a streaming task's step: its partition's store
            if result.diffed and self.engine.position[key] != before[key]:
                label, after = self.label(key), _keyed(self._store_of(self.partition_chain(key)))
                changed = partition_store.store_changes(result.changed.get(label, {}), store, after)
                if changed:
                    result.changed[label] = changed
                else:
                    result.changed.pop(label, None)
        self._stores_before = {}
        result.position = self.position
        result.interaction = self.at_interaction()
        if result.ok and result.interaction is not None:
            self._compare_recorded(result, result.interaction)
        if result.ok and result.differs is None:
            result.diverged = self._past_divergence()
            if result.diverged is not None:
                said = (f"past interaction {result.diverged['k']}, where the replay differs from the recording "
                        f"({result.diverged['op']}:{result.diverged['instance']}): what is shown may not be what ran")
                result.note = f"{said}; {result.note}" if result.note else said
        result.seconds = round(time.perf_counter() - t0, 4)
        self.last_result = result

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
                found[ref] = None if row is None else values.encode_readable(row)
        targets: dict[Key, int] = {}
        failing = {r for r in refs if shadow.instances[(r.op, r.instance)].failed_at == r.position}
        for r in refs:  # (a failed run's failing tuple is read where it waits: consuming it raises)
            targets[(r.op, r.instance)] = max(targets.get((r.op, r.instance), 0), r.position + (r not in failing))
        with shadow.hooks(after_consume=after):
            for key in sorted(targets, reverse=True):   # consumers first: a producer capped at its own tuple
                if shadow.instances[key].count < targets[key]:   # could not feed a later consumer's
                    shadow.advance_to({key: targets[key]}, pull=True)
        for r in failing:
            inst = shadow.instances[(r.op, r.instance)]
            if not inst.available():
                shadow._pull(inst, lambda i: i.failed_at if i.failed_at is not None else i.total)
            row = inst.peek()
            found[r] = None if row is None else values.encode_readable(row)
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
            return values.encode_readable(inst.entry[(ch[0], ch[1])].get(ch[2]))
        for p in self.pending(self.label(key), limit=10_000):
            if p.ref == ref:
                return p.row
        shadow = Engine(self.reader, trust=True)
        shadow.advance_to({key: ref.position}, pull=True)
        q = shadow.instances[key].queues.get((ch[0], ch[1]))
        if not q:
            shadow._pull(shadow.instances[key], lambda i: i.total)
            q = shadow.instances[key].queues.get((ch[0], ch[1]))
        return values.encode_readable(q[0]) if q else None


def _raised(e: RecordedFailure) -> dict:
    """A re-raised failure, as a result reports it."""
    return {"tuple": e.label, "error": e.error_type, "message": str(e.error), "recorded": e.recorded,
            "traceback": e.traceback}

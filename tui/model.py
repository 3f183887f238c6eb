"""What the debugger's widgets show, computed off the UI thread from the debug session.

The TUI is a thin view on `DebugSession`: every call into the session goes
through `Model.call`, which hands it to the one engine thread (`EngineThread`)
and holds the session's lock there, so actions run one at a time, always on the
same thread, while workers wait for them and the UI keeps drawing. After each
action the model builds a `Shown` (position, pending tuples, what each step
key can do and why not, the selected operator's states and what changed in
them, the selected tuple's scope) that the widgets render without touching the
session.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..core.scopes import Overlap, ScopeNode, TupleRef, operator_of
from ..replay import state_paths
from .engine_thread import EngineThread

if TYPE_CHECKING:  # the session (and the replay engine) load on the engine thread, after the first screen
    from ..replay.session import Availability, DebugSession, Pending, StepResult

PENDING_PER_INSTANCE = 12
SCOPE_LIMIT = 400
OVERLAP_TUPLE_LIMIT = 3_000_000   # above this many logged tuples, overlaps are computed on request only


@dataclass
class ScopeLine:
    ref: TupleRef
    label: str
    depth: int
    consumed: bool
    overlap: str = ""           # why this tuple is in an overlap, if it is


@dataclass
class Shown:
    """One position of the session, as the widgets show it."""

    position: dict[str, int]                    # instance label -> inputs consumed (the END step included)
    counts: dict[str, int]                      # operator name -> tuples consumed (all instances, no END step)
    progress: dict
    interaction: int | None                     # the interaction the session is at (`DebugSession.at_interaction`)
    pending: list[Pending]                      # the first `PENDING_PER_INSTANCE` of each instance
    to_come: dict[str, int]                     # instance label -> inputs it has still to consume (END included)
    selected: TupleRef | None
    selected_label: str | None
    default: TupleRef | None                    # where n/s act when nothing else is selected
    availability: dict[str, Availability]       # over, into, out, back
    op: str | None                              # operator whose state is shown
    states: dict[str, Any]                      # its instances' states
    changes: dict[str, dict[tuple, tuple]]      # instance -> path -> (old, new)
    scope_stack: list[str]                      # the scopes stepped into, outermost first
    scope: list[ScopeLine] = field(default_factory=list)
    scope_truncated: bool = False
    overlaps: list[Overlap] | None = None
    result: StepResult | None = None


def _on_engine(method):
    """Run the method through `Model.call`: on the engine thread, under the session's lock."""
    @functools.wraps(method)
    def run(self: Model, *args: Any, **kwargs: Any) -> Any:
        return self.call(lambda _session: method(self, *args, **kwargs))
    return run


class Model:
    """The debugger's side of the session: runs one action at a time (on the engine thread, under the
    session's lock, whichever worker asks) and builds what the widgets show after it (`Shown`),
    keeping the selection a step back should restore."""

    def __init__(self, session: DebugSession, engine_thread: EngineThread | None = None):
        """`engine_thread`: the thread that built `session` (the app's); None when the caller is that thread
        and drives the session itself (a script, a benchmark)."""
        self.session = session
        self.engine_thread = engine_thread
        self.shown: Shown | None = None
        self.overlaps: list[Overlap] | None = None
        self._theta = session.graph.theta
        self._selections: list[tuple[str | None, TupleRef | None]] = []   # per history entry: the selection before it

    # --- session access -----------------------------------------------------------------------

    def call(self, fn: Callable[[DebugSession], Any]) -> Any:
        """`fn(session)` on the engine thread, under the session's lock (`tt replay` and others share it);
        the caller waits for its result, or its exception re-raised."""
        if self.engine_thread is None:
            return self._locked(fn)
        return self.engine_thread.call(self._locked, fn)

    def _locked(self, fn: Callable[[DebugSession], Any]) -> Any:
        with self.session.lock:
            return fn(self.session)

    @_on_engine
    def build(self, op: str | None, want: TupleRef | None, result: StepResult | None = None,
              keep_changes: bool = False) -> Shown:
        """What to show at the session's current position."""
        s = self.session
        prev = self.shown
        position = s.position
        counts = self._tuples()
        progress = s.progress()
        pending = s.pending(limit=PENDING_PER_INSTANCE)
        default = self._default(pending)
        refs = {p.ref for p in pending}
        selected = want if want in refs else default
        if op is None:
            op = s.graph.nodes[self._theta].name
        states = self._states(op, prev, result)
        if keep_changes and prev is not None and prev.op == op:
            changes = prev.changes
        elif result is not None and result.diffed:
            changes = _from_result(result, op)   # the session diffed the states it moved
        elif prev is not None and prev.op == op and prev.position != position:
            changes = {inst: state_paths.diff(prev.states.get(inst), st) for inst, st in states.items()
                       if inst in prev.states and prev.position.get(inst) != position.get(inst)}
            changes = {k: v for k, v in changes.items() if v}
        else:
            changes = {}
        to_come = {inst.label: inst.total - inst.count for inst in s.engine.instances.values()}
        shown = Shown(position=position, counts=counts, progress=progress, interaction=progress["interaction"],
                      pending=pending, to_come=to_come, selected=selected,
                      selected_label=s.label(selected) if selected else None,
                      default=default, availability=self._availability(selected), op=op, states=states,
                      changes=changes, scope_stack=[s.label(r) for r in s.scope_stack], overlaps=self.overlaps,
                      result=result)
        if selected is not None:
            shown.scope, shown.scope_truncated = self._scope(selected, position)
        self.shown = shown
        return shown

    @_on_engine
    def act(self, fn: Callable[[DebugSession], StepResult | None], op: str | None, want: TupleRef | None,
            select_after: Callable[[DebugSession, StepResult | None], tuple[str | None, TupleRef | None]] | None = None
            ) -> Shown:
        """Run one action, then build what to show after it.

        A step back restores the selection there was before the action it undoes, so the
        next `s` or `n` acts on the tuple the user had picked, not on another one."""
        history = self.session.history
        before = len(history)
        chosen = (op, want)
        result = fn(self.session)
        if select_after is not None:
            new_op, new_ref = select_after(self.session, result)
            op = new_op or op
            want = new_ref
        after = len(history)
        if after > before:
            del self._selections[before:]
            self._selections.extend([chosen] * (after - before))
        elif after < before and after < len(self._selections):
            op, want = self._selections[after]
            del self._selections[after:]
        return self.build(op, want, result)

    @_on_engine
    def select(self, op: str | None, want: TupleRef | None) -> Shown:
        """Another operator or tuple selected: the same position, seen differently."""
        prev = self.shown
        shown = self.build(op, want, prev.result if prev else None, keep_changes=True)
        if prev is not None and prev.op != op and prev.result is not None:
            shown.changes = _from_result(prev.result, shown.op)
        return shown

    @_on_engine
    def refresh(self, op: str | None, want: TupleRef | None) -> Shown:
        """A live run grew: the session rebuilds its engine over the longer logs, the overlaps are found again."""
        self.session.refresh()
        self.overlaps = None
        return self.select(op, want)

    @_on_engine
    def compute_overlaps(self, force: bool = False) -> list[Overlap] | None:
        if self.overlaps is None:
            total = sum(inst.total for inst in self.session.engine.instances.values())
            if total > OVERLAP_TUPLE_LIMIT and not force:
                return None
            self.overlaps = self.session.overlaps()
        return self.overlaps

    # --- pieces ---------------------------------------------------------------------------------

    def _tuples(self) -> dict[str, int]:
        """Per operator of G(θ), the tuples its instances have consumed.

        An instance's position also counts its END step (the end of its input, which
        calls `finish()`); the DAG shows tuples, so that step is left out: FE shows the
        tuples into θ, not that number plus one per instance."""
        counts: dict[str, int] = {}
        for inst in self.session.engine.instances.values():
            counts[inst.node.name] = counts.get(inst.node.name, 0) + inst.tuples
        return counts

    def _default(self, pending: list[Pending]) -> TupleRef | None:
        """Inside a stepped-into scope, its next tuple; otherwise θ's next tuple in the original order."""
        s = self.session
        nexts = [p for p in pending if p.next]
        if s.scope_stack:
            scope = s.provenance.scope_set(s.scope_stack[-1])
            inside = [p for p in nexts if p.ref in scope]
            if inside:
                return min(inside, key=lambda p: (p.ref.op, p.ref.instance, p.ref.position)).ref
        theta = [p for p in nexts if p.ref.op == self._theta and not p.end]
        if theta:
            return min(theta, key=lambda p: s.provenance.rank(p.ref)).ref
        return nexts[0].ref if nexts else None

    def _availability(self, ref: TupleRef | None) -> dict[str, Availability]:
        from ..replay.stepping import Availability

        s = self.session
        none = Availability(False, "no tuple is waiting")
        return {
            "over": s.can_step_over(ref) if ref is not None else none,
            "into": s.can_step_into(ref) if ref is not None else none,
            "out": s.can_step_out(),
            "back": s.can_step_back(),
        }

    def _states(self, op: str, prev: Shown | None = None, result: StepResult | None = None) -> dict[str, Any]:
        """`op`'s instance states, encoding as little as possible.

        An instance at the same position as in `prev` has the same state; after a
        step, the session's own diff (complete unless it says "…") turns the
        previous state into the new one; only otherwise is the state encoded
        again (which costs a walk over the whole state)."""
        s = self.session
        out = {}
        diffed = result is not None and result.diffed and prev is not None and prev.op == op \
            and result.position == s.position
        for key, inst in s.engine.instances.items():
            if inst.node.name != op:
                continue
            old = prev.states.get(inst.label) if prev is not None and prev.op == op else None
            chain = s.partition_chain(key)   # a streaming task shows its partition's earlier micro-batches too
            moved = [s.engine.instances[k] for k in chain] if chain is not None else [inst]
            if old is not None and all(prev.position.get(m.label) == m.count for m in moved):
                out[inst.label] = old
                continue
            if diffed and old is not None and chain is None:  # prev is what was shown before this step
                patched = _patched(old, result.changed.get(inst.label, {}))
                if patched is not None:
                    out[inst.label] = patched
                    continue
            out[inst.label] = s.instance_state(key)
        return out

    def _scope(self, ref: TupleRef, position: dict[str, int]) -> tuple[list[ScopeLine], bool]:
        s = self.session
        blockers: dict[TupleRef, Overlap] = {}
        roots: dict[TupleRef, Overlap] = {}
        for o in self.overlaps or []:
            roots[o.root] = o
            blockers[o.at] = o
        root = s.scope(ref)
        lines: list[ScopeLine] = []
        stack: list[tuple[ScopeNode, int]] = [(root, 0)]
        truncated = False
        while stack:
            node, depth = stack.pop()
            if len(lines) >= SCOPE_LIMIT:
                truncated = True
                break
            r = node.ref
            label = s.label(r)
            inst = s.label((r.op, r.instance))
            note = ""
            if r in roots:
                o = roots[r]
                note = f"no step-over: the later {s.label(o.blocker)} is in the way at {s.label(o.at)}"
            elif r in blockers:
                o = blockers[r]
                note = f"overlap: consumed here before {s.label(o.root)}'s tuples"
            lines.append(ScopeLine(r, label, depth, r.position < position.get(inst, 0), note))
            for child in reversed(node.children):
                stack.append((child, depth + 1))
        return lines, truncated


def _patched(state: Any, fields: dict[str, list]) -> Any | None:
    """`state` with the session's changes ({"field.key": [old, new]}) applied; None if they are incomplete."""
    if any(name.endswith(".…") for name in fields):
        return None  # more keys changed than the session listed
    if "" in fields:
        return fields[""][1]
    if not isinstance(state, dict):
        return None
    out = dict(state)
    copied: set[str] = set()
    for name, (old, new) in fields.items():
        field, dot, key = name.partition(".")
        if not dot:
            if new == state_paths.MISSING:
                out.pop(field, None)
            else:
                out[field] = new
            continue
        inner = out.get(field)
        if not isinstance(inner, dict):
            return None
        if field not in copied:
            inner = out[field] = dict(inner)
            copied.add(field)
        if new == state_paths.MISSING:
            inner.pop(key, None)
        else:
            inner[key] = new
    return out


def _from_result(result: StepResult, op: str) -> dict[str, dict[tuple, tuple]]:
    """The session's own change list ({instance: {"field.key": [old, new]}}) as paths, for `op`."""
    out: dict[str, dict[tuple, tuple]] = {}
    for inst, fields in (result.changed or {}).items():
        if operator_of(inst) != op:
            continue
        paths = {}
        for name, (old, new) in fields.items():
            path = tuple(p for p in name.split(".", 1) if p) if name else ()
            paths[path] = (old, new)
        out[inst] = paths
    return out

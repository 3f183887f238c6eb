"""Planning steps from the logs, without moving the engine.

A step on a tuple says which inputs every instance must have consumed after it:
*into* t is t alone at its instance; *over* t is t's whole scope; *out* is the
rest of the scope stepped into last. On the way, a tuple of another θ input's
scope may stand in the way (the scopes overlap, or that scope is still in
progress): then the step is not possible, and the plan says why. Tuples that
entered G(θ) anywhere but at θ, and those emitted by an END step, are *free*:
consumed as logged whenever they are in the way.

The planner answers once per kind, tuple and position: the availability line,
`can_*` and `step_*` all read the same `Plan` until the engine moves.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from typing import Callable

from ..core.graph import Graph
from ..core.scopes import Provenance, TupleRef

Key = tuple[int, int]   # (operator id, instance)

INTO, OVER, OUT = "into", "over", "out"


@dataclass
class Availability:
    """Whether an action is possible now, and why not when it is not."""

    ok: bool
    reason: str = ""
    blocker: str | None = None  # the tuple (or root) in the way

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class Plan:
    """Where every instance must stand after a step (`targets`), or why the step is not possible."""

    kind: str
    ref: TupleRef
    availability: Availability
    targets: dict[Key, int] = field(default_factory=dict)
    allowed: Set[TupleRef] = frozenset()   # the step's own tuples; any other consumed is free

    @property
    def ok(self) -> bool:
        return self.availability.ok


class Planner:
    """Plans steps at the current position of the engine (read through `positions`)."""

    def __init__(self, graph: Graph, provenance: Provenance, positions: Callable[[], dict[Key, int]]):
        self.graph = graph
        self.provenance = provenance
        self.positions = positions
        self._at: tuple | None = None
        self._plans: dict[tuple[str, TupleRef], Plan] = {}

    def plan(self, kind: str, ref: TupleRef) -> Plan:
        """Step `kind` (INTO, OVER, or OUT of the scope of `ref`) from here, planned once per position."""
        at = self.positions()
        signature = tuple(at.values())
        if signature != self._at:
            self._at, self._plans = signature, {}
        plan = self._plans.get((kind, ref))
        if plan is None:
            plan = self._plans[(kind, ref)] = self._make(kind, ref, at)
        return plan

    def free(self, ref: TupleRef) -> bool:
        """Consumed as logged when in the way: its root is not one of θ's inputs."""
        prov = self.provenance
        return not prov.is_theta_root(prov.root(ref))

    def remaining(self, ref: TupleRef, at: dict[Key, int] | None = None) -> dict[Key, int]:
        """Per instance, how far it must go to have consumed the whole scope of `ref` (empty: done)."""
        at = self.positions() if at is None else at
        return self._remaining(self.provenance.scope_set(ref), at)

    @staticmethod
    def _remaining(scope: Set[TupleRef], at: dict[Key, int]) -> dict[Key, int]:
        required: dict[Key, int] = {}
        for r in scope:
            key = (r.op, r.instance)
            if at[key] <= r.position:
                required[key] = max(required.get(key, 0), r.position + 1)
        return required

    # --- making a plan -----------------------------------------------------------------------

    def _make(self, kind: str, ref: TupleRef, at: dict[Key, int]) -> Plan:
        label = ref.label(self.graph)
        if kind != OUT and ref.position < at[(ref.op, ref.instance)]:
            return Plan(kind, ref, Availability(False, f"{label} was already consumed"))
        if kind == INTO:
            allowed = {ref}
            required = {(ref.op, ref.instance): ref.position + 1}
        else:
            allowed = self.provenance.scope_set(ref)
            required = self._remaining(allowed, at)
        targets = self._targets(required, allowed, at)
        if isinstance(targets, Availability):
            why = targets
            if kind == OVER:
                why = Availability(False, f"no step-over for {label}: {why.reason}", why.blocker)
            return Plan(kind, ref, why)
        return Plan(kind, ref, Availability(True), targets, allowed)

    def _targets(self, required: dict[Key, int], allowed: Set[TupleRef],
                 at: dict[Key, int]) -> dict[Key, int] | Availability:
        """Targets that consume `required` while consuming only `allowed` or free tuples: every
        tuple on the way must be allowed or free, and its producer must have emitted it."""
        prov = self.provenance
        targets = dict(required)
        checked = dict(at)
        work = list(required)
        while work:
            key = work.pop()
            end = targets[key]
            for q in range(checked[key], end):
                ref = TupleRef(key[0], key[1], q)
                if ref not in allowed and not self.free(ref):
                    return self._blocked(ref, allowed)
                origin = prov.origin(ref)
                if origin is not None:
                    okey = (origin.op, origin.instance)
                    if at[okey] <= origin.position and origin.position + 1 > targets.get(okey, 0):
                        if origin not in allowed and not self.free(origin):
                            return Availability(False, f"{self._label(ref)} has not been produced yet: "
                                                f"{self._label(origin)} has to be processed first",
                                                self._label(origin))
                        targets[okey] = origin.position + 1
                        work.append(okey)
            checked[key] = max(checked[key], end)
        return targets

    def _blocked(self, ref: TupleRef, allowed: Set[TupleRef]) -> Availability:
        """Why `ref` cannot be consumed as part of a step on `allowed`."""
        prov = self.provenance
        root = prov.root(ref)
        mine = prov.root(next(iter(allowed))) if allowed else None
        where = f"{self.graph.nodes[ref.op].name}:{ref.instance}"
        if mine is not None and prov.is_theta_root(mine) and prov.rank(root) > prov.rank(mine):
            return Availability(False, f"its scope overlaps that of the later tuple {self._label(root)}: {where} "
                                f"consumed {self._label(ref)} (from {self._label(root)}) first", self._label(root))
        if root == ref:   # one of θ's inputs before this step's own, not begun
            return Availability(False, f"{where} must first consume {self._label(ref)}, which comes before; "
                                f"step over it first", self._label(root))
        return Availability(False, f"{where} must first consume {self._label(ref)}, from the scope of "
                            f"{self._label(root)}, which is still in progress; step over or out of it first",
                            self._label(root))

    def _label(self, ref: TupleRef) -> str:
        return ref.label(self.graph)

"""Choosing which interactions to checkpoint, under a responsiveness bound τ.

Cost model (IcedTea section 6, adapted to a local replay):

* the *cost* of checkpointing interaction k is the byte size of the serialized
  states of G(θ) at k, known from the recording without taking the checkpoint
  (the states of every interaction are stored with it);
* the *jump time* from a checkpoint at I_j to I_k is predicted from the measured
  local replay speed: Σ over instances of (inputs to replay) × (seconds per input
  of that operator), plus loading I_j's checkpoint (bytes / load speed). The
  original run's wall time says nothing about it: replay runs elsewhere, alone.

Policies:

* `online` (during recording, and simulated here for comparison): checkpoint I_k
  when a jump to it from the latest checkpoint would exceed τ;
* `offline`: a dynamic program over the whole history chooses the cheapest set
  of checkpoints with every jump within τ (`brute_force` checks it on small
  histories);
* `per_instance`: each instance gets its own plan under its share of τ
  (stateless instances cost nothing and need none); a jump then finds a
  consistent recovery line (`tt.core.recovery`).

An instance no checkpoint can hold (a hooked generator, a state that cannot be pickled:
`replayed`) is put back by replaying its inputs from its start on every jump. That time,
the jump's *floor*, is added to every prediction, and the plans are chosen so that the rest,
what checkpoints can shorten, stays within τ.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

Key = tuple[int, int]


@dataclass
class Profile:
    """What the planner knows about a run."""

    interactions: list[int]                           # complete interactions, I_0 first
    positions: dict[int, dict[Key, int]]              # per interaction, per instance
    state_bytes: dict[int, dict[Key, int]]            # per interaction, per instance: checkpoint cost
    seconds_per_input: dict[int, float]               # per operator id: measured replay speed
    load_bytes_per_second: float = 200e6              # restoring a checkpoint
    stateless: set[Key] = field(default_factory=set)  # instances whose object never changes
    restore_seconds: float = 0.0                      # fixed cost of any restore (counters, cursors)
    replayed: set[Key] = field(default_factory=set)   # instances put back by replay from their start

    def floor(self, k: int) -> float:
        """What any jump to k spends replaying the `replayed` instances from their start."""
        pk = self.positions[k]
        return sum(pk[key] * self.seconds_per_input.get(key[0], 0.0) for key in self.replayed if key in pk)

    def cost(self, k: int) -> int:
        return sum(b for key, b in self.state_bytes[k].items() if key not in self.stateless)

    def replay_seconds(self, j: int, k: int, keys=None) -> float:
        pj, pk = self.positions[j], self.positions[k]
        keys = pk.keys() if keys is None else keys
        return sum((pk[key] - pj[key]) * self.seconds_per_input.get(key[0], 0.0) for key in keys
                   if key not in self.replayed)   # (their replay from the start is the floor)

    def load_seconds(self, j: int, keys=None) -> float:
        if j == self.interactions[0]:
            return 0.0  # the initial state comes from the operators' code
        sb = self.state_bytes[j]
        all_keys = keys is None
        keys = sb.keys() if keys is None else keys
        fixed = self.restore_seconds * (1.0 if all_keys else len(list(keys)) / max(1, len(sb)))
        return fixed + sum(sb[key] for key in keys if key not in self.stateless) / self.load_bytes_per_second

    def jump_seconds(self, j: int, k: int, keys=None) -> float:
        return self.load_seconds(j, keys) + self.replay_seconds(j, k, keys)


@dataclass
class Plan:
    policy: str
    tau: float
    checkpoints: set[int]                                 # coordinated: interactions
    per_instance: dict[Key, set[int]] | None = None       # per-instance plans
    predicted: dict[int, float] = field(default_factory=dict)  # interaction -> predicted jump seconds
    cost: int = 0

    def as_dict(self) -> dict:
        return {"policy": self.policy, "tau": self.tau, "checkpoints": sorted(self.checkpoints),
                "per_instance": ({f"{k[0]}:{k[1]}": sorted(v) for k, v in self.per_instance.items()}
                                 if self.per_instance is not None else None),
                "predicted": {str(k): v for k, v in self.predicted.items()}, "cost": self.cost}


def _finish(profile: Profile, policy: str, tau: float, chosen: set[int]) -> Plan:
    plan = Plan(policy, tau, set(chosen))
    base = profile.interactions[0]
    for k in profile.interactions:
        if k in chosen:
            base = k
        plan.predicted[k] = round(profile.jump_seconds(base, k) + profile.floor(k), 6)
    plan.cost = sum(profile.cost(k) for k in chosen)
    return plan


def online(profile: Profile, tau: float) -> Plan:
    """Checkpoint an interaction when the jump from the latest checkpoint would exceed τ."""
    chosen, last = set(), profile.interactions[0]
    for k in profile.interactions[1:]:
        if profile.jump_seconds(last, k) > tau:
            chosen.add(k)
            last = k
    return _finish(profile, "online", tau, chosen)


def every(profile: Profile, tau: float = 0.0) -> Plan:
    return _finish(profile, "all", tau, set(profile.interactions[1:]))


def none(profile: Profile, tau: float = 0.0) -> Plan:
    return _finish(profile, "none", tau, set())


def offline(profile: Profile, tau: float) -> Plan:
    """The cheapest set of checkpoints with every jump within τ (dynamic program, O(n²)).

    f(j) is the least cost of checkpoints after I_j covering I_j..I_n when I_j is a
    checkpoint (or I_0). From j, the next checkpoint k may be any interaction up
    to the first one a jump from j cannot reach in time. If some interaction
    cannot be reached within τ by any plan (its own checkpoint loads too slowly),
    the plan checkpoints it anyway and its predicted time shows by how much it misses.
    """
    ks = profile.interactions
    n = len(ks)
    INF = float("inf")
    f = [INF] * n
    nxt: list[int | None] = [None] * n
    for a in range(n - 1, -1, -1):
        j = ks[a]
        best, choice = INF, None
        b = a + 1
        # option: no more checkpoints if everything after j is reachable from j
        reach = a + 1
        while reach < n and profile.jump_seconds(j, ks[reach]) <= tau:
            reach += 1
        if reach == n:
            best, choice = 0.0, None
        # option: next checkpoint at any k in (j, reach] (k = reach: the first one j cannot reach)
        for b in range(a + 1, min(reach, n - 1) + 1):
            if profile.jump_seconds(ks[b], ks[b]) > tau:
                continue  # its checkpoint alone would load too slowly
            cand = profile.cost(ks[b]) + f[b]
            if cand < best:
                best, choice = cand, b
        if best == INF and a + 1 < n:  # nothing feasible: checkpoint the very next one
            best, choice = profile.cost(ks[a + 1]) + f[a + 1], a + 1
        f[a], nxt[a] = best, choice
    chosen, a = set(), 0
    while nxt[a] is not None:
        a = nxt[a]
        chosen.add(ks[a])
    return _finish(profile, "offline", tau, chosen)


def feasible(profile: Profile, tau: float, chosen: set[int]) -> bool:
    base = profile.interactions[0]
    for k in profile.interactions:
        if k in chosen:
            base = k
        if profile.jump_seconds(base, k) > tau + 1e-12:
            return False
    return True


def brute_force(profile: Profile, tau: float) -> Plan | None:
    """The cheapest feasible plan by trying every subset (for tests on small histories)."""
    ks = profile.interactions[1:]
    best = None
    for r in range(len(ks) + 1):
        for subset in itertools.combinations(ks, r):
            s = set(subset)
            if feasible(profile, tau, s):
                c = sum(profile.cost(k) for k in s)
                if best is None or c < best[0]:
                    best = (c, s)
    return None if best is None else _finish(profile, "brute-force", tau, best[1])


def per_instance(profile: Profile, tau: float) -> Plan:
    """Each stateful instance gets a plan of its own under a share of τ.

    The share of an instance is proportional to its replay work weighted by the
    square root of its state size, so that big states (costly to checkpoint) get
    more time and are checkpointed rarely, small ones often. Stateless instances
    need no checkpoint: they can restart at any position.
    """
    ks = profile.interactions
    last = ks[-1]
    keys = [key for key in profile.positions[last] if key not in profile.stateless]
    weights = {}
    for key in keys:
        work = profile.replay_seconds(ks[0], last, [key])
        size = max(1, max(profile.state_bytes[k].get(key, 0) for k in ks))
        weights[key] = max(work, 1e-9) * size ** 0.5
    total = sum(weights.values()) or 1.0
    plans: dict[Key, set[int]] = {}
    for key in keys:
        share = tau * weights[key] / total
        sub = Profile(ks, profile.positions, {k: {key: profile.state_bytes[k].get(key, 0)} for k in ks},
                      profile.seconds_per_input, profile.load_bytes_per_second)

        def jump(j, k, _key=key, _sub=sub):
            return _sub.load_seconds(j, [_key]) + _sub.replay_seconds(j, k, [_key])
        sub.jump_seconds = jump  # type: ignore[method-assign]
        plans[key] = offline(sub, share).checkpoints
    plan = Plan("per-instance", tau, set(), plans)
    plan.cost = sum(profile.state_bytes[k].get(key, 0) for key, cks in plans.items() for k in cks)
    for k in ks:  # predicted without rollback propagation; jumps measure the real thing
        t = 0.0
        for key in profile.positions[k]:
            base = max([j for j in plans.get(key, ()) if j <= k] or [ks[0]]) if key in plans else k
            t += profile.jump_seconds(base, k, [key]) if key in plans else 0.0
        plan.predicted[k] = round(t + profile.floor(k), 6)
    return plan


__all__ = ["Profile", "Plan", "online", "offline", "every", "none", "per_instance", "brute_force", "feasible"]

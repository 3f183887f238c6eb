"""Checkpoints of a recorded run: profiling, taking them by local replay, restoring.

`tt checkpoint RUN --tau 2s` profiles the run (one replay pass that measures how
fast each operator replays), chooses a plan (`tt.replay.planning`), takes the
chosen checkpoints in a second replay pass, and measures every jump with them.
Jumps then start from the latest *consistent* set of restore points before the
target (`Restorer`): for a coordinated plan that is simply the checkpoint of the
latest planned interaction; for per-instance plans it is a recovery line found by
rollback propagation (`tt.core.recovery`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

import cloudpickle
import orjson

from ..core.checkpoint import FULL, CheckpointWriter, restore
from ..core.errors import RunFileError, UsageError
from ..core.hooked import HookedOperator
from ..core.recovery import RestorePoint, recovery_line
from ..store import blobs, schema
from ..store.reader import RunReader
from ..store.trust import Sealer
from . import planning
from .engine import Engine, Key

POLICIES = ("offline", "online", "per-instance", "all", "none")


class Restorer:
    """Finds and loads the best restore line for a target position (active plan)."""

    def __init__(self, engine: Engine, plan: dict | None = None):
        self.engine = engine
        reader = engine.reader
        self.plan = plan if plan is not None else reader.active_plan()
        self.index = reader.checkpoint_index(self.plan["id"]) if self.plan else {}
        info = self.plan["info"] if self.plan else {}
        self.stateless = {tuple(map(int, k.split(":"))) for k in info.get("stateless", [])}
        self.interaction_ks = [i.k for i in reader.interactions()]
        self.interaction_positions: list[dict[Key, int]] = [
            {key: at.position for key, at in reader.instances_at(k).items()} for k in self.interaction_ks]
        self.cuts: dict[tuple, int] = {}   # each interaction's cut, as sorted items (to look up) -> its first k
        for k, p in zip(self.interaction_ks, self.interaction_positions):
            self.cuts.setdefault(tuple(sorted(p.items())), k)
        self.channels = self._channels()
        self._counts: dict[tuple[Key, int], tuple[dict, dict]] = {}

    def __bool__(self) -> bool:
        return bool(self.index) or bool(self.stateless)

    def _channels(self) -> list[tuple[tuple, Key, Key]]:
        g = self.engine.graph
        out = []
        for e in g.edges:
            if e.src not in g.in_g or e.dst not in g.in_g:
                continue
            n_src, n_dst = g.nodes[e.src].instances, g.nodes[e.dst].instances
            for i in range(n_src):
                dests = range(n_dst) if e.shuffle else [i]
                for d in dests:
                    out.append(((e.id, i, d), (e.src, i), (e.dst, d)))
        return out

    def counts(self, key: Key, position: int) -> tuple[dict, dict]:
        """Tuples consumed per input channel and produced per output channel before `position`."""
        cached = self._counts.get((key, position))
        if cached is not None:
            return cached
        inst = self.engine.instances[key]
        consumed: dict = {}
        left = position
        for port, src, n in inst.runs:
            if left <= 0:
                break
            take = min(n, left)
            if port >= 0:
                ch = (inst.node.inputs[port], src, inst.i)
                consumed[ch] = consumed.get(ch, 0) + take
            left -= take
        produced = inst.produced_before(position)
        self._counts[(key, position)] = (consumed, produced)
        return consumed, produced

    def interaction_at(self, position: dict[Key, int]) -> int | None:
        """The first interaction whose cut is `position` (every instance where it stands), or None."""
        return self.cuts.get(tuple(sorted(position.items())))

    def line_for(self, targets: dict[Key, int]) -> tuple[dict[Key, tuple[int, Any]], int]:
        """The latest consistent restore line at or before `targets`, and how many inputs it skips."""
        points: dict[Key, list[RestorePoint]] = {}
        for key, target in targets.items():
            cands = [(0, None)]
            if key in self.stateless:
                cands += [(p[key], None) for p in self.interaction_positions if 0 < p[key] <= target]
                cands.append((target, None))
            for seq, k, pos, kind, size, rowid in self.index.get(key, []):
                if pos <= target:
                    cands.append((pos, seq))
            cands = sorted(set(cands), key=lambda c: (c[0], -1 if c[1] is None else c[1]))
            pts = []
            for pos, seq in cands:
                consumed, produced = self.counts(key, pos)
                pts.append(RestorePoint(key, (pos, seq), consumed, produced))
            points[key] = pts
        line = recovery_line(points, self.channels, mode="replay")
        out = {key: rp.label for key, rp in line.items()}
        return out, sum(pos for pos, _ in out.values())

    def line_at_interaction(self, bound: dict[Key, int]) -> tuple[dict[Key, tuple[int, Any]] | None, int]:
        """The latest restore line at or before `bound` that puts every instance at one
        interaction's cut (each at its position there), and how many inputs it skips; (None, 0)
        where there is none. A replay in the original order may start from it as from the
        start (`Engine.in_order`); from another line, one instance ahead of that order, not."""
        stateful = [key for key in self.engine.instances if key not in self.stateless]
        held = set(self.interaction_ks)
        for key in stateful:
            held &= {e[1] for e in self.index.get(key, [])}
        cuts = [cut for k, cut in zip(self.interaction_ks, self.interaction_positions)
                if k in held and all(cut[key] <= bound[key] for key in cut)]
        if not cuts:
            return None, 0
        best = max(cuts, key=lambda cut: sum(cut.values()))
        line, done = self.line_for(best)
        if any(pos != best[key] for key, (pos, _) in line.items()):
            return None, 0
        return line, done

    def load(self, line: dict[Key, tuple[int, Any]]) -> None:
        reader = self.engine.reader
        restored = {}
        for key, (pos, seq) in line.items():
            op = None
            if seq is not None:
                entries = [e for e in self.index[key] if e[0] <= seq]
                start = max(i for i, e in enumerate(entries) if e[3] == FULL)
                op = restore([(e[3], reader.checkpoint_data(e[5])) for e in entries[start:]])
            restored[key] = (pos, op)
        self.engine.restore_line(restored, {key: self.counts(key, pos)[1] for key, (pos, _) in line.items()})


def profile(reader: RunReader, *, trust: bool = False,
            progress: Callable[[int, int], None] | None = None) -> planning.Profile:
    """One replay pass: positions, state sizes (from the recording) and replay speed per operator."""
    engine = Engine(reader, trust=trust)
    busy: dict[int, float] = {}
    inputs: dict[int, int] = {}
    # an instance's first input carries one-time costs (imports, the first Arrow decode, a
    # generator's start): 23 times the rest on a small run, in the first replay of a process
    first: dict[int, list[float]] = {}   # op -> [seconds, inputs] of its instances' first inputs
    clock = time.perf_counter
    started = [0.0]

    def before(inst, pos, ch):
        started[0] = clock()

    def after(inst, pos, row):
        op, spent = inst.node.id, clock() - started[0]
        if pos == 0:
            warm = first.setdefault(op, [0.0, 0])
            warm[0] += spent
            warm[1] += 1
            return
        busy[op] = busy.get(op, 0.0) + spent
        inputs[op] = inputs.get(op, 0) + 1
    # None: a hooked generator, or hooked state that cannot be pickled; like stateless instances
    # those get no checkpoint, and a restore line puts them in place by replaying their inputs
    initial = {key: inst.pickled_op() for key, inst in engine.instances.items()}
    interactions = reader.interactions()
    positions, state_bytes = {}, {}
    sizes = dict(reader.conn.execute("SELECT hash, size FROM states"))
    wall = 0.0
    with engine.hooks(on_consume=before, after_consume=after):
        for n, inter in enumerate(interactions):
            snap = reader.instances_at(inter.k)
            targets = {key: at.position for key, at in snap.items()}
            t0 = clock()
            engine.advance_to(targets)
            wall += clock() - t0
            positions[inter.k] = targets
            state_bytes[inter.k] = {key: int(sizes.get(at.state, 0) or 0) for key, at in snap.items()}
            if progress is not None:
                progress(n + 1, len(interactions))
    end = {key: inst.pickled_op() for key, inst in engine.instances.items()}
    stateless = {key for key, data in end.items() if data is None or initial[key] is None or data == initial[key]}
    # per-operator time inside consume, scaled so that it adds up to the pass's wall time
    # (the scheduler's own work is spread over operators in proportion to theirs)
    alone = {op for op in first if op not in inputs}   # (one input an instance: its first is all there is)
    for op in alone:
        busy[op], inputs[op] = first[op]
    warm = sum(seconds for op, (seconds, _) in first.items() if op not in alone)
    scale = max(wall - warm, 0.0) / max(sum(busy.values()), 1e-9)
    speed = {op: scale * busy[op] / inputs[op] for op in busy if inputs[op]}
    # how fast checkpoints load: unpickle the biggest operator object at the end
    data = blobs.compress(max((d for d in end.values() if d is not None), key=len, default=cloudpickle.dumps(None)))
    t = clock()
    for _ in range(3):
        cloudpickle.loads(blobs.decompress(data))
    load = max(1e6, 3 * len(blobs.decompress(data)) / max(clock() - t, 1e-9))
    # the fixed part of a restore: recovery line, counters and cursors of every instance
    restorer = Restorer(engine, plan={"id": -1, "info": {}})
    last = positions[interactions[-1].k]
    t = clock()
    line, _ = restorer.line_for(last)
    engine.restore_line({key: (pos, None) for key, (pos, _) in line.items()},
                        {key: restorer.counts(key, pos)[1] for key, (pos, _) in line.items()})
    fixed = clock() - t
    prof = planning.Profile([i.k for i in interactions], positions, state_bytes, speed, load, stateless)
    prof.restore_seconds = fixed
    prof.replayed = {key for key, data in end.items() if data is None or initial[key] is None}
    try:
        busy = reader.conn.execute("SELECT SUM(busy) FROM stage_stats").fetchone()[0]
    except Exception:  # a run file from before stage statistics
        busy = None
    prof.replay_factor = round(wall / busy, 2) if busy else None  # replay vs the executors' time
    return prof


def choose(prof: planning.Profile, policy: str, tau: float, engine: Engine | None = None) -> planning.Plan:
    if policy not in POLICIES:
        raise UsageError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if policy == "per-instance" and engine is not None:
        return per_instance(engine, prof, tau)
    return {"offline": planning.offline, "online": planning.online, "per-instance": planning.per_instance,
            "all": planning.every, "none": planning.none}[policy](prof, tau)


def per_instance(engine: Engine, prof: planning.Profile, tau: float) -> planning.Plan:
    """Checkpoints per instance: small states often, huge ones rarely, stateless never.

    Without a log of the tuples inside G(θ), an instance restored early drags its
    producers back too (rollback propagation), so the plan is judged by the jumps
    it actually allows: starting from the coordinated offline plan, with every
    interaction checkpointed for instances whose state is small, checkpoints are
    dropped, the most expensive first, as long as every jump, predicted through
    its recovery line, stays within τ.
    """
    ks = prof.interactions
    keys = [k for k in engine.instances if k not in prof.stateless]
    coordinated = planning.offline(prof, tau).checkpoints
    total = max(1, sum(prof.cost(k) for k in ks[1:]))
    small = {key for key in keys if sum(prof.state_bytes[k].get(key, 0) for k in ks) < 0.01 * total}
    chosen = {key: set(ks[1:]) if key in small else set(coordinated) for key in keys}
    restorer = Restorer(engine, plan={"id": -1, "info": {}})

    def jumps(plan: dict, base: dict[int, float] | None = None, affected=None,
              limit: float = float("inf")) -> dict[int, float] | None:
        """Predicted jump to each interaction (only those `affected` differ from `base`);
        None as soon as one is over `limit`."""
        restorer.index = {key: [(n, j, prof.positions[j][key], "full", prof.state_bytes[j].get(key, 0), None)
                                for n, j in enumerate(sorted(plan.get(key, ())))] for key in keys}
        restorer.stateless = set(prof.stateless)
        out = dict(base or {})
        for k in ks:
            if base is not None and not affected(k):
                continue
            line, _ = restorer.line_for(prof.positions[k])
            seconds = prof.restore_seconds + prof.floor(k)
            for key, (pos, seq) in line.items():
                seconds += (prof.positions[k][key] - pos) * prof.seconds_per_input.get(key[0], 0.0)
                if seq is not None:
                    seconds += restorer.index[key][seq][4] / prof.load_bytes_per_second
            if seconds > limit:
                return None
            out[k] = seconds
        return out

    candidates = sorted(((prof.state_bytes[k].get(key, 0), key, k) for key in keys for k in chosen[key]),
                        reverse=True)
    current = jumps(chosen)
    for size, key, k in candidates:
        if size == 0:
            continue
        chosen[key].discard(k)
        # only jumps whose target lies at or after this checkpoint could have used it
        at = prof.positions[k][key]
        trial = jumps(chosen, current, lambda j: prof.positions[j][key] >= at, max(tau, max(current.values())))
        if trial is not None:
            current = trial
        else:
            chosen[key].add(k)
    plan = planning.Plan("per-instance", tau, set(), {key: v for key, v in chosen.items() if v})
    plan.cost = sum(prof.state_bytes[k].get(key, 0) for key, v in chosen.items() for k in v)
    plan.predicted = {k: round(v, 6) for k, v in current.items()}
    return plan


def take(path, prof: planning.Profile, plan: planning.Plan, *, trust: bool = False,
         progress: Callable[[int, int], None] | None = None, full_every: int = 16,
         planned_for: float | None = None) -> int:
    """Take the plan's checkpoints by a local replay pass; returns the new plan's id.

    An instance's checkpoints are deltas against its previous one, with a full one
    every `full_every` (1: every checkpoint full). `planned_for`: the τ the plan
    was chosen for, when tighter than the plan's own (see `make`)."""
    reader = RunReader(path)
    engine = Engine(reader, trust=trust)
    seal = Sealer(reader.run_id)  # checkpoints are unpickled by jumps: sealed (store/trust.py)
    writer = CheckpointWriter(full_every=full_every)
    rows = []
    seqs: dict[Key, int] = {}
    wanted: dict[int, list[Key]] = {}
    if plan.per_instance is not None:
        for key, ks in plan.per_instance.items():
            for k in ks:
                wanted.setdefault(k, []).append(key)
    else:
        for k in plan.checkpoints:
            wanted[k] = [key for key in engine.instances if key not in prof.stateless]
    ks = [k for k in prof.interactions if k in wanted]
    for n, k in enumerate(ks):
        engine.advance_to(prof.positions[k])
        for key in wanted[k]:
            inst = engine.instances[key]
            if inst.restored_by_replay:
                continue  # a hooked generator: restored by replay from its start, never from a pickle
            try:
                kind, data = writer.take(key, inst.runner.op)
            except Exception:  # noqa: BLE001
                if isinstance(inst.runner.op, HookedOperator):
                    continue  # its state took something unpicklable: restored by replay, as a generator is
                raise
            packed = blobs.compress(data)
            seq = seqs.get(key, 0)
            seqs[key] = seq + 1
            rows.append((key[0], key[1], seq, k, 0, inst.count, kind, len(packed), seal("checkpoint", packed)))
        if progress is not None:
            progress(n + 1, len(ks))
    reader.close()
    with schema.writing(path) as conn:
        conn.execute("UPDATE checkpoint_plans SET active=0")
        cur = conn.execute("INSERT INTO checkpoint_plans (policy, tau, created, active, info) VALUES (?,?,?,1,?)",
                           (plan.policy, plan.tau, time.time(), orjson.dumps(_info(prof, plan, planned_for)).decode()))
        plan_id = cur.lastrowid
        conn.executemany("INSERT INTO checkpoints (plan, op, instance, seq, k, attempt, position, kind, size, data)"
                         " VALUES (?,?,?,?,?,?,?,?,?,?)", [(plan_id, *r) for r in rows])
    return plan_id


def make(path, prof: planning.Profile, policy: str, tau: float, *, trust: bool = False,
         engine: Engine | None = None, bar: Callable[[str], Callable[[int, int], None] | None] = lambda label: None,
         rounds: int = 4) -> tuple[planning.Plan, dict[int, float], int]:
    """Choose, take and measure a plan until every measured jump is within τ.

    The cost model is a prediction (replay speed from one pass, load speed from
    one state); the measured jumps are the truth. When one is over τ (and stays
    over when measured again), the plan is chosen again for a τ tightened by the
    overshoot, and the rejected plan is dropped. Returns the plan (its `tau` is
    the asked τ), the measured jump times, and how many plans were tried. It stops
    early when a tighter τ gives the same plan: no plan does better (a jump's
    fixed costs alone are over τ), and the measured one is kept. A jump's floor
    (`Profile.floor`: instances no checkpoint holds, replayed from their start) is
    not held against the plan: only what a checkpoint can shorten is. A long run's
    jumps are measured on a sample (`worth_measuring`)."""
    target = tau
    plan = choose(prof, policy, target, engine)
    attempt = 1
    while True:
        plan.tau = tau
        plan_id = take(path, prof, plan, trust=trust, progress=bar("checkpointing"), planned_for=target)
        measured = measure(path, trust=trust, progress=bar("measuring jumps"), only=worth_measuring(prof, plan))
        slow = [k for k, s in measured.items() if s - prof.floor(k) > tau]
        if slow:  # a jump can be slow once (a busy machine): believe the faster of two
            again = measure(path, trust=trust, progress=bar("measuring slow jumps again"), only=slow)
            measured.update({k: min(measured[k], again[k]) for k in slow})
        worst = max((s - prof.floor(k) for k, s in measured.items()), default=0.0)
        if worst <= tau or policy in ("all", "none") or attempt == rounds:
            break
        target *= min(0.9, tau / worst)
        tighter = choose(prof, policy, target, engine)
        if (tighter.checkpoints, tighter.per_instance) == (plan.checkpoints, plan.per_instance):
            break
        drop_plan(path, plan_id)
        plan, attempt = tighter, attempt + 1
    record_measurements(path, measured)
    return plan, measured, attempt


def drop_plan(path, plan_id: int) -> None:
    """Delete a plan and its checkpoints (the newest remaining plan becomes the active one)."""
    with schema.writing(path) as conn:
        conn.execute("DELETE FROM checkpoints WHERE plan=?", (plan_id,))
        conn.execute("DELETE FROM checkpoint_plans WHERE id=?", (plan_id,))
        conn.execute("UPDATE checkpoint_plans SET active=1 WHERE id=(SELECT MAX(id) FROM checkpoint_plans)"
                     " AND NOT EXISTS (SELECT 1 FROM checkpoint_plans WHERE active=1)")


def _info(prof: planning.Profile, plan: planning.Plan, planned_for: float | None = None) -> dict:
    info = plan.as_dict()
    if planned_for is not None and planned_for != plan.tau:
        info["planned_for_tau"] = planned_for
    info["stateless"] = sorted(f"{k[0]}:{k[1]}" for k in prof.stateless)
    info["replayed"] = sorted(f"{k[0]}:{k[1]}" for k in prof.replayed)
    info["seconds_per_input"] = {str(op): s for op, s in prof.seconds_per_input.items()}
    info["load_bytes_per_second"] = prof.load_bytes_per_second
    info["costs"] = {str(k): prof.cost(k) for k in prof.interactions}
    info["replay_factor"] = getattr(prof, "replay_factor", None)
    return info


MEASURED_AT_MOST = 32   # distinct jumps a plan is measured on: the predicted slowest and a spread


def worth_measuring(prof: planning.Profile, plan: planning.Plan) -> list[int] | None:
    """The interactions to time a plan's jumps at: all of them (None) where they are at most
    `MEASURED_AT_MOST` distinct cuts; else the cuts the plan predicts slowest, counting what
    a checkpoint can shorten (a jump's floor aside), three in four of the sample, and the rest
    spread evenly over the run, its last interaction included. A run taken every 0.1 s has
    hundreds of cuts, and each measured jump replays up to τ of the job's work (and its floor)
    from a cold engine: measuring them all took over 20 minutes on a 3M-row run."""
    first_at: dict[tuple, int] = {}
    for k in prof.interactions:
        first_at.setdefault(tuple(sorted(prof.positions[k].items())), k)
    cuts = list(first_at.values())
    if len(cuts) <= MEASURED_AT_MOST:
        return None
    part = {k: plan.predicted.get(k, 0.0) - prof.floor(k) for k in cuts}
    slowest = sorted(cuts, key=lambda k: part[k], reverse=True)[:MEASURED_AT_MOST * 3 // 4]
    spread = MEASURED_AT_MOST - len(slowest)
    evenly = [cuts[round(i * (len(cuts) - 1) / (spread - 1))] for i in range(spread)]
    return sorted(set(slowest) | set(evenly))


def measure(path, *, trust: bool = False, progress: Callable[[int, int], None] | None = None,
            only: Iterable[int] | None = None) -> dict[int, float]:
    """Time a jump to every interaction (or those in `only`, and the others at their cuts)
    with the active plan, from a cold engine, as the debugger makes it: restore, replay, and
    the restore point it keeps afterwards for stepping back. Interactions at one cut (a run
    taken every 0.1 s stops many times where no instance moved) are one jump, timed once."""
    reader = RunReader(path)
    engine = Engine(reader, trust=trust)
    restorer = Restorer(engine)
    out = {}
    timed: dict[tuple, float] = {}   # a cut (its instances' positions) -> its jump's time
    cuts = {}
    for inter in reader.interactions():
        targets = {key: at.position for key, at in reader.instances_at(inter.k).items()}
        cuts[inter.k] = (targets, tuple(sorted(targets.items())))
    if only is not None:
        wanted = {cuts[k][1] for k in only}
        cuts = {k: c for k, c in cuts.items() if c[1] in wanted}
    for n, (k, (targets, cut)) in enumerate(cuts.items()):
        if cut not in timed:
            engine.reset()
            t = time.perf_counter()
            if restorer:
                line, _ = restorer.line_for(targets)
                restorer.load(line)
            engine.advance_to(targets)
            engine.save()
            timed[cut] = round(time.perf_counter() - t, 6)
        out[k] = timed[cut]
        if progress is not None:
            progress(n + 1, len(cuts))
    reader.close()
    return out


def record_measurements(path, measured: dict[int, float]) -> None:
    with schema.writing(path) as conn:
        row = conn.execute("SELECT id, info FROM checkpoint_plans WHERE active=1 ORDER BY id DESC LIMIT 1").fetchone()
        if row is None:
            raise RunFileError(f"{path} has no checkpoint plan")
        info = orjson.loads(row[1])
        info["measured"] = {str(k): v for k, v in measured.items()}
        conn.execute("UPDATE checkpoint_plans SET info=? WHERE id=?", (orjson.dumps(info).decode(), row[0]))

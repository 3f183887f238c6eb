"""What the random-shape tests check of a recorded run in `tt debug`'s session."""

from __future__ import annotations

import json
import random
from pathlib import Path

from tt.core import values
from tt.replay.session import DebugSession
from tt.store.reader import RunReader


def states(session: DebugSession) -> str:
    return json.dumps(values.encode(session.states()), sort_keys=True, default=str)


def steps_undo_and_reverse(out: Path, reader: RunReader, rng: random.Random, what: str) -> None:
    """From an interaction drawn by `rng`, up to 12 steps over or into tuples the session says
    it can step: undone one by one, they pass back through the same positions and states. Then
    a reverse step lands just before θ's previous input, where a fresh session's does: the one
    saves a restore point every 256 inputs of the jump (as a slow machine does every 0.25 s),
    the other none (CI once saw a reverse step start from a point the jump had saved mid-way,
    an instance drained ahead of the original order, and stop in a state that never was)."""
    debug = DebugSession(out)
    debug.points.save_every = 0.0
    ks = [i.k for i in reader.interactions()]
    k = rng.choice(ks[:-1]) if len(ks) > 1 else ks[0]
    debug.jump(k)
    trail = [(dict(debug.position), states(debug))]
    for _ in range(rng.randint(1, 12)):
        over = rng.random() < 0.7
        can = debug.can_step_over if over else debug.can_step_into
        ready = [p for p in debug.pending() if not p.end and can(p.ref).ok]
        if not ready:
            break
        p = rng.choice(ready)
        assert (debug.step_over(p.ref) if over else debug.step_into(p.ref)).ok, (what, p.label)
        trail.append((dict(debug.position), states(debug)))
    while len(trail) > 1:
        position, state = trail.pop()
        assert (dict(debug.position), states(debug)) == (position, state), (what, k, len(trail))
        debug.step_back()
    assert (dict(debug.position), states(debug)) == trail[0], (what, k)

    before = debug._previous_theta_input()
    if before is not None:   # a reverse step, from restore points the steps saved and from none
        debug.step_back()
        assert debug.position[debug.label((before.op, before.instance))] == before.position, (what, k)
        fresh = DebugSession(out)
        fresh.points.save_every = float("inf")
        fresh.jump(k)
        fresh.step_back()
        assert (dict(debug.position), states(debug)) == (dict(fresh.position), states(fresh)), (what, k)

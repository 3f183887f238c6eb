"""Where replay starts from: positions saved in memory, checkpoint lines, or the start.

Going to a position means restoring the latest start at or before it and replaying
forward. Starts come from three places: positions the session saved in memory
(`SavedPosition`s: before each action, and every `SAVE_EVERY` seconds of a long
one), the lines of the run's checkpoints (`Restorer`), and the start of the run.
A save is skipped where replaying from the latest one is cheaper than taking it,
and the saved positions stay within `BUDGET` bytes.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from ..core.errors import Cancelled
from .checkpoints import Restorer
from .engine import Engine, Key, SavedPosition

BUDGET = 256 << 20   # bytes of saved positions kept in memory
SAVE_EVERY = 0.25    # seconds of replay between the positions a long action leaves behind


class RestorePoints:
    """The engine's starts, and moving the engine to a position from the nearest one."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.restorer = Restorer(engine)            # checkpoints of the active plan, if any
        self.saved: list[SavedPosition] = []
        self.last_saved: SavedPosition | None = None
        # costs that decide when a save is worth taking (seconds, measured as we go)
        self.save_seconds = 0.0
        self.seconds_per_input = 5e-6
        self.save_every = SAVE_EVERY   # (a test sets it: 0 saves at every tick, as a slow machine would)

    # --- saving -------------------------------------------------------------------------------

    def maybe_save(self) -> SavedPosition | None:
        """Save the position here, unless replaying to here from the latest saved one is
        cheaper than taking it (big states are costly to save; a few steps are cheap to redo)."""
        self.in_order_here()   # (a jump's end at an interaction is a start for a reverse step)
        here = self.engine.position
        covering = [s for s in self.saved if s.covers(here)]
        if covering:
            redo = min(sum(here[k] - s.position[k] for k in here) for s in covering)
            if redo * self.seconds_per_input < self.save_seconds:
                return None
        t = time.perf_counter()
        saved = self.engine.save(self.last_saved)
        self.save_seconds = 0.5 * self.save_seconds + 0.5 * (time.perf_counter() - t)
        self.last_saved = saved
        self.saved.append(saved)
        while len(self.saved) > 2 and sum(s.nbytes() for s in self.saved) > BUDGET:
            self.saved.pop(1)  # keep the oldest (cheap base) and the newest
        return saved

    def measured(self, inputs: int, seconds: float) -> None:
        """An action replayed `inputs` inputs in `seconds`: what redoing one costs."""
        if inputs:
            self.seconds_per_input = 0.7 * self.seconds_per_input + 0.3 * (seconds / inputs)

    def in_order_here(self) -> bool:
        """Whether the original order passes where the engine stands (`Engine.in_order`): it
        got there in that order from such a place, or it stands at an interaction, every
        instance at its cut (θ has taken every input before the barrier and nothing after it,
        and every other instance stands at or before where that order's replay has it then)."""
        engine = self.engine
        if not engine.in_order:
            engine.in_order = self.restorer.interaction_at(engine.position) is not None
        return engine.in_order

    # --- restoring ------------------------------------------------------------------------------

    def latest_before(self, target: dict[Key, int], in_order: bool = False) -> SavedPosition | None:
        """The saved position furthest along among those from which replay can reach `target`
        (`in_order`: among those the original order passes through)."""
        usable = [s for s in self.saved if s.covers(target) and (s.in_order or not in_order)]
        return max(usable, key=lambda s: sum(s.position.values()), default=None)

    def restore(self, saved: SavedPosition | None, as_base: bool = False) -> None:
        """Back to a saved position (None: the start of the run). `as_base`: the next save
        shares its unchanged parts with this one (when going back to stay there, not to
        search forward from it)."""
        if saved is None:
            self.engine.reset()
        else:
            self.engine.restore(saved)
            if as_base:
                self.last_saved = saved

    def restore_nearest(self, bound: dict[Key, int], keep_here: bool = False, in_order: bool = False) -> str:
        """Restore the latest start at or before `bound` on every instance: a saved position,
        a checkpoint line, or the start; and say which ("the checkpoints at interaction 4").
        `keep_here`: the current position (at or before `bound`) is a start too, and is kept
        when nothing else is further along. `in_order`: only a start the original order passes
        through (`Engine.in_order`), for a replay in that order: a checkpoint line only where it
        puts every instance at one interaction's cut (another puts each at its own latest
        restore point)."""
        engine = self.engine
        base = self.latest_before(bound, in_order)
        base_done = sum(base.position.values()) if base is not None else 0
        line, line_done = (None, 0) if not self.restorer else \
            self.restorer.line_at_interaction(bound) if in_order else self.restorer.line_for(bound)
        here = sum(engine.position.values()) if keep_here else -1
        best = max(line_done, base_done, here)
        if keep_here and here == best:
            return "where it stood"
        if line is not None and line_done == best and line_done > base_done:
            self.restorer.load(line)
            if in_order:
                engine.in_order = True   # (a line at an interaction's cut: `line_at_interaction`)
            k = self.restorer.interaction_at({key: pos for key, (pos, _) in line.items()})
            return f"the checkpoints at interaction {k}" if k is not None else "the run's checkpoints"
        if base is None or base_done < best:
            self.restore(None)
            return "the start of the run"
        self.restore(base)
        if not base_done:
            return "the start of the run"
        k = self.restorer.interaction_at(base.position)
        return f"interaction {k} (kept in memory)" if k is not None else "a position kept in memory on the way here"

    def move_to(self, targets: dict[Key, int], progress=None, cancel: threading.Event | None = None,
                from_here: bool = False) -> None:
        """Restore the nearest start, then replay forward until every instance in `targets`
        stands at its target. `from_here`: when the targets lie ahead, replay forward from the
        current position, not from a start between it and them (a step reports every tuple
        it consumed)."""
        engine = self.engine
        behind = any(engine.instances[k].count > t for k, t in targets.items())
        if behind or not from_here:
            full = {k: targets.get(k, inst.count) for k, inst in engine.instances.items()}
            self.restore_nearest(full, keep_here=not behind)
        total = sum(max(0, t - engine.instances[k].count) for k, t in targets.items())
        engine.advance_to(targets, self.tick(progress, cancel, total))

    # --- progress ----------------------------------------------------------------------------------

    def tick(self, progress: Callable[[int, int], None] | None = None, cancel: threading.Event | None = None,
             total: int = 0) -> Callable[[int], None]:
        """The engine's progress callback for an action: reports progress, raises `Cancelled`
        when asked to, and saves the position every `save_every` seconds of replay (at least
        ten times what a save costs), so that stepping back or searching back after a long
        action replays a short stretch, not the whole action. It measures what an input costs to
        replay as it goes: a save is skipped where redoing the inputs since the last one is
        cheaper (a run of a few heavy inputs, pandas batches, must not look cheap to redo)."""
        done = [0]
        since = [time.perf_counter(), 0]   # (when and after how many inputs the last save was due)
        due = [since[0] + max(self.save_every, 10 * self.save_seconds)]

        def tick(steps: int) -> None:
            done[0] += steps
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled")
            if progress is not None:
                progress(done[0], total)
            now = time.perf_counter()
            if now >= due[0]:
                self.measured(done[0] - since[1], now - since[0])
                self.maybe_save()
                since[:] = [time.perf_counter(), done[0]]
                due[0] = since[0] + max(self.save_every, 10 * self.save_seconds)
        return tick

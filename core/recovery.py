"""Recovery lines over uncoordinated, per-instance checkpoints (rollback propagation).

Instances may be checkpointed at different moments: a stateless one never (it
can restart anywhere), a small state often, a huge one rarely. A jump then needs
a *recovery line*: one restore point per instance such that replaying forward
from all of them reproduces the execution.

Each restore point records, per channel, how many tuples the instance had
consumed (its inputs) and produced (its outputs). For a channel u→v, with u
restored at checkpoint cu and v at cv:

* CheckMate's rule (`mode="checkmate"`, Definition 4): no *orphan*, a tuple v
  consumed before cv that u only sends after cu; in-flight tuples (sent before
  cu, consumed after cv) come from a log of the channel. An orphan rolls back
  the receiver.
* tt's rule (`mode="replay"`): tt keeps no log of tuples inside G(θ), but
  replay is deterministic, so a tuple u sends again that v already consumed is
  a duplicate and is dropped. What cannot be recovered is a tuple in flight:
  sent before cu and not consumed before cv, which nobody would send again. It
  rolls back the sender.

Algorithm 1 of CheckMate (after Wang et al.): start from every instance's latest
checkpoint, mark those that violate the rule, replace each marked one by the
previous checkpoint of the same instance, and repeat. Counters grow with time,
so checking the current root set directly reaches the same fixpoint as marking
reachability in the checkpoint graph; the result is the latest consistent line.
An instance's oldest restore point is its initial state, which never violates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

Channel = Hashable   # identifies one channel, the same from both ends


@dataclass(frozen=True)
class RestorePoint:
    instance: Hashable
    label: Hashable                     # e.g. the interaction it was taken at
    consumed: dict = field(default_factory=dict)  # channel -> tuples consumed before it
    produced: dict = field(default_factory=dict)  # channel -> tuples produced before it

    def __hash__(self) -> int:
        return hash((self.instance, self.label))


def violations(line: dict[Hashable, RestorePoint], channels: list[tuple[Channel, Hashable, Hashable]],
               mode: str) -> set[Hashable]:
    """Instances whose restore point breaks the rule; `channels` lists (channel, sender, receiver)."""
    marked = set()
    for ch, u, v in channels:
        sent = line[u].produced.get(ch, 0)
        got = line[v].consumed.get(ch, 0)
        if mode == "replay" and sent > got:
            marked.add(u)
        elif mode == "checkmate" and got > sent:
            marked.add(v)
    return marked


def recovery_line(points: dict[Hashable, list[RestorePoint]], channels: list[tuple[Channel, Hashable, Hashable]],
                  mode: str = "replay", steps: list | None = None) -> dict[Hashable, RestorePoint]:
    """The latest consistent line; `points[i]` lists instance i's restore points, oldest first.

    If `steps` is a list, each root set tried is appended to it with its marked instances.
    """
    if mode not in ("replay", "checkmate"):
        raise ValueError(f"unknown mode {mode!r}")
    index = {i: len(ps) - 1 for i, ps in points.items()}
    while True:
        line = {i: points[i][index[i]] for i in points}
        marked = violations(line, channels, mode)
        if steps is not None:
            steps.append(({i: p.label for i, p in line.items()}, sorted(marked, key=str)))
        if not marked:
            return line
        for i in marked:
            if index[i] == 0:
                raise ValueError(f"no consistent recovery line: {i} has no earlier restore point")
            index[i] -= 1

"""A digest of the outputs an instance emitted, in order.

Spark may run a task it already ran: a second action on an RDD or DataFrame that was not
persisted, a lost executor's partition, a speculative copy. tt records the first run and runs
the others in shadow. A shadow's end state tells little where the operator is a generator (its
end state is empty once it returns), so a shadow digests what it emits, and `tt verify`
digests what the replay of the recorded run emits: where they differ, rows Spark took from
the later run are not the ones tt replays (replay/reruns.py `verify_reruns`).

Each output goes in as `values.dumps` writes it: the encoding that states are compared by, the
same in Spark's workers and in a replay. A batch (a pandas DataFrame, an Arrow batch or
table: `mapInPandas`, `applyInPandas`) goes in always, by the digest of its values that
`values` writes for it; of other outputs (an RDD function's rows), every `EVERY`th and the
count. A second action over a hooked RDD (1M rows, a running total, 2 partitions, scratch
runs, 2026-12-06) took 2.10 s with a shadow that digested nothing, 3.08 s digesting every row,
2.26 s every 16th; and what makes a later run differ (another file, other draws) changes more
rows than one in sixteen. Only shadows and `tt verify` digest: a recording task does not pay
for it.
"""

from __future__ import annotations

from typing import Any

from . import values


EVERY = 16
_BATCHES = frozenset({"DataFrame", "RecordBatch", "Table"})   # (types' names: no import of pandas or pyarrow)


class OutputDigest:
    """A runner's target: call it with each output; `hexdigest()` says "count:every:xxh3-128",
    and `OutputDigest.like(that)` makes one that digests as the one that said it."""

    __slots__ = ("_hash", "count", "every")

    def __init__(self, every: int = EVERY):
        import xxhash

        self._hash = xxhash.xxh3_128()
        self.count = 0
        self.every = every

    @classmethod
    def like(cls, said: str) -> "OutputDigest":
        return cls(read(said)[1])

    def __call__(self, output: Any) -> None:
        n = self.count
        self.count = n + 1
        if n % self.every and type(output).__name__ not in _BATCHES:
            return
        data = values.dumps(output)
        self._hash.update(b"%d:%d:" % (n, len(data)))
        self._hash.update(data)

    def hexdigest(self) -> str:
        return f"{self.count}:{self.every}:{self._hash.hexdigest()}"


def read(said: str | None) -> tuple[int, int] | None:
    """(count, every) of a digest `hexdigest` said, or None where this tt does not read it."""
    parts = (said or "").split(":")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit() or len(parts[2]) != 32:
        return None
    return int(parts[0]), int(parts[1])


def why_again(another_action: bool) -> str:
    """Why Spark ran a recorded task again, as the run's messages say it: in a later Spark
    stage (another action over data not persisted, or a later job computing again the output
    an executor lost with it), or in the same one (a speculative copy, a retry)."""
    return ("in a later Spark stage (another action on the same RDD or DataFrame, or output lost with an "
            "executor)" if another_action else "in the same Spark stage (a speculative copy, or a retry)")

"""A digest of the outputs an instance emitted, in order.

Spark may run a task it already ran: a second action on an RDD or DataFrame that was not
persisted, a lost executor's partition, a speculative copy. tt records the first run and runs
the others in shadow. A shadow's end state tells little where the operator is a generator (its
end state is empty once it returns), so a shadow digests what it emits, and `tt verify`
digests what the replay of the recorded run emits: where they differ, rows Spark took from
the later run are not the ones tt replays (replay/reruns.py `verify_reruns`).

Each output goes in as `values.dumps` writes it: the encoding that states are compared by, the
same in Spark's workers and in a replay. Of an RDD function's rows, every `EVERY`th goes in, and
the count. A second action over a hooked RDD (1M rows, a running total, 2 partitions, scratch
runs, 2026-12-06) took 2.10 s with a shadow that digested nothing, 3.08 s digesting every row,
2.26 s every 16th; and what makes a later run differ (another file, other draws) changes more
rows than one in sixteen. Batches (a pandas DataFrame, an Arrow batch or table: `mapInPandas`,
`applyInPandas`, a processor's) go in whole, by the digest of their values `values` writes, every
`EVERY`th of them since 2026-12-07, when recording tasks began to digest too (replay/outputs.py):
`values` took 87 µs for a one-row frame, and a keyed `transformWithStateInPandas` emitting one a
key (10,000 keys) recorded at ×1.18 of its plain run instead of ×1.03–1.06. A batch goes in
through `values.table_dumps` (the bytes `dumps` gives, without its walk), which reads a frame's
columns as pandas holds them: a processor's one-row frame took 0.96 M instructions to digest,
0.33 M so (benches/processor_path.py: 60,000 and 21,000 a key, one frame in 16). A digest says how it
sampled ("count:every:xxh3-128:batches_every"; one from before, without the last field, took
every batch), and `like` digests alike.
"""

from __future__ import annotations

from typing import Any

from . import values


EVERY = 16
_BATCHES = frozenset({"DataFrame", "RecordBatch", "Table"})   # (types' names: no import of pandas or pyarrow)


class OutputDigest:
    """A runner's target: call it with each output; `hexdigest()` says
    "count:every:xxh3-128:batches_every", and `OutputDigest.like(that)` makes one that digests as
    the one that said it."""

    __slots__ = ("_hash", "count", "every", "batches", "_batch")

    def __init__(self, every: int = EVERY, batches: int = EVERY):
        import xxhash

        self._hash = xxhash.xxh3_128()
        self.count = 0
        self.every = every
        self.batches = batches   # every how many batches one goes in (1: each)
        self._batch = 0

    @classmethod
    def like(cls, said: str) -> "OutputDigest":
        _, every, batches = read(said)
        return cls(every, batches)

    def __call__(self, output: Any) -> None:
        n = self.count
        self.count = n + 1
        if type(output).__name__ in _BATCHES:
            b = self._batch
            self._batch = b + 1
            if b % self.batches:
                return
            data = values.table_dumps(output)
        elif n % self.every:
            return
        else:
            data = values.dumps(output)
        self._hash.update(b"%d:%d:" % (n, len(data)))
        self._hash.update(data)

    def hexdigest(self) -> str:
        said = f"{self.count}:{self.every}:{self._hash.hexdigest()}"
        return said if self.batches == 1 else f"{said}:{self.batches}"

    def sampled(self) -> tuple[int, int]:
        """(every, batches): how it samples, which two digests must share to be compared."""
        return self.every, self.batches


def read(said: str | None) -> tuple[int, int, int] | None:
    """(count, every, batches) of a digest `hexdigest` said, or None where this tt does not read it."""
    parts = (said or "").split(":")
    if len(parts) not in (3, 4) or not all(p.isdigit() for p in parts[:2] + parts[3:]) or len(parts[2]) != 32:
        return None
    return int(parts[0]), int(parts[1]), int(parts[3]) if len(parts) == 4 else 1


def why_again(another_action: bool) -> str:
    """Why Spark ran a recorded task again, as the run's messages say it: in a later Spark
    stage (another action over data not persisted, or a later job computing again the output
    an executor lost with it), or in the same one (a speculative copy, a retry)."""
    return ("in a later Spark stage (another action on the same RDD or DataFrame, or output lost with an "
            "executor)" if another_action else "in the same Spark stage (a speculative copy, or a retry)")

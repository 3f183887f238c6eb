"""A digest of the outputs an instance emitted, in order.

Spark may run a task it already ran: a second action on an RDD or DataFrame that was not
persisted, a lost executor's partition, a speculative copy. tt records the first run and runs
the others in shadow. A shadow's end state tells little where the operator is a generator (its
end state is empty once it returns), so a shadow digests what it emits, and `tt verify`
digests what the replay of the recorded run emits: where they differ, rows Spark took from
the later run are not the ones tt replays (replay/verify.py `verify_reruns`).

Each output goes in as `values.dumps` writes it: the encoding that states are compared by, the
same in Spark's workers and in a replay. Only shadows and `tt verify` digest: a recording
task does not pay for it.
"""

from __future__ import annotations

from typing import Any

from . import values


class OutputDigest:
    """A runner's target: call it with each output; `hexdigest()` says "count:xxh3-128"."""

    __slots__ = ("_hash", "count")

    def __init__(self):
        import xxhash

        self._hash = xxhash.xxh3_128()
        self.count = 0

    def __call__(self, output: Any) -> None:
        data = values.dumps(output)
        self._hash.update(b"%d:" % len(data))
        self._hash.update(data)
        self.count += 1

    def hexdigest(self) -> str:
        return f"{self.count}:{self._hash.hexdigest()}"

"""`tt verify`'s check of the runs Spark made again of recorded tasks.

Spark runs a task it already ran for a second action on an RDD or DataFrame that was not
persisted, or to recompute a lost or speculated partition. tt records the first run; the later
ones run in shadow and keep the digest of what they emitted (core/output_digest.py, the
`reruns` table). The replay of the recorded run emits what that run emitted, so where a later
run's digest differs, rows Spark took from it (another action's output) are not the ones tt
replays. The recorder already says where a later run ended in another state or after other
inputs; a generator's end state is empty, so only its outputs tell. (The replay's digests are
replay/outputs.py's, which compares the recorded run's own too.)
"""

from __future__ import annotations

from ..core.output_digest import OutputDigest, read, why_again
from ..store.reader import RunReader
from .outputs import replayed

Key = tuple[int, int]


def verify_reruns(reader: RunReader, *, trust: bool = False, digested: dict[Key, OutputDigest] | None = None) -> dict:
    """{"compared": how many later runs, "differ": [{"op", "instance", "error"}, ...], and "error"
    where none could be compared}: each instance with a later run is replayed from its start to
    its recorded end, digesting what it emits, and compared with each later run's digest (a
    replay of its own, from each instance's start, so that every output is digested), but for
    those `digested` already holds (`tt verify`'s pass: replay/outputs.py `watch`, `finished`)."""
    reruns = [r for r in reader.reruns() if read(r["outputs"]) is not None]
    if not reruns:
        return {"compared": 0, "differ": []}
    digests, error = replayed(reader, {(r["op"], r["instance"]) for r in reruns}, trust=trust, digested=digested)
    if error is not None:
        return {"compared": 0, "differ": [], "error": error}
    differ, named = [], set()
    for r in reruns:
        key = (r["op"], r["instance"])
        if key not in digests or digests[key].hexdigest() == r["outputs"] or r["op"] in named \
                or read(r["outputs"])[1:] != digests[key].sampled():   # (one sampled otherwise: not comparable)
            continue   # (once per operator: its first instance that differs says it)
        named.add(r["op"])
        name = reader.operators[r["op"]].name
        recorded, later = digests[key].count, read(r["outputs"])[0]
        counts = (f"{later:,} outputs where the recorded run made {recorded:,}" if later != recorded
                  else f"as many outputs ({later:,}), not all the same")
        differ.append({"op": name, "instance": r["instance"],
                       "error": f"{name}:{r['instance']} ran again {why_again(r['another_action'])} and emitted other "
                                f"rows than the run tt recorded and replays ({counts}): rows Spark took from that run "
                                f"are not the ones tt shows; where it ran for another action, persist() the RDD or "
                                f"DataFrame before the first so that it runs once"})
    return {"compared": len(reruns), "differ": differ}

"""`tt verify`'s check of the runs Spark made again of recorded tasks.

Spark runs a task it already ran for a second action on an RDD or DataFrame that was not
persisted, or to recompute a lost or speculated partition. tt records the first run; the later
ones run in shadow and keep the digest of what they emitted (core/output_digest.py, the
`reruns` table). The replay of the recorded run emits what that run emitted, so where a later
run's digest differs, rows Spark took from it (another action's output) are not the ones tt
replays. The recorder already says where a later run ended in another state or after other
inputs; a generator's end state is empty, so only its outputs tell.
"""

from __future__ import annotations

from ..core.errors import TTError
from ..core.output_digest import OutputDigest, why_again
from ..core.runtime import OperatorFailure
from ..store.reader import RunReader
from .engine import Engine


def verify_reruns(reader: RunReader, *, trust: bool = False) -> dict:
    """{"compared": how many later runs, "differ": [{"op", "instance", "error"}, ...], and "error"
    where none could be compared}: each instance with a later run is replayed from its start to
    its recorded end, digesting what it emits, and compared with each later run's digest (a
    replay of its own, from each instance's start, so that every output is digested)."""
    reruns = [r for r in reader.reruns() if r["outputs"] is not None]
    if not reruns:
        return {"compared": 0, "differ": []}
    engine = Engine(reader, trust=trust)
    digests = {}
    for r in reruns:
        key = (r["op"], r["instance"])
        inst = engine.instances.get(key)
        if inst is not None and key not in digests:
            digests[key] = OutputDigest.like(r["outputs"])
            inst.runner.targets.append(digests[key])
    try:
        engine.advance_to({key: engine.instances[key].total for key in digests}, pull=True)
    except (OperatorFailure, TTError) as e:   # (a replay that cannot reach an instance's end compares nothing)
        what = f"{e.runner.label} raised {type(e.error).__name__}: {e.error}" if isinstance(e, OperatorFailure) else e
        return {"compared": 0, "differ": [], "error": f"the replay could not reach their ends: {what}"}
    differ, named = [], set()
    for r in reruns:
        key = (r["op"], r["instance"])
        if key not in digests or digests[key].hexdigest() == r["outputs"]:
            continue
        inst = engine.instances[key]
        if r["op"] in named:   # once per operator: the first instance says it
            continue
        named.add(r["op"])
        why = why_again(r["another_action"])
        recorded, later = digests[key].count, int(r["outputs"].split(":", 1)[0])
        counts = (f"{later:,} outputs where the recorded run made {recorded:,}" if later != recorded
                  else f"as many outputs ({later:,}), not all the same")
        differ.append({"op": inst.node.name, "instance": r["instance"],
                       "error": f"{inst.label} ran again {why} and emitted other rows than the run tt recorded and "
                                f"replays ({counts}): rows Spark took from that run are not the ones tt shows; "
                                f"where it ran for another action, persist() the RDD or DataFrame before the first "
                                f"so that it runs once"})
    return {"compared": len(reruns), "differ": differ}

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
from ..core.output_digest import OutputDigest, read, why_again
from ..core.runtime import OperatorFailure
from ..store.reader import RunReader
from .engine import Engine


Key = tuple[int, int]


def _comparable(rerun: dict) -> bool:
    """A later run whose digest this tt reads ("count:every:xxh3-128")."""
    return read(rerun["outputs"]) is not None


def watch(reader: RunReader, engine: Engine) -> dict[Key, tuple[object, OutputDigest]]:
    """Digest, from the start of a fresh `engine`, what each instance with a later run emits:
    `tt verify`'s own pass then digests them on its way (`finished` takes them at its end),
    and `verify_reruns` replays only those it could not."""
    watched = {}
    for r in reader.reruns():
        key = (r["op"], r["instance"])
        inst = engine.instances.get(key)
        if _comparable(r) and inst is not None and key not in watched:
            digest = OutputDigest.like(r["outputs"])
            inst.runner.targets.append(digest)
            watched[key] = (inst.runner, digest)
    return watched


def finished(engine: Engine, watched: dict[Key, tuple[object, OutputDigest]]) -> dict[Key, OutputDigest]:
    """Of `watch`'s digests, those complete: their instance at its end, on the runner that
    digested it from its start (a reset makes another)."""
    return {key: digest for key, (runner, digest) in watched.items()
            if engine.instances[key].runner is runner and engine.instances[key].count == engine.instances[key].total}


def verify_reruns(reader: RunReader, *, trust: bool = False, digested: dict[Key, OutputDigest] | None = None) -> dict:
    """{"compared": how many later runs, "differ": [{"op", "instance", "error"}, ...], and "error"
    where none could be compared}: each instance with a later run is replayed from its start to
    its recorded end, digesting what it emits, and compared with each later run's digest (a
    replay of its own, from each instance's start, so that every output is digested), but for
    those `digested` already holds (`tt verify`'s pass: `watch`, `finished`)."""
    reruns = [r for r in reader.reruns() if _comparable(r)]
    if not reruns:
        return {"compared": 0, "differ": []}
    digests = dict(digested or {})
    if any((r["op"], r["instance"]) not in digests for r in reruns):
        engine = Engine(reader, trust=trust)
        left = {key: digest for key, (_, digest) in watch(reader, engine).items() if key not in digests}
        try:
            engine.advance_to({key: engine.instances[key].total for key in left}, pull=True)
        except (OperatorFailure, TTError) as e:   # (a replay that cannot reach an instance's end compares nothing)
            what = (f"{e.runner.label} raised {type(e.error).__name__}: {e.error}" if isinstance(e, OperatorFailure)
                    else e)
            return {"compared": 0, "differ": [], "error": f"the replay could not reach their ends: {what}"}
        digests.update(left)
    differ, named = [], set()
    for r in reruns:
        key = (r["op"], r["instance"])
        if key not in digests or digests[key].hexdigest() == r["outputs"] or r["op"] in named:
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

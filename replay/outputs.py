"""`tt verify`'s check of what hooked functions emitted: the replay's rows against the run's.

A hooked function's states can agree with the recording while its rows do not: where its code
reads something no log gives back (a set of objects iterated in address order, `id()`, a
thread's ident, a file C code reads), the replay emits other rows than the run did, and the
debugger and `tt lineage` would show them as the run's. So a recorded hooked instance digests
what it emits (core/output_digest.py: the `outputs` table), as a run Spark made again of a
recorded task does (the `reruns` table, replay/reruns.py), and `tt verify` digests what the
replay emits from each such instance's start to its recorded end, and compares. A Dataflow
operator is not digested: its outputs follow from its logged inputs and its verified state.
"""

from __future__ import annotations

from ..core.errors import TTError
from ..core.output_digest import OutputDigest, read
from ..core.runtime import OperatorFailure
from ..store.reader import RunReader
from .engine import Engine

Key = tuple[int, int]


def expected(reader: RunReader) -> dict[Key, str]:
    """Per instance, a digest this tt reads that its replay is compared with: the recorded
    run's own, else the first of a run Spark made again (both digest alike: `OutputDigest.like`)."""
    said: dict[Key, str] = {}
    for key, digest in reader.recorded_outputs().items():
        if read(digest) is not None:
            said[key] = digest
    for r in reader.reruns():
        key = (r["op"], r["instance"])
        if key not in said and read(r["outputs"]) is not None:
            said[key] = r["outputs"]
    return said


def watch(reader: RunReader, engine: Engine) -> dict[Key, tuple[object, OutputDigest]]:
    """Digest, from the start of a fresh `engine`, what each instance with an expected digest
    emits: `tt verify`'s own pass then digests them on its way (`finished` takes them at its
    end), and `replayed` replays only those it could not."""
    watched = {}
    for key, said in expected(reader).items():
        inst = engine.instances.get(key)
        if inst is not None:
            digest = OutputDigest.like(said)
            inst.runner.targets.append(digest)
            watched[key] = (inst.runner, digest)
    return watched


def finished(engine: Engine, watched: dict[Key, tuple[object, OutputDigest]]) -> dict[Key, OutputDigest]:
    """Of `watch`'s digests, those complete: their instance at its end, on the runner that
    digested it from its start (a reset makes another)."""
    return {key: digest for key, (runner, digest) in watched.items()
            if engine.instances[key].runner is runner and engine.instances[key].count == engine.instances[key].total}


def replayed(reader: RunReader, keys, *, trust: bool = False,
             digested: dict[Key, OutputDigest] | None = None) -> tuple[dict[Key, OutputDigest], str | None]:
    """What the replay emits at each of `keys`, digested from its start to its recorded end, and
    why it could not be, if so: those `digested` holds already (`tt verify`'s pass: `watch`,
    `finished`), the others by a replay of their own."""
    digests = dict(digested or {})
    if all(key in digests for key in keys):
        return digests, None
    engine = Engine(reader, trust=trust)
    left = {key: digest for key, (_, digest) in watch(reader, engine).items() if key in keys and key not in digests}
    try:
        engine.advance_to({key: engine.instances[key].total for key in left}, pull=True)
    except (OperatorFailure, TTError) as e:   # (a replay that cannot reach an instance's end compares nothing)
        what = (f"{e.runner.label} raised {type(e.error).__name__}: {e.error}" if isinstance(e, OperatorFailure)
                else e)
        return digests, f"the replay could not reach their ends: {what}"
    digests.update(left)
    return digests, None


def verify_outputs(reader: RunReader, *, trust: bool = False, digested: dict[Key, OutputDigest] | None = None) -> dict:
    """{"compared": how many instances, "differ": [{"op", "instance", "error"}, ...], and "error"
    where none could be compared}: each recorded hooked instance's digest against its replay's,
    once per operator (its first instance that differs says it)."""
    recorded = {key: said for key, said in reader.recorded_outputs().items() if read(said) is not None}
    if not recorded:
        return {"compared": 0, "differ": []}
    digests, error = replayed(reader, set(recorded), trust=trust, digested=digested)
    if error is not None:
        return {"compared": 0, "differ": [], "error": error}
    differ, named = [], set()
    for (op, i), said in sorted(recorded.items()):
        if (op, i) not in digests or digests[(op, i)].hexdigest() == said or op in named:
            continue
        named.add(op)
        name = reader.operators[op].name
        ran, again = read(said)[0], digests[(op, i)].count
        counts = (f"{again:,} outputs where the run emitted {ran:,}" if again != ran
                  else f"as many outputs ({ran:,}), not all the same")
        differ.append({"op": name, "instance": i,
                       "error": f"{name}:{i} emits other rows in replay than it emitted when recorded ({counts}): "
                                f"its code reads something tt does not log (a set of objects iterated in address "
                                f"order, id(), a thread's ident, a file C code reads), so what tt shows of its rows "
                                f"is not what ran"})
    return {"compared": len(recorded), "differ": differ}

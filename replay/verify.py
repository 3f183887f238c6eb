"""`tt verify`: replay every complete interaction and compare with the recorded states.

Kept apart from the engine it drives (and from the checkpoints it re-checks), so
that `engine.py` is only the replay machinery and nothing imports in a circle.
"""

from __future__ import annotations

from typing import Any, Callable

import cloudpickle
import orjson

from ..core import values
from ..core.errors import ReplayDivergence, RunFileError, TTError
from ..core.runtime import OperatorFailure
from ..store import blobs
from ..store.reader import RunReader
from .checkpoints import Restorer
from .engine import Engine, Instance, Key
from .facts import stored_state


def verify(reader: RunReader, *, trust: bool = False,
           progress: Callable[[int, int], None] | None = None) -> list[dict]:
    """Replay every complete interaction and compare states with the stored ones.

    Returns one result per interaction: `{"k", "ok", ...}`; a failed one names the
    operator, instance and field that differ (or the divergence the replay hit) and,
    for a state that differs, the input after which it first diverges (`_bisect`).
    Stops at the first divergence, since everything after it would differ too. An
    interaction that is incomplete although the run was not cut off there (the run
    completed, or a later interaction is complete) is a failure too (`"incomplete"`).
    """

    engine = Engine(reader, trust=trust)
    results = []
    interactions = reader.interactions()
    prev_k: int | None = None
    for n, interaction in enumerate(interactions):
        snap = reader.instances_at(interaction.k)
        try:
            engine.jump(interaction.k)
        except ReplayDivergence as e:
            results.append({"k": interaction.k, "ok": False, "op": e.op, "instance": e.instance,
                            "position": e.position, "error": str(e)})
            break
        except OperatorFailure as f:  # recorded interactions were reached without this exception
            r = f.runner
            results.append({"k": interaction.k, "ok": False, "op": r.name, "instance": r.instance,
                            "position": r.count, "error": f"{r.label} raised {type(f.error).__name__}: "
                            f"{f.error} on input #{r.count} in replay, but not when recorded"})
            break
        except TTError:
            raise
        except _DAMAGE as e:  # stored logs or tuples whose bytes do not decode
            detail = " ".join(str(e).split())[:120]
            raise RunFileError(f"the run file is damaged: replaying to interaction {interaction.k} failed to "
                               f"decode its recorded data ({type(e).__name__}: {detail})") from e
        bad = None
        for key, at in snap.items():
            if at.state is None:
                continue
            recorded = stored_state(reader, key, at.state, interaction.k)
            replayed = engine.instances[key].state()
            diff = values.first_difference(recorded, replayed)
            if diff is not None:
                inst = engine.instances[key]
                path, a, b = diff
                bad = {"k": interaction.k, "ok": False, "op": inst.node.name, "instance": inst.i,
                       "position": at.position, "field": path,
                       "recorded": values.render(a, 120), "replayed": values.render(b, 120),
                       "error": f"{inst.label} differs at interaction {interaction.k} in {path}: recorded "
                                f"{values.render(a, 60)}, replayed {values.render(b, 60)}"}
                found = _bisect(reader, engine, key, prev_k, interaction.k, at.position, path, trust)
                bad["error"] += found.pop("text")
                bad.update(found)
                break
        if bad:
            results.append(bad)
            break
        results.append({"k": interaction.k, "ok": True, "instances": len(snap)})
        prev_k = interaction.k
        if progress is not None:
            progress(n + 1, len(interactions))
    results.extend(_gaps(reader, interactions))
    if all(r["ok"] for r in results) and reader.active_plan() is not None:
        results.extend(_verify_checkpoints(reader, engine, interactions))
    return results


# what decoding damaged bytes raises: zstandard.ZstdError, pickle.UnpicklingError or EOFError, orjson's
# JSONDecodeError (a ValueError); pyarrow raises OSError or ArrowInvalid (a ValueError)
_DAMAGE: tuple[type[BaseException], ...] = (ValueError, OSError, EOFError, cloudpickle.pickle.UnpicklingError,
                                            blobs.zstandard.ZstdError)


def _gaps(reader: RunReader, complete) -> list[dict]:
    """Incomplete interactions that a cut-off run does not explain: any one, in a run that
    completed; one before a complete one, in a run that stopped early (interrupted, failed,
    killed, still recording: there, only those after the last complete one may be)."""
    done = {i.k for i in complete}
    last = max(done, default=-1)
    status = reader.status
    out = []
    for inter in reader.interactions_all:
        if inter.k in done:
            continue
        if status == "complete":
            why = "although the run completed"
        elif inter.k < last:
            why = f"although interaction {last} after it is complete (a run cut off early loses only the last ones)"
        else:
            continue
        missing = _missing_instances(reader, inter.k)
        which = f" ({', '.join(missing[:6])}{' …' if len(missing) > 6 else ''} took no snapshot)" if missing else ""
        out.append({"k": inter.k, "ok": False, "incomplete": True, "missing": missing,
                    "error": f"interaction {inter.k} is incomplete{which}, {why}: the run file is damaged or "
                             f"was written by a faulty recorder"})
    return out


def _missing_instances(reader: RunReader, k: int) -> list[str]:
    """The G(θ) instances with no known state at interaction k (see `RunReader.instances_at`)."""
    missing = []
    for op, i in reader.g_instances():
        name = f"{reader.operators[op].name}:{i}"
        att = reader.attempt_of(op, i)
        if att is None:
            missing.append(name)
            continue
        if reader.conn.execute("SELECT 1 FROM barriers WHERE attempt=? AND op=? AND k=?",
                               (att[0], op, k)).fetchone():
            continue
        fin = reader.conn.execute("SELECT last_k FROM finals WHERE attempt=? AND op=?", (att[0], op)).fetchone()
        if att[1] != "committed" or fin is None or fin[0] >= k:
            missing.append(name)
    return missing


def _bisect(reader: RunReader, engine: Engine, key: Key, prev_k: int | None, k: int, target: int, path: str,
            trust: bool) -> dict:
    """The input of instance `key` after which its replayed state first diverges, for a state
    that differs from the recording at interaction k (and matched at prev_k).

    No state is recorded per input, only at interactions; but a replay that cannot reproduce
    a recording is not deterministic, and then two replays cannot reproduce each other either.
    So the instance is replayed twice, by two engines started at the same position, one input
    at a time up to its position at k: the first input after which the two states differ is
    named. When they never differ (the difference with the recording comes from something that
    is the same within one process: hash order, the environment), the first input that changed
    the diverging field in the replay is named instead. Returns {"text": …} and, when an input
    was found, "tuple", "input", "row" and "found_by"."""
    label = engine.instances[key].label
    other = Engine(reader, trust=trust)
    start = "the start"

    def begin(at_k: int | None) -> None:
        for e in (engine, other):
            e.reset()
            if at_k is not None:
                e.jump(at_k)
    rows: dict[str, dict[int, Any]] = {"a": {}, "b": {}}

    def catch(side: str):
        def after(inst: Instance, pos: int, row: Any) -> None:
            if inst.key == key:
                rows[side][pos] = row
        return after
    try:
        begin(prev_k)
        a, b = engine.instances[key], other.instances[key]
        if prev_k is not None:
            if a.state() == b.state():
                start = f"interaction {prev_k}"
            else:  # the two replays differ at prev_k already: go back to the initial state
                begin(None)
        with engine.hooks(after_consume=catch("a")), other.hooks(after_consume=catch("b")):
            first_change = None
            before = _value_at(a.state(), path)
            for pos in range(a.count, target):
                engine.advance_to({key: pos + 1}, pull=True)
                other.advance_to({key: pos + 1}, pull=True)
                sa, sb = a.state(), b.state()
                ra, rb = rows["a"].pop(pos, None), rows["b"].pop(pos, None)
                if sa != sb:
                    where = values.first_difference(sa, sb)[0]
                    upstream = ra != rb
                    how = (f"replaying {label} twice from {start}, one input at a time, the two replays' states "
                           f"first differ (in {where}) after this input")
                    how += (", and they passed it different rows: what is not deterministic is upstream of "
                            f"{label}" if upstream else ", so processing it is not deterministic (wrap the "
                            "non-deterministic call in tt.log_result)")
                    ref = f"{label}:{pos}"
                    return {"tuple": ref, "input": pos, "row": values.render(_encoded(ra), 200), "found_by": "replays",
                            "text": f"; it first diverges at input {ref} {values.render(_encoded(ra), 120)}: {how}"}
                now = _value_at(sa, path)
                if first_change is None and now != before:
                    first_change = (pos, ra)
            if first_change is None:
                return {"text": f"; no input of {label} changed {path} in the replay from {start} to interaction {k}, "
                                f"and two replays agree with each other"}
            pos, row = first_change
            ref = f"{label}:{pos}"
            return {"tuple": ref, "input": pos, "row": values.render(_encoded(row), 200), "found_by": "first change",
                    "text": f"; the first input that changed {path} in the replay from {start} is {ref} "
                            f"{values.render(_encoded(row), 120)} (two replays agree with each other, so what differs "
                            f"from the recording is the same in every replay: hash order, a clock, the environment?)"}
    except (TTError, OperatorFailure, *_DAMAGE) as e:
        return {"text": f" (the input could not be found: {e})"}


def _encoded(row: Any) -> Any:
    try:
        return orjson.loads(values.dumps(row))
    except Exception:  # noqa: BLE001  (a row is only shown; any value renders somehow)
        return repr(row)


_ABSENT = object()


def _value_at(state: Any, path: str, here: str = "") -> Any:
    """The part of an encoded state at a `values.first_difference` path (`_ABSENT` if none)."""
    if path in ("", "<root>") or here == path:
        return state
    if isinstance(state, dict):
        for k, v in state.items():
            sub = values._join(here, k) if isinstance(k, str) else f"{here}.{k}"
            if sub == path or (path.startswith(sub) and path[len(sub):len(sub) + 1] in (".", "[")) \
                    or (sub == here and v is not state):
                found = _value_at(v, path, sub)
                if found is not _ABSENT:
                    return found
        return _ABSENT
    if isinstance(state, list):
        for i, v in enumerate(state):
            sub = f"{here}[{i}]"
            if sub == path or path.startswith(sub + ".") or path.startswith(sub + "["):
                return _value_at(v, path, sub)
        return _ABSENT
    return _ABSENT


def _verify_checkpoints(reader: RunReader, engine: Engine, interactions) -> list[dict]:
    """Every interaction again, this time jumping from the active plan's checkpoints."""

    restorer = Restorer(engine)
    out = []
    for interaction in interactions:
        snap = reader.instances_at(interaction.k)
        targets = {key: at.position for key, at in snap.items()}
        engine.reset()
        line, _ = restorer.line_for(targets)
        restorer.load(line)
        engine.advance_to(targets)
        for key, at in snap.items():
            diff = values.first_difference(stored_state(reader, key, at.state, interaction.k),
                                           engine.instances[key].state()) if at.state is not None else None
            if diff is not None:
                inst = engine.instances[key]
                out.append({"k": interaction.k, "ok": False, "op": inst.node.name, "instance": inst.i,
                            "checkpoint": True, "field": diff[0],
                            "error": f"jumping to interaction {interaction.k} from the checkpoints gives "
                                     f"{inst.label} a different {diff[0]}: recorded {values.render(diff[1], 60)},"
                                     f" restored {values.render(diff[2], 60)}"})
                return out
        out.append({"k": interaction.k, "ok": True, "checkpoint": True,
                    "restored_from": sorted({seq is not None for _, seq in line.values()})})
    return out



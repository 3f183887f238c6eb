"""`tt verify`: replay every complete interaction and compare with the recorded states.

`verify_statestore` (`tt verify --statestore`) compares a streaming run's transformWithState
processors with a second oracle, Spark's own state store, which the CLI reads through
recorder/statestore.py (this module never imports Spark: it is handed the readers).

Kept apart from the engine it drives (and from the checkpoints it re-checks), so
that `engine.py` is only the replay machinery and nothing imports in a circle.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import cloudpickle
import orjson

from ..core import kept_inputs, libraries, values
from ..core.errors import ReplayDivergence, RunFileError, TTError, UsageError
from ..core.group_state import NO_TIMESTAMP, GroupStateOperator
from ..core.hooked import GROUP_STATE_KIND, HookedOperator
from ..core.runtime import OperatorFailure
from ..core.state_handle import StoreView, same, shown
from ..store import blobs
from ..store.reader import RunReader
from .checkpoints import Restorer
from . import outputs as replayed_outputs
from .engine import Engine, Instance, Key, RecordedFailure, recorded_failures
from .facts import stored_state


def verify(reader: RunReader, *, trust: bool = False, progress: Callable[[int, int], None] | None = None,
           outputs: dict | None = None, failure: dict | None = None) -> list[dict]:
    """Replay every complete interaction and compare states with the stored ones.

    Returns one result per interaction: `{"k", "ok", ...}`; a failed one names the
    operator, instance and field that differ (or the divergence the replay hit) and,
    for a state that differs, the input after which it first diverges (`_bisect`).
    Stops at the first divergence, since everything after it would differ too. An
    interaction that is incomplete although the run was not cut off there (the run
    completed, or a later interaction is complete) is a failure too (`"incomplete"`).

    A join's stored rows are stored at interactions by their keys and rows, and digested at
    its task's end (core/kept_inputs.py `ROWS`): an interaction that compared such a field so
    says (`"rows_only"`: the operators), and an instance whose digest differs is searched for
    its input from the last interaction its digest matched, not from the last one at all.

    `outputs`, a dict, gets on the way what the replay of each recorded hooked instance, and of each
    one Spark ran again, emitted (replay/outputs.py `watch`), for `verify_outputs` and
    `reruns.verify_reruns`, which then need not replay them again.

    `failure`, a dict, gets what `_reproduce_failure` found of a failed run's failing tuples, once
    every interaction matched: the replay goes on from the last one to where the run failed.
    """

    reader.sources().check_all()  # a changed source file: one line now, not a divergence later
    engine = Engine(reader, trust=trust)
    watched = replayed_outputs.watch(reader, engine) if outputs is not None else {}
    results = []
    interactions = reader.interactions()
    # (the progress: each interaction, and a failed run's replay on to its failure, one step more)
    steps = len(interactions) + (1 if failure is not None and reader.failure_points() else 0)
    prev_k: int | None = None
    digested: dict[Key, int] = {}   # per instance, the last k its whole state (digests too) matched
    by_rows_since: set[Key] = set()   # the instances compared by rows since
    finals: dict[Key, int] = {}   # each instance's position at its task's end
    matched: dict[Key, tuple] = {}   # per instance, where its state last matched (`differing_state`)
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
            missing = (f"; the module is neither importable here nor stored with the run (a function imported "
                       f"it in Spark's workers alone): add the folder that holds it to PYTHONPATH"
                       if isinstance(f.error, ModuleNotFoundError) else "")
            results.append({"k": interaction.k, "ok": False, "op": r.name, "instance": r.instance,
                            "position": r.count, "error": f"{r.label} raised {type(f.error).__name__}: "
                            f"{f.error} on input #{r.count} in replay, but not when recorded{missing}"})
            break
        except TTError:
            raise
        except _DAMAGE as e:  # stored logs or tuples whose bytes do not decode
            detail = " ".join(str(e).split())[:120]
            raise RunFileError(f"the run file is damaged: replaying to interaction {interaction.k} failed to "
                               f"decode its recorded data ({type(e).__name__}: {detail})") from e
        by_rows: set[Key] = set()
        held: set[int] = set()   # the operators an instance of which held a state here
        bad = differing_state(reader, engine, interaction.k, snap, by_rows, held, matched)
        if bad:
            key = (reader.operator(bad["op"]).id, bad["instance"])
            since = digested.get(key) if key in by_rows_since else prev_k
            found = _bisect(reader, engine, key, since, interaction.k, bad["position"], bad["field"], trust)
            bad["error"] += found.pop("text")
            bad.update(found)
            results.append(bad)
            break
        moved = {op for (op, _), at in snap.items() if at.state is not None and at.position}
        result = {"k": interaction.k, "ok": True, "instances": len(snap),
                  # (compared after some input, but empty in every instance: a generator that ended, a
                  # function keeping nothing; before any input every state is empty, and says nothing)
                  "empty": sorted({reader.operators[op].name for op in moved if op not in held}),
                  "moved": sorted({reader.operators[op].name for op in moved}),
                  # (and those caught inside a task: between its first input and its last)
                  "inside": sorted({reader.operators[op].name for (op, i), at in snap.items()
                                    if op in moved and 0 < at.position < _last_position(reader, finals, op, i)})}
        if by_rows:
            result["rows_only"] = sorted({reader.operators[op].name for op, _ in by_rows})
        results.append(result)
        by_rows_since |= by_rows
        for key, at in snap.items():
            if at.state is not None and key not in by_rows:
                digested[key] = interaction.k
                by_rows_since.discard(key)
        prev_k = interaction.k
        if progress is not None:
            progress(n + 1, steps)
    results.extend(_gaps(reader, interactions))
    if failure is not None and all(r["ok"] for r in results):
        failure.update(_reproduce_failure(reader, engine) or {})
        if progress is not None:
            progress(steps, steps)
    if outputs is not None:
        outputs.update(replayed_outputs.finished(engine, watched))
    if all(r["ok"] for r in results) and reader.active_plan() is not None:
        results.extend(_verify_checkpoints(reader, engine, interactions))
    return results


def _last_position(reader: RunReader, finals: dict[Key, int], op: int, instance: int) -> int:
    """How many inputs the instance took in all (its task's end), remembered in `finals`; 0 when
    the run file has no end for it (a task cut off: no interaction of it is then said inside)."""
    key = (op, instance)
    if key not in finals:
        end = reader.final(op, instance)
        finals[key] = end.position if end is not None else 0
    return finals[key]


def _reproduce_failure(reader: RunReader, engine: Engine) -> dict | None:
    """Whether the replay fails where the recorded run failed, as it failed: every instance goes
    on to where its log ends, each failed one to just before the tuple it raised on, which it is
    then fed (`Instance._feed_failing`). A failed run's interactions may all precede its failure
    (a run without --every has only its start): without this, verify compared nothing of it and
    said so in a line that read as a pass. None for a run that did not fail in an operator.

    `{"ok", "label", "error", "checked"}`: `checked` False where no failing tuple can be replayed
    (`engine.recorded_failures`' reason); `ok` False where the replay raised otherwise, or not at
    all (`text`)."""
    failures = recorded_failures(engine)
    if not failures:
        return None
    failing = [f for f in failures if f.steppable]
    if not failing:
        f = failures[0]
        return {"ok": True, "checked": False, "label": f.label, "error": f.error,
                "reason": f.reason + ("" if f.in_g else " to replay it")}
    found = {"ok": True, "checked": True, "label": failing[0].label, "error": failing[0].error,
             "instances": len(failing)}
    try:
        engine.advance_to({key: inst.failed_at if inst.failed_at is not None else inst.total
                           for key, inst in engine.instances.items()})
        for f in failing:
            try:
                engine.step(engine.instances[(reader.operator(f.op).id, f.instance)])
            except RecordedFailure as e:
                got = f"{e.error_type}: {e.error}"
                if _ADDRESS.sub("0x…", got) != _ADDRESS.sub("0x…", f.error):
                    return {**found, "ok": False, "label": f.label,
                            "text": f"{f.label} raised {f.error} when recorded, but {got} in replay"}
    except ReplayDivergence as e:
        return {**found, "ok": False, "text": str(e)}
    except OperatorFailure as e:   # an instance raised on the way, on a tuple it did not raise on when recorded
        return {**found, "ok": False, "text": f"{e} in replay, before the recorded failure"}
    return found


#: an object's address in an exception's message (`<Foo object at 0x7f…>`), which differs run to run
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def differing_state(reader: RunReader, engine: Engine, k: int, snap: dict | None = None,
                    by_rows: set | None = None, held: set | None = None,
                    matched: dict | None = None) -> dict | None:
    """Where the replayed states at interaction k (the engine stands there) first differ from
    the recorded ones: the instance, its field, both values and a line that says it; None where
    every instance's state equals its recorded one. `tt verify` checks every interaction so, and
    the debug session the one it jumps to. `by_rows` gets the instances whose recorded state
    holds stored rows by their keys and rows alone (core/kept_inputs.py `ROWS`); `held`, the
    operators whose recorded state is not empty in some instance.

    `matched` (verify's, across interactions): per instance, the position and recorded state at
    which its replayed state last matched. An instance at the same position with the same
    recorded state (content-addressed) matches again without being compared: the replay did not
    move it, and its recorded state is that same one. A run taken every 0.1 s holds many
    interactions where an instance stood still; comparing its 50,000-key state again at each
    (both encoded, walked key by key) kept `tt verify` over ten minutes on one such run."""
    for key, at in (snap if snap is not None else reader.instances_at(k)).items():
        if at.state is None:
            continue
        last = matched.get(key) if matched is not None else None
        if last is not None and last[:2] == (at.position, at.state):
            _, _, holds, rows_only = last
            if held is not None and holds:
                held.add(key[0])
            if by_rows is not None and rows_only:
                by_rows.add(key)
            continue
        recorded = stored_state(reader, key, at.state, k)
        holds, rows_only = bool(recorded), kept_inputs.rows_only(recorded)
        if held is not None and holds:
            held.add(key[0])
        if by_rows is not None and rows_only:
            by_rows.add(key)
        replayed = engine.instances[key].state(like=recorded)
        diff = None if values.same_encoded(recorded, replayed) else values.first_difference(recorded, replayed)
        if diff is None and matched is not None:
            matched[key] = (at.position, at.state, holds, rows_only)
        if diff is not None:
            inst = engine.instances[key]
            path, a, b = diff
            (long_a, long_b), (short_a, short_b) = values.render_apart(a, b, 120), values.render_apart(a, b, 60)
            return {"k": k, "ok": False, "op": inst.node.name, "instance": inst.i,
                    "position": at.position, "field": path, "recorded": long_a, "replayed": long_b,
                    "error": f"{inst.label} differs at interaction {k} in {path}: recorded {short_a}, "
                             f"replayed {short_b}"}
    return None


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
    op = engine.instances[key].runner.op
    field = re.split(r"[.\[]", path, maxsplit=1)[0]
    if isinstance(op, HookedOperator) and field in op.shared_attributes():   # (no input is to blame)
        return {"text": f"; {field} is an attribute of {reader.operator(key[0]).name}'s class, which its code writes into and every "
                        f"instance shares: in the run each Python worker's tasks shared it, in the replay every "
                        f"instance does, in another order, so what it holds is no one task's (keep it per "
                        f"instance: set it in __init__)"}
    other = Engine(reader, trust=trust)
    start = "the start"

    def begin(at_k: int | None) -> None:
        for e in (engine, other):
            e.reset()
            if at_k is not None:
                e.jump(at_k)
    rows: dict[str, dict[int, Any]] = {"a": {}, "b": {}}

    def catch(side: str):
        def before(inst: Instance, pos: int, channel: Any) -> None:
            if inst.key == key:   # encoded as it arrives: processing it may change it (a join's merge)
                rows[side][pos] = _encoded(inst.peek())
        return before
    try:
        begin(prev_k)
        a, b = engine.instances[key], other.instances[key]
        if prev_k is not None:
            if values.same_encoded(a.state(), b.state()):
                start = f"interaction {prev_k}"
            else:  # the two replays differ at prev_k already: go back to the initial state
                begin(None)
        with engine.hooks(on_consume=catch("a")), other.hooks(on_consume=catch("b")):
            first_change = None
            before = _value_at(a.state(), path)
            for pos in range(a.count, target):
                engine.advance_to({key: pos + 1}, pull=True)
                other.advance_to({key: pos + 1}, pull=True)
                sa, sb = a.state(), b.state()
                ra, rb = rows["a"].pop(pos, None), rows["b"].pop(pos, None)
                if not values.same_encoded(sa, sb):
                    where = values.first_difference(sa, sb)[0]
                    upstream = ra != rb
                    how = (f"replaying {label} twice from {start}, one input at a time, the two replays' states "
                           f"first differ (in {where}) after this input")
                    how += (", and they passed it different rows: what is not deterministic is upstream of "
                            f"{label}" if upstream else ", so processing it is not deterministic (wrap the "
                            "non-deterministic call in tt.log_result; of a plain PySpark job's functions, tt logs the "
                            "clock, random, numpy.random, uuid, os.urandom, secrets, pandas.Timestamp.now, process id "
                            "and host name calls itself, but not what comes of an object's address, id() or a set of "
                            "objects: docs/HOOKS.md §5)")
                    ref = f"{label}:{pos}"
                    return {"tuple": ref, "input": pos, "row": values.render(ra, 200), "found_by": "replays",
                            "text": f"; it first diverges at input {ref} {values.render(ra, 120)}: {how}"}
                now = _value_at(sa, path)
                if first_change is None and not values.same_encoded(now, before):
                    first_change = (pos, ra)
            if first_change is None:
                return {"text": f"; no input of {label} changed {path} in the replay from {start} to interaction {k}, "
                                f"and two replays agree with each other"}
            pos, row = first_change
            ref = f"{label}:{pos}"
            differ = libraries.differing(reader.libraries)
            suspects = (f"libraries of other versions here than the workers had: {libraries.described(differ)}; "
                        if differ else "") + (f"{engine.zone_note}; " if engine.zone_note else "") + (
                "a value rewritten in place in a file read by reference, its size, time and footer kept "
                "(docs/SOURCES.md §8); " if reader.referenced() else "")
            return {"tuple": ref, "input": pos, "row": values.render(row, 200), "found_by": "first change",
                    "text": f"; the first input that changed {path} in the replay from {start} is {ref} "
                            f"{values.render(row, 120)} (two replays agree with each other, so what differs "
                            f"from the recording is the same in every replay: {suspects}hash order, a clock, a module "
                            f"only Spark's workers imported, an installed package changed since, the environment?)"}
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
            if at.state is None:
                continue
            recorded = stored_state(reader, key, at.state, interaction.k)
            diff = values.first_difference(recorded, engine.instances[key].state(like=recorded))
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




# --- tt verify --statestore: Spark's own state store as a second oracle --------------------------

_WRITES = frozenset({"update", "clear", "put", "appendValue", "appendList", "updateValue", "removeKey"})


def streaming_queries(reader: RunReader, checkpoints: Sequence[str] = ()) -> list[dict]:
    """The streaming queries of a run whose transformWithState processors `--statestore` can
    compare: `[{"id", "name", "checkpoint", "operators": [names]}]`, the checkpoint where the
    run recorded it (`plan["queries"]`) unless `checkpoints` (`--checkpoint [QUERY=]PATH`) says
    otherwise. Raises a one-line `UsageError` when there is nothing to compare or a checkpoint
    is not known. Needs no Spark."""
    from ..core.hooked import PROCESSOR_KINDS

    plan = reader.plan
    batches = plan.get("micro_batches") or {}
    kinds = {o.name: o.kind for o in reader.operators}
    procs = [name for name in batches if kinds.get(name) in PROCESSOR_KINDS | {GROUP_STATE_KIND}]
    if not procs:
        why = ("its streaming query runs no transformWithState processor and no applyInPandasWithState function"
               if batches else "it recorded no streaming query (a batch run)")
        raise UsageError(f"{reader.path}: there is no streaming query to compare with Spark's state store: {why}; "
                         f"--statestore checks runs of transformWithState(InPandas) and applyInPandasWithState in "
                         f"Structured Streaming")
    queries = [{"id": q, "name": info.get("name"), "checkpoint": info.get("checkpoint"),
                "operators": [o for o in info.get("operators", []) if o in procs]}
               for q, info in (plan.get("queries") or {}).items()]
    # the queries that ran processors; with none known, the one query the run saw (if it saw one)
    queries = [q for q in queries if q["operators"]] or (queries if len(queries) == 1 else [])
    unassigned = [p for p in procs if not any(p in q["operators"] for q in queries)]
    if unassigned:
        if len(queries) == 1:
            queries[0]["operators"] += unassigned
        else:   # recorded by a tt that did not note the queries
            queries.append({"id": None, "name": None, "checkpoint": None, "operators": unassigned})
    for given in checkpoints:
        which, _, path = given.rpartition("=")
        named = [q for q in queries if which and which in (q["id"], q["name"])
                 or which and q["id"] and q["id"].startswith(which)]
        if which and not named and len(queries) > 1:
            raise UsageError(f"--checkpoint {given}: the run has no streaming query {which!r} (its queries: "
                             f"{', '.join(_query_label(q) for q in queries)})")
        if not named:
            if len(queries) > 1:
                raise UsageError(f"--checkpoint {given}: the run has {len(queries)} streaming queries; say whose "
                                 f"checkpoint it is with --checkpoint QUERY=PATH (queries: "
                                 f"{', '.join(_query_label(q) for q in queries)})")
            named, path = queries, given
        for q in named:
            q["checkpoint"], q["given"] = path, True
    for q in queries:
        if not q["checkpoint"]:
            name = q["name"] or q["id"]
            raise UsageError(f"{reader.path} does not say where the checkpoint of its streaming query"
                             f"{' ' + name if name else ''} is (a run recorded before tt noted it, or Spark did not "
                             f"tell); give it with --checkpoint PATH")
    return queries


def _query_label(q: dict) -> str:
    return q["name"] or q["id"] or "(unknown)"


class _Wrote:
    """Stands in for a checked instance's `StoreView.saw`: folds the call into the view as
    before, and notes which keys each call wrote, per variable. What the view knows whole (a
    key's value, its timers) and what its calls deleted, the view notes itself
    (`StoreView.whole`, `timers_whole`, `timers_gone`)."""

    def __init__(self, view: Any, wrote: dict):
        self.view, self.wrote = view, wrote

    def __call__(self, name: str, method: str, key: Any, args: tuple, answer: Any) -> None:
        type(self.view).saw(self.view, name, method, key, args, answer)
        if name != "timers" and method in _WRITES:
            self.wrote.setdefault(name, set()).add(shown(key))


class _Tracker:
    """Puts a `_Wrote` on the view of every instance `--statestore` checks, as it is replayed;
    of an applyInPandasWithState instance, notes the keys its calls were for."""

    def __init__(self, keys: set):
        self.keys = keys
        self.views: dict[Key, Any] = {}
        self.wrote: dict[Key, dict] = {}
        self.grouped: dict[Key, GroupStateOperator] = {}   # an applyInPandasWithState instance's operator
        self.called: dict[Key, set] = {}   # ... the keys its calls were for
        self.writes: dict[Key, dict] = {}  # ... and what Spark wrote for each of them last

    def on_consume(self, inst: Instance, position: int, channel: Any) -> None:
        if inst.key not in self.keys:
            return
        op = inst.runner.op
        if isinstance(op, GroupStateOperator):
            if self.grouped.get(inst.key) is not op:   # a fresh operator: a fresh account of the keys it called
                self.grouped[inst.key], called, writes = op, set(), {}
                self.called[inst.key], self.writes[inst.key] = called, writes
                op.watch_state_calls(lambda kind, field, k: field == "state" and called.add(k))
                op.watch_store_writes(writes.__setitem__)
            return
        view = getattr(op, "_store", None)
        if not isinstance(view, StoreView) or self.views.get(inst.key) is view:
            return
        self.views[inst.key] = view   # a fresh operator (the start, a reset): a fresh account
        self.wrote[inst.key] = {}
        view.saw = _Wrote(view, self.wrote[inst.key])


_NONE = object()


def _agrees(kind: str, replayed: Any, stored: Any, whole: bool) -> bool:
    """A replayed value against the store's: a view that holds only what its calls showed (an
    appended list, some entries of a map) must be a suffix, or a part, of the store's."""
    if stored is _NONE:
        return False
    if kind == "list" and not whole:
        n = len(replayed)
        return isinstance(stored, list) and len(stored) >= n and same(stored[len(stored) - n:], replayed)
    if kind == "map" and not whole:
        return isinstance(stored, dict) and all(uk in stored and same(stored[uk], v) for uk, v in replayed.items())
    return same(replayed, stored)


def _keys_text(keys: Any) -> str:
    return "[" + ", ".join(values.render(values.encode(k), 40) for k in sorted(keys, key=repr)[:8]) + \
        (", …" if len(keys) > 8 else "") + "]"


def verify_statestore(reader: RunReader, queries: list[dict], stores: list[Any], *, trust: bool = False,
                      progress: Callable[[int, int], None] | None = None) -> dict:
    """Replay every micro-batch end and compare each transformWithState processor's replayed
    view with Spark's state store (`stores[i]` reads `queries[i]`'s checkpoint: see
    recorder/statestore.py `StateStore`).

    At the end of micro-batch b, every instance that ran micro-batch b (a task: one partition)
    shows the keys its calls touched; each (variable, key) it shows must equal the store's
    value after batch b in that partition (a view that holds only what its calls showed, an
    appended list or some entries of a map, must be a suffix, or a part, of it), and a key its
    calls cleared or found empty (and did not write again) must have no value there. A key's
    timers: those its calls registered (and did not delete) must be in the store, those deleted
    or fired must not; all of them, when its calls listed them. Then, per
    variable, the keys Spark's change feed says batch b wrote must be the keys the replay's
    calls wrote in batch b (not for a TTL'd variable, whose expiries Spark writes itself;
    skipped with the reason when the change feed cannot be read). Returns `{"ok", "keys",
    "values", "timers", "micro_batches", "differences", "change_feed", "skipped", ...}`."""
    slots = reader.plan.get("micro_batches") or {}
    checks: dict[Key, dict] = {}
    for qi, q in enumerate(queries):
        for name in q["operators"]:
            op = reader.operator(name)
            for i, slot in enumerate(slots.get(name, [])):
                checks[(op.id, i)] = {"query": qi, "op": name, "instance": i, "batch": int(slot[0]),
                                      "partition": int(slot[1])}
    engine = Engine(reader, trust=trust)
    skipped: list[dict] = []
    outside = sorted({c["op"] for key, c in checks.items() if key not in engine.instances})
    if outside:
        skipped.append({"operators": outside, "why": "not replayed: outside G(θ) (record with --watch on it)"})
    checks = {key: c for key, c in checks.items() if key in engine.instances}
    tracker = _Tracker(set(checks))
    differences: list[dict] = []
    mapped: dict[tuple[int, str], dict | None] = {}   # (query, operator) -> the store's operator
    per_batch: dict[tuple[int, str, int], list] = {}  # (query, operator, batch) -> [instances, checked]
    for c in checks.values():
        per_batch.setdefault((c["query"], c["op"], c["batch"]), [0, 0])[0] += 1
    wrote: dict[tuple[int, str, int], dict[str, set]] = {}
    group_writes: dict[tuple[int, str, int], dict] = {}   # applyInPandasWithState: {key: what Spark wrote last}
    counted = {"keys": 0, "values": 0, "timers": 0}
    batches: set[tuple[int, int]] = set()

    def store_operator(qi: int, name: str, declared: set, kind: str = "transformWithState") -> dict | None:
        if (qi, name) not in mapped:
            found = [o for o in stores[qi].operators() if kind.lower() in o["name"].lower()]
            fits = [o for o in found if declared <= set(o["variables"])] or found
            taken = {id(o) for (q, _), o in mapped.items() if q == qi and o is not None}
            mapped[(qi, name)] = next((o for o in fits if id(o) not in taken), fits[0] if fits else None)
            if not found:
                differences.append({"operator": name, "query": _query_label(queries[qi]),
                                    "error": f"the checkpoint {queries[qi]['checkpoint']} holds no {kind} "
                                             f"operator's state: is it the checkpoint of {name}'s query?"})
        return mapped[(qi, name)]

    def check(key: Key) -> None:
        c = checks[key]
        qi, name, b, part = c["query"], c["op"], c["batch"], c["partition"]
        inst = engine.instances[key]
        view, grouped = tracker.views.get(key), tracker.grouped.get(key)
        if view is None and grouped is None:
            return
        sop = store_operator(qi, name, set() if grouped is not None else set(view.kinds),
                             GROUP_STATE_KIND if grouped is not None else "transformWithState")
        if sop is None:
            return
        where = f"micro-batch {b}: {inst.label} (partition {part})"
        if b > sop["max_batch"]:
            differences.append({"batch": b, "operator": name, "instance": inst.i, "partition": part,
                                "error": f"{where} ran, but Spark's state store in {queries[qi]['checkpoint']} ends "
                                         f"at micro-batch {sop['max_batch']}: is it this run's checkpoint?"})
            return
        if b < sop["min_batch"]:
            skipped.append({"batch": b, "operator": name, "instance": inst.i,
                            "why": f"Spark keeps micro-batches {sop['min_batch']} to {sop['max_batch']} only"})
            return
        if grouped is not None:
            _check_group_states(grouped, tracker.called.get(key, set()), stores[qi].group_states(sop["id"], b, part),
                                where, {"batch": b, "operator": name, "instance": inst.i, "partition": part},
                                differences, counted)
            group_writes.setdefault((qi, name, b), {}).update(tracker.writes.get(key, {}))
            batches.add((qi, b))
            per_batch[(qi, name, b)][1] += 1
            return
        keys = set()
        for var, kind in view.kinds.items():
            per_key = view.vars.get(var, {})
            absent = sorted((k for v, k in view.whole if v == var and k not in per_key), key=repr)   # found no value
            if not per_key and not absent:
                continue
            meta = sop["variables"].get(var)
            if meta is None:
                differences.append({"batch": b, "operator": name, "instance": inst.i, "partition": part,
                                    "variable": var, "error": f"{where}: the replay's {var} is not a state "
                                                              f"variable of Spark's operator {sop['id']}"})
                continue
            stored = stores[qi].read(sop["id"], var, b, kind, meta["ttl"], partition=part)
            for k, replayed in [*per_key.items(), *((k, _NONE) for k in absent)]:
                keys.add(k)
                counted["values"] += 1
                have = stored.get(k, _NONE)
                known = kind == "value" or (var, k) in view.whole
                if have is _NONE if replayed is _NONE else _agrees(kind, replayed, have, known):
                    continue
                k_text = values.render(values.encode(k), 40)
                s_text = "no value for this key" if have is _NONE else values.render(values.encode(have), 80)
                if replayed is _NONE:
                    r_text = "has no value in the replay (its calls cleared it or found none)"
                else:
                    r_text = f"is {values.render(values.encode(replayed), 80)} in the replay" + (
                        "" if known else " (the part its calls showed)" if kind == "map" else
                        " (the elements its calls appended)")
                differences.append({
                    "batch": b, "operator": name, "instance": inst.i, "partition": part, "variable": var,
                    "key": values.encode(k), "replayed": None if replayed is _NONE else values.encode(replayed),
                    "store": None if have is _NONE else values.encode(have), "whole": known,
                    "error": f"{where}: {var}[{k_text}] {r_text}, but Spark's state store has {s_text}"})
        timed = sorted({*view.timers, *view.timers_whole, *(k for k, g in view.timers_gone.items() if g)}, key=repr)
        if timed:
            stored = stores[qi].timers(sop["id"], b, partition=part)
            for k in timed:
                keys.add(k)
                counted["timers"] += 1
                replayed, have = view.timers.get(k, []), stored.get(k, [])
                whole = k in view.timers_whole
                left = sorted(view.timers_gone.get(k, set()) & set(have))
                if (replayed == have) if whole else (set(replayed) <= set(have) and not left):
                    continue
                k_text = values.render(values.encode(k), 40)
                r_text = (f"{replayed} in the replay" if whole else
                          f"{left} deleted or fired in the replay" if left else
                          f"{replayed} registered in the replay")
                differences.append({
                    "batch": b, "operator": name, "instance": inst.i, "partition": part, "variable": "timers",
                    "key": values.encode(k), "replayed": replayed, "store": have, "whole": whole,
                    "error": f"{where}: the timers of {k_text} are {r_text}, but Spark's state store has "
                             f"{have or 'none'}"})
        counted["keys"] += len(keys)
        batches.add((qi, b))
        per_batch[(qi, name, b)][1] += 1
        acc = wrote.setdefault((qi, name, b), {})
        for var, ks in tracker.wrote.get(key, {}).items():
            acc.setdefault(var, set()).update(ks)

    interactions = reader.interactions()
    pending = dict(checks)
    with engine.hooks(on_consume=tracker.on_consume):
        for n, interaction in enumerate(interactions):
            batch = interaction.detail.get("batch") if interaction.trigger == "micro-batch" else None
            last = n == len(interactions) - 1
            due = [key for key, c in pending.items() if c["batch"] == batch or last]
            if due:
                engine.jump(interaction.k)
                for key in due:
                    inst = engine.instances[key]
                    if inst.count < inst.total:   # its task had not ended (batch b of another query)
                        continue
                    del pending[key]
                    check(key)
            if progress is not None:
                progress(n + 1, len(interactions))
    if pending:
        skipped.append({"instances": len(pending), "why": "their tasks did not end in the recording"})
    feed = _compare_change_feeds(queries, stores, mapped, per_batch, wrote, group_writes, differences)
    return {"ok": not differences, "keys": counted["keys"], "values": counted["values"], "timers": counted["timers"],
            "micro_batches": len(batches),
            "queries": [{**q, "operator_ids": {name: o["id"] for (qi, name), o in mapped.items()
                                               if qi == i and o is not None}} for i, q in enumerate(queries)],
            "differences": differences, "change_feed": feed, "skipped": skipped}


def _check_group_states(op: GroupStateOperator, called: set, stored: dict, where: str, at: dict,
                        differences: list[dict], counted: dict) -> None:
    """An applyInPandasWithState instance at its micro-batch's end: each key its calls were for
    has, in the store, the value and timeout the replay's last call for it left (none, where it
    removed the state)."""
    shown_state = op.state()
    replayed_values, timeouts = shown_state["state"], shown_state.get("timeouts", {})
    for k in sorted(called | set(replayed_values), key=repr):   # (a restored operator's earlier calls too)
        counted["keys"] += 1
        counted["values"] += 1
        replayed = (replayed_values[k], timeouts.get(k, NO_TIMESTAMP)) if k in replayed_values else _NONE
        have = stored.get(k, _NONE)
        if (have is _NONE) if replayed is _NONE else (have is not _NONE and same(replayed, have)):
            continue
        k_text = values.render(values.encode(k), 40)
        r_text = "has no GroupState in the replay (its call removed it)" if replayed is _NONE else \
            f"is {_group_state_text(replayed)} in the replay"
        s_text = "no GroupState for this key" if have is _NONE else _group_state_text(have)
        differences.append({**at, "variable": "state", "key": values.encode(k),
                            "replayed": None if replayed is _NONE else values.encode(list(replayed)),
                            "store": None if have is _NONE else values.encode(list(have)), "whole": True,
                            "error": f"{where}: the GroupState of {k_text} {r_text}, but Spark's state store has "
                                     f"{s_text}"})


def _group_state_text(state: tuple[Any, int]) -> str:
    value, timeout = state
    return values.render(values.encode(value), 80) + (f" (timeout {timeout})" if timeout != NO_TIMESTAMP else "")


def _compare_change_feeds(queries: list[dict], stores: list[Any], mapped: dict, per_batch: dict, wrote: dict,
                          group_writes: dict, differences: list[dict]) -> dict:
    """Per operator and variable: the keys Spark's change feed says each fully checked
    micro-batch wrote, against the keys the replay's calls wrote in it; of an
    applyInPandasWithState operator, what each key's last write was too (`writes` counts them)."""
    feed: dict = {"batches": 0, "variables": 0, "writes": 0, "unavailable": None, "ttl": []}
    seen_batches = set()
    for (qi, name), sop in mapped.items():
        if sop is None:
            continue
        done = sorted(b for (q, o, b), (n, checked) in per_batch.items() if q == qi and o == name and n == checked)
        done = [b for b in done if sop["min_batch"] <= b <= sop["max_batch"]]
        if not done:
            continue
        if GROUP_STATE_KIND.lower() in sop["name"].lower():
            try:
                changed = stores[qi].group_state_changes(sop["id"], done[0], done[-1])
            except TTError as e:
                feed["unavailable"] = str(e)
                return feed
            feed["variables"] += 1
            for b in done:
                seen_batches.add((qi, b))
                _compare_group_writes(   # (`before` is called, if at all, within this iteration)
                    b, name, changed.get(b, {}), group_writes.get((qi, name, b), {}),
                    lambda: stores[qi].group_states(sop["id"], b - 1) if b - 1 >= sop["min_batch"] else None,
                    feed, differences)
            continue
        for var, meta in sop["variables"].items():
            if meta["kind"] not in ("value", "list", "map"):
                continue
            if meta["ttl"]:   # Spark writes its own expiries, which no call of the processor made
                feed["ttl"].append(var)
                continue
            try:
                changed = stores[qi].changes(sop["id"], var, done[0], done[-1])
            except TTError as e:
                feed["unavailable"] = str(e)
                return feed
            feed["variables"] += 1
            for b in done:
                spark_keys, ours = changed.get(b, set()), wrote.get((qi, name, b), {}).get(var, set())
                seen_batches.add((qi, b))
                if spark_keys == ours:
                    continue
                extra, missing = spark_keys - ours, ours - spark_keys
                text = []
                if extra:
                    text.append(f"Spark's change feed says it wrote {var} for {_keys_text(extra)}, which no call "
                                f"of the replay wrote")
                if missing:
                    text.append(f"the replay wrote {var} for {_keys_text(missing)}, which Spark's change feed "
                                f"does not list")
                differences.append({"batch": b, "operator": name, "variable": var, "change_feed": True,
                                    "only_in_store": [values.encode(k) for k in sorted(extra, key=repr)],
                                    "only_in_replay": [values.encode(k) for k in sorted(missing, key=repr)],
                                    "error": f"micro-batch {b}: {name}: " + "; ".join(text)})
    feed["batches"] = len(seen_batches)
    return feed


_UNREAD = object()   # `_compare_group_writes`: the store's earlier GroupStates, not read yet


def _compare_group_writes(b: int, name: str, spark: dict, ours: dict, before: Callable[[], dict | None],
                          feed: dict, differences: list[dict]) -> None:
    """Micro-batch `b` of an applyInPandasWithState operator: the GroupStates Spark's change
    feed says it wrote (`{key: ("update", value, timeout) or ("delete",)}`, the last per key)
    against those the replay's calls left Spark to write (core/group_state.py `store_write`).
    A call that removed a state the store did not have (`before()`: the store's GroupStates after
    micro-batch b - 1, None where Spark no longer keeps them; read once, and only for such a
    removal) may have written nothing: the default (HDFS-backed) state store writes a removal
    only of a key it holds."""
    held: Any = _UNREAD
    for k in sorted(spark.keys() | ours.keys(), key=repr):
        have, replayed = spark.get(k), ours.get(k)
        if have is not None and replayed is not None and same(have, replayed):
            feed["writes"] += 1
            continue
        if have is None and replayed == ("delete",):
            if held is _UNREAD:
                held = before()   # (a Spark job: once a micro-batch)
            if held is None or k not in held:
                continue
        k_text = values.render(values.encode(k), 40)
        differences.append({"batch": b, "operator": name, "variable": "state", "change_feed": True,
                            "key": values.encode(k),
                            "replayed": None if replayed is None else values.encode(list(replayed)),
                            "store": None if have is None else values.encode(list(have)),
                            "error": f"micro-batch {b}: {name}: the replay {_write_text(replayed)} for {k_text}, "
                                     f"but Spark's change feed says it {_write_text(have)}"})


def _write_text(write: tuple | None) -> str:
    if write is None:
        return "wrote no GroupState"
    if write[0] == "delete":
        return "removed the GroupState"
    return f"wrote the GroupState {_group_state_text(write[1:])}" if write[1] is not None else \
        f"wrote an empty GroupState (timeout {write[2]})"

"""`tt verify`: replay every interaction of a run and check it against the recording."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .main import app
from ..core.hooked import ITERATOR_KINDS
from .output import JSON, Progress, emit, require_dataflow, require_intact


@app.command()
def verify(
    run: Path = typer.Argument(..., help="A run file written by `tt record`."),
    trust: bool = typer.Option(False, "--trust", help="Allow replaying code from a run you did not record."),
    statestore: bool = typer.Option(
        False, "--statestore", help="Also compare the replayed state of the run's transformWithState processors "
        "(variables and timers) and applyInPandasWithState functions (GroupStates) with Spark's own state store, "
        "read from the streaming query's checkpoint, at every micro-batch end (and the keys each micro-batch "
        "wrote with Spark's change feed). Needs pyspark and Java."),
    checkpoint: Optional[List[str]] = typer.Option(
        None, "--checkpoint", metavar="[QUERY=]PATH", help="With --statestore: where the streaming query's "
        "checkpoint is now, if it moved since the run was recorded (QUERY=PATH, by query id or name, when the run "
        "has several queries)."),
    json: bool = JSON,
):
    """Replay every complete interaction locally and compare states with the recorded ones.

    Exits 0 when every replayed state equals the recorded one; otherwise names the
    first operator, instance, state field and input tuple that differ and exits 1.
    Where Spark ran a recorded task again (a second action on data not persisted, a
    recomputed partition), what that run emitted must equal what the replay emits, or
    it exits 1 too: the rows Spark took from that run are not the ones tt shows.
    Also exits 1 when an interaction is incomplete for any other reason than the run
    having been cut off (only those after the last complete one may be). A run that failed
    in an operator of G(θ) is replayed on to the tuple it failed on, which must raise the
    same exception again, or it exits 1. Needs no Spark.

    With --statestore, a streaming run is also checked against a second oracle that reads
    none of tt's logs: Spark's state store in the query's checkpoint (recorded with the run;
    --checkpoint PATH if it moved). At every micro-batch end, each key a processor's replayed
    view shows, in every state variable, must equal the store's value after that micro-batch
    (and its timers the store's timers; an applyInPandasWithState call's GroupState, the
    store's value and timeout), and the keys Spark's change feed says the micro-batch wrote
    must be those the replay wrote, and of a GroupState what it wrote (a transformWithState
    query's change feed needs RocksDB's changelog checkpointing; without it only the values
    are compared).
    It prints how many keys it checked over how many micro-batches; a difference names the
    micro-batch, operator, variable, key and both values, and exits 1. This part starts Spark
    (local mode) and needs Java: e.g. `tt verify --statestore run.db`.
    """
    from ..core.errors import UsageError
    from ..replay.outputs import verify_outputs
    from ..replay.reruns import verify_reruns
    from ..replay.verify import verify as run_verify
    from ..store.reader import RunReader

    if checkpoint and not statestore:
        raise UsageError("--checkpoint names where Spark's state store is, for --statestore; add --statestore")
    reader = RunReader(run)
    stores: list = []
    try:
        require_intact(reader)
        require_dataflow(reader, "verify")
        queries = _open_stores(reader, checkpoint or [], stores) if statestore else None
        progress = Progress("verifying")
        try:
            outputs: dict = {}   # what hooked instances (and runs Spark made again) emit, digested on the way
            failure: dict = {}   # whether the replay fails where a failed run failed
            results = run_verify(reader, trust=trust, progress=progress, outputs=outputs, failure=failure)
        finally:
            progress.close()
        failed = sorted((r for r in results if not r["ok"]), key=lambda r: (bool(r.get("checkpoint")), r["k"]))
        checked = sum(1 for r in results if r["ok"] and not r.get("checkpoint"))
        via_checkpoints = sum(1 for r in results if r["ok"] and r.get("checkpoint"))
        recorded = len(reader.interactions_all)
        status = reader.status
        # and the hooked functions emit in replay what they emitted when recorded (replay/outputs.py)
        emitted = verify_outputs(reader, trust=trust, digested=outputs) if not failed else None
        digested_ops = {reader.operators[op].name for op, _ in reader.recorded_outputs()} if emitted else set()
        data = {"file": str(run), "status": status, "checked": checked, "recorded": recorded, "ok": not failed,
                "divergence": failed[0] if failed else None, "results": results}
        done = f"verified {checked} of {recorded} interactions"
        if failed:
            bad = failed[0]
            if bad.get("incomplete"):
                text = f"{run}: {done}, but {bad['error']}"
            else:
                text = f"{run}: {done}, then replay diverges at interaction {bad['k']}: {bad['error']}"
        else:
            cut = recorded - checked
            note = "" if status == "complete" and not cut else (
                f" (the run is {status}; " + (f"the {cut} interaction{'s' if cut != 1 else ''} after the last "
                                              f"complete one {'were' if cut != 1 else 'was'} cut off)" if cut
                                              else "every interaction was complete)"))
            via = f"; again from the checkpoints for {via_checkpoints}" if via_checkpoints else ""
            text = f"{run}: {done}{via} — every replayed state equals the recorded one{note}"
            compared = [r for r in results if r["ok"] and not r.get("checkpoint") and "empty" in r]
            empty = sorted(op for op in {op for r in compared for op in r.get("moved", ())}   # (after some input)
                           if all(op in r["empty"] for r in compared if op in r.get("moved", ())))
            if empty:   # "equals" compared nothing of theirs: say so (what they emitted: counts, and digests)
                data["empty_states"] = empty
                text += _empty_states(run, empty, {op for r in compared for op in r.get("inside", ())},
                                      {o.name for o in reader.operators if o.kind in ITERATOR_KINDS}, digested_ops)
            by_rows = sorted({op for r in results for op in r.get("rows_only", ())})
            if by_rows:   # what "equals" meant for their stored rows (core/kept_inputs.py `ROWS`)
                text += (f"\n{run}: {', '.join(by_rows)}: stored rows, which are the inputs, compared by their "
                         f"keys and rows at interactions and by their digest at each task's end")
        if failure:   # a failed run: and the replay fails where it failed, as it failed
            data["failure"] = failure
            if not failure["ok"]:
                data["ok"] = False
                text += f"\n{run}: but the recorded failure does not reproduce: {failure['text']}"
            elif failure["checked"]:
                text += (f"\n{run}: the recorded failure reproduces: {failure['label']} raises {failure['error']} "
                         f"in replay too")
            else:
                text += (f"\n{run}: the recorded failure ({failure['label']} raised {failure['error']}) was not "
                         f"replayed: {failure['reason']}")
        if emitted is not None:
            text += _emitted(run, data, "outputs", emitted, "what the hooked functions emitted was",
                             lambda n: f"what the hooked functions emitted ({n} instance{'s' if n != 1 else ''}) is "
                                       f"what the replay emits")
        if not failed:   # and the runs Spark made again of recorded tasks emitted what the replay emits
            text += _emitted(run, data, "reruns", verify_reruns(reader, trust=trust, digested=outputs),
                             "the runs Spark made again of recorded tasks were",
                             lambda n: f"{n} run{'s' if n != 1 else ''} that Spark made again of recorded tasks "
                                       f"emitted what the replay emits")
        warnings = reader.warnings()
        if warnings:   # "verified" covers what was recorded: say what the recording could not
            data["warnings"] = warnings
            text += "".join(f"\n{run}: the recording warned: {w}" for w in warnings)
        if statestore:
            store_result, store_text = _statestore(reader, run, queries, stores, trust, replay_ok=not failed)
            data["statestore"] = store_result
            data["ok"] = data["ok"] and bool(store_result["ok"])
            text += "\n" + store_text
        emit(data, json=json, text=text)
        return 0 if data["ok"] else 1
    finally:
        for store in stores:
            store.close()
        reader.close()


def _emitted(run: Path, data: dict, key: str, result: dict, what_was: str, agreed) -> str:
    """The lines of a comparison of what the replay emits with a recorded digest (`result`, of
    `verify_outputs` or `verify_reruns`, kept in `data[key]`): each difference, or why nothing
    was compared (both fail the run), or `agreed(how many)` where all agreed."""
    data[key] = result
    if result["differ"] or result.get("error"):
        data["ok"] = False
    if result["differ"]:
        return "".join(f"\n{run}: but {d['error']}" for d in result["differ"])
    if result.get("error"):
        return f"\n{run}: but {what_was} not compared: {result['error']}"
    return f"\n{run}: {agreed(result['compared'])}" if result["compared"] else ""


def _empty_states(run: Path, empty: list[str], inside: set[str], generators: set[str], emitted: set[str]) -> str:
    """The lines that say what "equals" meant for operators whose recorded state was empty at
    every interaction after their first input: those caught inside a task kept nothing between
    their steps; a function that is no generator keeps nothing between its calls; a generator
    (`generators`: the operators that run as one) seen only before a task's first input or
    after its last (each task ran whole between two interactions) had no state there, and a
    condition, which stops at a tuple, shows it better than a shorter period would. `emitted`:
    the operators whose rows were compared too (replay/outputs.py), not only counted."""
    groups = [
        ([op for op in empty if op in inside], "{its} recorded state was empty at every interaction, inside {its} "
         "tasks too (a function keeping nothing between its steps)", ""),
        ([op for op in empty if op not in inside and op not in generators], "{its} recorded state was empty at "
         "every interaction (a function keeping nothing between its calls)", ""),
        ([op for op in empty if op not in inside and op in generators], "no interaction fell inside any of {its} "
         "tasks (each ran whole between two), and {its} recorded state was empty before and after each (a "
         "generator's state is gone once it ends)", ": to see a generator's state mid-run, record with --when, which "
         "stops at a tuple"),
    ]
    lines = []
    for ops, why, advice in groups:
        for those, what in (([op for op in ops if op not in emitted], "only how many outputs each input gave"),
                            ([op for op in ops if op in emitted], "how many outputs each input gave, and what "
                             "{it} emitted")):
            if those:
                one = len(those) == 1
                it = "it" if one else "they"
                lines.append(f"{run}: {', '.join(those)}: {why.format(its='its' if one else 'their')}, so for "
                             f"{'it' if one else 'them'} verify compared {what.format(it=it)}{advice}")
    return "".join(f"\n{line}" for line in lines)


def _open_stores(reader, checkpoints: list[str], stores: list) -> list[dict]:
    """The run's streaming queries, each with Spark's store in its checkpoint opened (appended
    to `stores`): before anything is replayed, so a missing checkpoint, pyspark or Java is
    reported at once, in one line."""
    from ..recorder.statestore import check_checkpoint, check_query, open_store
    from ..replay.verify import streaming_queries

    queries = streaming_queries(reader, checkpoints)
    for q in queries:   # every checkpoint is there before Spark starts
        what = "the checkpoint given with --checkpoint" if q.get("given") else f"the checkpoint of {_label(q)}"
        check_checkpoint(q["checkpoint"], what)
        if not q.get("given"):   # (one given is compared as asked: another run's, on purpose)
            check_query(q["checkpoint"], q.get("id"), what)
    for q in queries:
        stores.append(open_store(q["checkpoint"]))
    return queries


def _label(q: dict) -> str:
    name = q.get("name") or q.get("id")
    return f"the streaming query {name}" if name else "the streaming query"


def _statestore(reader, run: Path, queries: list[dict], stores: list, trust: bool,
                replay_ok: bool) -> tuple[dict, str]:
    """`tt verify --statestore`'s comparison: its JSON part and its line."""
    from ..replay.verify import verify_statestore

    where = ", ".join(str(q["checkpoint"]) for q in queries)
    if not replay_ok:
        return ({"ok": False, "compared": False, "checkpoints": [q["checkpoint"] for q in queries],
                 "why": "the replay diverges from the recording"},
                f"{run}: statestore: not compared with Spark's state store in {where}, as the replay diverges from "
                f"the recording")
    progress = Progress("comparing with Spark's state store")
    try:
        result = verify_statestore(reader, queries, stores, trust=trust, progress=progress)
    finally:
        progress.close()
    result["compared"] = True
    n, m = result["keys"], result["micro_batches"]
    t = result["timers"]
    timers = f", the timers of {t} key{'s' if t != 1 else ''}" if t else ""
    figures = (f"checked {n} key{'s' if n != 1 else ''} over {m} micro-batch{'es' if m != 1 else ''} "
               f"({result['values']} values{timers}) against Spark's state store in {where}")
    feed = result["change_feed"]
    if feed["unavailable"]:
        feed_text = f"; the change feed was not compared: {feed['unavailable']}"
    elif feed["variables"]:
        ttl = f" (not for {', '.join(feed['ttl'])}: with a TTL, Spark writes expiries itself)" if feed["ttl"] else ""
        w = feed["writes"]
        writes = f" ({w} GroupState{'s' if w != 1 else ''} written, each as the replay wrote it)" if w else ""
        feed_text = (f"; its change feed names the keys the replay wrote in each of {feed['batches']} "
                     f"micro-batch{'es' if feed['batches'] != 1 else ''}{writes}{ttl}") if result["ok"] else ""
    else:
        feed_text = ""
    skipped = "".join(f"; skipped {_skipped(s)}" for s in result["skipped"][:3])
    diffs = result["differences"]
    if diffs:
        more = f" (and {len(diffs) - 1} more difference{'s' if len(diffs) != 2 else ''})" if len(diffs) > 1 else ""
        text = f"{run}: statestore: {figures}, and the replay differs from it: {diffs[0]['error']}{more}"
    else:
        text = f"{run}: statestore: {figures} — every replayed value equals the store's{feed_text}{skipped}"
    return result, text


def _skipped(s: dict) -> str:
    what = (f"micro-batch {s['batch']} of {s['operator']}" if "batch" in s else
            ", ".join(s["operators"]) if "operators" in s else f"{s.get('instances')} task(s)")
    return f"{what}: {s['why']}"

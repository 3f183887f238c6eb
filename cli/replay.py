"""`tt replay`: a scripted debug session (jump, then steps), one result per step: as text,
one JSON document (--json) or one JSON object per line (--nl)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from ..core.errors import UsageError
from ..core.scopes import instance_of
from .main import app
from .output import Activity, cut_hint, emit, only_one, require_dataflow, row_text

ACTIONS = {  # option -> (session method, takes an argument)
    "--jump": ("jump", True),
    "--goto-before": ("goto_before", True),
    "--step-over": ("step_over", True),
    "--step-into": ("step_into", True),
    "--step-out": ("step_out", False),
    "--step-back": ("step_back", False),
    "--run-until": ("run_until", True),
    "--last-change": ("last_change", True),
}


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def replay(
    ctx: typer.Context,
    run: Path = typer.Argument(..., help="A run file written by `tt record`."),
    to: Optional[int] = typer.Option(None, "--to", help="Jump to this interaction first [default: 0; for a "
                                     "failed run, just before the tuple it failed on]."),
    states: str = typer.Option("changed", "--states", help="States to print per step: changed (only the "
                               "fields each step changed, old → new) | all (also every instance's whole "
                               "state) | none."),
    trust: bool = typer.Option(False, "--trust", help="Allow replaying code from a run you did not record."),
    json: bool = typer.Option(False, "--json", help="Print one JSON document: a list with one object per step."),
    nl: bool = typer.Option(False, "--nl", help="Print newline-delimited JSON, one object per step and line."),
):
    """Replay a run locally: jump to an interaction, then take steps in the order given.

    Steps (repeat and mix them; they run left to right):
      --step-over OP:I:N     process the tuple and its whole scope
      --step-into OP:I:N     only its operator processes it; its outputs wait downstream
      --step-out             finish the scope of the tuple stepped into last
      --step-back            return to the position before the last step
      --run-until EXPR       go forward until EXPR holds, e.g. "'Bob' in FD.blacklist"
      --last-change OP:I.F   go back to just before the last change of field F
      --jump K               jump to interaction K
      --goto-before OP:I:N   to just before the tuple is consumed: the last interaction
                             before it, then its instance alone up to it (a θ input)

    Each step prints the tuples it consumed and the one it stopped at, with their
    values; the state fields it changed (old → new); and the tuple waiting next at
    each instance, with its value. --json prints one document, a list with one
    object per step ("changed": {instance: {field: {"old", "new"}}}, false "diffed"
    where the step jumped and lists no changes, "rows": the
    values of the tuples named, "pending": the next tuple at every instance);
    --nl prints the same objects one per line. Example:
      tt replay fraud.db --to 8 --last-change FD:0.blacklist.Bob --step-into FD:0:24997 --step-out

    A failed run (an operator raised while recording) starts just before the tuple
    it failed on, which waits at its instance (`tt inspect RUN failures` names it):
      tt replay failed.db --step-into FE:1:999
    re-raises the operator's exception in the replay and reports it as the step's
    result ("FE:1:999 raised ZeroDivisionError: division by zero (as in the
    recording)", with the traceback under "raised" in --json); the state stays as it
    was just before that tuple. Steps that reach the tuple stop just before it.

    A step that ends at an interaction (a jump, or any step that lands on one)
    compares the replayed states with the recorded ones there and says where they
    differ ("differs" in --json): what follows is then not what ran, and each later
    step past it says so ("diverged").

    Exit status: 0 when every step was taken; 1 when a step was not possible,
    re-raised the operator's exception, or found the replay differing from the
    recording; 2 for bad arguments.
    """
    from ..replay.session import DebugSession
    from ..store.reader import RunReader

    only_one(json=json, nl=nl)
    steps = _parse_steps(list(ctx.args))
    if states not in ("changed", "all", "none"):
        raise UsageError("--states takes changed, all or none")
    reader = RunReader(run)
    require_dataflow(reader, "replay")
    session = DebugSession(reader, trust=trust)
    failed = session.failure is not None and session.failure.steppable and to is None
    first = ("goto_failure", None) if failed else ("jump", str(to or 0))
    results = [_take(session, method, arg, states) for method, arg in [first, *steps]]
    if json or nl:
        emit(results, json=json, nl=nl)
    else:
        texts = [_text(r) for r in results]
        cut = any(c for _, c in texts)
        typer.echo("\n".join(t for t, _ in texts) + ("\n" + cut_hint("--json") if cut else ""))
    return 0 if all(r["ok"] and not r.get("differs") and not r.get("diverged") for r in results) else 1


def _take(session, method: str, arg: str | None, states: str) -> dict:
    """Take one step; its result as a dict (see `_report`)."""
    from ..core import values

    engine = session.engine
    rows: dict = {}
    capture = method in ("step_into", "step_over", "step_out")

    def after(inst, pos, row) -> None:   # the values of the tuples a step consumes, as they are consumed
        if row is not None and len(rows) < _ROWS_KEPT:
            rows[session.label((inst.node.id, inst.i)) + f":{pos}"] = values.encode_readable(row)
    with engine.hooks(after_consume=after if capture else None):
        if method in ("step_into", "step_over"):
            _target_row(session, arg, rows)
        with Activity(f"{method} {arg or ''}".strip()):
            result = _call(session, method, arg)
    return _report(session, result, states, rows, method, arg)


def _target_row(session, label: str, rows: dict) -> None:
    """The value of the tuple a step is about, before the step: from where it waits, or
    for a θ input from the recorded tuples (the step reports any error in its name)."""
    from ..core.errors import TTError

    try:
        ref = session.parse_ref(label)
        for p in session.pending(session.label((ref.op, ref.instance)), limit=20):
            if p.ref == ref and not p.end:
                rows[p.label] = p.row
                return
        if session.provenance.is_theta_root(ref):
            rows[session.label(ref)] = session.payload(ref)
    except TTError:
        pass


_ROWS_KEPT = 1000  # values kept per step (a step-over's scope); the names of all consumed tuples are kept


def _call(session, method: str, arg: str | None):
    fn = getattr(session, method)
    if method == "jump":
        return fn(_int(arg, "--jump"))
    if method == "last_change":
        instance, _, field = arg.partition(".")
        if not field:
            raise UsageError(f"--last-change takes OP:INSTANCE.FIELD, e.g. FD:0.blacklist, not {arg!r}")
        return fn(instance, field)
    return fn() if arg is None else fn(arg)


def _parse_steps(args: list[str]) -> list[tuple[str, str | None]]:
    steps, i = [], 0
    while i < len(args):
        opt, _, inline = args[i].partition("=")
        if opt not in ACTIONS:
            raise UsageError(f"unknown step {args[i]!r}; steps are {', '.join(ACTIONS)}")
        method, takes = ACTIONS[opt]
        if takes:
            if inline:
                arg = inline
            elif i + 1 < len(args):
                i += 1
                arg = args[i]
            else:
                raise UsageError(f"{opt} needs a value")
            steps.append((method, arg))
        else:
            steps.append((method, None))
        i += 1
    return steps


def _int(text: str, opt: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{opt} takes an interaction number, not {text!r}") from None


def _report(session, result, states: str, rows: dict, method: str, arg: str | None) -> dict:
    """A step's result: what `StepResult` says, with "changed" as {instance: {field: {"old":
    …, "new": …}}} ("old" absent for a field that appeared, "new" for one that went; a
    "note" where the session summarised), "stopped_at" for a run-until, last-change or goto-before,
    "rows" (the values of the tuples consumed and stopped at), "pending" (the next tuple
    at every instance, with its value) and, for --states all, "states"."""
    out = result.as_dict()
    pending = {}
    for p in session.pending(limit=1):
        if p.next:
            pending[session.label((p.ref.op, p.ref.instance))] = {
                "tuple": p.label, "from": p.sender, "free": p.free, "row": p.row, "end": p.end}
    named = set(out["consumed"]) | ({out["target"]} if method in ("step_into", "step_over") else set())
    out["rows"] = {k: v for k, v in rows.items() if k in named}
    stop = _stopped_at(session, result, out, method, pending)
    if stop is not None:
        out["stopped_at"] = stop
    out["pending"] = pending
    changed = out.pop("changed", {})
    diffed = out.pop("diffed", True)
    if states != "none":  # none: no state at all, not even the fields a step changed
        out["changed"] = {inst: {f: _change(f, pair) for f, pair in fields.items()}
                          for inst, fields in changed.items()}
        out["diffed"] = diffed
    if states == "all":
        out["states"] = session.states()
    order = ("action", "target", "ok", "note", "differs", "diverged", "consumed", "free_consumed", "stopped_at", "rows",
             "changed", "diffed", "states", "position", "interaction", "seconds", "raised", "pending")
    return {k: out[k] for k in sorted(out, key=lambda k: order.index(k) if k in order else len(order))}


def _set_change(ch: dict) -> str | None:
    """A set's change as the items it gained and lost, with its sizes (`+{1150} (157 → 158
    items)`): both sets cut to 60 characters showed the same first items, not the new one."""
    import orjson

    from ..core import values

    old, new = ch.get("old"), ch.get("new")
    tags = ("$set", "$frozenset")
    if not (type(old) is dict and type(new) is dict and len(old) == len(new) == 1
            and next(iter(old)) in tags and next(iter(new)) in tags):
        return None
    before, after = next(iter(old.values())), next(iter(new.values()))
    def key(x):   # (the items as stored, compared by their JSON)
        return orjson.dumps(x, option=orjson.OPT_SORT_KEYS)
    was, now = {key(x): x for x in before}, {key(x): x for x in after}
    gained = [now[k] for k in now if k not in was]
    lost = [was[k] for k in was if k not in now]
    parts = ([f"+{values.render({'$set': gained}, 60)}"] if gained else []) + \
            ([f"-{values.render({'$set': lost}, 60)}"] if lost else [])
    return f"{' '.join(parts) or 'the same items'} ({len(before)} → {len(after)} items)"


def _note_field(field: str) -> bool:
    return field == "…" or field.endswith(".…")


def _change(field: str, pair) -> dict:
    old, new = pair
    if _note_field(field):  # e.g. "highest.…": ["4953 more keys changed", None]
        return {"note": old}
    from ..replay.state_paths import MISSING

    out = {}
    if old != MISSING:
        out["old"] = old
    if new != MISSING:
        out["new"] = new
    return out


def _stopped_at(session, result, out: dict, method: str, pending: dict) -> dict | None:
    """Where a run-until stopped (after a tuple) or a last-change or goto-before (before one), with the θ
    input that tuple came from; their values go into out["rows"] (no replay: a θ input's
    value is read from the recorded tuples, a waiting tuple's from the queue it waits in)."""
    ref = result.stopped_at
    if not result.ok or ref is None or method not in ("last_change", "run_until", "goto_before"):
        return None
    label, where = session.label(ref), "after" if method == "run_until" else "before"
    if where == "before":
        waiting = pending.get(session.label((ref.op, ref.instance)))
        if not waiting or waiting.get("end") or (method == "goto_before" and waiting["tuple"] != label):
            return None
        out["rows"][label] = waiting["row"]
    stop = {"tuple": label, "where": where}
    try:
        root = session.provenance.root(ref)
        if session.provenance.is_theta_root(root):
            stop["from"] = session.label(root)
            if stop["from"] not in out["rows"]:
                out["rows"][stop["from"]] = session.payload(root)
    except Exception:  # noqa: BLE001  (the stop is told by the note anyway; its lineage is a bonus)
        pass
    return stop


def _text(r: dict) -> tuple[str, bool]:
    """A step in plain text, and whether a value in it was cut."""
    cut = False

    def val(v, limit=None) -> str:
        nonlocal cut
        text, c = row_text(v, limit)
        cut |= c
        return text

    head = f"{r['action']} {r['target'] or ''}".strip()
    lines = [f"{head}: {'ok' if r['ok'] else 're-raised' if r.get('raised') else 'not possible'}"
             + (f" (interaction {r['interaction']})" if r["interaction"] is not None else "")
             + f"  [{r['seconds'] * 1000:.0f} ms]"]
    if r["note"]:
        lines.append(f"  {r['note']}")
    rows = r.get("rows", {})
    target = r["target"] if r["action"] in ("step_into", "step_over") else None
    if target in rows:  # the tuple stepped into or over, with its value
        lines.append(f"  {target} {val(rows[target])}")
    shown = [c for c in r["consumed"] if c != target][:_CONSUMED_SHOWN]
    for label in shown:
        lines.append(f"  consumed {label}" + (f" {val(rows[label])}" if label in rows else ""))
    more = len([c for c in r["consumed"] if c != target]) - len(shown)
    if more > 0:
        lines.append(f"  … and {more} more consumed (--json lists them)")
    stop = r.get("stopped_at")
    if stop and stop.get("from") and stop["from"] != stop["tuple"]:
        origin = stop["from"]
        lines.append(f"  {stop['tuple']} came from {origin}" + (f" {val(rows[origin])}" if origin in rows else ""))
    elif stop and stop["tuple"] in rows and stop["where"] == "after":
        lines.append(f"  {stop['tuple']} {val(rows[stop['tuple']])}")
    for inst, fields in r.get("changed", {}).items():
        items = _named_first(list(fields.items()), r["target"] if r["action"] == "run_until" else "")
        for f, ch in items[:_FIELDS_SHOWN]:
            if "note" in ch:
                lines.append(f"  {inst}.{f.rstrip('.…') or '…'}: … {ch['note']}")
            elif _set_change(ch) is not None:
                lines.append(f"  {inst}.{f}: {_set_change(ch)}")
            else:
                old = val(ch["old"], 60) if "old" in ch else "(absent)"
                new = val(ch["new"], 60) if "new" in ch else "(absent)"
                lines.append(f"  {inst}.{f}: {old} → {new}")
        if len(items) > _FIELDS_SHOWN:
            lines.append(f"  {inst}: … and {len(items) - _FIELDS_SHOWN} more changed (--json lists them)")
    for inst, state in (r.get("states") or {}).items():
        lines.append(f"  state {inst} = {val(state)}")
    pending = r["pending"]
    touched = _touched(r)
    order = sorted(pending, key=lambda inst: (inst not in touched, touched.get(inst, 0)))
    for inst in order[:_NEXT_SHOWN]:
        p = pending[inst]
        if p.get("end"):
            lines.append(f"  next at {inst}: its end of input")
        else:
            lines.append(f"  next {p['tuple']} {val(p['row'])}" + (" (as logged)" if p["free"] else ""))
    if len(order) > _NEXT_SHOWN:
        more = len(order) - _NEXT_SHOWN
        lines.append(f"  … and a tuple waiting at {more} more instance{'' if more == 1 else 's'} (--json lists them)")
    return "\n".join(lines), cut


_CONSUMED_SHOWN, _FIELDS_SHOWN, _NEXT_SHOWN = 8, 10, 6


def _named_first(items: list, condition: str) -> list:
    """Changed fields, those the condition names (every part of `highest.Bob` in it) first:
    with many changes, the one the user asked about must not be among the hidden."""
    if not condition:
        return items
    words = set(re.findall(r"\w+", condition))

    def named(item) -> int:
        parts = [x for x in re.split(r"[.\[\]]", item[0]) if x]
        return -sum(x in words for x in parts) if parts else 0
    return sorted(items, key=named)


def _touched(r: dict) -> dict[str, int]:
    """The instances a step is about, first the one it stopped at or aimed at: their next
    tuples are listed first."""
    order: dict[str, int] = {}

    def add(label: str | None) -> None:
        if label:
            inst = instance_of(label)
            order.setdefault(inst, len(order))
    stop = r.get("stopped_at") or {}
    add(stop.get("tuple"))
    target = r["target"] or ""
    if r["action"] in ("step_into", "step_over", "goto_failure", "goto_before") and target.count(":") == 2:
        add(target)
    if r["action"] == "last_change":
        add(target.partition(".")[0])
    for label in r["consumed"]:
        add(label)
    for inst in r.get("changed", {}):
        add(inst)
    return order

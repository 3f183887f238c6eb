"""`tt replay`: a scripted debug session (jump, then steps), one result per step."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import orjson
import typer

from ..core.errors import UsageError
from .main import app
from .output import JSON, NL, require_dataflow

ACTIONS = {  # option -> (session method, takes an argument)
    "--jump": ("jump", True),
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
    states: str = typer.Option("changed", "--states", help="States to print per step: changed (the fields "
                               "each step changed, old → new) | all | none."),
    trust: bool = typer.Option(False, "--trust", help="Allow replaying code from a run you did not record."),
    json: bool = JSON, nl: bool = NL,
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

    Each step prints what it consumed, which states changed, and the tuples waiting
    next at every instance. Example:
      tt replay fraud.db --to 5 --step-into FE:1:48716 --step-out --json

    A failed run (an operator raised while recording) starts just before the tuple
    it failed on, which waits at its instance (`tt inspect RUN failures` names it):
      tt replay failed.db --step-into FE:1:999
    re-raises the operator's exception in the replay and reports it as the step's
    result ("FE:1:999 raised ZeroDivisionError: division by zero (as in the
    recording)", with the traceback under "raised" in --json); the state stays as it
    was just before that tuple. Steps that reach the tuple stop just before it.

    Exit status: 0 when every step was taken; 1 when a step was not possible or
    re-raised the operator's exception; 2 for bad arguments.
    """
    from ..replay.session import DebugSession
    from ..store.reader import RunReader

    steps = _parse_steps(list(ctx.args))
    if states not in ("changed", "all", "none"):
        raise UsageError("--states takes changed, all or none")
    reader = RunReader(run)
    require_dataflow(reader, "replay")
    session = DebugSession(reader, trust=trust)
    failed = session.failure is not None and session.failure.steppable and to is None
    results = [_report(session, session.goto_failure() if failed else session.jump(to or 0), states)]
    for method, arg in steps:
        fn = getattr(session, method)
        if method == "jump":
            result = fn(_int(arg, "--jump"))
        elif method == "last_change":
            instance, _, field = arg.partition(".")
            if not field:
                raise UsageError(f"--last-change takes OP:INSTANCE.FIELD, e.g. FD:0.blacklist, not {arg!r}")
            result = fn(instance, field)
        elif arg is None:
            result = fn()
        else:
            result = fn(arg)
        results.append(_report(session, result, states))
    for r in results:
        if json or nl:
            typer.echo(orjson.dumps(r, option=orjson.OPT_NON_STR_KEYS).decode())
        else:
            typer.echo(_text(r))
    return 0 if all(r["ok"] for r in results) else 1


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


def _report(session, result, states: str) -> dict:
    out = result.as_dict()
    pending = {}
    for p in session.pending(limit=1):
        if p.next:
            pending[p.label.rsplit(":", 1)[0]] = {"tuple": p.label, "from": p.sender, "free": p.free,
                                                  "row": p.row}
    out["pending"] = pending
    if states == "all":
        out["states"] = session.states()
    elif states == "changed":
        out["states"] = {k: session.state(k) for k in out["changed"]}
    else:  # none: no state at all, not even the fields a step changed
        out.pop("changed", None)
    return out


def _text(r: dict) -> str:
    head = f"{r['action']} {r['target'] or ''}".strip()
    lines = [f"{head}: {'ok' if r['ok'] else 'not possible'}"
             + (f" (interaction {r['interaction']})" if r["interaction"] is not None else "")
             + f"  [{r['seconds'] * 1000:.0f} ms]"]
    if r["note"]:
        lines.append(f"  {r['note']}")
    if r["consumed"]:
        more = f" … {len(r['consumed']) - 8} more" if len(r["consumed"]) > 8 else ""
        lines.append(f"  consumed: {', '.join(r['consumed'][:8])}{more}")
    for inst, fields in r.get("changed", {}).items():
        for f, (old, new) in list(fields.items())[:10]:
            lines.append(f"  {inst}.{f}: {_short(old)} → {_short(new)}")
    nxt = [f"{k} ← {v['tuple']}" + (" (as logged)" if v["free"] else "") for k, v in r["pending"].items()]
    if nxt:
        lines.append(f"  next: {', '.join(nxt[:6])}" + (" …" if len(nxt) > 6 else ""))
    return "\n".join(lines)


def _short(v) -> str:
    from ..core.values import render

    return render(v, 60)

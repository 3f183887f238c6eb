"""`tt checkpoint`: choose and take checkpoints so that every jump finishes within τ."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..core.errors import UsageError

from ..recorder.triggers import parse_duration
from .main import app
from .output import JSON, Progress, emit, human_bytes, require_dataflow


@app.command()
def checkpoint(
    run: Path = typer.Argument(..., help="A run file written by `tt record`."),
    tau: Optional[str] = typer.Option(None, "--tau", help="The longest a jump may take, e.g. 2s or 500ms."),
    measure_only: bool = typer.Option(False, "--measure", help="Only measure every jump with the active plan "
                                      "(e.g. one made online while recording) and store the figures."),
    policy: str = typer.Option("offline", "--policy",
                               help="offline (cheapest plan meeting τ) | online | per-instance | all | none."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan without taking it."),
    attempts: int = typer.Option(4, "--attempts", min=1, help="Plans to try at most: when a measured jump is "
                                 "over τ, the plan is chosen again for a tighter τ (1: take the first plan as is)."),
    trust: bool = typer.Option(False, "--trust", help="Allow replaying code from a run you did not record."),
    json: bool = JSON,
):
    """Make every jump in this run finish within τ, at the least storage cost.

    Profiles the run by a local replay (how fast each operator replays), chooses
    the interactions to checkpoint (`offline`: a dynamic program finds the cheapest
    set meeting τ), takes those checkpoints by a second replay, and measures the
    jumps (on a long run, the 32 predicted slowest and a spread). The run file gains
    the checkpoints; `tt debug` and `tt replay` use them. A hooked generator is in no
    checkpoint: every jump replays it from its start, and the result says how much of
    the slowest jump that is.
    """
    from ..replay import checkpoints as ck
    from ..store.reader import RunReader

    reader = RunReader(run)
    require_dataflow(reader, "checkpoint")
    if measure_only:
        plan = reader.active_plan()
        if plan is None:
            raise UsageError(f"{run} has no checkpoint plan to measure; make one with --tau")
        measured = ck.measure(run, trust=trust, progress=Progress("measuring jumps"))
        ck.record_measurements(run, measured)
        worst = max(measured.values(), default=0.0)
        emit({"plan": plan["id"], "policy": plan["policy"], "tau": plan["tau"],
              "measured": {str(k): v for k, v in measured.items()}}, json=json,
             text=f"{run}: {plan['policy']} plan (τ = {plan['tau']:g}s): slowest jump measured {worst:.3f}s"
                  + (f" — over τ by {worst - plan['tau']:.3f}s" if worst > plan["tau"] else ""))
        return 0
    if tau is None:
        raise UsageError("how fast must jumps be? pass --tau, e.g. --tau 2s (or --measure)")
    seconds = parse_duration(tau)
    if reader.status == "recording":
        raise UsageError(f"{run} is still being recorded; checkpoint it once `tt record` has finished")
    prof = ck.profile(reader, trust=trust, progress=Progress("profiling"))
    engine = None
    if policy == "per-instance":
        from ..replay.engine import Engine

        engine = Engine(reader, trust=trust)
    tried = 1
    if dry_run:
        plan = ck.choose(prof, policy, seconds, engine)
    else:
        plan, measured, tried = ck.make(run, prof, policy, seconds, trust=trust, engine=engine, rounds=attempts,
                                        bar=Progress)
    data = plan.as_dict()
    data["all_cost"] = sum(prof.cost(k) for k in prof.interactions[1:])
    if not dry_run:
        data["measured"] = {str(k): v for k, v in measured.items()}
        data["attempts"] = tried
    times = measured if not dry_run else plan.predicted
    worst_k = max(times, key=lambda k: times[k], default=None)
    worst = times[worst_k] if worst_k is not None else 0.0
    count = len(plan.checkpoints) if plan.per_instance is None else sum(len(v) for v in plan.per_instance.values())
    text = (f"{run}: {policy} plan for τ = {seconds:g}s — {count} checkpoint(s), {human_bytes(plan.cost)} of state "
            f"({100 * plan.cost / max(1, data['all_cost']):.0f}% of checkpointing every interaction); "
            f"slowest jump {'measured' if not dry_run else 'predicted'} {worst:.3f}s")
    if not dry_run and len(measured) < len(prof.interactions):
        text += f" ({len(measured):,} of {len(prof.interactions):,} jumps measured: the predicted slowest, and a spread)"
    if tried > 1:
        text += f" (plan {tried}: the first measured over τ, so τ was tightened for planning)"
    if worst > seconds:
        text += f" — over τ by {worst - seconds:.3f}s"
        floor = min(prof.floor(worst_k), worst)   # (predicted: the profile's speed of each operator)
        if floor > 0.25 * (worst - seconds):
            names = ", ".join(sorted({reader.operator(op).name for op, _ in prof.replayed}))
            text += (f"; about {floor:.3f}s of that jump replays {names} from the start, as every jump does: no "
                     f"checkpoint holds a generator's state (or one that cannot be pickled)")
    emit(data, json=json, text=text)
    return 0


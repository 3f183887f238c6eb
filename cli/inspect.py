"""`tt inspect`: the facts of a run as text or JSON, for scripts and quick looks."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import orjson
import typer

from ..core.errors import UsageError
from .main import app
from .output import CSV, JSON, NL, emit, human_bytes, only_one, require_intact, table

_VIEWS = ("summary", "interactions", "state", "failures", "scope", "overlaps", "checkpoints")


@app.command()
def inspect(
    run: Path = typer.Argument(..., help="A run file written by `tt record`."),
    what: str = typer.Argument("summary", help="summary | interactions | state | failures | scope | "
                                               "overlaps | checkpoints"),
    target: Optional[str] = typer.Argument(None, help="For `scope`: the tuple, as OP:INSTANCE:SEQ."),
    at: Optional[int] = typer.Option(None, "--at", help="Interaction index (for `state`, `scope`)."),
    op: Optional[str] = typer.Option(None, "--op", help="Only this operator (for `state`)."),
    trust: bool = typer.Option(False, "--trust", help="Allow replaying code from a run you did not record."),
    json: bool = JSON, nl: bool = NL, csv: bool = CSV,
):
    """Show what a run file holds: the run and its DAG, interactions, states, failures.

    Examples:
      tt inspect fraud.db
      tt inspect fraud.db interactions --json
      tt inspect fraud.db state --at 3 --op FD
    """
    from ..replay import facts
    from ..store.reader import RunReader

    only_one(json=json, nl=nl, csv=csv)
    if what not in _VIEWS:
        raise UsageError(f"unknown view {what!r}; choose one of {', '.join(_VIEWS)}")
    reader = RunReader(run)
    try:
        require_intact(reader)
        if what == "summary":
            s = facts.summary(reader)
            s["wal"] = {"bytes": reader.wal_bytes(), "note": reader.wal_note}
            emit(s, json=json, nl=nl, csv_=csv, text=_summary_text(s))
        elif what == "interactions":
            rows = facts.interactions(reader)
            emit(rows, json=json, nl=nl, csv_=csv, text=_interactions_text(rows),
                 columns=["k", "time", "t", "trigger", "complete", "detail", "positions"])
        elif what == "state":
            if at is None:
                raise UsageError("which interaction? pass --at K (see `tt inspect RUN interactions`)")
            states = facts.states_at(reader, at, op)
            emit(states, json=json, nl=nl, csv_=False, text=_states_text(states, at))
        elif what == "failures":
            rows = reader.failures()  # one per failure, however many attempts Spark made
            emit(rows, json=json, nl=nl, csv_=csv, text="\n".join(_failure_text(f, run) for f in rows)
                 or "no operator failed")
        else:
            from . import inspect_replay

            inspect_replay.show(reader, what, target, at=at, trust=trust, json=json, nl=nl, csv=csv)
    finally:
        reader.close()


def _failure_text(f: dict, run: Path) -> str:
    n = f["attempts"]
    line = (f"{f['op']}:{f['instance']} input #{f['position']} raised {f['error']} "
            f"({n} attempt{'s' if n != 1 else ''})\n  tuple: {f['row']}")
    if f["visible"] and f["in_g"]:
        line += f"\n  debug it: tt replay {run} --step-into {f['op']}:{f['instance']}:{f['position']}"
    return line


def _summary_text(s: dict) -> str:
    lines = [f"{s['file']}: {s['status']}" + (f" — {s['error']}" if s["error"] else "")]
    lines.append(f"job      {s['job']} {' '.join(s['args'] or [])}".rstrip())
    lines.append(f"spark    {s['spark_version'] or '?'} on {s['master'] or '?'}, {s['stages']} stages, "
                 f"{s['tasks']['committed']} tasks committed")
    if s["seconds"] is not None:
        lines.append(f"time     {s['started']} · {s['seconds']:.1f}s")
    lines.append(f"θ        {s['theta']}   (G(θ) = {', '.join(o['name'] for o in s['operators'] if o['in_g'])})")
    lines.append("")
    lines.append(table([[o["name"], o["kind"], o["class"].rsplit(".", 1)[-1], o["stage"], o["instances"],
                         ("θ" if o["theta"] else "G") if o["in_g"] else ""] for o in s["operators"]],
                       ["operator", "kind", "class", "stage", "instances", "in G(θ)"]))
    lines.append("")
    lines.append("edges    " + ", ".join(f"{e['from']}→{e['to']}" + (" (shuffle)" if e["shuffle"] else "")
                                        for e in s["edges"]))
    lines.append(f"interactions  {s['interactions']} complete of {s['interactions_recorded']} recorded")
    sz = s["sizes"]
    lines.append(f"sizes    file {human_bytes(sz['file'])}; control log {human_bytes(s['control_log_bytes'])}"
                 + (f" = {100 * s['control_log_ratio']:.2f}% of {human_bytes(s['input_bytes'])} input"
                    if s["control_log_ratio"] else "")
                 + f"; recorded tuples {human_bytes(sz['recorded_tuples'])}; states {human_bytes(sz['states'])}")
    for f in s["failures"]:
        lines.append(f"failure  {f['op']}:{f['instance']} input #{f['position']}: {f['error']}")
    wal = s.get("wal") or {}
    if wal.get("bytes"):
        lines.append(f"wal      {human_bytes(wal['bytes'])} in {Path(s['file']).name}-wal, not yet in the file: "
                     + (wal["note"] or "a recorder is writing it (copy both files, or wait until it ends)"))
    return "\n".join(lines)


def _interactions_text(rows: list[dict]) -> str:
    out = []
    for r in rows:
        pos = r["positions"]
        brief = ", ".join(f"{k}={v}" for k, v in list(pos.items())[:6]) + (" …" if pos and len(pos) > 6 else "") \
            if pos else "(incomplete)"
        detail = ""
        if r["trigger"] == "condition":
            d = r["detail"]
            detail = f" {d.get('op')}:{d.get('instance')} #{d.get('position')}"
        out.append([r["k"], f"{r['t']:.2f}s", r["trigger"] + detail, brief])
    return table(out, ["k", "t", "trigger", "positions"])


def _states_text(states: dict, k: int) -> str:
    lines = [f"states at interaction {k}:"]
    for name, entry in states.items():
        lines.append(f"{name}  (after {entry['position']} inputs)")
        state = entry["state"]
        if isinstance(state, dict) and state:
            for key, value in state.items():
                lines.append(f"  {key} = {orjson.dumps(value).decode()[:2000]}")
        else:
            lines.append(f"  {orjson.dumps(state).decode()[:2000]}")
    return "\n".join(lines)

"""The `tt inspect` views that need a replay: tuple scopes and their overlaps."""

from __future__ import annotations

from ..core.errors import UsageError
from ..core.values import render
from .output import emit, table


def show(reader, what: str, target: str | None, *, at: int | None, trust: bool, json: bool, nl: bool,
         csv: bool) -> None:
    from ..replay.session import DebugSession
    from .output import require_dataflow

    if what == "checkpoints":
        return show_checkpoints(reader, json=json, nl=nl)
    require_dataflow(reader, "inspect")
    session = DebugSession(reader, trust=trust)
    if what == "scope":
        if not target:
            raise UsageError("which tuple? e.g. tt inspect RUN scope FE:0:42")
        tree = session.scope(target)
        refs = {n.ref for n in tree.walk()}
        rows = session.payloads(refs)
        overlap = {o.root: o for o in session.overlaps()} if session.provenance.is_theta_root(tree.ref) else {}

        def node(n):
            return {"tuple": session.label(n.ref), "row": rows.get(n.ref),
                    "children": [node(c) for c in n.children]}
        data = node(tree)
        o = overlap.get(tree.ref)
        data["step_over"] = o is None
        if o is not None:
            data["overlaps_with"] = session.label(o.blocker)
        lines = []

        def walk(n, depth):
            lines.append("  " * depth + f"{n['tuple']}  {render(n['row'], 100)}")
            for c in n["children"]:
                walk(c, depth + 1)
        walk(data, 0)
        if o is not None:
            lines.append(f"no step-over: the scope overlaps that of {session.label(o.blocker)} "
                         f"(at {session.label(o.at)})")
        emit(data, json=json, nl=nl, text="\n".join(lines))
    elif what == "overlaps":
        overlaps = session.overlaps()
        roots = session.provenance.theta_roots()
        rows = [{"tuple": session.label(o.root), "blocked_by": session.label(o.blocker),
                 "at": session.label(o.at)} for o in overlaps]
        data = {"theta_inputs": roots, "step_over": roots - len(overlaps), "overlaps": len(overlaps),
                "tuples": rows}
        text = (f"{roots} inputs of θ; {roots - len(overlaps)} have a step-over, {len(overlaps)} do not "
                f"(their scopes overlap a later tuple's)")
        if rows:
            text += "\n\n" + table([[r["tuple"], r["blocked_by"], r["at"]] for r in rows[:200]],
                                   ["tuple", "scope overlaps that of", "at"])
            if len(rows) > 200:
                text += f"\n… {len(rows) - 200} more (use --json for all)"
        if csv:
            emit(rows, csv_=True, columns=["tuple", "blocked_by", "at"])
        else:
            emit(data, json=json, nl=nl, text=text)
    elif what == "checkpoints":
        show_checkpoints(reader, json=json, nl=nl)


def show_checkpoints(reader, *, json: bool, nl: bool) -> None:
    """Plans, the cost of each checkpoint, predicted and measured jump time per interaction."""
    from .output import human_bytes

    plans = reader.plans()
    if not plans:
        raise UsageError("this run has no checkpoint plan; make one with `tt checkpoint RUN --tau 2s`")
    rows = []
    for plan in plans:
        info = plan["info"]
        sizes = dict(((k, ), v) for k, v in ())
        stored = {}
        for (k, size) in reader.conn.execute("SELECT k, SUM(size) FROM checkpoints WHERE plan=? GROUP BY k",
                                             (plan["id"],)):
            stored[k] = size
        per = []
        for k in sorted({int(x) for x in info.get("predicted", {})}):
            per.append({"k": k, "checkpoint": k in set(info.get("checkpoints", [])) or k in stored,
                        "cost": info.get("costs", {}).get(str(k)), "stored": stored.get(k),
                        "predicted": info.get("predicted", {}).get(str(k)),
                        "measured": info.get("measured", {}).get(str(k))})
        rows.append({"plan": plan["id"], "policy": plan["policy"], "tau": plan["tau"], "active": plan["active"],
                     "checkpoints": info.get("checkpoints"), "per_instance": info.get("per_instance"),
                     "cost": info.get("cost"), "stored_bytes": sum(stored.values()),
                     "interactions": per})
    lines = []
    for r in rows:
        lines.append(f"plan {r['plan']} ({r['policy']}, τ = {r['tau']:g}s){' — active' if r['active'] else ''}: "
                     f"cost {human_bytes(r['cost'])}, stored {human_bytes(r['stored_bytes'])}")
        lines.append(table([[x["k"], "●" if x["checkpoint"] else "", human_bytes(x["cost"]) if x["cost"] else "",
                             f"{x['predicted']:.3f}s" if x["predicted"] is not None else "",
                             f"{x['measured']:.3f}s" if x["measured"] is not None else ""]
                            for x in r["interactions"]],
                           ["k", "ckpt", "state", "predicted jump", "measured jump"]))
    emit(rows, json=json, nl=nl, text="\n".join(lines))

"""The `tt inspect` views that need a replay (tuple scopes and their overlaps), and the
checkpoint plans."""

from __future__ import annotations

from ..core.errors import UsageError
from .output import Activity, cut_hint, emit, row_text, table


def show(reader, what: str, target: str | None, *, at: int | None, trust: bool, json: bool, nl: bool,
         csv: bool) -> None:
    from ..replay.session import DebugSession
    from .output import require_dataflow

    if what == "checkpoints":
        return show_checkpoints(reader, json=json, nl=nl)
    require_dataflow(reader, "inspect")
    session = DebugSession(reader, trust=trust)
    if what == "scope":
        show_scope(session, target, json=json, nl=nl)
    elif what == "overlaps":
        with Activity("finding the θ inputs whose scopes overlap (every tuple of the run, from the logs)"):
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


def show_scope(session, target: str | None, *, json: bool, nl: bool) -> None:
    """A tuple's scope as a tree, every tuple with its row (whole in --json and --nl)."""
    if not target:
        raise UsageError("which tuple? e.g. tt inspect RUN scope FE:0:42")
    tree = session.scope(target)
    refs = {n.ref for n in tree.walk()}
    # The rows: one replay from the start of the run up to the scope's last tuples
    # (`DebugSession.payloads`); it cannot report how far it is, so show that it works.
    with Activity(f"replaying the run to read the {len(refs)} tuple(s) of {session.label(tree.ref)}'s scope"):
        rows = session.payloads(refs)
    overlap = _overlap_of(session.provenance, tree) if session.provenance.is_theta_root(tree.ref) else None

    def node(n):
        return {"tuple": session.label(n.ref), "row": rows.get(n.ref),
                "children": [node(c) for c in n.children]}
    data = node(tree)
    data["step_over"] = overlap is None
    if overlap is not None:
        data["overlaps_with"] = session.label(overlap.blocker)
        data["at"] = session.label(overlap.at)
    lines, cut = [], False

    def walk(n, depth):
        nonlocal cut
        text, c = row_text(n["row"])
        cut |= c
        lines.append("  " * depth + f"{n['tuple']}  {text}")
        for child in n["children"]:
            walk(child, depth + 1)
    walk(data, 0)
    if overlap is not None:
        lines.append(f"no step-over: the scope overlaps that of {session.label(overlap.blocker)} "
                     f"(at {session.label(overlap.at)})")
    if cut:
        lines.append(cut_hint(f"`tt inspect RUN scope {data['tuple']} --json`"))
    emit(data, json=json, nl=nl, text="\n".join(lines))


def _overlap_of(prov, tree):
    """Whether the θ input at the root of `tree` lacks a step-over: the `Overlap` that
    `Provenance.overlaps()` reports for it (same blocker, same place), or None.

    `overlaps()` ranks every tuple of the run (seconds on a large run) to answer for all
    θ inputs at once; one input's answer only needs the instances its scope reaches, up to
    its tuples there: root x lacks a step-over when such an instance consumed a tuple of a
    later root before a tuple of x."""
    from ..core.scopes import Overlap, TupleRef

    graph = prov.graph
    root = tree.ref
    mine = prov.rank(root)
    reach: dict[tuple[int, int], int] = {}
    for n in tree.walk():
        r = n.ref
        if r.op != graph.theta:
            reach[(r.op, r.instance)] = max(reach.get((r.op, r.instance), -1), r.position)
    ranks: dict[TupleRef, tuple | None] = {}

    def rank_of(ref: TupleRef):
        """The rank of the θ input a tuple comes from (None: a free tuple)."""
        chain = []
        while ref not in ranks:
            origin = prov.origin(ref)
            if origin is None:
                ranks[ref] = prov.rank(ref) if prov.is_theta_root(ref) else None
                break
            chain.append(ref)
            ref = origin
        value = ranks[ref]
        for r in chain:
            ranks[r] = value
        return value

    for (op, i) in sorted(reach):  # the order `overlaps()` scans instances in (topological)
        best, best_n = None, -1
        for n in range(reach[(op, i)] + 1):
            r = rank_of(TupleRef(op, i, n))
            if r is None:
                continue
            if best is not None and r < best:
                if r == mine:
                    return Overlap(root, TupleRef(graph.theta, best[1], best[2]), TupleRef(op, i, best_n))
            elif best is None or r > best:
                best, best_n = r, n
    return None


def show_checkpoints(reader, *, json: bool, nl: bool) -> None:
    """Plans, the cost of each checkpoint, predicted and measured jump time per interaction."""
    from .output import human_bytes

    plans = reader.plans()
    if not plans:  # a fact of the run, not an error: an empty list (--json), nothing (--nl)
        emit([], json=json, nl=nl,
             text=f"{reader.path}: no checkpoint plan (a jump replays from the start); make one with "
                  f"`tt checkpoint {reader.path} --tau 2s`")
        return
    rows = []
    for plan in plans:
        info = plan["info"]
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

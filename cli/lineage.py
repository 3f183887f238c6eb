"""`tt lineage`: which tuples a row was made from (--back), or what a tuple became (--forward)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Optional

import orjson
import typer

from ..core import values
from ..core.errors import UsageError
from .main import app
from .output import CSV, JSON, Activity, Progress, cut_hint, emit, only_one, require_dataflow, require_intact, row_text

_CSV_COLUMNS = ["root", "from", "kind", "state", "read_by", "to", "row", "note", "spark", "rows"]


@app.command()
def lineage(
    run: Path = typer.Argument(..., help="A run file written by `tt record`."),
    target: str = typer.Argument(..., help="A tuple, OP:INSTANCE:INPUT# (one waiting on a channel too); a row "
                                           "a call emitted, OP:INSTANCE:INPUT#/OUTPUT#; a state value at the "
                                           "end of the run "
                                           "(or at --at K), OP:INSTANCE.FIELD.KEY (--back); or an operator, "
                                           "sink or source name with --where choosing among the rows it emitted."),
    back: bool = typer.Option(False, "--back", help="What the row was made from, down to where it entered G(θ)."),
    forward: bool = typer.Option(False, "--forward", help="What the row became, up to where each path ended."),
    where: Optional[str] = typer.Option(None, "--where", help="A Python expression over a row's fields (a "
                                        "dict's keys, a named Row's fields, a UDTF's returnType, a DataFrame's columns, where one of its "
                                        "rows holds; the whole row is `row`): one tree per row it holds for."),
    depth: Optional[int] = typer.Option(None, "--depth", min=0, help="Follow at most N links from the row."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="At most N of the rows --where chooses: "
                                        "the first by instance, then position (the others are counted)."),
    at: Optional[int] = typer.Option(None, "--at", min=0, metavar="K", help="With a state value: its value at "
                                     "interaction K (`tt inspect RUN interactions` lists them), not at the end."),
    index: bool = typer.Option(True, "--index/--no-index", help="Answer from the run's lineage index, built "
                               "by the first query (one replay of G(θ) with state tracked) and kept in the run "
                               "file; --no-index replays only as far as this query needs and keeps nothing."),
    reindex: bool = typer.Option(False, "--reindex", help="Build the lineage index again, even if one is kept."),
    trust: bool = typer.Option(False, "--trust", help="Allow replaying code (and decoding pickled tuples) "
                               "from a run you did not record."),
    json: bool = JSON, csv: bool = CSV,
):
    """Row lineage: the tuples a row was made from (--back), or what a tuple became (--forward).

    Each link says how two rows are related: "emitted while processing" (the row is an
    output of that tuple's call, from the logs), or "through state" (the call that emitted
    the row read an operator's state that the other tuple's call wrote, found by replaying
    the run with the state tracked; the link names the instance, field and key). In a job
    tt recorded unchanged, "through Spark" links a unit a hooked function was handed to the
    outputs of the hooked function before it whose rows it holds, Spark's shuffle or filter
    between them (matched by value), or, across one aggregate by columns that function
    emitted, its rows with the group's key (matched by key); "passed on by PySpark
    (pipelined)" links two RDD
    functions PySpark runs one after the other (exact).
    Backward lineage stops at the tuples that entered G(θ): θ's inputs and the other side of
    a join, with the source row's file and row number when the source was read by
    reference. Forward lineage says where each path ended: a sink, a call that emitted
    nothing from it (filtered or absorbed), or a row still pending at the end of the run.
    --json prints a list with one document per row (its tuples and links); --csv one line
    per link. See docs/LINEAGE.md.

    Examples (the fraud sample, sample_runs/fraud/):
      tt record sample_runs/fraud/job.py --watch FE -o fraud.db
      tt lineage fraud.db FD --where "customer == 'Bob' and label == 'Fraud'" --back --depth 2 --limit 3
      tt lineage fraud.db U --where "amount == '¥5000'" --forward
      tt lineage fraud.db FF:0:17 --back --json
      tt lineage fraud.db FE:1:40/0 --forward          # the first row FE:1's call on input #40 emitted
      tt lineage fraud.db FD:0.blacklist.Bob --back     # who put Bob on the blacklist
      tt lineage fraud.db FE:1.highest.Bob --back --at 2   # his highest payment as interaction 2 saw it
    """
    from ..replay.lineage import Lineage
    from ..replay.session import DebugSession
    from ..store.reader import RunReader

    only_one(json=json, csv=csv)
    if back == forward:
        raise UsageError("choose one direction: --back (what the row was made from) or --forward (what it became)")
    # A query's own objects hold no cycles: a collection set off by them walks the whole heap for
    # nothing (40–60 ms of a 110 ms query from the index, one query in three). Replays of user
    # code, to build the index or where a query needs one, collect as usual (`values.gc_resumed`).
    with values.gc_paused():
        reader = RunReader(run)
        try:
            require_intact(reader)
            require_dataflow(reader, "trace")
            session = DebugSession(reader, trust=trust)
            lineage = Lineage(session)
            _check_question(reader, lineage, target, where, at)   # at once, before an index is built
            if (index or reindex) and not _STATE.fullmatch(target):   # (a state value is read from a replay)
                note = lineage.use_index(rebuild=reindex, progress=Progress("indexing lineage (once)"))
                if note is not None:
                    print(f"tt: {note}", file=sys.stderr)
            replaying = "replaying the run with the operators' state tracked"
            with Activity("tracing" if lineage.index is not None else replaying):
                roots = _roots(session, lineage, target, where, at)
                left_out = len(roots) - limit if limit is not None and len(roots) > limit else 0
                trees = lineage.trees(roots[:len(roots) - left_out], back, depth)
            if json:
                emit([lineage.as_dict(t) for t in trees], json=True)
            elif csv:
                emit([row for t in trees for row in _csv_rows(lineage, t)], csv_=True, columns=_CSV_COLUMNS)
            else:
                texts, cut = zip(*(_tree_text(lineage, t) for t in trees))
                stops = sorted({s for s in (lineage.stops(t) for t in trees) if s})
                again = f"`tt lineage {run} {target}{' --where ' + repr(where) if where else ''} " \
                        f"{'--back' if back else '--forward'} --json`"
                emit(None, text="\n\n".join(texts) + "".join("\n" + s for s in stops)
                     + (f"\n… {left_out} more row(s) match --where (--limit {limit})" if left_out else "")
                     + ("\n" + cut_hint(again) if any(cut) else ""))
        finally:
            reader.close()


_STATE = re.compile(r"([^:.]+:\d+)\.(.+)")   # OP:I.field.key


def _check_question(reader, lineage, target: str, where: str | None, at: int | None) -> None:
    """What can be told wrong with the question without an index (or a replay to build one)."""
    from ..replay.lineage import Where

    state = _STATE.fullmatch(target)
    if state is not None:
        if where is not None:
            raise UsageError(f"{target} names one state value; --where chooses among the rows an operator emitted")
        return
    if at is not None:
        raise UsageError(f"--at chooses when a state value is read (OP:INSTANCE.FIELD.KEY); {target} is not one")
    if ":" not in target:
        reader.operator(target)
        if where is None:
            raise UsageError(f"which of {target}'s rows? choose them with --where, e.g. --where \"customer == 'Bob'\" "
                             f"(or name one tuple as OP:INSTANCE:INPUT#)")
        Where(where)
        return
    if where is not None:
        raise UsageError(f"{target} names one tuple; --where chooses among the rows an operator emitted "
                         f"(tt lineage RUN OP --where EXPR)")
    lineage.check_ref(target)


def _roots(session, lineage, target: str, where: str | None, at: int | None = None) -> list:
    """The rows the question is about (`_check_question` has found nothing wrong with it)."""
    state = _STATE.fullmatch(target)
    if state is not None:   # OP:I.field.key: a state value, at the end of the run or at interaction `at`
        instance, dotted = state.groups()
        return [lineage.state_value(instance, dotted, at=_position_at(session, instance, at))]
    if ":" not in target:
        return lineage.rows_of(target, where)
    return [lineage.parse_ref(target)]


def _position_at(session, instance: str, k: int | None) -> int | None:
    """How many tuples `instance` had consumed at interaction k (None: the end of the run)."""
    if k is None:
        return None
    key = session.parse_instance(instance)
    snap = session.reader.instances_at(k)
    if snap is None:
        raise UsageError(session.reader.no_states_at(k))
    return snap[key].position


def _link_text(lineage, link, back: bool) -> str:
    if link.kind == "consumed":
        return "consumed at"
    if link.kind == "emitted":
        return "emitted while processing" if back else "emitted as"
    if link.kind == "spark":
        return link.spark_text(back)
    if back:
        return f"through state {link.state}, written by"
    return f"through state {link.state}, read by {lineage.label(link.by)}, as"


def _tree_text(lineage, tree) -> tuple[str, bool]:
    """The tree, depth first, each row once ("shown above" where it comes again), at most
    WRITERS_SHOWN writers per state path (`Tree.shown_links`); (text, whether a row was cut)."""
    from ..replay.lineage import Output
    back = tree.direction == "back"
    lines, shown, cut = [], set(), False

    def describe(node) -> str:
        nonlocal cut
        text, c = row_text(tree.rows.get(node))
        op = node.call.op if isinstance(node, Output) else getattr(node, "op", None)
        if tree.rows.get(node) is None and op in lineage.graph.lineage:
            text = "(row not recorded: outside G(θ))"
        cut |= c
        note = tree.note(node)
        more = "  … (more beyond --depth)" if node in tree.cut else ""
        return f"{lineage.label(node)}  {text}" + (f"  {note}" if note else "") + more

    def children(node) -> list:
        return [f"… {item[1]} more through state {item[0]} (--json lists them)" if isinstance(item, tuple)
                else item for item in tree.shown_links(node)]

    def walk(node, prefix: str) -> None:
        shown.add(node)
        items = children(node)
        for i, item in enumerate(items):
            last = i == len(items) - 1
            head, pad = ("└─ ", "   ") if last else ("├─ ", "│  ")
            if isinstance(item, str):
                lines.append(prefix + head + item)
                continue
            if item.to in shown:
                lines.append(f"{prefix}{head}{_link_text(lineage, item, back)} {lineage.label(item.to)} (shown above)")
                continue
            lines.append(f"{prefix}{head}{_link_text(lineage, item, back)} {describe(item.to)}")
            walk(item.to, prefix + pad)

    lines.append(describe(tree.root))
    walk(tree.root, "")
    return "\n".join(lines), cut


def _csv_rows(lineage, tree) -> list[dict]:
    root = lineage.label(tree.root)

    def row(node) -> str:
        return orjson.dumps(tree.rows.get(node)).decode()
    rows = [{"root": root, "kind": "root", "to": root, "row": row(tree.root), "note": tree.note(tree.root)}]
    for link in tree.links:
        rows.append({"root": root, "from": lineage.label(link.src), "kind": link.kind, "state": link.state or "",
                     "read_by": lineage.label(link.by) if link.by is not None else "",
                     "to": lineage.label(link.to), "row": row(link.to), "note": tree.note(link.to),
                     "spark": link.spark or "", "rows": link.rows or ""})
    return rows

"""What Spark does to the rows between two hooked operators: the DAG's opaque edges.

A hooked call's input is a DataFrame (or grouped data, or an RDD) whose plan may run
an earlier hooked function. Spark's analyzed plan names it (what Spark runs carries
the operator's name, recorder/hooked_calls.py), and the plan nodes between the two
say what Spark did: a filter, a join, a shuffle by the grouping keys. PySpark chains
the RDD functions of one stage as `PipelinedRDD.prev`. Best effort: a plan tt cannot
read gives no edge, never an error.
"""

from __future__ import annotations

import re
from typing import Any

#: Spark's logical plan nodes, as a user would name what they do; others are shown lowercased.
PLAN_WORDS = {"Filter": "filter", "Join": "join", "Aggregate": "aggregate", "Repartition": "shuffle",
              "RepartitionByExpression": "shuffle", "Sort": "sort", "Union": "union", "Window": "window",
              "Deduplicate": "distinct", "Distinct": "distinct", "GlobalLimit": "limit", "Sample": "sample",
              "Expand": "expand", "Generate": "explode", "EventTimeWatermark": "watermark"}
_QUIET = {"Project", "SubqueryAlias", "LocalLimit", "View", "ResolvedHint"}


def note_plan_node(session: Any, name: str | None, df: Any) -> None:
    """Where Spark's plans name a hooked operator otherwise than by its function: a
    StatefulProcessor's node runs PySpark's `transformWithStateUDF(...)#N`, whatever the
    processor. Its expression, unique to the call (`#N`), is noted for `name` from the plan of
    the DataFrame the call made, so a later call downstream finds the edge from it. Best
    effort: a plan tt cannot read notes nothing."""
    try:
        root = df._jdf.queryExecution().analyzed().toString().splitlines()[0]
    except Exception:  # noqa: BLE001
        return
    m = re.match(r"\W*\w+ (\w+\((?:[^()]|\([^()]*\))*\)#\d+)", root)   # (a streaming plan's nodes start with ~)
    if name and m is not None:
        session.plan_nodes[name] = m.group(1)


def spark_upstream(session: Any, inputs: list) -> list[tuple[str, str, list[str] | None]]:
    """(hooked operator, what Spark did to its rows, the keys of the one aggregate between them
    or None: `aggregate_keys`) for each hooked operator whose output reaches this call through
    `inputs` (DataFrames, or grouped data), from Spark's own analyzed plan. Best effort: a plan
    tt cannot read gives no edge, never an error."""
    names = session.hooked_names()
    if not names:
        return []
    out: list[tuple[str, str]] = []
    nodes = getattr(session, "plan_nodes", {})
    for x in inputs:
        try:
            df = x if hasattr(x, "_jdf") else None
            if df is None:   # GroupedData: its DataFrame, and the shuffle by its keys
                df = x._df
                keys = _grouping_keys(x._jgd.toString())
                first = f"shuffle by {keys}" if keys else "shuffle by key"
            else:
                first = ""
            text = df._jdf.queryExecution().analyzed().toString()
        except Exception:  # noqa: BLE001
            continue
        for name in names:
            label = plan_path_label(text, name, [n for n in names if n != name], nodes)
            if label is not None:
                # (in the order the rows went: the plan's nodes, then the shuffle by the call's keys)
                out.append((name, ", ".join(w for w in (label, first) if w) or "as is",
                            aggregate_keys(text, name, nodes)))
    return out


def rdd_upstream(session: Any, rdd: Any) -> list[tuple[str, str, list[str] | None]]:
    """The hooked operator an RDD call is pipelined after, if any (PySpark chains the
    Python functions of one stage as `PipelinedRDD.prev`); or, where the chain starts at a
    DataFrame's `.rdd` (`df.rdd.mapPartitions(f)`: the hook of `DataFrame.rdd` marks the RDD
    with its DataFrame), the hooked operators that DataFrame's plan runs (`spark_upstream`)."""
    seen = 0
    while rdd is not None and seen < 32:
        name = getattr(rdd, "_tt_operator", None)
        if name is not None:
            return [(name, "pipelined" if seen == 0 else "pipelined through PySpark's own functions", None)]
        df = getattr(rdd, "_tt_dataframe", None)
        if df is not None:
            return spark_upstream(session, [df])
        rdd, seen = getattr(rdd, "prev", None), seen + 1
    return []


def plan_path_label(plan: str, name: str, others: Any = (), nodes: dict[str, str] | None = None) -> str | None:
    """What lies between the root of an analyzed plan (its tree text) and the node that runs
    the hooked function `name`: the kinds of the nodes on that path, as words. None when
    the plan does not run `name`, or where a node on that path runs one of the hooked
    functions `others`: `name`'s rows reach the root through that one, whose own edge says so
    (`df.mapInPandas(f).groupBy(k).applyInPandas(g)` then `.rdd.mapPartitions(h)`: g's rows
    feed h, f's feed g). `nodes`: the plan's name for an operator not named by its function
    (`note_plan_node`)."""
    lines = plan.splitlines()
    at = next((i for i, line in enumerate(lines) if _runs(line, name, nodes)), None)
    if at is None:
        return None
    depth, words = _plan_depth(lines[at]), []
    for line in reversed(lines[:at]):   # up the tree: in the order the rows went through
        d = _plan_depth(line)
        if d < depth:
            depth = d
            if any(_runs(line, other, nodes) for other in others):
                return None
            kind = line[d:].split(" ", 1)[0]
            word = PLAN_WORDS.get(kind, kind.lower())
            if kind not in _QUIET and word not in words:
                words.append(word)
    return ", ".join(words)


#: nodes that pass every row on with its values, between a hooked function and an aggregate
_MOVES = _QUIET | {"Repartition", "RepartitionByExpression", "Sort"}
#: ... and between an aggregate and the hooked function after it: each row there is one group's
_KEEPS_GROUPS = _MOVES | {"Filter", "GlobalLimit"}
_DEPTH = {"[": 1, "(": 1, "]": -1, ")": -1}   # how a plan's text nests
_ATTRIBUTE = re.compile(r"^([A-Za-z_]\w*)#\d+L?$")


def aggregate_keys(plan: str, name: str, nodes: dict[str, str] | None = None) -> list[str] | None:
    """The grouping columns of the one aggregate between the hooked function `name` and the root
    of an analyzed plan, where each row the root gives is one group of rows the function emitted:
    every grouping expression is a column the function emitted (its attribute, `cust#5`, is on
    the function's node, and no node between recomputes it), nothing between the function and
    the aggregate drops or changes a row (a filter there would drop rows of a group), and the
    nodes above the aggregate keep each key as it is (a filter: fewer groups; a projection that
    renames a key or drops it: no keys). [] for an aggregate of all rows. None otherwise, or
    where the plan is not one tt reads: then rows are matched by value alone (replay/spark_links.py)."""
    lines = plan.splitlines()
    at = next((i for i, line in enumerate(lines) if _runs(line, name, nodes)), None)
    if at is None:
        return None
    path, depth = [], _plan_depth(lines[at])
    for line in reversed(lines[:at]):   # up the tree, from the function to the root
        d = _plan_depth(line)
        if d < depth:
            depth = d
            path.append(line[d:])
    kinds = [node.split(" ", 1)[0] for node in path]
    if kinds.count("Aggregate") != 1:
        return None
    agg = kinds.index("Aggregate")
    if any(k not in _MOVES for k in kinds[:agg]) or any(k not in _KEEPS_GROUPS for k in kinds[agg + 1:]):
        return None
    grouping = _bracketed(path[agg][len("Aggregate "):])
    if grouping is None:
        return None
    attributes = [a.strip() for a in _split_top(grouping)] if grouping.strip() else []
    keys = []
    for a in attributes:
        m = _ATTRIBUTE.match(a)
        if m is None or not re.search(re.escape(a) + r"(?![\w#])", lines[at]):
            return None   # a computed key (`id % 2`), or a column the function did not emit
        for node in path[:agg] + path[agg + 1:]:
            if node.startswith("Project ") and not re.search(re.escape(a) + r"(?![\w#])(?! AS )", node):
                return None   # dropped, renamed or made anew on the way
        keys.append(m.group(1))
    return keys


def _bracketed(text: str) -> str | None:
    """What the bracket `text` starts with holds: `cust#5, x#6` of `[cust#5, x#6], [...]`."""
    if not text.startswith("["):
        return None
    level = 0
    for i, c in enumerate(text):
        level += _DEPTH.get(c, 0)
        if level == 0:
            return text[1:i]
    return None


def _split_top(text: str) -> list[str]:
    """`text` split at its commas outside brackets."""
    parts, level, start = [], 0, 0
    for i, c in enumerate(text):
        level += _DEPTH.get(c, 0)
        if c == "," and level == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _runs(line: str, name: str, nodes: dict[str, str] | None = None) -> bool:
    """Whether a plan node's line runs the hooked function `name` (or the node `nodes` notes for it)."""
    node = nodes.get(name) if nodes else None
    if node is not None:
        return f" {node}" in line
    return f" {name}(" in line or f"], {name}(" in line


def _plan_depth(line: str) -> int:
    return next((i for i, c in enumerate(line) if c.isalnum()), len(line))


def _grouping_keys(text: str) -> str:
    """`customer` from `RelationalGroupedDataset: [grouping expressions: [customer], …`."""
    m = re.search(r"grouping expressions: \[([^\]]*)\]", text)
    return ", ".join(k.split(":")[0].strip() for k in m.group(1).split(",")) if m else ""


__all__ = ["spark_upstream", "rdd_upstream", "plan_path_label", "aggregate_keys", "note_plan_node"]

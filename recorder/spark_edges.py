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
              "Expand": "expand", "Generate": "explode"}
_QUIET = {"Project", "SubqueryAlias", "LocalLimit", "View", "ResolvedHint"}


def spark_upstream(session: Any, inputs: list) -> list[tuple[str, str]]:
    """(hooked operator, what Spark did to its rows) for each hooked operator whose output
    reaches this call through `inputs` (DataFrames, or grouped data), from Spark's own
    analyzed plan. Best effort: a plan tt cannot read gives no edge, never an error."""
    names = session.hooked_names()
    if not names:
        return []
    out: list[tuple[str, str]] = []
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
            label = plan_path_label(text, name, [n for n in names if n != name])
            if label is not None:
                out.append((name, ", ".join(w for w in (first, label) if w) or "as is"))
    return out


def rdd_upstream(session: Any, rdd: Any) -> list[tuple[str, str]]:
    """The hooked operator an RDD call is pipelined after, if any (PySpark chains the
    Python functions of one stage as `PipelinedRDD.prev`); or, where the chain starts at a
    DataFrame's `.rdd` (`df.rdd.mapPartitions(f)`: the hook of `DataFrame.rdd` marks the RDD
    with its DataFrame), the hooked operators that DataFrame's plan runs (`spark_upstream`)."""
    seen = 0
    while rdd is not None and seen < 32:
        name = getattr(rdd, "_tt_operator", None)
        if name is not None:
            return [(name, "pipelined" if seen == 0 else "pipelined through PySpark's own functions")]
        df = getattr(rdd, "_tt_dataframe", None)
        if df is not None:
            return spark_upstream(session, [df])
        rdd, seen = getattr(rdd, "prev", None), seen + 1
    return []


def plan_path_label(plan: str, name: str, others: Any = ()) -> str | None:
    """What lies between the root of an analyzed plan (its tree text) and the node that runs
    the hooked function `name`: the kinds of the nodes on that path, as words. None when
    the plan does not run `name`, or where a node on that path runs one of the hooked
    functions `others`: `name`'s rows reach the root through that one, whose own edge says so
    (`df.mapInPandas(f).groupBy(k).applyInPandas(g)` then `.rdd.mapPartitions(h)`: g's rows
    feed h, f's feed g)."""
    lines = plan.splitlines()
    at = next((i for i, line in enumerate(lines) if _runs(line, name)), None)
    if at is None:
        return None
    depth, words = _plan_depth(lines[at]), []
    for line in reversed(lines[:at]):   # up the tree: in the order the rows went through
        d = _plan_depth(line)
        if d < depth:
            depth = d
            if any(_runs(line, other) for other in others):
                return None
            kind = line[d:].split(" ", 1)[0]
            word = PLAN_WORDS.get(kind, kind.lower())
            if kind not in _QUIET and word not in words:
                words.append(word)
    return ", ".join(words)


def _runs(line: str, name: str) -> bool:
    """Whether a plan node's line runs the hooked function `name`."""
    return f" {name}(" in line or f"], {name}(" in line


def _plan_depth(line: str) -> int:
    return next((i for i, c in enumerate(line) if c.isalnum()), len(line))


def _grouping_keys(text: str) -> str:
    """`customer` from `RelationalGroupedDataset: [grouping expressions: [customer], …`."""
    m = re.search(r"grouping expressions: \[([^\]]*)\]", text)
    return ", ".join(k.split(":")[0].strip() for k in m.group(1).split(",")) if m else ""


__all__ = ["spark_upstream", "rdd_upstream", "plan_path_label"]

"""The step planner (replay/stepping.py) on logs built in memory: no Spark, no run file.

The DAG is S → A (θ) → B, with a second input of B from a source outside G(θ)
(its tuples are free). Each test writes the Input and Output logs of a small
execution by hand and checks the plan against what the logs say.
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace

from tt.core.graph import Graph
from tt.core.logs import END
from tt.core.scopes import Provenance, TupleRef
from tt.replay.stepping import INTO, OUT, OVER, Planner


def _graph(a_instances: int, shuffle: bool) -> Graph:
    g = Graph()
    s = g.add_node("S", "source", SimpleNamespace())
    a = g.add_node("A", "process", SimpleNamespace())
    b = g.add_node("B", "process", SimpleNamespace())
    x = g.add_node("X", "source", SimpleNamespace())
    g.connect(s, a)
    g.connect(a, b, shuffle=shuffle)
    g.connect(x, b, shuffle=shuffle)
    s.instances, a.instances, b.instances, x.instances = a_instances, a_instances, 1, 1
    g.theta, g.in_g = a.id, {a.id, b.id}
    return g


class Logs:
    """Input runs, output counts and shuffle destinations per instance, as the recorder logs them."""

    def __init__(self) -> None:
        self.runs: dict[tuple[int, int], list] = {}
        self.counts: dict[tuple[int, int], list[int]] = {}
        self.dests: dict[tuple[int, int], dict[int, list[int]]] = {}

    def __call__(self, op: int, i: int):
        dests = {e: array("q", d) for e, d in self.dests.get((op, i), {}).items()}
        return self.runs[(op, i)], array("q", self.counts[(op, i)]), dests


def _chain() -> tuple[Graph, Provenance]:
    """A:0 consumes three tuples from S and emits 1, 2, 0 outputs; B:0 consumes A's three
    outputs in order, then one tuple from X (free), then ends."""
    g = _graph(1, shuffle=False)
    logs = Logs()
    logs.runs[(1, 0)] = [(0, 0, 3), (*END, 1)]
    logs.counts[(1, 0)] = [1, 2, 0, 0]
    logs.runs[(2, 0)] = [(0, 0, 3), (1, 0, 1), (*END, 1)]
    logs.counts[(2, 0)] = [0, 0, 0, 0, 0]
    return g, Provenance(g, logs, {})


def test_into_and_over_plan_the_tuple_and_its_scope():
    g, prov = _chain()
    at = {(1, 0): 0, (2, 0): 0}
    planner = Planner(g, prov, lambda: at)
    into = planner.plan(INTO, TupleRef(1, 0, 1))
    assert not into.ok and "A:0:0" in into.availability.reason, "A:0:0 must be processed first: not free"
    assert into.availability.reason == "A:0 must first consume A:0:0, which comes before; step over it first"
    into = planner.plan(INTO, TupleRef(1, 0, 0))
    assert into.ok and into.targets == {(1, 0): 1} and into.allowed == {TupleRef(1, 0, 0)}
    over = planner.plan(OVER, TupleRef(1, 0, 0))
    assert over.ok and over.targets == {(1, 0): 1, (2, 0): 1}
    assert over.allowed == {TupleRef(1, 0, 0), TupleRef(2, 0, 0)}
    at[(1, 0)] = 1   # A:0:0 stepped into: its output waits at B
    over = planner.plan(OVER, TupleRef(1, 0, 1))
    assert not over.ok
    assert over.availability.reason == ("no step-over for A:0:1: B:0 must first consume B:0:0, from the scope of "
                                        "A:0:0, which is still in progress; step over or out of it first")
    assert over.availability.blocker == "A:0:0"
    out = planner.plan(OUT, TupleRef(1, 0, 0))
    assert out.ok and out.targets == {(2, 0): 1}
    assert planner.remaining(TupleRef(1, 0, 0)) == {(2, 0): 1}


def test_consumed_tuples_and_free_tuples():
    g, prov = _chain()
    at = {(1, 0): 3, (2, 0): 3}
    planner = Planner(g, prov, lambda: at)
    assert planner.plan(INTO, TupleRef(1, 0, 2)).availability.reason == "A:0:2 was already consumed"
    assert planner.free(TupleRef(2, 0, 3)), "X's tuple entered G(θ) at B: free"
    assert planner.free(TupleRef(1, 0, 3)), "the END step is free"
    assert not planner.free(TupleRef(2, 0, 1)), "B:0:1 came from θ's input A:0:1"
    assert planner.remaining(TupleRef(1, 0, 1)) == {}, "the scope is complete"


def test_plans_are_cached_until_the_position_changes():
    g, prov = _chain()
    at = {(1, 0): 0, (2, 0): 0}
    planner = Planner(g, prov, lambda: dict(at))
    first = planner.plan(OVER, TupleRef(1, 0, 0))
    assert planner.plan(OVER, TupleRef(1, 0, 0)) is first, "the same position: the same plan"
    at[(1, 0)] = 1
    again = planner.plan(OVER, TupleRef(1, 0, 0))
    assert again is not first and not again.ok and "already consumed" in again.availability.reason


def test_overlapping_scopes_have_no_step_over():
    """A has two instances shuffling into B:0, which consumed A:1's output before A:0's: the
    scope of A:0:0 overlaps that of the later root A:1:0 (section 5.3)."""
    g = _graph(2, shuffle=True)
    logs = Logs()
    logs.runs[(1, 0)] = [(0, 0, 1)]
    logs.counts[(1, 0)] = [1]
    logs.dests[(1, 0)] = {1: [0]}
    logs.runs[(1, 1)] = [(0, 1, 1)]
    logs.counts[(1, 1)] = [1]
    logs.dests[(1, 1)] = {1: [0]}
    logs.runs[(2, 0)] = [(0, 1, 1), (0, 0, 1)]
    logs.counts[(2, 0)] = [0, 0]
    prov = Provenance(g, logs, {})
    at = {(1, 0): 0, (1, 1): 0, (2, 0): 0}
    planner = Planner(g, prov, lambda: at)
    over = planner.plan(OVER, TupleRef(1, 0, 0))
    assert not over.ok
    assert over.availability.reason == ("no step-over for A:0:0: its scope overlaps that of the later tuple A:1:0: "
                                        "B:0 consumed B:0:0 (from A:1:0) first")
    assert [(o.root, o.blocker) for o in prov.overlaps()] == [(TupleRef(1, 0, 0), TupleRef(1, 1, 0))]
    later = planner.plan(OVER, TupleRef(1, 1, 0))
    assert later.ok and later.targets == {(1, 1): 1, (2, 0): 1}
    into = planner.plan(INTO, TupleRef(1, 0, 0))
    assert into.ok, "stepping into it needs nothing of the other scope"

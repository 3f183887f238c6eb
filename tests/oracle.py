"""An independent oracle for replayed states: G(θ)'s operators run sequentially in
plain Python, in the logged order.

It reads only the run file's recorded tuples, Input logs and operator code; it
routes outputs itself (by the dataflow's key functions) and tracks which θ input
each tuple descends from. It shares no code with the replay engine or with
`tt.core.scopes`, so agreeing with it means something.
"""

from __future__ import annotations

from typing import Any

import cloudpickle
import orjson

from tt.core import values
from tt.core.graph import Graph
from tt.core.operator import CONTEXT
from tt.store import blobs
from tt.store.reader import RunReader

END = (-1, -1)


class _Results:
    """log_result values served by (position, call), for operators that use them."""

    def __init__(self, results):
        self.by = {(r.position, r.call): r.value for r in results}
        self.count = 0
        self.pos, self.call = -1, 0

    def log_result(self, fn, args, kwargs):
        if self.count != self.pos:
            self.pos, self.call = self.count, 0
        else:
            self.call += 1
        return self.by[(self.pos, self.call)]


class Oracle:
    def __init__(self, reader: RunReader):
        self.reader = reader
        keys = {e: cloudpickle.loads(c) for e, c in reader.edge_keys().items()}
        self.graph = Graph.from_description(reader.plan, {}, keys)
        for o in reader.operators:
            self.graph.nodes[o.id].instances = o.instances
        self._outputs: dict[tuple[int, int], list] = {}
        self._inputs: dict[tuple[int, int], list] = {}
        self.epochs = {}
        theta = self.graph.theta
        for inter in reader.interactions():
            if inter.k and inter.trigger != "end":
                for (op, i), at in reader.instances_at(inter.k).items():
                    if op == theta:
                        self.epochs.setdefault(i, []).append(at.position)

    def fresh(self, op: int):
        return cloudpickle.loads(self.reader.code(op))

    def entry_rows(self, op: int, i: int) -> dict[tuple[int, int], list]:
        out: dict[tuple[int, int], list] = {}
        for port, src, start, n, codec, data in self.reader.entry_chunks(op, i):
            rows = out.setdefault((port, src), [])
            assert start == len(rows)
            rows.extend(blobs.unpack_tuples(codec, data))
        return out

    def inputs(self, op: int, i: int) -> list[tuple[Any, int, Any]]:
        """Every logged input of (op, i): (row, port, root), END as (None, -1, None)."""
        key = (op, i)
        if key in self._inputs:
            return self._inputs[key]
        g = self.graph
        node = g.nodes[op]
        entries = self.entry_rows(op, i)
        taken: dict[tuple[int, int], int] = {}
        out = []
        for port, src, n in self.reader.input_runs(op, i):
            for _ in range(n):
                if (port, src) == END:
                    out.append((None, -1, None))
                    continue
                seq = taken.get((port, src), 0)
                taken[(port, src)] = seq + 1
                edge = g.edges[node.inputs[port]] if port < len(node.inputs) else None
                if edge is None or edge.src not in g.in_g:
                    row = entries[(port, src)][seq]
                    root = ("θ", i, len(out)) if op == g.theta else None
                    out.append((row, port, root))
                else:
                    mine = [(r, root) for r, root, dest in self.outputs(edge.src, src)
                            if dest.get(edge.id, i) == i]
                    row, root = mine[seq]
                    out.append((row, port, root))
        self._inputs[key] = out
        return out

    def outputs(self, op: int, i: int) -> list[tuple[Any, Any, dict]]:
        """Every output of (op, i) in order: (row, root, {shuffle edge: destination instance})."""
        key = (op, i)
        if key in self._outputs:
            return self._outputs[key]
        g = self.graph
        node = g.nodes[op]
        operator = self.fresh(op)
        results = _Results(self.reader.results(op, i))
        out = []
        for n, (row, port, root) in enumerate(self.inputs(op, i)):
            results.count = n
            CONTEXT.runner = results
            try:
                produced = list(operator.finish() or ()) if port == -1 else list(operator.process(row, port) or ())
            finally:
                CONTEXT.runner = None
            for o in produced:
                dest = {e.id: g.route(e, o, i) for e in g.out_edges(node) if e.shuffle}
                out.append((o, root, dest))
        self._outputs[key] = out
        return out

    def state_after(self, op: int, i: int, n: int) -> Any:
        operator = self.fresh(op)
        results = _Results(self.reader.results(op, i))
        for pos, (row, port, _) in enumerate(self.inputs(op, i)[:n]):
            results.count = pos
            CONTEXT.runner = results
            try:
                list(operator.finish() or ()) if port == -1 else list(operator.process(row, port) or ())
            finally:
                CONTEXT.runner = None
        return orjson.loads(values.dumps(operator.state()))

    def states(self, position: dict[str, int]) -> dict[str, Any]:
        out = {}
        for label, n in position.items():
            name, i = label.split(":")
            op = self.reader.operator(name).id
            out[label] = self.state_after(op, int(i), n)
        return out

    def rank(self, root) -> tuple:
        _, i, n = root
        epoch = sum(1 for p in self.epochs.get(i, []) if p <= n)
        return (epoch, i, n)

    def overlapping_roots(self) -> dict:
        """θ inputs some instance saw a later root's tuple before: {root: (blocker, instance)}."""
        g = self.graph
        found = {}
        for node in g.nodes:
            if node.id not in g.in_g or node.id == g.theta:
                continue
            for i in range(node.instances):
                best = None
                for row, port, root in self.inputs(node.id, i):
                    if root is None:
                        continue
                    r = self.rank(root)
                    if best is not None and r < self.rank(best):
                        found.setdefault(root, (best, (node.name, i)))
                    elif best is None or r > self.rank(best):
                        best = root
        return found

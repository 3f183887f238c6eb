"""The dataflow DAG, its cut into stages, and the sub-DAG G(θ).

A dataflow is a DAG of operator nodes. An edge is *narrow* (the consumer runs in
the same task, on the same partition, tuple by tuple) or a *shuffle* (the
consumer starts a new stage; tuples are routed to an instance by a key or, for
unkeyed merges of stages, by the sending instance). Each stage runs as P
instances, one per Spark partition; every operator in a stage has P instances.

This module is pure structure: it is shipped to executors, stored in run.db and
rebuilt by the replay engine, so it must not know about Spark.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import UsageError
from .hooked import HOOKED_KINDS, UNITS
from .operator import Operator, Sink, Source

# Node kinds, as shown to users.
SOURCE, PROCESS, MAP, FILTER, FLAT_MAP, AGGREGATE, JOIN, UNION, SINK = (
    "source", "process", "map", "filter", "flat_map", "aggregate", "join", "union", "sink")


@dataclass
class Edge:
    id: int
    src: int
    dst: int
    port: int
    shuffle: bool = False
    key: Callable[[Any], Any] | None = None  # hash-partition by key; None on a shuffle = forward
    partitions: int | None = None  # requested by the user on key_by(...)

    @property
    def keyed(self) -> bool:
        return self.key is not None


@dataclass
class Node:
    id: int
    name: str
    kind: str
    op: Operator | None
    inputs: list[int] = field(default_factory=list)   # edge ids, index = port
    outputs: list[int] = field(default_factory=list)  # edge ids
    stage: int = -1
    instances: int = 0
    sink_mode: str | None = None  # sinks: "dataframe" | "collect" | "json"


@dataclass
class Stage:
    id: int
    nodes: list[int]           # topological order
    instances: int
    source: int | None = None  # the source node of a source stage
    inputs: list[int] = field(default_factory=list)  # shuffle edges into the stage
    head: int | None = None    # the node fed by those edges


class Graph:
    """Nodes and edges in creation order (which is a topological order)."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.edges: list[Edge] = []
        self.stages: list[Stage] = []
        self.theta: int | None = None
        self.in_g: set[int] = set()
        self.lineage: set[int] = set()   # outside G(θ), logged for lineage alone (`tt record --lineage`)
        self.untracked: set[int] = set()  # ... of them, those with state lineage cannot see into
        # shuffle edges from a source read by reference into G(θ): the tuples they carry are not
        # recorded where they enter, but rebuilt from the source's logs (its rows' positions and
        # where each row went; the source is then in `lineage` too)
        self.by_reference: set[int] = set()

    # --- building ---------------------------------------------------------

    def add_node(self, name: str, kind: str, op: Operator) -> Node:
        if any(n.name == name for n in self.nodes):
            raise UsageError(f"two operators are named {name!r}; names must be unique")
        if not name or ":" in name or any(c.isspace() for c in name):
            raise UsageError(f"operator name {name!r} must be non-empty, without spaces or ':'")
        op._tt_name = name
        node = Node(id=len(self.nodes), name=name, kind=kind, op=op)
        self.nodes.append(node)
        return node

    def connect(self, src: Node, dst: Node, *, key=None, shuffle=False, partitions=None) -> Edge:
        edge = Edge(id=len(self.edges), src=src.id, dst=dst.id, port=len(dst.inputs),
                    shuffle=shuffle or key is not None, key=key, partitions=partitions)
        self.edges.append(edge)
        src.outputs.append(edge.id)
        dst.inputs.append(edge.id)
        return edge

    # --- queries ----------------------------------------------------------

    def node(self, name_or_id) -> Node:
        if isinstance(name_or_id, int):
            return self.nodes[name_or_id]
        for n in self.nodes:
            if n.name == name_or_id:
                return n
        names = ", ".join(n.name for n in self.nodes)
        raise UsageError(f"unknown operator {name_or_id!r}; operators are: {names}")

    def in_edges(self, node: Node) -> list[Edge]:
        return [self.edges[e] for e in node.inputs]

    def out_edges(self, node: Node) -> list[Edge]:
        return [self.edges[e] for e in node.outputs]

    def feeds(self, source: int, nodes: set[int]) -> bool:
        """Whether a source is one of `nodes` or an edge of it leads into them."""
        return source in nodes or any(self.edges[e].dst in nodes for e in self.nodes[source].outputs)

    def descendants(self, node_id: int) -> set[int]:
        seen = {node_id}
        stack = [node_id]
        while stack:
            for e in self.nodes[stack.pop()].outputs:
                d = self.edges[e].dst
                if d not in seen:
                    seen.add(d)
                    stack.append(d)
        return seen

    @property
    def logged(self) -> set[int]:
        """The nodes whose instances keep Input and Output logs: G(θ), and with
        `tt record --lineage` every other operator (a source: where it shuffles to)."""
        return self.in_g | self.lineage

    def log_lineage(self) -> None:
        """Whole-job lineage: every operator outside G(θ) but the sources logs which input
        each output came from (ids and counts, never rows; docs/LINEAGE.md §5)."""
        self.lineage = {n.id for n in self.nodes
                        if n.id not in self.in_g and n.kind != SOURCE and n.kind not in HOOKED_KINDS}
        # a source feeding one of them through a shuffle logs where each row went (a narrow edge
        # needs nothing: the consumer's n-th input is the source's n-th row)
        self.lineage |= {n.id for n in self.nodes if n.kind == SOURCE and any(
            self.edges[e].shuffle and self.edges[e].dst in self.lineage for e in n.outputs)}
        # their state is not replayed: only operators that say where they keep rows (`kept_in`) log
        # what their outputs were made from; lineage through any other's state is not known
        self.untracked = {i for i in self.lineage
                          if self.nodes[i].op.is_stateful() and self.nodes[i].op.kept_in is None}

    def takes_barriers(self, node_id: int) -> bool:
        """Whether the node's instances take interactions between two of their own inputs:
        θ, and every hooked operator (Spark feeds those, and Spark's rows carry no epochs)."""
        return node_id == self.theta or self.nodes[node_id].kind in HOOKED_KINDS

    def is_entry(self, edge: Edge) -> bool:
        """An edge that brings tuples into G(θ) from outside it: they are recorded."""
        return edge.dst in self.in_g and edge.src not in self.in_g

    def records_source(self, source: int) -> bool:
        """Whether a source's own rows are recorded: it is in G(θ), or feeds G(θ) directly
        without a shuffle (the task then logs the batches it reads; `StageTask._source_captures`)."""
        return source in self.in_g or any(
            not self.edges[e].shuffle and self.is_entry(self.edges[e]) for e in self.nodes[source].outputs)

    # --- compiling --------------------------------------------------------

    def theta_for(self, name: str | None) -> Node:
        """The operator the user watches; default: the first stateful one."""
        if name is not None:
            return self.node(name)
        candidates = [n for n in self.nodes if n.kind not in (SOURCE, SINK) and n.op.is_stateful()]
        if not candidates:
            candidates = [n for n in self.nodes if n.kind != SOURCE]
        if not candidates:
            raise UsageError("the dataflow has no operator to watch")
        return candidates[0]

    def choose_theta(self, name: str | None) -> Node:
        """θ is the operator the user watches (`theta_for`): G(θ) is it and all below it."""
        theta = self.theta_for(name)
        self.theta = theta.id
        self.in_g = self.descendants(theta.id)
        return theta

    def cut_stages(self, source_partitions: dict[int, int], default_partitions: int | None) -> None:
        """Assign every node to a stage; unkeyed merges of two stages become shuffles."""
        self.stages = []
        for node in self.nodes:
            ins = self.in_edges(node)
            if node.kind == SOURCE:
                self._new_stage(node, source_partitions[node.id], source=node.id)
                continue
            if not ins:
                raise UsageError(f"operator {node.name!r} has no input")
            upstream_stages = {self.nodes[e.src].stage for e in ins}
            if any(e.shuffle for e in ins) or len(upstream_stages) > 1:
                for e in ins:
                    e.shuffle = True  # an operator's inputs are all narrow or all shuffled
                wanted = [e.partitions for e in ins if e.partitions]
                n = max(wanted) if wanted else (default_partitions or max(
                    self.stages[s].instances for s in upstream_stages))
                stage = self._new_stage(node, n)
                stage.inputs = [e.id for e in ins]
                stage.head = node.id
            else:
                stage = self.stages[upstream_stages.pop()]
                stage.nodes.append(node.id)
                node.stage = stage.id
                node.instances = stage.instances

    def add_hooked(self, source: Node, node: Node) -> Stage:
        """A hooked call site: a stage of its own, fed by Spark (`source`), in G(θ).
        Its partition count is learnt from the tasks that run it."""
        self.connect(source, node)
        stage = self._new_stage(source, 1, source=source.id)
        stage.nodes.append(node.id)
        node.stage, node.instances = stage.id, stage.instances
        self.in_g.add(node.id)
        return stage

    def hooked_node(self, stage_id: int) -> Node:
        """The hooked operator of a hooked stage (`add_hooked`: its source, then it)."""
        return self.nodes[self.stages[stage_id].nodes[-1]]

    def _new_stage(self, node: Node, instances: int, source: int | None = None) -> Stage:
        if instances < 1:
            raise UsageError(f"operator {node.name!r} would run with {instances} partitions")
        stage = Stage(id=len(self.stages), nodes=[node.id], instances=instances, source=source)
        self.stages.append(stage)
        node.stage = stage.id
        node.instances = instances
        return stage

    def route(self, edge: Edge, row: Any, src_instance: int) -> int:
        """The instance of `edge.dst` that receives `row` from `src_instance`."""
        n = self.nodes[edge.dst].instances
        if edge.key is None:
            return src_instance % n
        return stable_hash(edge.key(row)) % n

    # --- shipping and storing ---------------------------------------------

    def for_stage(self, stage_id: int) -> "Graph":
        """A copy without the operator objects of other stages (shipped to executors)."""
        g = Graph()
        g.nodes = [Node(**{**n.__dict__, "op": n.op if n.stage == stage_id else None,
                           "inputs": list(n.inputs), "outputs": list(n.outputs)}) for n in self.nodes]
        g.edges = self.edges
        g.stages = self.stages
        g.theta = self.theta
        g.in_g = set(self.in_g)
        g.lineage = set(self.lineage)
        g.untracked = set(self.untracked)
        g.by_reference = set(self.by_reference)
        return g

    def describe(self) -> dict:
        """The plan as JSON, stored in run.db (code is stored separately)."""
        return {
            "theta": self.theta,
            **({"lineage": sorted(self.lineage), "untracked": sorted(self.untracked)} if self.lineage else {}),
            **({"by_reference": sorted(self.by_reference)} if self.by_reference else {}),
            "nodes": [{"id": n.id, "name": n.name, "kind": n.kind, "class": _qualname(n.op),
                       "stage": n.stage, "instances": n.instances, "inputs": n.inputs,
                       "outputs": n.outputs, "in_g": n.id in self.in_g, "sink_mode": n.sink_mode,
                       **({"site": n.op._site, "unit": UNITS[n.kind]} if n.kind in HOOKED_KINDS else {})}
                      for n in self.nodes],
            "edges": [{"id": e.id, "src": e.src, "dst": e.dst, "port": e.port,
                       "shuffle": e.shuffle, "keyed": e.keyed} for e in self.edges],
            "stages": [{"id": s.id, "nodes": s.nodes, "instances": s.instances,
                        "source": s.source, "inputs": s.inputs, "head": s.head} for s in self.stages],
        }

    @classmethod
    def from_description(cls, desc: dict, ops: dict[int, Operator], keys: dict[int, Callable]) -> "Graph":
        g = cls()
        for n in desc["nodes"]:
            g.nodes.append(Node(id=n["id"], name=n["name"], kind=n["kind"], op=ops.get(n["id"]),
                                inputs=list(n["inputs"]), outputs=list(n["outputs"]),
                                stage=n["stage"], instances=n["instances"], sink_mode=n.get("sink_mode")))
        for e in desc["edges"]:
            g.edges.append(Edge(id=e["id"], src=e["src"], dst=e["dst"], port=e["port"],
                                shuffle=e["shuffle"], key=keys.get(e["id"])))
        for s in desc["stages"]:
            g.stages.append(Stage(id=s["id"], nodes=s["nodes"], instances=s["instances"],
                                  source=s["source"], inputs=s["inputs"], head=s["head"]))
        g.theta = desc["theta"]
        g.in_g = {n["id"] for n in desc["nodes"] if n["in_g"]}
        g.lineage = set(desc.get("lineage", ()))
        g.untracked = set(desc.get("untracked", ()))
        g.by_reference = set(desc.get("by_reference", ()))
        return g


def _qualname(op: Any) -> str:
    if op is None:
        return ""
    t = type(op)
    return f"{t.__module__}.{t.__qualname__}"


def stable_hash(key: Any) -> int:
    """A hash that is the same in every process (Python's str hash is salted)."""
    t = type(key)
    if t is str:
        return zlib.crc32(key.encode("utf-8", "surrogatepass"))
    if t is int:
        return key & 0x7FFFFFFF if -2**31 <= key < 2**31 else zlib.crc32(str(key).encode())
    return zlib.crc32(repr(key).encode("utf-8", "surrogatepass"))


__all__ = ["Graph", "Node", "Edge", "Stage", "stable_hash", "Source", "Sink"]

"""The dataflow builder: the public API a PySpark job uses.

    flow = tt.Dataflow("fraud")
    payments = flow.source("U", df)                       # a DataFrame or an RDD
    fe = payments.process(FeatureEnrichment(), name="FE")
    fd = fe.key_by(lambda r: r["customer"]).process(FraudDetector(), name="FD")
    fd.process(FraudFilter(), name="FF").to_dataframe("S", schema="customer string, ...")
    result = flow.run()                                   # runs on Spark; recorded under `tt record`
    result["S"].show()

Nothing here touches Spark until `run()`; the graph itself is `tt.core.graph`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..core import graph as g
from ..core.errors import UsageError
from ..core.operator import (Aggregate, Filter, FlatMap, HashJoin, Map, Operator, Sink, Source,
                             Union)


@dataclass
class SinkSpec:
    mode: str                   # dataframe | collect | files
    schema: Any = None
    path: str | None = None
    format: str = "parquet"
    write_mode: str = "overwrite"


class Dataflow:
    """A DAG of operators over Spark data. Build it with streams, then `run()` it."""

    def __init__(self, name: str = "dataflow", partitions: int | None = None):
        self.name = name
        self.partitions = partitions  # default parallelism of shuffled operators
        self.graph = g.Graph()
        self.sources: dict[int, Any] = {}
        self.sinks: dict[int, SinkSpec] = {}
        self._counter: dict[str, int] = {}

    def source(self, name: str, data: Any) -> "Stream":
        """Rows of a Spark DataFrame (as dicts, via Arrow) or the elements of an RDD."""
        if not (hasattr(data, "mapInArrow") or hasattr(data, "mapPartitionsWithIndex")):
            raise UsageError(f"source {name!r} needs a Spark DataFrame or RDD, got {type(data).__name__}")
        node = self.graph.add_node(name, g.SOURCE, Source())
        self.sources[node.id] = data
        return Stream(self, node)

    def run(self, spark: Any = None) -> "Result":
        """Execute on Spark, each operator's work done once; recorded under `tt record`."""
        from .execute import execute

        return execute(self, spark)

    def _name(self, kind: str, name: str | None) -> str:
        if name:
            return name
        n = self._counter.get(kind, 0) + 1
        self._counter[kind] = n
        return f"{kind}{n}"

    def _add(self, kind: str, op: Operator, name: str | None, inputs: list[tuple["Stream", Any]]) -> "Stream":
        if not isinstance(op, Operator):
            raise UsageError(f"{type(op).__name__} is not a tt.Operator; subclass tt.Operator and "
                             f"implement process(self, row, port)")
        node = self.graph.add_node(self._name(kind, name), kind, op)
        for stream, keyed in inputs:
            if stream.flow is not self:
                raise UsageError("cannot connect streams of two different dataflows")
            key, partitions = (keyed.key, keyed.partitions) if keyed is not None else (None, None)
            self.graph.connect(stream.node, node, key=key, partitions=partitions)
        return Stream(self, node)


class Stream:
    """The output of one operator; every consumer sees all of its tuples."""

    def __init__(self, flow: Dataflow, node: g.Node):
        self.flow = flow
        self.node = node

    @property
    def name(self) -> str:
        return self.node.name

    # --- narrow operators (same task, same partition) ------------------------

    def process(self, op: Operator, name: str | None = None) -> "Stream":
        return self.flow._add(g.PROCESS, op, name, [(self, None)])

    def map(self, fn: Callable[[Any], Any], name: str | None = None) -> "Stream":
        return self.flow._add(g.MAP, Map(fn), name, [(self, None)])

    def filter(self, predicate: Callable[[Any], bool], name: str | None = None) -> "Stream":
        return self.flow._add(g.FILTER, Filter(predicate), name, [(self, None)])

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: str | None = None) -> "Stream":
        return self.flow._add(g.FLAT_MAP, FlatMap(fn), name, [(self, None)])

    def union(self, *others: "Stream", name: str | None = None) -> "Stream":
        """Merge streams; the order the union consumed them in is logged."""
        for o in others:
            if isinstance(o, KeyedStream):
                raise UsageError("union of a stream and a keyed stream: key both or neither")
        return self.flow._add(g.UNION, Union(), name, [(s, None) for s in (self, *others)])

    # --- shuffles -------------------------------------------------------------

    def key_by(self, key: Callable[[Any], Any], partitions: int | None = None) -> "KeyedStream":
        """Partition by `key` for a keyed operator, aggregate or join (a Spark shuffle)."""
        if not callable(key):
            raise UsageError("key_by needs a function of the row, e.g. key_by(lambda r: r['customer'])")
        return KeyedStream(self, key, partitions)

    # --- sinks ----------------------------------------------------------------

    def to_dataframe(self, name: str, schema: Any) -> None:
        """After `run()`, `result[name]` is a DataFrame of these rows (dicts or tuples)."""
        self._sink(name, SinkSpec("dataframe", schema=schema))

    def collect(self, name: str) -> None:
        """After `run()`, `result[name]` is the list of these rows, on the driver."""
        self._sink(name, SinkSpec("collect"))

    def write(self, name: str, path: str, schema: Any, format: str = "parquet", mode: str = "overwrite") -> None:
        """Write these rows as files with Spark's writer (`format` as in DataFrameWriter)."""
        self._sink(name, SinkSpec("files", schema=schema, path=str(path), format=format, write_mode=mode))

    def _sink(self, name: str, spec: SinkSpec) -> None:
        out = self.flow._add(g.SINK, Sink(), name, [(self, None)])
        out.node.sink_mode = spec.mode
        self.flow.sinks[out.node.id] = spec


class KeyedStream:
    """A stream partitioned by key: consume it with process, aggregate, join or union."""

    def __init__(self, stream: Stream, key: Callable[[Any], Any], partitions: int | None):
        self.stream = stream
        self.key = key
        self.partitions = partitions

    @property
    def flow(self) -> Dataflow:
        return self.stream.flow

    def process(self, op: Operator, name: str | None = None) -> Stream:
        """A keyed stateful operator: each instance sees every tuple of its keys."""
        return self.flow._add(g.PROCESS, op, name, [(self.stream, self)])

    def aggregate(self, zero: Any, fold: Callable[[Any, Any], Any],
                  emit: Callable[[Any, Any], Any] | None = None, name: str | None = None) -> Stream:
        """Group by the key: `acc = fold(acc, row)` per row; emits `emit(key, acc)` per group at the end."""
        return self.flow._add(g.AGGREGATE, Aggregate(self.key, zero, fold, emit), name, [(self.stream, self)])

    def join(self, other: "KeyedStream", merge: Callable[[Any, Any], Any] | None = None,
             name: str | None = None) -> Stream:
        """Inner hash join on the two keys; `merge(left, right)` builds the output (default: dict merge)."""
        if not isinstance(other, KeyedStream):
            raise UsageError("join needs two keyed streams: a.key_by(...).join(b.key_by(...))")
        return self.flow._add(g.JOIN, HashJoin(self.key, other.key, merge), name,
                              [(self.stream, self), (other.stream, other)])

    def union(self, *others: "KeyedStream", name: str | None = None) -> Stream:
        for o in others:
            if not isinstance(o, KeyedStream):
                raise UsageError("union of a keyed stream and a stream: key both or neither")
        return self.flow._add(g.UNION, Union(), name, [(s.stream, s) for s in (self, *others)])


class Result:
    """What `Dataflow.run()` returns: each sink's DataFrame or rows, by sink name."""

    def __init__(self, outputs: dict[str, Any], run_file: str | None):
        self.outputs = outputs
        self.run_file = run_file

    def __getitem__(self, name: str) -> Any:
        if name not in self.outputs:
            raise KeyError(f"no sink named {name!r}; sinks: {', '.join(self.outputs)}")
        return self.outputs[name]

    def __repr__(self) -> str:
        return f"<Result sinks={list(self.outputs)} run_file={self.run_file!r}>"

"""Compile a dataflow into Spark stages and run it, each operator's work done once.

Every stage is one `mapInArrow` over a DataFrame: a source DataFrame (an RDD
source is turned into envelope rows first), or the envelope rows of the
shuffles into the stage, routed to their instance with `repartitionById` and
sorted by `(epoch, route, src, seq)` (see `task.py` for why). A stage's output
consumed by several later stages or sinks is persisted once, so Spark never
computes an operator's work twice by re-reading it.
"""

from __future__ import annotations

import contextlib
import pickle
import secrets
import sys
from pathlib import Path
from typing import Any, Iterator

from ..core.errors import JobError, TTError, UsageError, first_line, where_raised
from ..core.graph import Graph
from . import session as sessions
from .dataflow import Dataflow, Result, SinkSpec
from .task import ENVELOPE_DDL, StageFunction


def execute(flow: Dataflow, spark: Any = None) -> Result:
    from pyspark.sql import SparkSession

    if not flow.sinks:
        raise UsageError(f"dataflow {flow.name!r} has no sink; end it with to_dataframe, collect or write")
    if spark is None:
        first = next(iter(flow.sources.values()), None)
        spark = getattr(first, "sparkSession", None) or SparkSession.getActiveSession()
        if spark is None:
            spark = SparkSession.builder.getOrCreate()
    with _unions_concatenated(spark):
        return _execute(flow, spark)


def _execute(flow: Dataflow, spark: Any) -> Result:
    from pyspark.sql import DataFrame

    graph = flow.graph
    session = sessions.active()
    examined = _examine_early(flow, session)
    source_parts = {nid: _partitions(data) if isinstance(data, DataFrame) else data.getNumPartitions()
                    for nid, data in flow.sources.items()}
    graph.cut_stages(source_parts, flow.partitions)
    _prepare_spark(spark, graph)
    recording = None
    refs: dict = {}
    if session is not None:
        recording = session.begin(graph, spark, _main_dir())
        if recording is not None:
            refs = _reference_sources(flow, graph, session, examined)
    try:
        outputs = _run_stages(flow, graph, spark, recording, refs)
    except KeyboardInterrupt:
        if session is not None and recording is not None:
            session.end(ok=False, status="interrupted", error="interrupted by the user")
        raise
    except Exception as e:
        if session is not None and recording is not None:
            message = failure_message(session, e)
            session.end(ok=False, error=message)
            raise JobError(message) from e
        raise
    if session is not None and recording is not None:
        session.end(ok=True, input_bytes=_input_bytes(flow))
    return Result(outputs, str(session.out) if session is not None and recording is not None else None)


#: Spark's setting for a union of parts that share one partitioning (two of one partition each,
#: say): on, each task of the union reads that partition of every part, where tt numbers a
#: stage's instances by the partitions of the parts before it (`task_numbering`)
UNION_OUTPUT_PARTITIONING = "spark.sql.unionOutputPartitioning"


@contextlib.contextmanager
def _unions_concatenated(spark: Any) -> Iterator[None]:
    """Spark plans the job's unions as parts one after the other, as `task_numbering` expects:
    a stage of one instance and a source of one partition (`repartition(1)`) that fed one join
    made Spark run both in the task on partition 0, and the job failed ("ran in task
    partition 0, outside its planned partitions 1 and up"). Every DataFrame of the job is
    planned inside (its sinks are collected, written or persisted here), and the sources'
    partitions are counted so too (a source that is a union of two such parts: `_partitions`);
    the user's setting comes back after."""
    conf = spark.conf
    before = conf.get(UNION_OUTPUT_PARTITIONING, None)
    conf.set(UNION_OUTPUT_PARTITIONING, "false")
    try:
        yield
    finally:
        if before is None:
            conf.unset(UNION_OUTPUT_PARTITIONING)
        else:
            conf.set(UNION_OUTPUT_PARTITIONING, before)


def _partitions(df: Any) -> int:
    """How many partitions a source DataFrame's stage reads: counted on a plan of its own, as
    the stage's `mapInArrow` gets one. The DataFrame's own plan is made once, at its first use:
    a job that asked `df.rdd.getNumPartitions()` or `df.explain()` before `run()` had it
    planned under the user's union setting (one partition for a union of two one-partition
    parts), its stage under tt's (two), and the job failed "stage 0 ran in task partition 1,
    outside its planned partitions 0..0". A cached DataFrame's cache serves both alike."""
    return df.select("*").rdd.getNumPartitions()


def _examine_early(flow: Dataflow, session: Any) -> Any:
    """Begin examining the source DataFrames `_reference_sources` will ask about, in a thread,
    while Spark plans them here (recorder/sources.py `Examination`): with `--lineage` all of
    them; without, those that feed G(θ) (recorded there, or shuffled into it)."""
    from pyspark.sql import DataFrame

    from .sources import Examination

    if session is None or session.copy_sources or session.graph is not None:   # (a second dataflow: not recorded)
        return None
    graph = flow.graph
    try:
        below = graph.descendants(graph.theta_for(session.watch).id)
    except TTError:
        return None   # (begin says why)
    frames = {nid: data for nid, data in flow.sources.items()
              if isinstance(data, DataFrame) and (session.lineage or graph.feeds(nid, below))}
    return Examination(frames) if frames else None


def _reference_sources(flow: Dataflow, graph: Graph, session: Any, examined: Any = None) -> dict[int, Any]:
    """The recorded source DataFrames whose rows can be stored as file positions
    (recorder/sources.py); stored in the run file with why the others are copied.
    `examined`: an `Examination` begun before the job was planned."""
    from pyspark.sql import DataFrame

    from . import sources

    refs, copied, first_id = {}, {}, 1
    for nid, data in flow.sources.items():
        if not isinstance(data, DataFrame) or not graph.feeds(nid, graph.logged):
            continue   # (the rule `_examine_early` chose the sources by, G(θ) known now)
        recorded = graph.records_source(nid)
        shuffled = [e for e in graph.nodes[nid].outputs if graph.edges[e].shuffle and graph.is_entry(graph.edges[e])]
        if session.copy_sources:
            ref, why = None, "tt record --copy-sources"
        else:
            ref, why = examined.reference(nid, data) if examined is not None else sources.reference(data)
        if ref is None:
            if recorded:   # (a source only --lineage reads is not copied: its rows stay unnamed)
                copied[nid] = why
            continue
        ref.first_id, first_id = first_id, first_id + len(ref.files)
        refs[nid] = ref
        if shuffled:   # what it shuffles into G(θ): rebuilt at replay from its positions and destinations
            graph.by_reference.update(shuffled)
            graph.lineage.add(nid)
    if refs or copied:
        session.write_sources(refs, copied)
    if graph.by_reference:
        session.update_plan(graph)
    return refs


def _run_stages(flow: Dataflow, graph: Graph, spark: Any, recording, refs: dict[int, Any]) -> dict[str, Any]:
    from pyspark import StorageLevel
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    consumers = {s.id: 0 for s in graph.stages}
    for e in graph.edges:
        if e.shuffle:
            consumers[graph.nodes[e.src].stage] += 1
    for nid in flow.sinks:
        consumers[graph.nodes[nid].stage] += 1

    token = secrets.token_hex(8)
    numbering = task_numbering(graph, consumers)
    out: dict[int, DataFrame] = {}
    persisted = []
    for stage in graph.stages:
        fn = StageFunction(graph.for_stage(stage.id), stage.id, recording, token, *numbering.get(stage.id, (0, None)))
        if stage.source is not None:
            data = flow.sources[stage.source]
            ref = refs.get(stage.source)
            if ref is not None:
                from .sources import augment

                data = augment(data, ref)
                fn.source_ref = ref.task_ref(stage.source)
            if isinstance(data, DataFrame):
                df = data.mapInArrow(fn, ENVELOPE_DDL)
            else:
                df = spark.createDataFrame(data.mapPartitionsWithIndex(fn.rows), ENVELOPE_DDL)
        else:
            parts = [out[graph.nodes[graph.edges[e].src].stage].filter(F.col("route") == e)
                     for e in union_order(graph, stage, consumers)]
            inp = parts[0]
            for p in parts[1:]:
                inp = inp.unionByName(p)
            inp = inp.repartitionById(stage.instances, "dest").sortWithinPartitions(
                "epoch", "route", "src", "seq")
            df = inp.mapInArrow(fn, ENVELOPE_DDL)
        if consumers[stage.id] > 1:
            df = df.persist(StorageLevel.DISK_ONLY)
            df.count()
            persisted.append(df)
        elif consumers[stage.id] == 0:
            df.write.format("noop").mode("overwrite").save()
        out[stage.id] = df

    results: dict[str, Any] = {}
    for nid, spec in flow.sinks.items():
        node = graph.nodes[nid]
        rows = out[node.stage].filter(F.col("route") == -1 - nid)
        results[node.name] = _sink(spark, rows, spec, token)
    for df in persisted:  # the sinks hold what they need now
        df.unpersist()
    return results


def union_order(graph: Graph, stage: Any, consumers: dict[int, int]) -> list[int]:
    """The edges into a shuffled stage, in the order their rows are unioned.

    Sources computed inside the union come last: their partition count is the one
    Spark planned for the source DataFrame, which adaptive execution may change,
    while a shuffled stage's count is fixed. The order changes nothing else: the
    stage reads its input sorted by (epoch, route, src, seq).
    """
    def inline_source(e: int) -> bool:
        s = graph.nodes[graph.edges[e].src].stage
        return graph.stages[s].source is not None and consumers[s] == 1
    return sorted(stage.inputs, key=inline_source)


def task_numbering(graph: Graph, consumers: dict[int, int]) -> dict[int, tuple[int, int | None]]:
    """stage -> (offset, limit): its instance i runs in the Spark task on partition offset + i.

    Spark computes a union's parts in the task set that writes the shuffle after it,
    their partitions one after the other. A stage whose only consumer is such a union
    runs there (a stage with several consumers is persisted and computed in a job of
    its own), so its instances are numbered from the partitions of the parts before
    it. `limit` is its planned partition count, checked by the task when a count
    other than planned would shift the next part's numbering or when it is fixed.
    """
    numbering: dict[int, tuple[int, int | None]] = {}
    for stage in graph.stages:
        if stage.source is not None:
            continue
        parts = union_order(graph, stage, consumers)
        offset = 0
        for n, e in enumerate(parts):
            s = graph.stages[graph.nodes[graph.edges[e].src].stage]
            if consumers[s.id] == 1:
                last_source = n == len(parts) - 1 and s.source is not None
                numbering[s.id] = (offset, None if last_source else s.instances)
            offset += s.instances
    return numbering


def _sink(spark: Any, rows: Any, spec: SinkSpec, token: str) -> Any:
    from pyspark import StorageLevel

    if spec.mode == "collect":
        # sorted here, not by Spark: orderBy would run a sampling job over the stage again
        out = []
        for r in sorted(rows.select("src", "seq", "payload").collect(), key=lambda r: (r["src"], r["seq"])):
            out.extend(pickle.loads(r["payload"]))
        return out
    schema = _schema(spark, spec.schema)
    decoded = rows.select("payload").mapInArrow(DecodeRows(schema, token), schema)
    if spec.mode == "files":
        decoded.write.format(spec.format).mode(spec.write_mode).save(spec.path)
        return spec.path
    decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
    decoded.count()
    return decoded


class DecodeRows:
    """Envelope payloads back into typed rows (for DataFrame and file sinks)."""

    def __init__(self, schema: Any, run_token: str):
        self.schema = schema
        self.run_token = run_token  # see StageFunction.run_token

    def __call__(self, batches):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow_schema = to_arrow_schema(self.schema)
        names = arrow_schema.names
        for batch in batches:
            rows = []
            for payload in batch.column(0).to_pylist():
                for r in pickle.loads(payload):
                    rows.append(r if isinstance(r, dict) else dict(zip(names, r)))
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)


def _schema(spark: Any, schema: Any) -> Any:
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        try:
            return spark.createDataFrame([], schema).schema
        except Exception as e:
            raise UsageError(f"bad sink schema {schema!r}: {str(e).splitlines()[0]}") from None
    raise UsageError("a DataFrame or file sink needs a schema (a DDL string such as "
                     "'customer string, amount double', or a StructType)")


def _prepare_spark(spark: Any, graph: Graph) -> None:
    """Workers must run this interpreter (local mode) and get the job's own code."""
    sessions.use_this_python(spark.sparkContext)
    _ship_user_modules(graph)


def _ship_user_modules(graph: Graph) -> None:
    """Pickle the job's own modules by value, for executors and for the run file.

    Operators and key functions defined in the job's modules (not in an installed
    package) are then shipped with their code: executors need not import them, and
    `tt debug` replays them without the job's source tree.
    """
    import sysconfig

    from pyspark import cloudpickle as spark_cloudpickle
    import cloudpickle

    installed = {Path(p).resolve() for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                                             sysconfig.get_paths()["stdlib"])}
    objects = [n.op for n in graph.nodes] + [e.key for e in graph.edges if e.key is not None]
    objects += [v for n in graph.nodes for v in vars(n.op).values() if callable(v)]
    for obj in objects:
        name = getattr(obj, "__module__", None) or type(obj).__module__
        if not name or name == "__main__" or name == "tt" or name.startswith("tt."):
            continue
        mod = sys.modules.get(name)
        f = getattr(mod, "__file__", None)
        if not f or any(parent in installed for parent in Path(f).resolve().parents):
            continue
        for cp in (spark_cloudpickle, cloudpickle):
            try:
                cp.register_pickle_by_value(mod)
            except (ValueError, AttributeError):
                pass


def _main_dir() -> Path | None:
    main = sys.modules.get("__main__")
    f = getattr(main, "__file__", None)
    return Path(f).absolute().parent if f else None   # as the job's code names its file


def _input_bytes(flow: Dataflow) -> int | None:
    """Bytes of the source data, as Spark sees them (for log-size ratios)."""
    total = 0
    try:
        from pyspark.sql import DataFrame

        for data in flow.sources.values():
            if not isinstance(data, DataFrame):
                return None
            size = int(str(data._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
            if size >= 1 << 60:  # Spark's "unknown" (spark.sql.defaultSizeInBytes)
                return None
            total += size
    except Exception:
        return None
    return total


def failure_message(session, error: BaseException) -> str:
    """One line saying what failed: the operator and tuple when tt knows them."""
    failures = session.coordinator.failures if session.coordinator is not None else []
    if failures:
        f = failures[0]
        name = session.graph.nodes[f["op"]].name if session.graph is not None else f["op"]
        where = where_raised(f.get("traceback"))
        return f"operator {name}:{f['i']} raised {f['error']} on input #{f['position']}" + (f" ({where})" if where else "")
    if isinstance(error, TTError):
        return str(error)
    return f"{type(error).__name__}: {(first_line(error) or type(error).__name__)[:300]}"

"""File sources by reference: which source DataFrames need not be copied into the run file.

A source DataFrame that is a plain scan of Parquet files (a read, filters, a
choice of columns, renamed or not; a table partitioned by directory too, whose
partition columns' values the driver records per file) can be read again later:
the recorder then stores, for each chunk of its rows, the file and the row
positions instead of the rows (`store/positions.py`), and replay reads them back
with pyarrow (`store/sources.py`). Spark gives the positions through the hidden
`_metadata.row_index` column, and the files each task reads through the scan's
file partitions. Anything else is copied as before: the rule errs towards
copying, which costs bytes, never fidelity. docs/SOURCES.md has the research.

Where the scan's filter is one pyarrow evaluates exactly as Spark does (comparisons of
integer, date, boolean and plain string columns with literals, IN lists, null tests,
AND/OR/NOT: `row_filter`), the tasks do not even take positions: a task's rows are the
rows of its splits' row groups that pass the filter, in file order, so a chunk is stored
as its task and the count of rows before it ("counted"), and replay derives the
positions from the files (store/sources.py). The extra column costs Spark as much as a
column of the job's own (0.74 s of 16 s on TPC-H W1's scan); the chunk's digest of its
values still proves every read-back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..store.sources import filter_columns

ROW = "_tt_row"     # the trailing position column added to a referenced source
FILE = "_tt_file"   # xxhash64 of the file's path, added when a task reads several files
#: Logical plan nodes a referenced source may have above its scan.
_PLAIN = {"Project", "Filter", "LogicalRelation"}


@dataclass
class SourceFile:
    uri: str              # as Spark names it: file:/data/lineitem.parquet, s3a://…
    size: int
    mtime_ms: int
    footer: bytes | None  # blake2b-128 of the Parquet footer, when the driver can read it


@dataclass
class ScanRef:
    """How one source's rows are referenced; stored in `source_scans`/`source_files`."""

    columns: list[str]                  # the file columns read, in the DataFrame's order
    files: list[SourceFile]
    # Spark partition -> (index into files, byte start, byte length) of each split it reads, in read order
    splits: dict[int, list[tuple[int, int, int]]]
    info: dict = field(default_factory=dict)  # for tt inspect: paths, filters
    hashes: dict[int, int] = field(default_factory=dict)  # xxhash64(uri) -> index, when per-row ids are needed
    first_id: int = 1     # files[i] is source_files.id first_id + i (ids are unique across sources)
    row_filter: list | None = None   # the scan's filter as `row_filter` gives it, for counted chunks
    counted: bool = False            # chunks are (task, rows before, count), no position column

    @property
    def tasks(self) -> dict[int, list[int]]:
        """Spark partition -> indexes into files, in read order."""
        return {p: [i for i, _, _ in spans] for p, spans in self.splits.items()}

    @property
    def per_row_file(self) -> bool:
        return not self.counted and any(len(f) > 1 for f in self.tasks.values())

    def stored_info(self) -> dict:
        """`info` as `source_scans` stores it: a counted source's splits and filter with file ids."""
        if not self.counted:
            return self.info
        return {**self.info, "counted": {
            "filter": self.row_filter,
            "splits": {str(p): [[self.first_id + i, start, length] for i, start, length in s]
                       for p, s in self.splits.items()}}}

    def file_ids(self) -> list[tuple[int, SourceFile]]:
        return [(self.first_id + i, f) for i, f in enumerate(self.files)]

    def task_ref(self, source: int) -> "TaskRef":
        """What the source's tasks need, with file ids as stored."""
        return TaskRef(source, {p: [self.first_id + i for i in ids] for p, ids in self.tasks.items()},
                       {h: self.first_id + i for h, i in self.hashes.items()}, self.counted)

    def scan(self, source: int, schema: bytes | None = None) -> dict:
        """The scan as `source_scans`/`source_files` store it (`SourceReader.of_scan` reads it)."""
        return {"source": source, "columns": self.columns, "info": self.stored_info(), "schema": schema,
                "files": [[fid, f.uri, f.size, f.mtime_ms, f.footer] for fid, f in self.file_ids()]}


@dataclass
class TaskRef:
    """What a task needs to turn its position columns into references (shipped to executors)."""

    source: int
    files: dict[int, list[int]]      # partition -> file ids in read order
    hashes: dict[int, int]           # xxhash64 -> file id (empty: one file per task)
    counted: bool = False            # no position columns: chunks are counted (ScanRef.counted)
    # a hooked call's: the scan (`ScanRef.scan`), for a task to read its first unit back. Spark
    # numbers the tasks of the call's DataFrame, and code after the call may number them
    # otherwise than the scan (a `union`, a `coalesce`): a unit not found where its partition says
    # is copied, with the rest of its task's (`StageTask._placed`)
    scan: dict | None = None

    def file_of(self, partition: int) -> int | None:
        ids = self.files.get(partition, [])
        return ids[0] if len(ids) == 1 else None


def reference(df: Any) -> tuple[ScanRef | None, str]:
    """A `ScanRef` for `df` when its rows can be read back from its files, else why not."""
    try:
        return _reference(df)
    except Exception as e:  # py4j or planning trouble: copy, and say why
        return None, f"its plan could not be examined ({type(e).__name__}: {str(e).splitlines()[0][:120]})"


class Examination:
    """The sources' `reference` taken in a thread while the driver goes on planning the job.

    Examining a source is mostly py4j round trips (150 for TPC-H's lineitem: the plan's nodes,
    the filter's terms, each split's file), 50–70 ms for W2's four sources at scale 1, about 1 %
    of the job when the driver waited for them. Begun before the driver has Spark plan the same
    DataFrames (`execute`: their partition counts), they run while it waits for that. The plans
    are the DataFrames' own, so both threads share Spark's planning (a lazy value, made once)."""

    def __init__(self, frames: dict[int, Any]):
        from pyspark import InheritableThread   # (the job's local properties, for `_hashes`'s Spark job)

        self._frames = frames
        self._out: dict[int, tuple[ScanRef | None, str]] = {}
        self._thread = InheritableThread(self._run, name="tt-sources", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for nid, df in self._frames.items():
            self._out[nid] = reference(df)

    def reference(self, nid: int, df: Any) -> tuple[ScanRef | None, str]:
        """`reference(df)`, examined already when `df` is the frame given for `nid`."""
        self._thread.join()
        if self._frames.get(nid) is df and nid in self._out:
            return self._out[nid]
        return reference(df)


def _reference(df: Any) -> tuple[ScanRef | None, str]:
    if "_metadata" in df.columns:
        return None, "a column is named _metadata"
    qe = df._jdf.queryExecution()
    conditions = []
    renamed: dict[str, str] = {}   # a column the DataFrame renames (`col("id").alias("key")`): key -> id
    projects, above = 0, False       # a filter above a renaming Project names the new columns
    for node in _walk(qe.optimizedPlan()):
        name = node.getClass().getSimpleName()
        if name == "Filter":
            conditions.append(node.condition())
            above = above or projects == 0
        if name in ("LocalRelation", "LogicalRDD"):
            return None, "it is in-memory data, not read from files"
        if name not in _PLAIN:
            return None, f"its plan has a {name}, not just a scan, filters and columns"
        if name == "Project":
            projects += 1
            exprs = node.projectList()
            for i in range(exprs.size()):
                e = exprs.apply(i)
                kind = e.getClass().getSimpleName()
                if kind == "Alias" and e.child().getClass().getSimpleName() == "AttributeReference":
                    renamed[str(e.name()).lower()] = str(e.child().name())
                elif kind != "AttributeReference":
                    return None, f"it computes a column ({e.sql()})"
    if renamed and projects > 1:
        return None, "it renames columns through several projections"
    leaves = _physical(qe.executedPlan()).collectLeaves()   # (one round trip, not one a node)
    if leaves.size() != 1 or leaves.apply(0).getClass().getSimpleName() != "FileSourceScanExec":
        return None, "it is not read by a single file scan"
    scan = leaves.apply(0)
    fmt = scan.relation().fileFormat().toString()
    if fmt != "Parquet":
        return None, f"it is read from {fmt} files (only Parquet gives row positions)"
    partitioned, why = _partition_columns(scan.relation().partitionSchema())
    if partitioned is None:
        return None, why
    required = {c.lower(): c for c in _field_names(scan.requiredSchema())}
    required.update((c.lower(), c) for c in partitioned)
    read = [renamed.get(c.lower(), c).lower() for c in df.columns]   # the file's (or directory's) column of each
    if any(c not in required for c in read) or len({c.lower() for c in df.columns}) < len(df.columns):
        return None, "its columns are not the file's columns as read"
    if len(set(read)) < len(read):
        return None, "it reads a column of the file twice"
    files: list[SourceFile] = []
    index: dict[str, int] = {}
    directory: dict[str, list] = {}   # a partitioned table's: file URI -> its partition columns' values
    splits: dict[int, list[tuple[int, int, int]]] = {}
    parts = scan.inputRDD().filePartitions()
    # a file's path as a URI, as `_metadata.file_path` gives it: `file:/data/x=a%20b/part-0.parquet` for
    # the directory `x=a b` (the path Spark lists has `file:///`, and a `%` of the name unescaped)
    hadoop_path = df.sparkSession._jvm.org.apache.hadoop.fs.Path
    for i in range(parts.size()):
        fp = parts.apply(i)
        spans = splits[int(fp.index())] = []
        for f in fp.files():
            uri = str(hadoop_path(f.toPath().toString()).toUri().toString())   # as _metadata.file_path gives it
            if uri not in index:
                index[uri] = len(files)
                files.append(SourceFile(uri, int(f.fileSize()), int(f.modificationTime()), None))
                if partitioned:
                    directory[uri] = _partition_values(f.partitionValues(), partitioned)
            spans.append((index[uri], int(f.start()), int(f.length())))
    if not files:
        return None, "it reads no files"
    info = {"paths": _strings(scan.relation().location().rootPaths()),
            "pushed_filters": _strings(scan.pushedDownFilters()),
            "data_filters": _strings(scan.dataFilters())}
    if partitioned:
        info["partitioned"] = {"columns": list(partitioned), "values": directory}
    ref = ScanRef([required[c] for c in read], files, splits, info)
    translated = [row_filter(c) for c in conditions]
    in_directory = {c.lower() for c in partitioned}
    if not (renamed and above) and all(t is not None and not in_directory.intersection(
            c.lower() for c in filter_columns(t)) for t in translated):
        ref.counted = True
        ref.row_filter = None if not translated else translated[0] if len(translated) == 1 else ["and", *translated]
    if ref.per_row_file:
        ref.hashes = _hashes(df.sparkSession, [f.uri for f in files])
        if len(ref.hashes) != len(files):
            return None, "two of its files' paths hash alike"
    for f in files:
        f.footer = footer_digest(f.uri)
    return ref, ""


#: Partition column types whose values replay rebuilds exactly from what Spark parsed out of
#: a file's directory (store/sources.py `_constant`), and how they are read from its InternalRow
_PARTITION_TYPES = {'"byte"': "getByte", '"short"': "getShort", '"integer"': "getInt", '"long"': "getLong",
                    '"date"': "getInt", '"boolean"': "getBoolean", '"string"': "getUTF8String"}


def _partition_columns(schema: Any) -> tuple[dict[str, str] | None, str]:
    """A table partitioned by directory (`…/year=2024/region=EU/part-0.parquet`): its partition
    columns and their Spark types (JSON names), none for a plain one; None and why where a
    column's type is one whose values replay could not rebuild exactly."""
    out = {}
    for i in range(schema.size()):
        f = schema.apply(i)
        kind = f.dataType().json()
        if kind not in _PARTITION_TYPES:
            return None, f"it is partitioned by {f.name()}, a {f.dataType().typeName()} column (not referenced yet)"
        out[str(f.name())] = kind
    return out, ""


def _partition_values(row: Any, columns: dict[str, str]) -> list:
    """A file's partition values, as Spark parsed them from its directory: what every row read
    from it holds in those columns (a date as days since 1970-01-01; None for a null)."""
    out = []
    for i, kind in enumerate(columns.values()):
        value = None if row.isNullAt(i) else getattr(row, _PARTITION_TYPES[kind])(i)
        out.append(str(value.toString()) if kind == '"string"' and value is not None else value)
    return out


#: Catalyst comparisons, and what store/sources.py evaluates them with (pyarrow.compute)
_COMPARE = {"EqualTo": "equal", "LessThan": "less", "LessThanOrEqual": "less_equal",
            "GreaterThan": "greater", "GreaterThanOrEqual": "greater_equal"}
_FLIPPED = {"equal": "equal", "less": "greater", "less_equal": "greater_equal",
            "greater": "less", "greater_equal": "less_equal"}
#: Spark types whose comparisons pyarrow makes exactly as Spark does (JSON names; a collated
#: string is "string collate …", a float has NaN rules of its own: neither is here)
_EXACT = {'"byte"', '"short"', '"integer"', '"long"', '"date"', '"string"', '"boolean"'}


def row_filter(expr: Any) -> list | None:
    """A Catalyst filter condition as JSON that store/sources.py evaluates with pyarrow to
    the very rows Spark keeps, or None where that is not certain.

    ["and"|"or", a, b], ["not", a], ["is_null"|"is_valid"|"value", column],
    [comparison, column, literal], ["in", column, [literals]]; a literal is
    {"int"|"date"|"bool"|"str": value} (a date as days since 1970-01-01). Spark keeps a row
    whose condition is true, not null: pyarrow's filter drops nulls alike, and its
    and_kleene/or_kleene are Spark's three-valued AND/OR."""
    kind = expr.getClass().getSimpleName()
    if kind in ("And", "Or"):
        a, b = row_filter(expr.left()), row_filter(expr.right())
        return None if a is None or b is None else [kind.lower(), a, b]
    if kind == "AttributeReference":   # a boolean column as the condition (`b = true` optimized)
        return ["value", str(expr.name())] if expr.dataType().json() == '"boolean"' else None
    if kind == "Not":
        inner = expr.child()
        if inner.getClass().getSimpleName() not in (*_COMPARE, "AttributeReference"):   # NOT IN, NOT IS NULL: not yet
            return None
        a = row_filter(inner)
        return None if a is None else ["not", a]
    if kind in ("IsNull", "IsNotNull"):
        col = _column(expr.child())
        return None if col is None else ["is_null" if kind == "IsNull" else "is_valid", col]
    if kind in _COMPARE:
        op, left, right = _COMPARE[kind], expr.left(), expr.right()
        if left.getClass().getSimpleName() == "Literal":
            op, left, right = _FLIPPED[op], right, left
        col, lit = _column(left), _literal(right)
        return None if col is None or lit is None else [op, col, lit]
    if kind == "In":
        col = _column(expr.value())
        items = expr.list()
        lits = [_literal(items.apply(i)) for i in range(items.size())]
        return None if col is None or not lits or None in lits else ["in", col, lits]
    return None


def _column(expr: Any) -> str | None:
    if expr.getClass().getSimpleName() != "AttributeReference" or expr.dataType().json() not in _EXACT:
        return None
    return str(expr.name())


def _literal(expr: Any) -> dict | None:
    if expr.getClass().getSimpleName() != "Literal" or expr.dataType().json() not in _EXACT:
        return None
    value, kind = expr.value(), expr.dataType().json().strip('"')
    if value is None:   # a comparison with NULL keeps nothing; rare enough to leave to positions
        return None
    if kind == "string":
        return {"str": str(value.toString())}
    if kind == "date":
        return {"date": int(value)}
    if kind == "boolean":
        return {"bool": bool(value)}
    return {"int": int(value)}


def augment(df: Any, ref: ScanRef) -> Any:
    """`df` with its row positions (and file hashes, when needed) as trailing columns; a
    counted source as it is."""
    from pyspark.sql import functions as F

    if ref.counted:
        return df
    cols = [F.col("_metadata.row_index").alias(ROW)]
    if ref.per_row_file:
        cols.append(F.xxhash64(F.col("_metadata.file_path")).alias(FILE))
    return df.select("*", *cols)


def footer_digest(uri: str) -> bytes | None:
    """blake2b-128 of a Parquet file's footer (identity, cheap: one small read), or None
    when this process cannot read the file."""
    from ..store.sources import footer_digest as digest

    try:
        return digest(uri)
    except Exception:
        return None


def _hashes(spark: Any, uris: list[str]) -> dict[int, int]:
    """xxhash64 of each path, computed by Spark itself so that it equals the tasks' values."""
    from pyspark.sql import functions as F

    rows = spark.createDataFrame([(i, u) for i, u in enumerate(uris)], "i int, u string") \
        .select("i", F.xxhash64("u").alias("h")).collect()
    return {r["h"]: r["i"] for r in rows}


def _physical(plan: Any) -> Any:
    """The plan that will run, through adaptive execution's wrapper."""
    if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
        return plan.executedPlan()
    return plan


def _walk(plan: Any):
    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        ch = node.children()
        stack.extend(ch.apply(i) for i in range(ch.size()))


def _strings(seq: Any) -> list[str]:
    """A Scala Seq's items as strings, in one round trip (their `toString`, as `str` of each gives
    it; a NUL, which no path or filter holds, between them)."""
    joined = str(seq.mkString("\x00"))
    return joined.split("\x00") if joined else []


def _field_names(schema: Any) -> list[str]:
    """A StructType's field names, from its JSON in one round trip (a Java array of names is
    read one item a round trip)."""
    return [f["name"] for f in json.loads(str(schema.json()))["fields"]]

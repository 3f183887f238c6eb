"""File sources by reference: which source DataFrames need not be copied into the run file.

A source DataFrame that is a plain scan of Parquet files (a read, filters, a
choice of columns) can be read again later: the recorder then stores, for each
chunk of its rows, the file and the row positions instead of the rows
(`store/positions.py`), and replay reads them back with pyarrow
(`store/sources.py`). Spark gives the positions through the hidden
`_metadata.row_index` column, and the files each task reads through the scan's
file partitions. Anything else is copied as before: the rule errs towards
copying, which costs bytes, never fidelity. docs/SOURCES.md has the research.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    tasks: dict[int, list[int]]         # Spark partition -> indexes into files, in read order
    info: dict = field(default_factory=dict)  # for tt inspect: paths, filters
    hashes: dict[int, int] = field(default_factory=dict)  # xxhash64(uri) -> index, when per-row ids are needed
    first_id: int = 1     # files[i] is source_files.id first_id + i (ids are unique across sources)

    @property
    def per_row_file(self) -> bool:
        return any(len(f) > 1 for f in self.tasks.values())

    def file_ids(self) -> list[tuple[int, SourceFile]]:
        return [(self.first_id + i, f) for i, f in enumerate(self.files)]

    def task_ref(self, source: int) -> "TaskRef":
        """What the source's tasks need, with file ids as stored."""
        return TaskRef(source, {p: [self.first_id + i for i in ids] for p, ids in self.tasks.items()},
                       {h: self.first_id + i for h, i in self.hashes.items()})


@dataclass
class TaskRef:
    """What a task needs to turn its position columns into references (shipped to executors)."""

    source: int
    files: dict[int, list[int]]      # partition -> file ids in read order
    hashes: dict[int, int]           # xxhash64 -> file id (empty: one file per task)

    def file_of(self, partition: int) -> int | None:
        ids = self.files.get(partition, [])
        return ids[0] if len(ids) == 1 else None


def reference(df: Any) -> tuple[ScanRef | None, str]:
    """A `ScanRef` for `df` when its rows can be read back from its files, else why not."""
    try:
        return _reference(df)
    except Exception as e:  # py4j or planning trouble: copy, and say why
        return None, f"its plan could not be examined ({type(e).__name__}: {str(e).splitlines()[0][:120]})"


def _reference(df: Any) -> tuple[ScanRef | None, str]:
    if "_metadata" in df.columns:
        return None, "a column is named _metadata"
    qe = df._jdf.queryExecution()
    for node in _walk(qe.optimizedPlan()):
        name = node.getClass().getSimpleName()
        if name in ("LocalRelation", "LogicalRDD"):
            return None, "it is in-memory data, not read from files"
        if name not in _PLAIN:
            return None, f"its plan has a {name}, not just a scan, filters and columns"
        if name == "Project":
            exprs = node.projectList()
            for i in range(exprs.size()):
                if exprs.apply(i).getClass().getSimpleName() != "AttributeReference":
                    return None, f"it computes a column ({exprs.apply(i).sql()})"
    leaves = [n for n in _walk(_physical(qe.executedPlan())) if n.children().size() == 0]
    if len(leaves) != 1 or leaves[0].getClass().getSimpleName() != "FileSourceScanExec":
        return None, "it is not read by a single file scan"
    scan = leaves[0]
    fmt = scan.relation().fileFormat().toString()
    if fmt != "Parquet":
        return None, f"it is read from {fmt} files (only Parquet gives row positions)"
    if scan.relation().partitionSchema().size() > 0:
        return None, "the table is partitioned by directory (not referenced yet)"
    required = {c.lower(): c for c in scan.requiredSchema().fieldNames()}
    if any(c.lower() not in required for c in df.columns) or len({c.lower() for c in df.columns}) < len(df.columns):
        return None, "its columns are not the file's columns as read"
    files: list[SourceFile] = []
    index: dict[str, int] = {}
    tasks: dict[int, list[int]] = {}
    parts = scan.inputRDD().filePartitions()
    for i in range(parts.size()):
        fp = parts.apply(i)
        ids = []
        for f in fp.files():
            uri = f.toPath().toString()   # the form _metadata.file_path gives
            if uri not in index:
                index[uri] = len(files)
                files.append(SourceFile(uri, int(f.fileSize()), int(f.modificationTime()), None))
            ids.append(index[uri])
        tasks[int(fp.index())] = ids
    if not files:
        return None, "it reads no files"
    info = {"paths": _strings(scan.relation().location().rootPaths()),
            "pushed_filters": _strings(scan.pushedDownFilters()),
            "data_filters": _strings(scan.dataFilters())}
    ref = ScanRef([required[c.lower()] for c in df.columns], files, tasks, info)
    if ref.per_row_file:
        ref.hashes = _hashes(df.sparkSession, [f.uri for f in files])
        if len(ref.hashes) != len(files):
            return None, "two of its files' paths hash alike"
    for f in files:
        f.footer = footer_digest(f.uri)
    return ref, ""


def augment(df: Any, ref: ScanRef) -> Any:
    """`df` with its row positions (and file hashes, when needed) as trailing columns."""
    from pyspark.sql import functions as F

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
    return [str(seq.apply(i)) for i in range(seq.size())]

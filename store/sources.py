"""Reading a source's rows back from its files, for replay: no Spark, only pyarrow.

A run that read a Parquet source by reference stores, per chunk of input, the
file and row positions (`store/positions.py`) and a digest of the rows' values (`store/row_digest.py`); the
files themselves are named in `source_files` with their size, modification time and a hash of
their footer.
`SourceReader` turns a chunk back into the rows the operator saw: it opens the
file, checks it is the one recorded, reads the row groups that hold the
positions, puts back a partitioned table's columns from the values recorded for
the file's directories, casts them to the Arrow schema the operator's batches had
(Spark's types, its session time zone), takes the rows and checks their digest. A counted
chunk (no positions: its task and the rows before it) gets its positions from the
task's splits first: the row groups Spark reads for each split, the rows of them that
pass the scan's recorded filter (`task_rows`). A file that
is gone or changed, or rows that differ from those recorded, are a `SourceFileError`
naming the file and the way out (`tt pack` where the files are).
"""

from __future__ import annotations

import collections
import datetime
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from ..core.errors import RunFileError, SourceFileError
from . import positions, row_digest

_CACHED_GROUPS = 4   # row groups kept decoded: a chunk lies in one or two
_CACHED_TASKS = 8    # counted sources: tasks whose row positions are kept
_CACHED_PARTS = 16   # chunks whose parts (files and positions) are kept


@dataclass
class FileRecord:
    id: int
    source: int
    uri: str
    size: int
    mtime_ms: int
    footer: bytes | None


def open_file(uri: str) -> tuple[Any, str]:
    """A pyarrow filesystem and path for one of Spark's URIs (`file:/x`, `s3a://b/x`, …)."""
    from pyarrow import fs

    for alias in ("s3a://", "s3n://"):
        if uri.startswith(alias):
            uri = "s3://" + uri[len(alias):]
    if uri.startswith("file:"):
        return fs.LocalFileSystem(), _local_path(uri)
    return fs.FileSystem.from_uri(uri)


def _local_path(uri: str) -> str:
    """The path of a `file:` URI as the filesystem names it (`%20` a space, `%25` a `%`)."""
    from urllib.parse import unquote, urlparse

    return unquote(urlparse(uri).path)


def shown(uri: str) -> str:
    """A file's URI as a user reads it: a local file's path unescaped (`file:/d/region=North
    America/…`, the directory's own name), as `ls` shows it; any other URI as it is."""
    return "file:" + _local_path(uri) if uri.startswith("file:") else uri


def footer_digest(uri: str) -> bytes:
    """blake2b-128 of a Parquet file's footer: its schema, row groups and statistics."""
    filesystem, path = open_file(uri)
    with filesystem.open_input_file(path) as f:
        size = f.size()
        f.seek(size - 8)
        tail = f.read(8)
        length = int.from_bytes(tail[:4], "little")
        if tail[4:] != b"PAR1" or length + 8 > size:
            raise ValueError(f"{uri} is not a Parquet file")
        f.seek(size - 8 - length)
        return hashlib.blake2b(f.read(length), digest_size=16).digest()


def identity(rec: FileRecord, run: str = "RUN") -> tuple[str | None, str | None]:
    """(what differs between a file now and when it was recorded, or None; a note where only its
    modification time does). A Parquet file of the recorded size and footer whose time alone
    changed is the one recorded, copied (`cp`, `scp` and uploads stamp the time of the copy):
    its rows are read, and each chunk of them checked against the digest the recording's task
    took of their values (`SourceReader.table`), which proves the content where the time could
    not (a rewrite in place keeps it: docs/SOURCES.md §8). Raises `SourceFileError` (naming the
    run file `run`) when the file cannot be read from here."""
    from pyarrow import fs

    try:
        filesystem, path = open_file(rec.uri)
        info = filesystem.get_file_info(path)
    except Exception as e:
        raise unreadable(rec.uri, str(e).splitlines()[0] if str(e) else type(e).__name__, run) from None
    if info.type == fs.FileType.NotFound:
        raise unreadable(rec.uri, "it is missing", run)
    changes = [f"size {rec.size:,} → {info.size:,}"] if info.size != rec.size else []
    mtime = int(info.mtime_ns // 1_000_000) if info.mtime_ns is not None else None
    retimed = f"modified {_when(rec.mtime_ms)} → {_when(mtime)}" if mtime not in (None, rec.mtime_ms) else None
    footer = None
    if not changes and rec.footer is not None:
        try:
            footer = "its Parquet footer differs" if footer_digest(rec.uri) != rec.footer else None
        except Exception as e:
            raise unreadable(rec.uri, str(e).splitlines()[0], run) from None
        if footer is None:   # the recorded size and footer: a copy where the time alone changed
            return None, retimed and f"{retimed}, its size and Parquet footer as recorded"
    return ", ".join(c for c in (*changes, retimed, footer) if c) or None, None


def unreadable(uri: str, why: str, run: str = "RUN") -> SourceFileError:
    e = SourceFileError(f"{run} reads {shown(uri)} by reference and it cannot be read from here ({why}); restore "
                        f"it, or run `tt pack {run}` where it can be read, to copy its rows into the run file")
    e.reason = why
    return e


#: How a hooked mapInPandas unit read by reference becomes the DataFrame PySpark built:
#: `build(table, settings)` and `version()`, PySpark's own conversion (recorder/frames.py, which
#: tt/__init__.py hands over: only recorder/ imports pyspark).
frame_builder: Any = None


def changed(uri: str, what: str, run: str = "RUN") -> SourceFileError:
    return SourceFileError(f"{run} reads {shown(uri)} by reference and it changed since the recording ({what}); "
                           f"restore it, or run `tt pack {run}` where the recorded file is, to copy its rows "
                           f"into the run file")


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _indices(a: Any) -> Any:
    """Row numbers (numpy) as the int64 Arrow array `Table.take` wants (pa.array() would import
    pandas: 0.2 s a query)."""
    import numpy as np
    import pyarrow as pa

    a = np.ascontiguousarray(a, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(a), [None, pa.py_buffer(a)])


def _scalar(value: Any, kind: Any) -> Any:
    """`value` as an Arrow scalar to compare a column of type `kind` with, or None where the
    comparison would not be exact: an int against an integer column, a str against a string
    one. Built from buffers: pa.scalar() would import pandas (0.16 s a query)."""
    import pyarrow as pa

    if type(value) is int and pa.types.is_integer(kind) and -2 ** 63 <= value < 2 ** 63:
        return _indices([value])[0]
    if type(value) is str and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return _strings([value], kind)[0]
    return None


def _constant(value: Any, kind: Any, n: int) -> Any:
    """A partition column's `value` (as recorder/sources.py `_partition_values` keeps it) on `n`
    rows, as an Arrow array of `kind` (built from buffers: pa.array() would import pandas)."""
    import numpy as np
    import pyarrow as pa

    if value is None:
        return pa.nulls(n, kind)
    if pa.types.is_boolean(kind):
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(np.packbits(np.full(n, value, np.uint8),
                                                                               bitorder="little"))])
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        data = value.encode()
        offsets = np.arange(n + 1, dtype=np.int64 if pa.types.is_large_string(kind) else np.int32) * len(data)
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])
    if pa.types.is_integer(kind) or pa.types.is_date32(kind):
        width = kind.bit_width if pa.types.is_integer(kind) else 32
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(np.full(n, value, np.dtype(f"int{width}")))])
    raise RunFileError(f"the run file's partition values are damaged: a column of type {kind}")


def _strings(values: list[str], kind: Any = None) -> Any:
    """Python strs as an Arrow string (or large_string) array, built from buffers."""
    import numpy as np
    import pyarrow as pa

    kind = pa.string() if kind is None else kind
    data = [v.encode() for v in values]
    offsets = np.concatenate(([0], np.cumsum([len(d) for d in data], dtype=np.int64)))
    offsets = offsets.astype(np.int64 if pa.types.is_large_string(kind) else np.int32)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


def _locate(parts: list[tuple[int, Any]], offset: int) -> tuple[int, Any, int]:
    """(file id, its positions, k): a chunk's `offset`-th row is row k of that file's part."""
    for fid, rows in parts:
        if offset < len(rows):
            return fid, rows, offset
        offset -= len(rows)
    raise RunFileError("the run file's row references are damaged: a chunk holds fewer rows than its log says")


def split_groups(metadata: Any, start: int, length: int) -> list[int]:
    """The row groups Spark reads for the split [start, start + length) of a Parquet file, in
    file order: those whose midpoint lies in it, as parquet-mr's `filterFileMetaDataByMidpoint`
    decides for Spark's readers (the midpoint: the first column chunk's first page, plus half
    the group's compressed size)."""
    out = []
    for g in range(metadata.num_row_groups):
        rg = metadata.row_group(g)
        first = rg.column(0)
        at = first.data_page_offset
        if first.has_dictionary_page and first.dictionary_page_offset is not None:
            at = min(at, first.dictionary_page_offset)
        size = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        if start <= at + size // 2 < start + length:
            out.append(g)
    return out


def filter_columns(expr: list | None) -> list[str]:
    """The columns a recorded filter (recorder/sources.py `row_filter`) reads."""
    if expr is None:
        return []
    if expr[0] in ("and", "or"):
        return list(dict.fromkeys(filter_columns(expr[1]) + filter_columns(expr[2])))
    if expr[0] == "not":
        return filter_columns(expr[1])
    return [expr[1]]


def evaluate(expr: list, table: Any) -> Any:
    """A recorded filter over `table`'s columns (named as the filter names them): a boolean
    array, null where Spark's condition is null (a filter drops those rows, as Spark does)."""
    import pyarrow.compute as pc

    op = expr[0]
    if op == "and":
        return pc.and_kleene(evaluate(expr[1], table), evaluate(expr[2], table))
    if op == "or":
        return pc.or_kleene(evaluate(expr[1], table), evaluate(expr[2], table))
    if op == "not":
        return pc.invert(evaluate(expr[1], table))
    column = table[expr[1]]
    if op == "value":   # a boolean column
        return column
    if op == "is_null":
        return pc.is_null(column)
    if op == "is_valid":
        return pc.is_valid(column)
    if op == "in":
        return pc.is_in(column, value_set=_literals(expr[2]))
    return getattr(pc, op)(column, _literals([expr[2]])[0])


def _literals(items: list[dict]) -> Any:
    """A filter's literals as one Arrow array (built from buffers: pa.array() imports pandas)."""
    import numpy as np
    import pyarrow as pa

    kind = next(iter(items[0]))
    if any(next(iter(i)) != kind for i in items):
        raise RunFileError(f"the run file's recorded filter mixes literal kinds: {items}")
    vals = [i[kind] for i in items]
    if kind == "int":
        return _indices(vals)
    if kind == "date":
        return pa.Array.from_buffers(pa.date32(), len(vals), [None, pa.py_buffer(np.asarray(vals, np.int32))])
    if kind == "bool":
        bits = np.packbits(np.asarray(vals, np.uint8), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(vals), [None, pa.py_buffer(bits)])
    return _strings(vals)


@dataclass
class _TaskRows:
    """A counted task's row positions, derived row group by row group only where a chunk
    needs them: a lineage query that shows one row reads the filter's columns of the groups
    before it (to count) and of its own, not the task's whole split; with the counts known (the
    lineage index keeps them), of its own group alone."""

    key: tuple[int, int]             # (source, task)
    groups: list[tuple[int, int]]    # (file id, row group) in the order the task read them
    expr: list | None                # the scan's recorded filter
    counts: list[int] = field(default_factory=list)   # rows that pass, per group of groups[:len(counts)]
    parts: dict = field(default_factory=dict)         # group index -> (file id, positions), as derived

    @property
    def rows(self) -> int:
        return sum(self.counts)


class SourceReader:
    """Rows of `ref` chunks, read from the recorded files (checked on first use)."""

    def __init__(self, conn: Any | None, run: str = "RUN"):
        """`conn`: the run file (`run` names it in errors); None for a run without sources read by reference."""
        self.run = run
        self.scans: dict[int, dict] = {}
        self.files: dict[int, FileRecord] = {}
        if conn is not None:
            for source, columns, schema, info in conn.execute(
                    "SELECT source, columns, arrow_schema, info FROM source_scans"):
                self.scans[source] = {"columns": orjson.loads(columns), "schema": schema,
                                      "info": orjson.loads(info or "{}")}
            for row in conn.execute("SELECT id, source, uri, size, mtime_ms, footer FROM source_files"):
                self.files[row[0]] = FileRecord(*row)
        self._opened: dict[int, Any] = {}
        self._schemas: dict[int, Any] = {}
        self.retimed: dict[int, str] = {}   # file id -> how its time alone changed (a copy: `identity`)
        self._groups: collections.OrderedDict = collections.OrderedDict()
        self._tasks: collections.OrderedDict = collections.OrderedDict()
        self._parts: collections.OrderedDict = collections.OrderedDict()   # chunk data -> `parts`
        # what the lineage index keeps of counted tasks (`counted_tasks`, replay/lineage_index.py):
        # (source, task) -> its rows that pass the filter per row group; (source, task, g) -> the
        # positions of its g-th group's (each None when not kept)
        self.known_counts: Callable[[tuple[int, int]], Any] | None = None
        self.known_rows: Callable[[tuple[int, int, int]], Any] | None = None

    @classmethod
    def of_scan(cls, scan: dict, run: str = "RUN") -> "SourceReader":
        """A reader of one scan described as the run file will store it (`ScanRef.scan`), without
        the run file: a recording task reads a unit back with it, as replay will."""
        reader = cls(None, run)
        reader.scans[scan["source"]] = {"columns": scan["columns"], "schema": scan["schema"], "info": scan["info"]}
        for fid, uri, size, mtime_ms, footer in scan["files"]:
            reader.files[fid] = FileRecord(fid, scan["source"], uri, size, mtime_ms, footer)
        return reader

    def check(self, file_id: int) -> None:
        """Raise `SourceFileError` unless the file is here and is the one recorded (`identity`);
        a copy's time is noted, for `table` to prove its rows by their digest."""
        rec = self.files[file_id]
        what, retimed = identity(rec, self.run)
        if what is not None:
            raise changed(rec.uri, what, self.run)
        if retimed is not None:
            self.retimed[file_id] = retimed

    def check_all(self) -> None:
        """Every file still referenced, before a long replay starts (`tt verify`, `tt pack`);
        a packed source's rows are in the run file, its files only say where they came from."""
        failed: list[tuple[int, SourceFileError]] = []
        for fid in sorted(self.files):
            if not self.scans[self.files[fid].source]["info"].get("packed"):
                try:
                    self.check(fid)
                except SourceFileError as e:
                    failed.append((fid, e))
        if failed:   # the first, and how many more (one line: each of them needs restoring)
            fid, first = failed[0]
            if len(failed) == 1:
                raise first
            others = [shown(self.files[f].uri).rsplit("/", 1)[-1] for f, _ in failed[1:]]
            more = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            e = SourceFileError(f"{first} ({len(others)} more file{'s' if len(others) > 1 else ''} too: {more})")
            e.reason = getattr(first, "reason", None)
            raise e from None

    def table(self, data: bytes, digest: Callable[[Any], bytes] = row_digest.digest) -> Any:
        """One chunk's rows as an Arrow table in the operator's schema. The chunk's digest of its
        values is checked on them (`digest`: None when it is of what they become, `frame`)."""
        import pyarrow as pa

        source, parts = self.parts(data)
        schema = self.schema(source)
        tables = [self._take(source, fid, rows) for fid, rows in parts]
        table = schema.empty_table() if not tables else tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        recorded = positions.content_digest(data)
        if recorded is None and (retimed := [fid for fid, _ in parts if fid in self.retimed]):
            raise changed(self.files[retimed[0]].uri, f"{self.retimed[retimed[0]]}, and the run's rows of it "
                                                      f"carry no digest to prove them by: restore its time, or "
                                                      f"record the job again", self.run)
        if digest is not None and recorded is not None and digest(table) != recorded:
            uris = ", ".join(dict.fromkeys(self.files[fid].uri for fid, _ in parts))
            raise changed(uris, f"the {table.num_rows:,} rows read back at the recorded positions hold other "
                                f"values than the recording's task read, although the file's size and "
                                f"footer are the recorded ones", self.run)
        return table

    def rows(self, data: bytes) -> list[dict]:
        """One chunk as the rows a tt.Dataflow source hands its operators."""
        return self.table(data).to_pylist()

    def frame(self, data: bytes) -> Any:
        """One chunk as the pandas DataFrame a hooked `mapInPandas` function was handed, built
        as PySpark built it (`frame_builder`) and checked against the recording's digest of it."""
        source, parts = self.parts(data)
        settings = self.scans[source]["info"].get("pandas") or {}
        if frame_builder is None:
            raise SourceFileError("this process cannot rebuild the DataFrames of a mapInPandas read by reference "
                                  "(import tt first: it hands the store PySpark's conversion)")
        frame = frame_builder.build(self.table(data, digest=None), settings)
        if row_digest.frame_digest(frame) != positions.content_digest(data):
            uris = ", ".join(dict.fromkeys(self.files[fid].uri for fid, _ in parts))
            recorded_with, here = settings.get("pyspark", "?"), frame_builder.version()
            why = (f"PySpark {here} builds its DataFrames otherwise than PySpark {recorded_with} did when recording: "
                   f"replay the run where PySpark {recorded_with} is installed"
                   if recorded_with != here else
                   "its values changed in place since the recording, or the run file's settings were altered: restore "
                   "the file")
            raise SourceFileError(f"{self.run}: the DataFrame rebuilt from the rows read back at the recorded "
                                  f"positions of {uris} differs from the one the recording's task handed the "
                                  f"mapInPandas function; {why}, or record the job again with --copy-sources")
        return frame

    def batch(self, data: bytes) -> Any:
        """One chunk as the one RecordBatch a hooked `mapInArrow` function was handed."""
        import pyarrow as pa

        table = self.table(data)
        return pa.RecordBatch.from_arrays([c.combine_chunks() for c in table.columns], schema=table.schema)

    def rows_where(self, data: bytes, equal: dict[str, Any]) -> tuple[int, list[int], list[dict]]:
        """(the chunk's row count, the offsets of its rows whose columns equal `equal`'s values,
        those rows): a scan's prefilter (`tt lineage SOURCE --where "key == 42"`), computed on
        the columns. A column it cannot compare exactly (not an integer or string column, or a
        value of another type) is not filtered on: a row it keeps may still fail the test."""
        import pyarrow.compute as pc

        table = self.table(data)
        mask = None
        for name, value in equal.items():
            if name not in table.column_names:
                continue
            value = _scalar(value, table.schema.field(name).type)
            if value is not None:
                hit = pc.equal(table[name], value)   # (null where the column is: filter and indices_nonzero skip it)
                mask = hit if mask is None else pc.and_(mask, hit)
        if mask is None:
            return len(table), list(range(len(table))), table.to_pylist()
        return len(table), pc.indices_nonzero(mask).to_pylist(), table.filter(mask).to_pylist()

    def row(self, data: bytes, offset: int) -> dict:
        """A chunk's `offset`-th row alone (lineage shows a few rows of many chunks): read from its
        row group, which stays cached for the next."""
        return self.rows_at([(data, offset)])[0]

    def rows_at(self, wanted: list[tuple[bytes, int]]) -> list[dict]:
        """`row` of each (chunk, offset), every row group they lie in read at once: a lineage
        tree's leaves lie in a dozen groups of a few files, and pyarrow reads one file's groups in
        one call side by side (the ten of a TPC-H Q10 back query: 30 → 20 ms, best of 9)."""
        places = [self._place(data, offset) for data, offset in wanted]
        groups, missing = {}, collections.defaultdict(set)
        for s, f, g, _ in places:
            if (s, f, g) in self._groups:
                self._groups.move_to_end((s, f, g))
                groups[(s, f, g)] = self._groups[(s, f, g)]
            elif (s, f, g) not in groups:
                missing[(s, f)].add(g)
        for (source, fid), wanted_groups in missing.items():
            pf, bounds = self._parquet(fid)
            order = sorted(wanted_groups)
            table = self._as_read(source, fid, pf.read_row_groups(order, columns=self._file_columns(source, fid),
                                                                   use_threads=True))
            start = 0
            for g in order:
                n = int(bounds[g + 1] - bounds[g])
                groups[(source, fid, g)] = self._keep((source, fid, g), table.slice(start, n))
                start += n
        return [groups[(s, f, g)].slice(i, 1).to_pylist()[0] for s, f, g, i in places]

    def _place(self, data: bytes, offset: int) -> tuple[int, int, int, int]:
        """(source, file id, row group, row in it) of a chunk's `offset`-th row."""
        source, parts = self.parts(data)
        fid, rows, k = _locate(parts, offset)
        r = int(rows[k])
        _, bounds = self._parquet(fid)
        self._check_rows(fid, bounds, r, r)
        g = int(bounds.searchsorted(r, side="right")) - 1
        return source, fid, g, r - int(bounds[g])

    def where(self, data: bytes, offset: int) -> tuple[str, int]:
        """(file URI, row number in the file, from 0) of a chunk's `offset`-th row: where a
        row of lineage came from. Reads no rows; a counted chunk's positions may need its
        filter's columns (`task_rows`), unless the lineage index kept them."""
        _, parts = self.parts(data)
        fid, rows, k = _locate(parts, offset)
        return self.files[fid].uri, int(rows[k])

    def spans(self, data: bytes) -> list[tuple[str, int, int, int]]:
        """(file URI, first row, last row, rows) per file of a chunk's positions: where a hooked
        unit read by reference (a mapInPandas batch) came from, as lineage says it."""
        _, parts = self.parts(data)
        return [(self.files[fid].uri, int(rows.min()), int(rows.max()), len(rows)) for fid, rows in parts if len(rows)]

    def parts(self, data: bytes) -> tuple[int, list[tuple[int, Any]]]:
        """(source node, [(file id, positions)]) of a chunk: as stored, or a counted chunk's
        rows of its task (`task_rows`). The last few are kept: lineage asks for a chunk's row and
        then for its place."""
        found = self._parts.get(data)
        if found is None:
            found = self._parts[data] = self._unpack_parts(data)
            while len(self._parts) > _CACHED_PARTS:
                self._parts.popitem(last=False)
        return found

    def _unpack_parts(self, data: bytes) -> tuple[int, list[tuple[int, Any]]]:
        counted = positions.counted(data)
        if counted is None:
            return positions.unpack(data)
        import numpy as np

        task, before, count = counted
        source = positions.source_of(data)
        rows = self.task_rows(source, task, before + count)
        if before + count > rows.rows:
            uris = ", ".join(dict.fromkeys(self.files[fid].uri for fid, _ in rows.groups))
            raise changed(uris or f"source {source}", f"task {task}'s splits hold {rows.rows:,} rows that pass the "
                          f"scan's filter, the recording's task read {before + count:,}", self.run)
        out: list[tuple[int, Any]] = []
        start, end = 0, before + count
        for g, n in enumerate(rows.counts):
            if start >= end:
                break
            if n and start + n > before:
                fid, found = self._derive(rows, g)
                piece = found[max(0, before - start):end - start]
                if out and out[-1][0] == fid:   # the next row group of the same file
                    out[-1] = (fid, np.concatenate((out[-1][1], piece)))
                else:
                    out.append((fid, piece))
            start += n
        return source, out

    def task_rows(self, source: int, task: int, upto: int | None = None) -> _TaskRows:
        """A counted source's task: its row groups (those Spark reads for each of its splits,
        `split_groups`) and how many rows of each pass the scan's filter, counted at least as far
        as its first `upto` rows (all when None). Kept for the next chunks of the same task."""
        key = (source, task)
        rows = self._tasks.get(key)
        if rows is None:
            counted = self.scans[source]["info"].get("counted")
            spans = (counted or {}).get("splits", {}).get(str(task))
            if spans is None:
                raise RunFileError(f"the run file's row references are damaged: source {source} has no splits "
                                   f"for task {task}")
            groups = [(fid, g) for fid, start, length in spans
                      for g in split_groups(self._parquet(fid)[0].metadata, start, length)]
            rows = self._tasks[key] = _TaskRows(key, groups, counted["filter"])
            known = self.known_counts(key) if self.known_counts is not None else None
            if known is not None and len(known) == len(groups):   # counted before, and kept
                rows.counts = [int(n) for n in known]
            while len(self._tasks) > _CACHED_TASKS:
                self._tasks.popitem(last=False)
        self._tasks.move_to_end(key)
        while len(rows.counts) < len(rows.groups) and (upto is None or rows.rows < upto):
            rows.counts.append(len(self._derive(rows, len(rows.counts))[1]))
        return rows

    def _derive(self, rows: _TaskRows, g: int) -> tuple[int, Any]:
        """(file id, positions in the file) of the rows of a task's g-th group that pass its filter."""
        found = rows.parts.get(g)
        if found is None:
            fid, group = rows.groups[g]
            known = self.known_rows((*rows.key, g)) if self.known_rows is not None else None
            found = rows.parts[g] = (fid, known if known is not None else
                                     self._passing(fid, group, rows.expr) + self._parquet(fid)[1][group])
        return found

    def counted_tasks(self) -> list[tuple[int, int, str, int, bytes]]:
        """What the lineage index keeps of every counted task, so that a query reads none of the
        filter's columns, as (source, task, part, seq, data): part "counts", how many rows of
        each of its row groups pass the filter (int64s); part "rows", seq g, the positions of
        those of its g-th group (packed, store/positions.py, compressed)."""
        import numpy as np

        from . import blobs

        out = []
        for source, scan in self.scans.items():
            counted = scan["info"].get("counted")
            if counted and not scan["info"].get("packed"):
                for task in map(int, counted["splits"]):
                    rows = self.task_rows(source, task)
                    out.append((source, task, "counts", 0, np.asarray(rows.counts, np.int64).tobytes()))
                    out += [(source, task, "rows", g, blobs.compress(positions.pack(source, [self._derive(rows, g)])))
                            for g in range(len(rows.groups))]
        return out

    def _passing(self, file_id: int, group: int, expr: list | None) -> Any:
        """Offsets in one row group of its rows that pass a recorded filter."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        pf, bounds = self._parquet(file_id)
        if expr is None:
            return np.arange(int(bounds[group + 1] - bounds[group]), dtype=np.int64)
        names = {n.lower(): n for n in pf.schema_arrow.names}
        wanted = filter_columns(expr)
        missing = [c for c in wanted if c.lower() not in names]
        if missing:
            raise changed(self.files[file_id].uri, f"it has no column {missing[0]!r}", self.run)
        raw = pf.read_row_group(group, columns=[names[c.lower()] for c in wanted], use_threads=False)
        cols = []
        for c in raw.columns:   # pyarrow compares string views only once cast (tpchgen-cli writes them)
            cols.append(c.cast(pa.string()) if pa.types.is_string_view(c.type) else c)
        mask = evaluate(expr, pa.Table.from_arrays(cols, names=wanted))
        # indices_nonzero skips nulls, as Spark's filter does; read from its buffer, as fill_null and
        # to_numpy() would import pandas (0.3–0.4 s a query)
        hits = pc.indices_nonzero(mask)
        return np.frombuffer(hits.buffers()[1], np.uint64, len(hits), hits.offset * 8).astype(np.int64)

    def schema(self, source: int) -> Any:
        import pyarrow as pa

        if source not in self._schemas:
            blob = self.scans[source]["schema"]
            if blob is None:
                raise SourceFileError(f"the run file lacks the schema of source {source}; it was not recorded "
                                      f"completely")
            self._schemas[source] = pa.ipc.read_schema(pa.py_buffer(blob))
        return self._schemas[source]

    def _parquet(self, file_id: int) -> Any:
        f = self._opened.get(file_id)
        if f is None:
            import pyarrow.parquet as pq

            self.check(file_id)
            rec = self.files[file_id]
            filesystem, path = open_file(rec.uri)
            pf = pq.ParquetFile(filesystem.open_input_file(path), coerce_int96_timestamp_unit="us")
            import numpy as np

            bounds = np.cumsum([0] + [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)])
            f = self._opened[file_id] = (pf, bounds)
        return f

    def _take(self, source: int, file_id: int, rows: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        pf, bounds = self._parquet(file_id)
        if len(rows):
            self._check_rows(file_id, bounds, int(rows.min()), int(rows.max()))
        groups = np.unique(np.searchsorted(bounds, rows, side="right") - 1)
        pieces = [self._group(source, file_id, int(g)) for g in groups]
        if not pieces:
            return self.schema(source).empty_table()
        table = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)
        # a position's row in the concatenated groups: its offset in its group, plus the rows before it
        starts = bounds[groups]
        before = np.concatenate(([0], np.cumsum([p.num_rows for p in pieces[:-1]], dtype=np.int64)))
        which = np.searchsorted(starts, rows, side="right") - 1
        return table.take(_indices(rows - starts[which] + before[which]))

    def _check_rows(self, file_id: int, bounds: Any, low: int, high: int) -> None:
        if low < 0 or high >= bounds[-1]:
            raise changed(self.files[file_id].uri, f"it has {int(bounds[-1]):,} rows, the recording read row "
                                                   f"{high:,}", self.run)

    def head(self, data: bytes, k: int) -> Any:
        """A chunk's first rows (at most `k`, of its first row group), reading only the start of
        that group: a recording task's check that its rows are where its partition says in the
        scan (`StageTask._placed`), without decoding a whole row group (114,000 TPC-H rows)."""
        import pyarrow as pa

        source, parts = self.parts(data)
        fid, rows = parts[0]
        pf, bounds = self._parquet(fid)
        rows = rows[:k]
        self._check_rows(fid, bounds, int(rows.min()), int(rows.max()))
        g = int(bounds.searchsorted(rows[0], side="right")) - 1
        rows = rows[rows < bounds[g + 1]] - bounds[g]
        batch = next(pf.iter_batches(batch_size=int(rows.max()) + 1, row_groups=[g], use_threads=False,
                                     columns=self._file_columns(source, fid)))
        return self._as_read(source, fid, pa.Table.from_batches([batch])).take(_indices(rows))

    def _file_columns(self, source: int, file_id: int) -> list[str]:
        """The file's names of the columns the scan read (matched as Spark matches them, by case),
        but those of a partitioned table's directories (`_as_read` adds them)."""
        pf, _ = self._parquet(file_id)
        in_directory = {c.lower() for c in self._partitioned(source).get("columns", ())}
        columns = [c for c in self.scans[source]["columns"] if c.lower() not in in_directory]
        names = {n.lower(): n for n in pf.schema_arrow.names}
        missing = [c for c in columns if c.lower() not in names]
        if missing:
            raise changed(self.files[file_id].uri, f"it has no column {missing[0]!r}", self.run)
        return [names[c.lower()] for c in columns]

    def _as_read(self, source: int, file_id: int, raw: Any) -> Any:
        """Rows read from a file as the operator had them: Spark's types (time zone, string_view →
        string), and a partitioned table's columns that the file's directory gives, each the value
        Spark parsed from it (recorded per file) on every row, in their place among the columns."""
        import pyarrow as pa

        schema = self.schema(source)
        partitioned = self._partitioned(source)
        if partitioned:
            where = {c.lower(): i for i, c in enumerate(partitioned["columns"])}
            values = partitioned["values"].get(self.files[file_id].uri)
            if values is None:
                raise RunFileError(f"the run file's row references are damaged: it holds no partition values of "
                                   f"{self.files[file_id].uri}")
            read = iter(raw.columns)
            raw = pa.Table.from_arrays(
                [_constant(values[where[c.lower()]], schema.field(i).type, raw.num_rows) if c.lower() in where
                 else next(read) for i, c in enumerate(self.scans[source]["columns"])], names=schema.names)
        return raw.rename_columns(schema.names).cast(schema)

    def _partitioned(self, source: int) -> dict:
        """A partitioned table's columns from its directories and their values per file (recorder/sources.py)."""
        return self.scans[source]["info"].get("partitioned") or {}

    def _group(self, source: int, file_id: int, group: int) -> Any:
        key = (source, file_id, group)
        t = self._groups.get(key)
        if t is not None:
            self._groups.move_to_end(key)
            return t
        pf, _ = self._parquet(file_id)
        raw = pf.read_row_group(group, columns=self._file_columns(source, file_id), use_threads=False)
        return self._keep(key, self._as_read(source, file_id, raw))

    def _keep(self, key: tuple[int, int, int], table: Any) -> Any:
        """`table`, a decoded row group, kept among the last few read."""
        self._groups[key] = table
        while len(self._groups) > _CACHED_GROUPS:
            self._groups.popitem(last=False)
        return table

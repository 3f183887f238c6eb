"""Paged read access to a run's raw logs, for the debugger's log browser.

A run of millions of tuples has millions of log rows: the browser never loads
them all. Each *source* (the interactions, one instance's Input log expanded
position by position, its Output log, the tuples recorded where they entered
G(θ)) answers `len()` with one SQL query and `rows(start, stop)` by finding the
one or two chunks that cover the range with a keyset query on the
`(op, instance, kind, attempt, start)` index, decoding them, and keeping the
last few decoded chunks and rendered pages in small LRU caches.

Sources only render strings. Recorded tuples stored with the `pickle` codec are
decoded only for a trusted run (unpickling runs code); Arrow batches always.

Searching and filtering scan the source page by page (`find`, `Filter`), so a
caller runs them off the UI thread and can cancel them.
"""

from __future__ import annotations

import bisect
import collections
import datetime as dt
import threading
from array import array
from pathlib import Path
from typing import Any, Iterable

import orjson

from ..core import logs, values
from ..core.errors import RunFileError
from ..store import blobs
from ..store.reader import RunReader
from ..store.trust import is_trusted
from .facts import condition_tuple

PAGE = 200


class LRU:
    """A tiny least-recently-used map (thread-safe)."""

    def __init__(self, size: int):
        self.size = size
        self._d: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, default=None):
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
            return default

    def put(self, key, value) -> None:
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()


class Source:
    """Rows of one log, rendered as string cells."""

    key = ""
    title = ""
    columns: tuple[str, ...] = ()
    widths: tuple[int, ...] = ()   # the last column takes the rest

    def __init__(self, log: "LogView"):
        self.log = log
        self.reader = log.reader
        self._pages = LRU(64)
        self._len: int | None = None

    def __len__(self) -> int:
        if self._len is None:
            self._len = self._count()
        return self._len

    def _count(self) -> int:
        raise NotImplementedError

    def _fetch(self, start: int, stop: int) -> list[tuple[str, ...]]:
        raise NotImplementedError

    def page(self, n: int) -> list[tuple[str, ...]]:
        rows = self._pages.get(n)
        if rows is None:
            start = n * PAGE
            rows = self._fetch(start, min(len(self), start + PAGE))
            self._pages.put(n, rows)
        return rows

    def cached_row(self, i: int) -> tuple[str, ...] | None:
        """Row i if its page is in the cache, else None: never queries (the UI thread draws
        from it, a line at a time)."""
        page = self._pages.get(i // PAGE)
        return page[i % PAGE] if page is not None and i % PAGE < len(page) else None

    def rows(self, start: int, stop: int) -> list[tuple[str, ...]]:
        stop = min(stop, len(self))
        out: list[tuple[str, ...]] = []
        i = max(0, start)
        while i < stop:
            p = i // PAGE
            page = self.page(p)
            out.extend(page[i - p * PAGE: stop - p * PAGE])
            i = (p + 1) * PAGE
        return out

    def row(self, i: int) -> tuple[str, ...]:
        rows = self.rows(i, i + 1)
        return rows[0] if rows else ()

    def forget(self) -> None:
        """Drop caches (a live run grew)."""
        self._pages.clear()
        self._len = None

    def tuple_at(self, i: int) -> tuple | None:
        """The tuple row i is about, for `w` in the logs view, read from what the rows shown
        already loaded (no query: the loader thread owns the connection): ("input", op, instance,
        position) for a row of an Input or Output log, ("entry", op, instance, (port, src), seq)
        for a recorded tuple; None for a row about no one tuple (an interaction)."""
        return None


class InteractionsSource(Source):
    key = "interactions"
    title = "interactions"
    columns = ("k", "time", "trigger", "detail")
    widths = (5, 13, 10)

    def _count(self) -> int:
        return self.reader.conn.execute("SELECT COUNT(*) FROM interactions").fetchone()[0]

    def _fetch(self, start, stop):
        started = self.reader.run["started"] or 0
        rows = self.reader.conn.execute(
            "SELECT k, time, trigger, detail FROM interactions ORDER BY k LIMIT ? OFFSET ?",
            (stop - start, start)).fetchall()
        out = []
        for k, t, trig, detail in rows:
            d = orjson.loads(detail) if detail else {}
            when = f"{(t or 0) - started:9.3f}s" if started else _clock(t)
            out.append((str(k), when, trig or "", _detail(d)))
        return out


def _clock(t: float | None) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3] if t else ""


def _detail(d: dict) -> str:
    if not d:
        return ""
    if "op" in d and "position" in d:   # a condition's: the tuple that met it, named as everywhere
        row = d.get("row", "")
        return f"{condition_tuple(d) or '?'} {row}".strip()
    return " ".join(f"{k}={v}" for k, v in d.items())


class _ChunkedSource(Source):
    """A per-instance log stored as chunks that each cover inputs [start, start+n)."""

    kind = ""
    label = ""

    def __init__(self, log: "LogView", op: int, instance: int):
        super().__init__(log)
        self.op, self.instance = op, instance
        self.name = f"{self.reader.operators[op].name}:{instance}"
        self.key = f"{self.kind}:{self.name}"
        self.title = f"{self.label} {self.name}"
        self._chunks = LRU(16)

    def _attempt(self) -> int | None:
        att = self.reader.attempt_of(self.op, self.instance)
        return None if att is None else att[0]

    def _count(self) -> int:
        a = self._attempt()
        if a is None:
            return 0
        row = self.reader.conn.execute(
            "SELECT start + n FROM log_chunks WHERE op=? AND instance=? AND kind=? AND attempt=? AND edge=-1 "
            "ORDER BY start DESC LIMIT 1", (self.op, self.instance, self.kind, a)).fetchone()
        return row[0] if row else 0

    def _chunk_at(self, position: int) -> tuple[int, int, Any] | None:
        """(start, n, decoded) of the chunk covering `position` (keyset lookup on the index)."""
        a = self._attempt()
        if a is None:
            return None
        row = self.reader.conn.execute(
            "SELECT rowid, start, n FROM log_chunks WHERE op=? AND instance=? AND kind=? AND attempt=? "
            "AND edge=-1 AND start <= ? ORDER BY start DESC LIMIT 1",
            (self.op, self.instance, self.kind, a, position)).fetchone()
        if row is None or position >= row[1] + row[2]:
            return None
        rowid, start, n = row
        cached = self._chunks.get(rowid)
        if cached is None:
            data = self.reader.conn.execute("SELECT data FROM log_chunks WHERE rowid=?", (rowid,)).fetchone()[0]
            cached = self._decode(blobs.decompress(data), start, n, a)
            self._chunks.put(rowid, cached)
        return start, n, cached

    def _decode(self, data: bytes, start: int, n: int, attempt: int) -> Any:
        raise NotImplementedError

    def tuple_at(self, i: int) -> tuple | None:
        return ("input", self.op, self.instance, i) if i >= 0 and (self._len is None or i < self._len) else None

    def _fetch(self, start, stop):
        out = []
        pos = start
        while pos < stop:
            chunk = self._chunk_at(pos)
            if chunk is None:
                out.append((str(pos), "?", "(missing from the run file)"))
                pos += 1
                continue
            cstart, n, decoded = chunk
            end = min(stop, cstart + n)
            out.extend(self._render(decoded, cstart, pos, end))
            pos = end
        return out

    def _render(self, decoded: Any, cstart: int, start: int, stop: int) -> list[tuple[str, ...]]:
        raise NotImplementedError


class InputSource(_ChunkedSource):
    """The Input log: which channel each input came from, one row per position."""

    kind, label = "in", "Input log"
    columns = ("position", "port", "from")
    widths = (11, 5)

    def _decode(self, data, start, n, attempt):
        runs = logs.unpack_runs(data)
        starts = array("q")
        pos = start
        for _, _, k in runs:
            starts.append(pos)
            pos += k
        return runs, starts

    def _render(self, decoded, cstart, start, stop):
        runs, starts = decoded
        out = []
        idx = bisect.bisect_right(starts, start) - 1
        pos = start
        while pos < stop and idx < len(runs):
            port, src, k = runs[idx]
            end = min(stop, starts[idx] + k)
            label = self.log.channel_label(self.op, port, src)
            p = str(port) if (port, src) != logs.END else "-"
            for q in range(pos, end):
                out.append((str(q), p, label))
            pos = end
            idx += 1
        return out


class OutputSource(_ChunkedSource):
    """The Output log: how many outputs each input produced, and where shuffled ones went."""

    kind, label = "out", "Output log"
    columns = ("position", "outputs", "to")
    widths = (11, 8)

    def _decode(self, data, start, n, attempt):
        counts = logs.unpack_u32(data)
        cum = array("q", [0])
        acc = 0
        for c in counts:
            acc += c
            cum.append(acc)
        dests = {}
        for edge, d, m in self.reader.conn.execute(
                "SELECT edge, data, n FROM log_chunks WHERE op=? AND instance=? AND kind='dest' AND attempt=? "
                "AND start=?", (self.op, self.instance, attempt, start)):
            dests[edge] = logs.unpack_dests(blobs.decompress(d), m)
        return counts, cum, dests

    def _render(self, decoded, cstart, start, stop):
        counts, cum, dests = decoded
        out = []
        targets = self.log.out_targets(self.op)
        for pos in range(start, stop):
            j = pos - cstart
            c = counts[j] if j < len(counts) else 0
            parts = []
            if c:
                for edge, dst_name, shuffle in targets:
                    if shuffle and edge in dests:
                        ds = dests[edge][cum[j]:cum[j + 1]]
                        parts.append(", ".join(f"{dst_name}:{d}" for d in ds[:12]) + (" …" if len(ds) > 12 else ""))
                    else:
                        parts.append(f"{dst_name}:{self.instance}" + (f" ×{c}" if c > 1 else ""))
            out.append((str(pos), str(c), "; ".join(parts)))
        return out


class TuplesSource(Source):
    """Tuples recorded where they entered G(θ) (the source's batches as they came)."""

    columns = ("seq", "channel", "tuple")
    widths = (10, 10)

    def __init__(self, log: "LogView", op: int, instance: int):
        super().__init__(log)
        self.op, self.instance = op, instance
        self.name = f"{self.reader.operators[op].name}:{instance}"
        self.key = f"tuples:{self.name}"
        self.title = f"recorded tuples into {self.name}"
        self._chunks = LRU(8)
        self._index: list[tuple[int, int, int, int, int, str]] | None = None
        self._offsets = array("q")

    def _load_index(self) -> None:
        if self._index is None:
            self._index = self.reader.entry_index(self.op, self.instance)  # (rowid, port, src, start, n, codec)
            self._offsets = array("q")
            acc = 0
            for row in self._index:
                self._offsets.append(acc)
                acc += row[4]
            self._total = acc

    def _count(self) -> int:
        self._load_index()
        return self._total

    def forget(self) -> None:
        super().forget()
        self._index = None

    def _fetch(self, start, stop):
        self._load_index()
        out = []
        i = start
        while i < stop:
            c = bisect.bisect_right(self._offsets, i) - 1
            rowid, port, src, cstart, n, codec = self._index[c]
            rows = self._decoded(rowid, codec)
            base = self._offsets[c]
            end = min(stop, base + n)
            ch = self.log.channel_label(self.op, port, src)
            for j in range(i, end):
                seq = cstart + j - base
                if rows is None:
                    cell = f"({codec}; pass --trust to decode pickled tuples)"
                else:
                    cell = values.render(values.encode(rows[j - base]), 400)
                out.append((str(seq), ch, cell))
            i = end
        return out

    def tuple_at(self, i: int) -> tuple | None:
        if self._index is None or not 0 <= i < self._total:
            return None
        c = bisect.bisect_right(self._offsets, i) - 1
        _, port, src, cstart, _, _ = self._index[c]
        return ("entry", self.op, self.instance, (port, src), cstart + i - self._offsets[c])

    def _decoded(self, rowid: int, codec: str) -> list | None:
        rows = self._chunks.get(rowid)
        if rows is None:
            if codec not in blobs.INERT and not self.log.trusted:
                return None
            rows = self.reader.entry_tuples(codec, rowid)
            self._chunks.put(rowid, rows)
        return rows


class LogView:
    """The log sources of one run, over a private connection (use it from one thread at a time)."""

    def __init__(self, path: str | Path | RunReader, *, trust: bool = False):
        self.reader = path if isinstance(path, RunReader) else RunReader(path)
        self._trust = trust
        self._sources: dict[str, Source] = {}

    @property
    def trusted(self) -> bool:
        if self._trust:
            return True
        r = self.reader
        try:
            return is_trusted(r.run.get("signature"), r.signed_code())
        except RunFileError:
            return False

    def close(self) -> None:
        self.reader.close()

    def refresh(self) -> None:
        """A live run grew: re-read what the caches hold."""
        self.reader.refresh()
        for s in self._sources.values():
            s.forget()

    # --- naming -----------------------------------------------------------------------------

    def _edges(self) -> list[dict]:
        try:
            return self.reader.plan.get("edges", [])
        except RunFileError:
            return []

    def channel_label(self, op: int, port: int, src: int) -> str:
        if (port, src) == logs.END:
            return "end of input"
        for e in self._edges():
            if e["dst"] == op and e["port"] == port:
                sender = self.reader.operators[e["src"]]
                name = f"{sender.name}:{src}"
                return name if sender.in_g else f"{name} (recorded)"
        return f"port {port} from {src}"

    def out_targets(self, op: int) -> list[tuple[int, str, bool]]:
        """(edge id, destination operator, shuffle?) for every edge out of `op` inside G(θ)."""
        out = []
        for i, e in enumerate(self._edges()):
            if e["src"] == op and self.reader.operators[e["dst"]].in_g:
                out.append((e.get("id", i), self.reader.operators[e["dst"]].name, bool(e["shuffle"])))
        return out

    # --- sources ----------------------------------------------------------------------------

    def choices(self) -> list[tuple[str, str]]:
        """(title, key) of every source, interactions first."""
        out = [("interactions", "interactions")]
        try:
            instances = self.reader.g_instances()
        except RunFileError:
            return out
        with_tuples = {(op, i) for op, i in self.reader.conn.execute(
            "SELECT DISTINCT op, instance FROM entry_chunks")}
        for kind, cls in (("in", InputSource), ("out", OutputSource)):
            for op, i in instances:
                name = f"{self.reader.operators[op].name}:{i}"
                out.append((f"{'Input' if kind == 'in' else 'Output'} log {name}", f"{kind}:{name}"))
        for op, i in instances:
            if (op, i) in with_tuples:
                name = f"{self.reader.operators[op].name}:{i}"
                out.append((f"recorded tuples {name}", f"tuples:{name}"))
        return out

    def source(self, key: str) -> Source:
        s = self._sources.get(key)
        if s is not None:
            return s
        if key == "interactions":
            s = InteractionsSource(self)
        else:
            kind, _, name = key.partition(":")
            op_name, _, i = name.rpartition(":")
            op = self.reader.operator(op_name)
            cls = {"in": InputSource, "out": OutputSource, "tuples": TuplesSource}.get(kind)
            if cls is None:
                raise KeyError(key)
            s = cls(self, op.id, int(i))
        self._sources[key] = s
        return s


# --- search -------------------------------------------------------------------------------------

def matches(row: Iterable[str], needle: str) -> bool:
    return any(needle in cell.lower() for cell in row)


class Filter(Source):
    """The rows of `base` that contain a text, found by a background scan (`scan_page`).

    Rows become visible as the scan finds them; `done` says when it has finished.
    """

    def __init__(self, base: Source, text: str):
        self.base = base
        self.text = text
        self.key, self.title, self.columns, self.widths = base.key, base.title, base.columns, base.widths
        self.hits = array("q")
        self.scanned = 0
        self.done = False
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.hits)

    def page(self, n):
        return self.rows(n * PAGE, (n + 1) * PAGE)

    def cached_row(self, i):
        """Match i if its row is in the base's cache (never queries)."""
        j = self.base_index(i)
        return None if j is None else self.base.cached_row(j)

    def rows(self, start, stop):
        with self._lock:
            idx = list(self.hits[max(0, start):stop])
        return [self.base.row(i) for i in idx]

    def row(self, i):
        with self._lock:
            if not 0 <= i < len(self.hits):
                return ()
            j = self.hits[i]
        return self.base.row(j)

    def base_index(self, i: int) -> int | None:
        with self._lock:
            return self.hits[i] if 0 <= i < len(self.hits) else None

    def tuple_at(self, i: int) -> tuple | None:
        j = self.base_index(i)
        return None if j is None else self.base.tuple_at(j)

    def forget(self) -> None:
        self.base.forget()

    def scan_page(self) -> bool:
        """Scan the next page of the base for the text (the log browser's loader does, a page
        between its other work); True once every row has been scanned."""
        total = len(self.base)
        if self.scanned >= total:   # (a last page shorter than PAGE was scanned again and again,
            self.done = True        # its matches added each time, while the status said "done")
            return True
        p = self.scanned // PAGE
        needle = self.text.lower()
        found = [p * PAGE + j for j, row in enumerate(self.base.page(p)) if matches(row, needle)]
        with self._lock:
            self.hits.extend(found)
            self.scanned = min(total, (p + 1) * PAGE)
        return False

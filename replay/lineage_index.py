"""The lineage index: what lineage's tracked replay of G(θ) finds, kept in the run file.

A lineage query inside G(θ) needs two things a recording does not keep: what each output
was made from (the writer chains of `state_access.py`) and the rows of the tuples inside
G(θ), which only a replay makes again. Without an index a query replays G(θ) with its
state tracked, seconds to a minute on a run of a million tuples. `tt lineage` builds the
index once, by one tracked replay of every instance of G(θ) to its end, and keeps it in
the run file (table `lineage_index`); every later query walks its arrays and unpickles
only the rows it shows (docs/LINEAGE.md §6).

Per instance of G(θ):

* `made` (`MadeIndex`): the writer chains as two arrays (a link's call position and the
  link it extends), and per output of each call that was made from state, its
  (path, link) pairs; a backward link follows a chain, a forward one walks the same
  arrays the other way (links by position, links by tail, pairs by link);
* `outputs` (`OutputRows`): what every call emitted, pickled as the call returned it
  (before any consumer could change it), in chunks of `CHUNK` calls, a chunk's rows in one
  pickle. An instance whose
  outputs do not pickle keeps none; its rows come from a replay, as without an index.

And per instance of a join outside G(θ) recorded with `--lineage`, `joined`: what each of
its outputs was made from, which its log of keys implies (store/join_lineage.py), worked
out once here instead of in every query. Per task of a source whose chunks are counted
(store/sources.py), `counts`: how many rows of each of its row groups pass the scan's
filter, and `rows` (one per row group): their positions, which a query would otherwise
derive from the filter's columns of the row group it shows a row of and every one before.

Blobs are sealed like checkpoints (store/trust.py): loading them unpickles. The index is
derived data: it is built only for a run that is no longer being written, and one whose
instances' log lengths differ from the run's is ignored.
"""

from __future__ import annotations

import pickle
import time
from typing import Callable, Iterator

import numpy as np
import orjson

from ..core import values
from ..core.errors import RunFileError
from ..store import blobs, positions, schema
from ..store.trust import Sealer
from .engine import Key
from .state_access import Made

FORMAT = 6   # 2: with the joins outside G(θ) (`joined`); 3: a chunk's outputs in one pickle;
             # 4: a StatefulProcessor's and a GroupState's state per key (3 traced it per instance);
             # 5: a UDTF's state written anew by each handler's init (4 chained a task's handlers);
             # 6: a hooked function's state traced field by field (5: as one slot, `state()`)
CHUNK = 4096              # calls per chunk of outputs
_KIND = "lineage index"   # the sealed blobs' kind


class MadeIndex:
    """What each output of one instance was made from, as arrays (`of` builds it from
    `StateAccess.made`). Chains share their tails, so a link is stored once however many
    outputs read it: a link is (the call that wrote, the link it extends or -1)."""

    def __init__(self, arrays: dict[str, np.ndarray], paths: list):
        self.calls = arrays["calls"]          # the calls with outputs made from state, ascending
        self.call_off = arrays["call_off"]    # call i's outputs: call_off[i]:call_off[i + 1]
        self.out_off = arrays["out_off"]      # output o's pairs: out_off[o]:out_off[o + 1]
        self.pair_path = arrays["pair_path"]  # index into `paths`
        self.pair_link = arrays["pair_link"]  # the newest writer of that path when it was read
        self.link_pos = arrays["link_pos"]
        self.link_tail = arrays["link_tail"]
        self.paths = paths
        self._by = {}

    @classmethod
    def of(cls, made: dict[int, list[Made]]) -> "MadeIndex":
        link_ids: dict[int, int] = {}
        links: list[tuple] = []
        path_ids: dict[tuple, int] = {}   # (paths equal as keys are one slot of the state's dicts)
        paths: list = []
        calls, call_off, out_off, pair_path, pair_link = [], [0], [0], [], []
        for c in sorted(made):
            calls.append(c)
            for m in made[c]:
                for path, w in m:
                    head = w
                    while w is not None and id(w) not in link_ids:
                        link_ids[id(w)] = len(links)
                        links.append(w)
                        w = w[1]
                    p = path_ids.get(path)
                    if p is None:
                        p = path_ids[path] = len(paths)
                        paths.append(path)
                    pair_path.append(p)
                    pair_link.append(link_ids[id(head)])
                out_off.append(len(pair_path))
            call_off.append(len(out_off) - 1)
        arrays = {"calls": np.array(calls, np.int64), "call_off": np.array(call_off, np.int64),
                  "out_off": np.array(out_off, np.int64), "pair_path": np.array(pair_path, np.int64),
                  "pair_link": np.array(pair_link, np.int64),
                  "link_pos": np.array([w[0] for w in links], np.int64),
                  "link_tail": np.array([-1 if w[1] is None else link_ids[id(w[1])] for w in links], np.int64)}
        return cls(arrays, paths)

    def to_bytes(self) -> bytes:
        arrays = {k: getattr(self, k) for k in ("calls", "call_off", "out_off", "pair_path", "pair_link",
                                                "link_pos", "link_tail")}
        return blobs.compress(pickle.dumps((arrays, self.paths), protocol=5))

    @classmethod
    def from_bytes(cls, data: bytes) -> "MadeIndex":
        arrays, paths = pickle.loads(blobs.decompress(data))
        return cls(arrays, paths)

    def made(self, call: int, j: int) -> list[tuple[tuple, list[int]]]:
        """Output j of `call`: (path, its writers' positions, newest first) per path it was made from."""
        i = int(np.searchsorted(self.calls, call))
        if i == len(self.calls) or self.calls[i] != call:
            return []
        o = int(self.call_off[i]) + j
        if o >= self.call_off[i + 1]:
            return []
        return [(self.paths[int(self.pair_path[p])], self._chain(int(self.pair_link[p])))
                for p in range(int(self.out_off[o]), int(self.out_off[o + 1]))]

    def _chain(self, link: int) -> list[int]:
        out, pos, tail = [], self.link_pos, self.link_tail
        while link >= 0:
            out.append(int(pos[link]))
            link = int(tail[link])
        return out

    def read_from(self, position: int, visited: set[int]) -> Iterator[tuple[int, int, tuple]]:
        """(call, j, path) of every output made from what call `position` wrote: the readers of
        the links it heads and of every newer link built on them. A link is visited once per
        walk (`visited`), so a row is reached once per tree."""
        at, newer, readers = self._lookup("at", self.link_pos), self._lookup("newer", self.link_tail), \
            self._lookup("readers", self.pair_link)
        stack = list(at(position))
        while stack:
            link = stack.pop()
            if link in visited:
                continue
            visited.add(link)
            for p in readers(link):
                o = int(np.searchsorted(self.out_off, p, side="right")) - 1
                i = int(np.searchsorted(self.call_off, o, side="right")) - 1
                yield int(self.calls[i]), o - int(self.call_off[i]), self.paths[int(self.pair_path[p])]
            stack.extend(newer(link))

    def _lookup(self, name: str, keys: np.ndarray):
        """i -> the indexes where `keys` equals i, in ascending order (a sorted copy, made once)."""
        found = self._by.get(name)
        if found is None:
            order = np.argsort(keys, kind="stable")
            found = self._by[name] = (order, keys[order])
        order, ordered = found

        def where(value: int) -> list[int]:
            lo, hi = np.searchsorted(ordered, value), np.searchsorted(ordered, value, side="right")
            return order[lo:hi].tolist()
        return where


class OutputRows:
    """What every call of one instance emitted, in chunks of `CHUNK` calls: per chunk, where each
    call's rows end, and all its rows in one pickle (a query scanning an operator's outputs
    unpickles a chunk at once: one `loads` of 4,096 calls' rows takes a third of 4,096 `loads`)."""

    def __init__(self, calls: int = 0, chunk: Callable[[int], bytes] | None = None):
        self.chunks: list[bytes] = []   # each: n (uint32), the n+1 ends of the calls' rows (uint64), the pickle
        self.calls = calls
        self.kept = True      # False: some call's outputs did not pickle; this instance keeps none
        self._chunk = chunk if chunk is not None else self.chunks.__getitem__
        self._pending: list[bytes] = []
        self._open: tuple[int, list[int], list] | None = None   # the chunk last read: (c, ends, rows)

    # --- building ------------------------------------------------------------------------

    def add(self, outs) -> None:
        """The next call's outputs (the call at position `self.calls`): pickled now, as the call
        returned them, before a consumer could change a row in place."""
        self.calls += 1
        if not self.kept:
            return
        try:
            self._pending.append(pickle.dumps(list(outs), protocol=5) if outs else b"")
        except Exception:  # noqa: BLE001  (pickle raises TypeError, PicklingError, AttributeError, ...)
            self.kept, self.chunks, self._pending = False, [], []
            return
        if len(self._pending) == CHUNK:
            self._flush()

    def close(self) -> None:
        if self.kept and self._pending:
            self._flush()

    def _flush(self) -> None:
        rows: list = []
        ends = [0]
        with values.gc_paused():   # (rows hold no cycles: no collection walks the heap for them)
            for p in self._pending:
                if p:
                    rows += pickle.loads(p)
                ends.append(len(rows))
            body = pickle.dumps(rows, protocol=5)
        self.chunks.append(blobs.compress(len(self._pending).to_bytes(4, "little")
                                          + np.array(ends, np.uint64).tobytes() + body))
        self._pending = []

    # --- reading -------------------------------------------------------------------------

    def of(self, call: int) -> list:
        """The outputs of `call`, as it emitted them."""
        c, k = divmod(call, CHUNK)
        if self._open is None or self._open[0] != c:
            self._open = (c, *_unchunk(self._chunk(c)))
        _, ends, rows = self._open
        return rows[ends[k]:ends[k + 1]]

    def batches(self) -> Iterator[tuple[list[int], list[int], list]]:
        """Per chunk, the rows its calls emitted in one list, in order: (the calls that emitted
        something, where each one's rows end in the list, the rows). A chunk at a time, so that
        only one chunk's rows are alive at once."""
        for c in range(-(-self.calls // CHUNK)):
            ends, rows = _unchunk(self._chunk(c))
            emitted = [k for k in range(len(ends) - 1) if ends[k + 1] > ends[k]]
            yield [c * CHUNK + k for k in emitted], [ends[k + 1] for k in emitted], rows


def _unchunk(data: bytes) -> tuple[list[int], list]:
    """A chunk's ends of each call's rows (and 0 first), and its rows."""
    raw = blobs.decompress(data)
    n = int.from_bytes(raw[:4], "little")
    with values.gc_paused():   # (in a process with a large heap, collections set off by the rows cost +30 %)
        rows = pickle.loads(memoryview(raw)[4 + 8 * (n + 1):])
    return np.frombuffer(raw, np.uint64, n + 1, 4).tolist(), rows


class LineageIndex:
    """The index of a whole run: per instance of G(θ), its `MadeIndex` and its `OutputRows`,
    read from the run file as a query first needs them."""

    def __init__(self, made: dict[Key, MadeIndex], outputs: dict[Key, OutputRows], totals: dict[Key, int],
                 joined: dict[Key, bytes] | None = None):
        self._made = made
        self.outputs = outputs
        self.totals = totals      # the inputs each instance's log holds: the index fits these logs only
        self._joined = joined or {}   # a join outside G(θ): its `made` log, from its keys
        self._load_made: Callable[[Key], MadeIndex] | None = None
        self._load_joined: Callable[[Key], bytes | None] | None = None
        # counted sources: (source, task, part, seq, data) as SourceReader.counted_tasks gives them
        self.counted: list[tuple[int, int, str, int, bytes]] = []
        self.load_counts: Callable[[Key], np.ndarray | None] | None = None
        self.load_rows: Callable[[tuple[int, int, int]], np.ndarray | None] | None = None

    def joined(self, key: Key) -> bytes | None:
        """What the outputs of join instance `key`, outside G(θ), were made from (the layout of
        `RunReader.made_from`), if the index kept it."""
        found = self._joined.get(key)
        if found is None and self._load_joined is not None:
            found = self._joined[key] = self._load_joined(key)
        return found

    def made(self, key: Key) -> MadeIndex:
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = self._load_made(key)
        return found

    def rows(self, key: Key) -> OutputRows | None:
        """The outputs of an instance, where they were kept."""
        out = self.outputs.get(key)
        return out if out is not None and out.kept else None

    # --- the run file --------------------------------------------------------------------

    def save(self, path, run_id: str) -> int:
        """Write the index into the run file (replacing an older one); returns its bytes."""
        seal = Sealer(run_id)
        rows = []
        for key, made in self._made.items():
            rows.append((*key, "made", 0, seal(_KIND, made.to_bytes())))
        for key, out in self.outputs.items():
            rows += [(*key, "outputs", c, seal(_KIND, data)) for c, data in enumerate(out.chunks)]
        rows += [(*key, "joined", 0, seal(_KIND, data)) for key, data in self._joined.items()]
        rows += [(source, task, part, seq, seal(_KIND, data)) for source, task, part, seq, data in self.counted]
        info = {"format": FORMAT, "built": time.time(),
                "instances": [[*key, total, self.outputs[key].kept, self.outputs[key].calls]
                              for key, total in sorted(self.totals.items())]}
        with schema.writing(path) as conn:
            conn.execute("DELETE FROM lineage_index")
            conn.executemany("INSERT INTO lineage_index (op, instance, part, seq, data) VALUES (?,?,?,?,?)", rows)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('lineage_index', ?)", (orjson.dumps(info).decode(),))
        return sum(len(r[-1]) for r in rows)

    @classmethod
    def load(cls, reader, totals: dict[Key, int]) -> "LineageIndex | None":
        """The index kept in the run file, if there is one made for these logs (`totals`: the
        inputs each instance of G(θ) holds now); None otherwise."""
        if not reader.has_table("lineage_index"):   # a run file no tt lineage has written to
            return None
        row = reader.conn.execute("SELECT value FROM meta WHERE key='lineage_index'").fetchone()
        if row is None:
            return None
        info = orjson.loads(row[0])
        if info.get("format") != FORMAT:
            return None
        kept = {(op, i): (total, ok, calls) for op, i, total, ok, calls in info["instances"]}
        if {key: v[0] for key, v in kept.items()} != totals:
            return None

        def blob(key: Key, part: str, seq: int) -> bytes:
            row = reader.conn.execute("SELECT data FROM lineage_index WHERE op=? AND instance=? AND part=? AND seq=?",
                                      (*key, part, seq)).fetchone()
            if row is None:
                raise RunFileError(f"{reader.path}: its lineage index lacks {part} {seq} of {key}; "
                                   f"build it again with `tt lineage {reader.path} ... --reindex`")
            return reader.open_blob(_KIND, row[0])

        outputs = {}
        for key, (_, ok, calls) in kept.items():
            outputs[key] = OutputRows(calls, lambda c, key=key: blob(key, "outputs", c))
            outputs[key].kept = bool(ok)
        index = cls({}, outputs, dict(totals))
        index._load_made = lambda key: MadeIndex.from_bytes(blob(key, "made", 0))

        def joined(key: Key) -> bytes | None:
            row = reader.conn.execute("SELECT data FROM lineage_index WHERE op=? AND instance=? AND part='joined'",
                                      key).fetchone()
            return reader.open_blob(_KIND, row[0]) if row is not None else None
        index._load_joined = joined

        def counts(key: Key) -> np.ndarray | None:
            row = reader.conn.execute("SELECT data FROM lineage_index WHERE op=? AND instance=? AND part='counts'",
                                      key).fetchone()
            return np.frombuffer(reader.open_blob(_KIND, row[0]), np.int64) if row is not None else None
        index.load_counts = counts

        def rows(key: tuple[int, int, int]) -> np.ndarray | None:
            row = reader.conn.execute("SELECT data FROM lineage_index WHERE op=? AND instance=? AND part='rows' "
                                      "AND seq=?", key).fetchone()
            return None if row is None else positions.unpack(blobs.decompress(reader.open_blob(_KIND, row[0])))[1][0][1]
        index.load_rows = rows
        return index

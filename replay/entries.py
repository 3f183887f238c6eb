"""Tuples that entered G(θ) through a shuffle from a source read by reference, rebuilt.

Such tuples are not recorded where they enter G(θ) (`Graph.by_reference`): the source
kept its rows' file positions (or copies of the batches whose positions it could not
keep) and, for each row, the instance it went to. The s-th tuple instance d got from
source partition p is then the row of p that was the s-th to go to d, read back from
its file: what was sent, in the order it was sent, without a copy in the run file.
"""

from __future__ import annotations

import bisect
import collections
from array import array
from typing import Any

from ..core.errors import RunFileError
from ..store import blobs
from ..store.reader import NumpyLogArrays, RunReader

ROW_CHUNKS_KEPT = 16   # decoded source chunks kept for all instances (each is read by every consumer)


class DecodedChunk:
    """One chunk of tuples entering G(θ), decoded, each row handed to an operator once.

    An operator may change the row it is given (a join's merge writing into it, `row["x"] =
    …`), and so may the rows it stores: a row taken a second time, when a replay goes back over
    it (a jump or step back, verify's second replay), comes from a fresh decode of the chunk, as
    it was recorded, not as the first pass left it. `peek` returns the row `take` will hand over
    next, or, for a row taken already (a view showing what a step consumed), the row as recorded,
    from a spare decode that the next second take then uses."""

    __slots__ = ("_decode", "rows", "_taken", "_spare")

    def __init__(self, decode):
        self._decode = decode
        self.rows: list = decode()
        self._taken = bytearray(len(self.rows))
        self._spare: list | None = None   # a fresh decode, once a taken row was peeked

    def peek(self, i: int) -> Any:
        if not self._taken[i]:
            return self.rows[i]
        if self._spare is None:
            self._spare = self._decode()
        return self._spare[i]

    def take(self, i: int) -> Any:
        if self._taken[i]:
            self.rows, self._spare = (self._spare if self._spare is not None else self._decode()), None
            self._taken = bytearray(len(self.rows))
        self._taken[i] = 1
        return self.rows[i]


class SourceShuffles:
    """What every instance of the engine needs of the shuffled sources, computed once: per source
    partition, its rows' destinations grouped by destination, and recently decoded chunks."""

    def __init__(self, reader: RunReader):
        self.reader = reader
        self._by_dest: dict[tuple[int, int, int], list[array]] = {}
        self._rows: collections.OrderedDict[int, DecodedChunk] = collections.OrderedDict()

    def sent_to(self, op: int, src: int, edge: int, n_dest: int, dest: int) -> array:
        """The numbers of the rows source partition `src` sent to instance `dest` on `edge`, in order."""
        key = (op, src, edge)
        groups = self._by_dest.get(key)
        if groups is None:
            groups = self._by_dest[key] = NumpyLogArrays.by_destination(self.reader.dests(op, src, edge), n_dest)[1]
        return groups[dest]

    def rows(self, codec: str, rowid: int) -> DecodedChunk:
        rows = self._rows.get(rowid)
        if rows is None:
            rows = self._rows[rowid] = DecodedChunk(lambda: self.reader.entry_tuples(codec, rowid))
            if len(self._rows) > ROW_CHUNKS_KEPT:
                self._rows.popitem(last=False)
        else:
            self._rows.move_to_end(rowid)
        return rows


class ShuffledEntryReader:
    """The tuples one instance got from one source partition over a shuffle by reference; the
    same interface as `engine.EntryReader`."""

    def __init__(self, shared: SourceShuffles, op: int, src: int, edge: int, n_dest: int, dest: int):
        self.shared = shared
        self._sent = (op, src, edge, n_dest, dest)
        self._outputs: array | None = None
        self.chunks = sorted((start, n, codec, rowid) for rowid, port, _, start, n, codec
                             in shared.reader.entry_index(op, src) if port == 0)
        self.starts = [c[0] for c in self.chunks]

    @property
    def outputs(self) -> array:
        if self._outputs is None:   # (on first use: an engine loads without reading every source's logs)
            self._outputs = self.shared.sent_to(*self._sent)
        return self._outputs

    def _chunk(self, seq: int) -> tuple[int, tuple[int, int, str, int]]:
        """(row number in the source partition, the chunk that holds it)."""
        if not 0 <= seq < len(self.outputs):
            raise RunFileError(f"recorded tuple #{seq} is missing from the run file")
        g = self.outputs[seq]
        idx = bisect.bisect_right(self.starts, g) - 1
        if idx < 0 or g >= self.chunks[idx][0] + self.chunks[idx][1]:
            raise RunFileError(f"row #{g} of a source read by reference is missing from the run file")
        return g, self.chunks[idx]

    def get(self, seq: int) -> Any:
        g, (start, _, codec, rowid) = self._chunk(seq)
        return self.shared.rows(codec, rowid).peek(g - start)

    def take(self, seq: int) -> Any:
        """The seq-th tuple, for an operator to consume (`DecodedChunk.take`)."""
        g, (start, _, codec, rowid) = self._chunk(seq)
        return self.shared.rows(codec, rowid).take(g - start)

    def place(self, seq: int) -> tuple[str, int] | None:
        """(file, row number) of the seq-th tuple, where the source kept its position."""
        g, (start, _, codec, rowid) = self._chunk(seq)
        if codec != blobs.REF:
            return None
        return self.shared.reader.entry_place(rowid, g - start)

    def spans(self, seq: int) -> None:
        """(rows, not hooked units, come through a shuffle: `place` says where each is)"""
        return None

    def __len__(self) -> int:
        return len(self.outputs)

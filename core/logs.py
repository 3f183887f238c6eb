"""Log records of one operator instance, and their byte layout.

IcedTea's logs, per instance in G(θ):

* **counts at interactions**: how many inputs the instance had consumed when it
  took interaction k (its logical timestamp);
* **Input log**: which channel each consumed tuple came from, as runs of
  `(port, src_instance, n)`; the end of input is the channel `END`;
* **Output log**: how many tuples each input produced (every output goes to
  every output edge), and for shuffle edges which instance each output went to;
* **logged results**: the values returned by `log_result(...)` calls.

Positions are 0-based: input #n is consumed when the count goes from n to n+1.
The arrays compress very well (a map operator's output counts are one long run
of 1s); compression itself happens in `tt.store.blobs`.
"""

from __future__ import annotations

import copy
import pickle
from array import array
from dataclasses import dataclass, field
from typing import Any

import orjson

from .frozen_frames import freeze, is_frame
from .values import IMMUTABLE_TYPES, immutable, immutable_items, json_exact

END = (-1, -1)  # the channel of the end-of-input step, which calls `finish()`


@dataclass
class InputRuns:
    """Run-length encoded channel sequence: [(port, src, n), ...]."""

    runs: list[list[int]] = field(default_factory=list)
    taken: dict[int, int] = field(default_factory=dict)   # per port, the inputs of the runs taken so far

    def add(self, port: int, src: int, n: int = 1) -> None:
        if n <= 0:
            return
        runs = self.runs
        if runs and runs[-1][0] == port and runs[-1][1] == src:
            runs[-1][2] += n
        else:
            runs.append([port, src, n])

    def per_port(self, consumed: int) -> dict[int, int]:
        """The inputs each port took among the first `consumed` of the instance (a shuffled stage
        logs a batch's channel before its rows are consumed, so runs may run ahead of them)."""
        counts = dict(self.taken)
        left = consumed - sum(counts.values())
        for port, _, n in self.runs:
            if left <= 0:
                break
            counts[port] = counts.get(port, 0) + min(n, left)
            left -= n
        return counts

    def take(self, total: int | None = None) -> list[list[int]]:
        """Remove and return the runs covering the first `total` inputs (all by default)."""
        out = self._take(total)
        taken = self.taken
        for port, _, n in out:
            taken[port] = taken.get(port, 0) + n
        return out

    def _take(self, total: int | None) -> list[list[int]]:
        if total is None:
            out, self.runs = self.runs, []
            return out
        out = []
        runs = self.runs
        while total > 0 and runs:
            port, src, n = runs[0]
            if n <= total:
                out.append(runs.pop(0))
                total -= n
            else:
                out.append([port, src, total])
                runs[0][2] = n - total
                total = 0
        return out


def pack_runs(runs: list[list[int]]) -> bytes:
    flat = array("q")
    for port, src, n in runs:
        flat.extend((port, src, n))
    return flat.tobytes()


def unpack_runs(data: bytes) -> list[tuple[int, int, int]]:
    flat = array("q")
    flat.frombytes(data)
    return [(flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]


def new_counts() -> array:
    """Outputs per input (uint32)."""
    return array("I")


def new_dests() -> array:
    """Destination instance per output on a shuffle edge (uint32)."""
    return array("I")


def dest_width(n_dest: int) -> int:
    """Bits per destination: a shuffle to 4 instances needs 2 bits, not a uint32."""
    for w in (1, 2, 4, 8, 16):
        if n_dest <= 1 << w:
            return w
    return 32


def pack_dests(dests: array, n_dest: int) -> bytes:
    """Bit-pack destination instances (zstd cannot squeeze random 2-bit values out of uint32s)."""
    w = dest_width(n_dest)
    if w >= 8:
        return bytes([w]) + array({8: "B", 16: "H", 32: "I"}[w], dests).tobytes()
    per = 8 // w
    n = len(dests)
    # one byte per destination, padded to whole bytes; then destination i*per+j lands in bits j*w of
    # byte i by shifting the big integer made of every per-th byte (values < 2**w: nothing carries)
    raw = array("B", dests).tobytes() + bytes(-n % per)
    packed = 0
    for j in range(per):
        packed |= int.from_bytes(raw[j::per], "little") << (j * w)
    return bytes([w]) + packed.to_bytes((n + per - 1) // per, "little")


def unpack_dests(data: bytes, n: int) -> array:
    w = data[0]
    if w >= 8:
        a = array({8: "B", 16: "H", 32: "I"}[w])
        a.frombytes(data[1:])
        return array("I", a)
    per, mask = 8 // w, (1 << w) - 1
    table = [array("I", [(b >> (j * w)) & mask for j in range(per)]) for b in range(256)]
    out = array("I")
    extend = out.extend
    for b in data[1:]:
        extend(table[b])
    del out[n:]
    return out


def unpack_u32(data: bytes) -> array:
    a = array("I")
    a.frombytes(data)
    return a


@dataclass
class LoggedResult:
    position: int   # the input being processed when log_result was called
    call: int       # 0-based index of the call within that input
    name: str       # the wrapped function's qualified name
    value: Any


def kept_apart(value: Any, *, packed_by_pickle: bool = False, frames: bool = False) -> Any:
    """`value`, or a copy of it where an operator could change it in place. What is logged must
    be the value as it was when logged, and the logs are packed later (a logged result, a tuple
    entering G(θ): the operator that gets it may write into it); what replay serves must be that
    value every time a replay goes back over it (core/runtime.py).

    `packed_by_pickle`: the log is packed by pickle (tuples entering G(θ), a hooked operator's
    units), so where a copy needs a pickle, the pickle is kept (`Frozen`) rather than unpickled
    into a copy that is pickled again when the log is packed. `frames` (with `packed_by_pickle`):
    the value may hold pandas DataFrames (a hooked operator's unit, `("row", frame)`,
    `(key, *frames)`): a plain one is kept as its column arrays (core/frozen_frames.py), and a
    tuple part by part in one pass, its immutable parts as they are (unpickled, the same tuple;
    testing the whole tuple first walked its parts twice: 7.1 → 5.9 µs for a
    transformWithStateInPandas key's unit, Spark-free). Rows entering G(θ) never hold a frame
    and do not pay for the look (0.5 µs for a three-item tuple)."""
    if type(value) is dict:
        if immutable_items(value.values()):
            return dict(value)   # a row of scalars, the common case: a shallow copy is a whole one
    elif frames and packed_by_pickle and type(value) is tuple:
        return tuple([v if type(v) in IMMUTABLE_TYPES or immutable(v) else kept_apart(v, packed_by_pickle=True, frames=True)
                      for v in value])
    elif frames and packed_by_pickle and is_frame(value):
        frame = freeze(value)
        if frame is not None:
            return frame
    elif immutable(value):
        return value
    try:
        data = pickle.dumps(value, protocol=5)
        return Frozen(data) if packed_by_pickle else pickle.loads(data)   # a deep copy at C speed
    except Exception:  # noqa: BLE001  (what plain pickle cannot copy; cloudpickle packs it later)
        return copy.deepcopy(value)


class Frozen:
    """A value in a log, frozen as its pickle when it was logged (`kept_apart`). It pickles as a
    call that unpickles that pickle, so a chunk of rows holding it unpickles to the value itself:
    replay reads it as it reads any pickled row."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    def __reduce__(self):
        return pickle.loads, (self.data,)


def pack_results(rows: list[tuple]) -> bytes:
    """A flush's logged results, each `(position, call, name, value)` as the runner logged it
    (`RecordingRunner.log_value`: a tuple, not a `LoggedResult`, so that a flush packs the
    rows it has), as JSON when every value survives it exactly (nothing to unpickle on
    replay), else a pickle. Only the values are asked (position and call are ints, name a
    str): 5,000 results, best of 7, as a state handle logs them (its key a tuple: a pickle)
    2.1 → 1.8 ms, JSON-exact ones 7.3 → 4.0 ms."""
    if all(json_exact(r[3], 2) for r in rows):
        try:
            return orjson.dumps(rows)
        except (orjson.JSONEncodeError, TypeError):   # a str orjson refuses (a lone surrogate)
            pass
    return pickle.dumps(rows, protocol=5)


def unpack_results(data: bytes) -> list[LoggedResult]:
    """Callers pass pickled data only once its seal checked out (`RunReader.open_blob`)."""
    if data[:1] == b"[":
        return [LoggedResult(*t) for t in orjson.loads(data)]
    return [LoggedResult(*t) for t in pickle.loads(data)]


def callable_name(fn: Any) -> str:
    """How a `log_result` call is named in the log, and checked in replay. A wrapper is named by
    what it wraps (`__wrapped__`): `random.random` is the same call in a process where tt has
    patched it (core/nondeterministic.py, named for pickling as the module's function) and in
    one where it has not."""
    fn = getattr(fn, "__wrapped__", fn)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module and module not in ("builtins", "__main__") else name

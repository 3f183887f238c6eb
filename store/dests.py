"""A shuffle's destinations, bit-packed and unpacked with numpy.

A sender in G(θ) (and, with `tt record --lineage`, outside it) logs the destination instance of
every row it shuffles: millions per run. `core.logs` packs them in pure Python (the core runs
without numpy); the recorder's tasks and the reader use these, which give and take the same
bytes (tests/test_units.py): 1M destinations to 4 instances packed in 2.3 ms, 37 ms by the
core's big-integer shifts.
"""

from __future__ import annotations

from array import array

from ..core import logs


def pack_dests(dests: array, n_dest: int) -> bytes:
    """`core.logs.pack_dests`: destination i*per+j in bits j*w of byte i (w bits each, `per` to a byte)."""
    import numpy as np

    w = logs.dest_width(n_dest)
    if w >= 8:
        return logs.pack_dests(dests, n_dest)
    per = 8 // w
    d = np.frombuffer(dests, np.uint32).astype(np.uint8) if len(dests) else np.zeros(0, np.uint8)
    d = np.concatenate((d, np.zeros(-len(d) % per, np.uint8))).reshape(-1, per)
    packed = np.zeros(len(d), np.uint8)
    for j in range(per):
        packed |= d[:, j] << np.uint8(j * w)
    return bytes([w]) + packed.tobytes()


def unpack_dests(data: bytes, n: int) -> array:
    """`core.logs.unpack_dests`."""
    import numpy as np

    w = data[0]
    if w >= 8:
        return logs.unpack_dests(data, n)
    per, mask = 8 // w, (1 << w) - 1
    packed = np.frombuffer(data, np.uint8, offset=1)
    fields = (packed[:, None] >> (np.arange(per, dtype=np.uint8) * w)) & mask   # per byte, low bits first
    out = array("I")
    out.frombytes(fields.reshape(-1)[:n].astype(np.uint32).tobytes())
    return out

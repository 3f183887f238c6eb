"""The instructions tt's path adds to each key of a StatefulProcessor, Spark-free, counted by valgrind.

`benches/instructions.py` counts a whole keyed TWS recording: a Spark session per variant,
minutes a run, and what it adds per key mixed with what a task and a worker pay once. This
bench runs the step a recording task runs for each key, in one process, without Spark:
benches/tws_overhead.py's `KeyedSum` processor, each key's 100 rows one pandas DataFrame,
its state calls answered by a dict in place of Spark's state store, either

  direct  the processor's `handleInputRows`, as PySpark calls it with recording off, or
  tt      θ's runner (core/runtime.py `ThetaRunner`) running it as a `ProcessorOperator` unit
          (core/processor.py), its state calls through tt's handle (core/state_handle.py), its
          outputs digested (core/output_digest.py), the logged results packed as a flush packs them.

Each mode runs under valgrind (cachegrind, instructions only) with KEYS and with KEYS + EXTRA
keys; the difference over EXTRA is one key's instructions, the imports and set-up cancelled.
Not counted here: what the hooked processor does around the step (recorder/hooked_calls.py,
recorder/task.py `feed_unit`, the Arrow batches kept, recorder/teed_batches.py), what a
flush sends, and cyclic garbage collection: its passes come by allocation counts and walk the
whole heap, and with it on, two checkouts whose step differs by two flag tests counted 1,422,000
and 1,442,000 instructions a key without the digest, so the collector is off while the keys run.

    python benches/processor_path.py [--keys 200] [--extra 1000] [--modes direct tt tt-nodigest]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def child(mode: str, keys: int) -> None:
    """One mode over `keys` keys, in this process (run under valgrind by `count`)."""
    import gc
    import pickle

    import numpy as np
    import pandas as pd

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tws_overhead import processor

    from tt.core.logs import pack_results
    from tt.core.output_digest import OutputDigest
    from tt.core.processor import ProcessorOperator
    from tt.core.runtime import InstanceLog, ThetaRunner
    from tt.core.state_handle import TimerValues
    from tt.store import blobs

    current = [None]

    class Value:   # a ValueState of Spark's, its store a dict, its key the one the step runs under
        store: dict = {}

        def __init__(self, name):
            self.name = name

        def get(self):
            return Value.store.get((self.name, current[0]))

        def update(self, value):
            Value.store[(self.name, current[0])] = tuple(value)

    class Store:
        def getValueState(self, name, schema, ttl=None):
            return Value(name)

    frames = [((k,), pd.DataFrame({"k": np.full(100, k), "amount": np.arange(100, dtype=float)}))
              for k in range(keys)]
    out: list = []
    p = processor()()
    gc.disable()   # (see the module's docstring)
    if mode == "direct":
        p.init(Store())
        for key, frame in frames:
            current[0] = key
            out.extend(p.handleInputRows(key, iter([frame]), TimerValues(0, 0)))
    else:
        op = ProcessorOperator(p)
        op.attach(Store())
        log = InstanceLog([])
        runner = ThetaRunner("KeyedSum", 0, op, 1, log, False, on_barrier=None, on_trigger=None, when=None)
        runner.targets = [out.append] if mode == "tt-nodigest" else [OutputDigest(), out.append]
        runner.feed(("init",), 0)
        for key, frame in frames:
            current[0] = key
            runner.feed(("one_row", key, (0, 0), frame), 0)
        blobs.compress(pack_results(log.results))
        blobs.compress(pickle.dumps(log.counts))
    if len(out) != keys:
        raise SystemExit(f"{mode}: {len(out)} outputs for {keys} keys")


def count(mode: str, keys: int) -> int:
    """Instructions of `child(mode, keys)` under valgrind."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                           sys.executable, __file__, "--child", mode, str(keys)],
                          env=env, capture_output=True, text=True)
    found = _REFS.search(proc.stderr)
    if proc.returncode != 0 or not found:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"processor_path: {mode} over {keys} keys failed: {tail}")
    return int(found[1].replace(",", ""))


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        return child(sys.argv[2], int(sys.argv[3]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=200, help="keys of the shorter run")
    ap.add_argument("--extra", type=int, default=1000, help="keys the longer run has more")
    ap.add_argument("--modes", nargs="+", default=["direct", "tt", "tt-nodigest"], choices=["direct", "tt", "tt-nodigest"])
    args = ap.parse_args()
    per_key = {}
    for mode in args.modes:
        short, long = count(mode, args.keys), count(mode, args.keys + args.extra)
        per_key[mode] = (long - short) / args.extra
        print(f"{mode:12} {per_key[mode]:>12,.0f} instructions a key", flush=True)
    if "direct" in per_key:
        for mode in per_key:
            if mode != "direct":
                print(f"{mode} − direct: {per_key[mode] - per_key['direct']:,.0f} instructions a key "
                      f"(×{per_key[mode] / per_key['direct']:.3f})")


if __name__ == "__main__":
    main()

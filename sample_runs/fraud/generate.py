"""Generate payments for the fraud-detection sample (IcedTea's running example).

Most payments are small dollar amounts. Two stand out:
* Mallory pays $4,800 once: real fraud, rightly caught;
* Bob, a regular customer, pays ¥5,000 (about $33) once, about a third of the
  way into the stream. The job's Feature Enrichment reads it as $5,000.

    python generate.py --rows 200000 --out data/payments.parquet
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

NAMED = ["Alice", "Bob", "Chris"]


def payments(rows: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    customers = NAMED + [f"cust{i:05d}" for i in range(max(50, rows // 40))]
    bob_yen_at = rows // 3
    mallory_at = rows // 5
    out = []
    for i in range(rows):
        if i == bob_yen_at:
            customer, amount = "Bob", "¥5000"
        elif i == mallory_at:
            customer, amount = "Mallory", "$4800.00"
        else:
            r = rng.random()
            customer = NAMED[int(r * 300) % 3] if r < 0.01 else rng.choice(customers)
            amount = f"${rng.lognormvariate(3.2, 0.8):.2f}"
        out.append({"id": i, "customer": customer, "amount": amount,
                    "merchant": f"m{rng.randrange(400):03d}", "ts": 1_700_000_000 + i})
    return out


def write(rows: int, out: str | Path, seed: int = 7) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(payments(rows, seed)), out)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--out", default=str(Path(__file__).parent / "data" / "payments.parquet"))
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    print(write(a.rows, a.out, a.seed))

"""Derived views of a run for the debugger: per-interaction series and state diffs.

The plots need, per interaction, how many tuples G(θ) had processed and how big
its stored states were; both come from the run file alone (positions from the
barriers, sizes from the `states` table), never from a replay. The state
inspector needs to know which values changed between two positions, with the
old value, without walking states of millions of entries more than once.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

from ..store.reader import RunReader

MISSING = "<missing>"   # the same marker DebugSession uses for an absent key


def series(reader: RunReader, cancel: Callable[[], bool] | None = None) -> list[dict]:
    """Per complete interaction: k, t (seconds since start), trigger, tuples processed, state bytes."""
    start = reader.run["started"] or 0
    sizes: dict[bytes, int] = {}
    out = []
    for inter in reader.interactions_all:
        if cancel is not None and cancel():
            break
        snap = reader.snapshot(inter.k)
        if snap is None:
            continue
        hashes = {at.state for at in snap.values() if at.state is not None and at.state not in sizes}
        if hashes:
            sizes.update(_sizes(reader, list(hashes)))
        out.append({
            "k": inter.k,
            "t": round(inter.time - start, 3),
            "trigger": inter.trigger,
            "tuples": sum(at.position for at in snap.values()),
            "state_bytes": sum(sizes.get(at.state, 0) for at in snap.values() if at.state is not None),
        })
    return out


def _sizes(reader: RunReader, hashes: list[bytes]) -> dict[bytes, int]:
    found = {}
    for i in range(0, len(hashes), 500):
        part = hashes[i:i + 500]
        marks = ",".join("?" * len(part))
        found.update(reader.conn.execute(f"SELECT hash, size FROM states WHERE hash IN ({marks})", part))
    return found


def counts_at(reader: RunReader, k: int) -> dict[str, int]:
    """Inputs consumed per operator (summed over its instances) at interaction k."""
    snap = reader.snapshot(k) or {}
    out: dict[str, int] = {}
    for (op, _), at in snap.items():
        name = reader.operators[op].name
        out[name] = out.get(name, 0) + at.position
    return out


# --- state diffs ------------------------------------------------------------------------------

Path = tuple  # keys from the state's root: ("blacklist", "Bob")


def diff(old: Any, new: Any, limit: int = 500) -> dict[Path, tuple[Any, Any]]:
    """Changed leaves between two JSON-encoded states, as {path: (old, new)}.

    Dicts are compared key by key, lists item by item when their lengths agree;
    anything else that differs is one change at its path. An absent side is
    `MISSING`. At most `limit` changes are listed (the rest are dropped: the
    inspector only highlights what it can show).
    """
    out: dict[Path, tuple[Any, Any]] = {}
    _diff(old, new, (), out, limit)
    return out


def _diff(a: Any, b: Any, path: Path, out: dict, limit: int) -> None:
    if len(out) >= limit or a is b:
        return
    if type(a) is dict and type(b) is dict and not _tagged(a) and not _tagged(b):
        if a == b:
            return
        for k in itertools.chain(a, (k for k in b if k not in a)):  # in the states' own order
            if len(out) >= limit:
                return
            x, y = a.get(k, MISSING), b.get(k, MISSING)
            if x is y or (type(x) is type(y) and type(x) in (str, int, float, bool) and x == y):
                continue
            _diff(x, y, path + (k,), out, limit)
        return
    if type(a) is list and type(b) is list and len(a) == len(b):
        if a == b:
            return
        for i, (x, y) in enumerate(zip(a, b)):
            if len(out) >= limit:
                return
            _diff(x, y, path + (i,), out, limit)
        return
    if a != b:
        out[path] = (a, b)


def _tagged(v: dict) -> bool:
    return len(v) == 1 and next(iter(v)).startswith("$")


def changed_prefixes(changes: dict[Path, tuple[Any, Any]]) -> set[Path]:
    """Every path that is a change or contains one (to highlight the way down to it)."""
    out: set[Path] = set()
    for path in changes:
        for n in range(len(path) + 1):
            out.add(path[:n])
    return out


def lookup(state: Any, path: Path) -> Any:
    value = state
    for part in path:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            value = value[part]
        else:
            return MISSING
    return value


def find_paths(state: Any, text: str, limit: int = 1000) -> Iterator[Path]:
    """Paths (depth first, in key order) whose key or scalar value contains `text` (case-insensitive)."""
    needle = text.lower()
    found = 0
    stack: list[tuple[Path, Any]] = [((), state)]
    while stack and found < limit:
        path, value = stack.pop()
        if path and needle in str(path[-1]).lower():
            found += 1
            yield path
        elif path and not isinstance(value, (dict, list)) and needle in str(value).lower():
            found += 1
            yield path
        if isinstance(value, dict):
            stack.extend((path + (k,), v) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((path + (i,), v) for i, v in reversed(list(enumerate(value))))

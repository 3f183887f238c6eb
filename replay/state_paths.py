"""Paths into JSON-encoded states: look a value up, diff two states, find a text.

The state inspector needs to know which values changed between two positions,
with the old value, without walking states of millions of entries more than
once; the debug session marks an absent key with the same `MISSING`.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator

MISSING = "<missing>"   # an absent key, on either side of a change

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


def field_path(path: Path) -> Path:
    """A tree path as a field path names it: cut before tt's own encoding (`$set`'s items are
    in sorted order, a `$tuple`'s and a `$dict`'s pairs by place), so a member of a set, a
    tuple's item or an int-keyed dict's entry names its container (`seen`), not a place in an
    encoding that moves as the value changes (`seen.$set.1326`)."""
    for i, part in enumerate(path):
        if isinstance(part, str) and part[:1] == "$":
            return path[:i]
    return path


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


def lookup_dotted(state: Any, path: str) -> Any:
    """The value at a dotted path as users write it ("blacklist.Bob", "items.0"), or MISSING; a
    `$dict`-encoded dict (non-string keys) is looked up by its keys' text."""
    value = state
    for part in [p for p in path.split(".") if p]:
        if isinstance(value, dict) and "$dict" in value and len(value) == 1:
            value = {str(k): v for k, v in value["$dict"]}
        if isinstance(value, dict):
            if part not in value:
                return MISSING
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
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

"""Interaction triggers given on the command line: `--every` and `--when`."""

from __future__ import annotations

import ast
import re
from typing import Any, Callable

from ..core.errors import UsageError
from ..core.expressions import free_names

_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_LONGEST = 365 * 24 * 3600.0  # longer than any run; beyond it timers overflow (threading.TIMEOUT_MAX)


def parse_duration(text: str) -> float:
    """'10s', '0.5s', '250ms', '2m' or a plain number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", text or "")
    if not m or (m.group(2) and m.group(2) not in _UNITS):
        raise UsageError(f"bad duration {text!r}; write it like 10s, 0.5s, 250ms or 2m")
    value = float(m.group(1)) * _UNITS.get(m.group(2) or "s")
    if value <= 0:
        raise UsageError(f"bad duration {text!r}; it must be more than zero")
    if not value <= _LONGEST:
        raise UsageError(f"bad duration {text.strip()[:40]!r}; it must be at most 365 days")
    return value


def check_condition(source: str) -> None:
    """Reject a `--when` expression that cannot work, before Spark starts."""
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as e:
        where = f"at column {e.offset}" if e.offset and e.offset <= len(source) else "at its end"   # (Python says 0 there)
        raise UsageError(f"bad --when expression {source!r}: {e.msg} ({where})") from None
    unknown = free_names(tree) - {"row"} - set(_SAFE_BUILTINS)
    if unknown:
        raise UsageError(f"bad --when expression {source!r}: unknown name(s) {', '.join(sorted(unknown))}; "
                         f"the tuple is called `row`, e.g. --when \"row['amount'] > 1000\"")


_SAFE_BUILTINS = {name: __builtins__[name] if isinstance(__builtins__, dict) else getattr(__builtins__, name)
                  for name in ("abs", "all", "any", "bool", "float", "int", "len", "max", "min", "round",
                               "str", "sum", "isinstance", "dict", "list", "tuple", "set", "True", "False",
                               "None")}


_CONDITION = """
def when(row):
    try:
        if EXPRESSION:
            return True
        return False
    except _Error as e:
        return _failed(e)

def first_hit(rows, start, stop):
    for i in _range(start, stop):
        row = rows[i]
        try:
            if EXPRESSION:
                return i
        except _Error as e:
            _failed(e)
    return -1
"""


class _Expression(ast.NodeTransformer):
    """Puts the condition where `_CONDITION` says EXPRESSION."""

    def __init__(self, source: str):
        self.source = source

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.parse(self.source, mode="eval").body if node.id == "EXPRESSION" else node


def compile_condition(source: str) -> Callable[[Any], bool]:
    """The `--when` expression as a function of the tuple `row`, with `first_hit(rows, start,
    stop)`: the index of the first of `rows[start:stop]` it holds for, or -1.

    An expression that raises on some tuple (a missing key, say) counts as false
    for that tuple: a condition is a filter over θ's input, not part of the job. `raised`
    counts those tuples: one that raised on every tuple tested nothing, which `tt record`
    says as an error once the job has run (cli/record.py `when_failure`).
    θ tests it on every input, so the expression is compiled into both functions, inside their
    `try`; θ's loop over a batch calls `first_hit` once a slice of rows. On TPC-H W2 (θ = J1, a
    condition that never holds, counted by valgrind), a wrapper calling a lambda, then `bool`,
    through `feed` for each row cost the workers 4,189 instructions an input, `first_hit` 1,409.
    """
    check_condition(source)
    tree = ast.fix_missing_locations(_Expression(source).visit(ast.parse(_CONDITION)))

    def failed(e: Exception) -> bool:
        when.raised += 1
        if when.first_error is None:
            when.first_error = f"--when {source!r} raised {type(e).__name__}: {e} (such tuples count as false)"
        return False

    scope: dict = {"__builtins__": _SAFE_BUILTINS, "_Error": Exception, "_range": range, "_failed": failed}
    exec(compile(tree, "<--when>", "exec"), scope)
    when = scope["when"]
    when.first_hit = scope["first_hit"]
    when.first_error = None  # reported once to the user, by the recorder
    when.raised = 0          # on how many tuples it raised: on every one, the run took no interaction by it
    return when

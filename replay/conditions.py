"""Conditions and expressions over operator states, and the searches that use them.

A condition (`c`, `--run-until`) or an expression (`e`, `w`) is Python over
`row` and the operators of G(θ) by name: `FD.blacklist` is the stepping (or, in
an expression, each) instance's field, `FD[1].blacklist` instance 1's. It is
parsed once, its names and fields are checked against the operators' states
before anything runs (a misspelt field would otherwise make a condition silently
false), and it is evaluated with a small set of builtins.

`Search` goes forward in the original execution's order: until a condition
holds, to just before a given tuple, or over a stretch to find where a field
last changed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Callable

from ..core import values
from ..core.errors import UsageError
from ..core.expressions import free_names
from ..core.hooked import HookedOperator
from ..core.scopes import Provenance, TupleRef
from .engine import Engine, Instance, Key, RecordedFailure
from .restore_points import RestorePoints
from .state_paths import lookup_dotted

BUILTINS = ("len", "any", "all", "sum", "min", "max", "abs", "str", "int", "float", "isinstance",
            "dict", "list", "set", "tuple", "sorted", "round", "bool")


@dataclass
class EvalError:
    """What an evaluated expression raised (shown in place of its value)."""
    message: str

    def __str__(self) -> str:
        return f"raised {self.message}"


Field = tuple[str, "int | None", "str | None"]   # (operator, instance or None, field or None)


@dataclass
class Parsed:
    """A condition or an expression, compiled, with the operator names and fields it reads."""

    source: str
    names: set[str]              # every name it uses
    operators: set[str]          # the operators of G(θ) among them
    fields: list[Field]
    code: Any
    builtins: dict[str, Any]


def parse(source: str, op_names: set[str], what: str, names_allowed: tuple[str, ...]) -> Parsed:
    """Compile a condition or an expression; one line naming what is wrong when it does not
    parse or uses a name it cannot see."""
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as e:
        raise UsageError(f"bad {what} {source!r}: {e.msg}") from None
    names = free_names(tree)
    refs = names & op_names
    unknown = names - refs - {*names_allowed, "True", "False", "None", *BUILTINS}
    if unknown:
        raise UsageError(f"bad {what} {source!r}: unknown name(s) {', '.join(sorted(unknown))}; use "
                         f"{', '.join(names_allowed)} or an operator of G(θ) ({', '.join(sorted(op_names))})")
    code = compile(tree, f"<{what}>", "eval")
    builtins = {k: __builtins__[k] if isinstance(__builtins__, dict) else getattr(__builtins__, k) for k in BUILTINS}
    return Parsed(source, names, refs, _fields_read(tree, refs), code, builtins)


def check_fields(parsed: Parsed, engine: Engine, operator, what: str) -> None:
    """Every `OP.field` and `OP[i].field` must name a field of OP's state where the engine
    stands (else a condition could only ever be false, silently). `operator(name)` gives
    the run's operator of that name (with `.id` and `.instances`)."""
    for name, index, attr in parsed.fields:
        op = operator(name)
        if index is not None and not 0 <= index < op.instances:
            raise UsageError(f"bad {what} {parsed.source!r}: {name} has instances 0..{op.instances - 1}, "
                             f"not {index}")
        insts = [inst for (o, i), inst in engine.instances.items() if o == op.id and (index is None or i == index)]
        fields = None if attr is None else unknown_field([inst.runner.op for inst in insts], attr)
        if fields is None:
            continue
        raise UsageError(f"bad {what} {parsed.source!r}: unknown field {attr!r} of "
                         f"{name if index is None else f'{name}[{index}]'} "
                         f"(fields: {', '.join(fields) or 'none, its state is empty'})")


def unknown_field(ops: list, attr: str) -> list[str] | None:
    """The fields the operators `ops` have, where `attr` is none of them (to name in the
    refusal); None where it is one, or may still come (a processor names its state variables in
    init, a UDTF's handler is made by its first unit: `fields_known`)."""
    if any(_has_field(op, attr) for op in ops) or any(getattr(op, "fields_known", True) is False for op in ops):
        return None
    return sorted({f for op in ops for f in (*_state_fields(op), *getattr(op, "empty_fields", ()))})


class Condition:
    """A compiled `run until` condition, checked after every step; errors count as false and
    the first one is reported once."""

    def __init__(self, parsed: Parsed, instances: Callable[[str, int], Instance]):
        self.parsed = parsed
        self.source = parsed.source
        self._instances = instances      # (operator name, i) -> that instance, for OP[i]
        self.evaluated = 0
        self.steps = 0       # the steps it was asked about (it is evaluated only on those it reads)
        self.raised = 0
        self.first_error: tuple[str, int, str, int] | None = None

    def __call__(self, inst: Instance, pos: int, row: Any) -> bool:
        p = self.parsed
        name = inst.node.name
        self.steps += 1
        if p.operators and name not in p.operators and "row" not in p.names:
            return False
        env = {"row": row, "op": name, "instance": inst.i, "position": pos}
        for r in p.operators:
            env[r] = _OperatorProxy(r, inst if r == name else None, self._instances)
        try:
            held = bool(eval(p.code, {"__builtins__": p.builtins, **env}))   # (globals: a generator sees them)
        except _NotThisStep:
            return False
        except Exception as e:  # noqa: BLE001  (the user's expression: any error counts as false, reported once)
            self.evaluated += 1
            self.raised += 1
            if self.first_error is None:
                self.first_error = (_describe(e), pos, name, inst.i)
            return False
        self.evaluated += 1
        return held

    @property
    def always_raised(self) -> bool:
        return bool(self.raised) and self.raised == self.evaluated

    def errors(self, every: bool) -> str:
        """The first error the condition raised, once, as part of a one-line note."""
        if self.first_error is None:
            return ""
        error, pos, name, i = self.first_error
        if every:
            return (f"the condition {self.source!r} raised {error} every time it was evaluated ({self.evaluated} "
                    f"times, first after {name}:{i}:{pos}), so it never held")
        return (f" (it raised {error} on {self.raised} of {self.evaluated} evaluations, first after "
                f"{name}:{i}:{pos}; those count as false)")


def evaluate(parsed: Parsed, each: list[Instance | None], instances: Callable[[str, int], Instance],
             row: Any) -> list[tuple[str, Any]]:
    """`parsed` once per instance in `each` (its `OP.field` is that instance's): (who, value)
    pairs, an `EvalError` as the value where it raised."""
    out = []
    for inst in each:
        env = {r: _OperatorProxy(r, inst if inst is not None and r == inst.node.name else None, instances)
               for r in parsed.operators}
        env["row"] = row
        try:
            value = eval(parsed.code, {"__builtins__": parsed.builtins, **env})
        except Exception as e:  # noqa: BLE001  (the user's expression)
            value = EvalError(_describe(e))
        out.append((inst.label if inst is not None else parsed.source, value))
    return out


class Stop(Exception):
    """Ends a forward run at a chosen step."""


class Search:
    """Forward runs in the original execution's order: θ's inputs by (epoch, instance,
    position), each followed by whatever it makes possible downstream."""

    def __init__(self, engine: Engine, provenance: Provenance, points: RestorePoints,
                 cuts: dict[Key, list[int | None]] | None = None, after_theta: frozenset[int] = frozenset()):
        self.engine = engine
        self.provenance = provenance
        self.points = points
        self.cuts = cuts or {}   # each instance's position at each interaction after the start (`_within`)
        self.after_theta = after_theta   # operators that take θ's rows through Spark (`spark_after`)

    def in_order(self, after: Callable[[Instance, int, Any], None] | None = None, tick=None,
                 stop_before: int | None = None, stop_at: TupleRef | None = None, failure_ends: bool = True) -> None:
        """Go forward in the original order until the end (or `after` raises `Stop`),
        stopping just before the `stop_before`-th consumed input (counting from 0), or
        just before the tuple `stop_at` would be consumed. A failed run's order ends where
        it failed (`failure_ends=False`: its `RecordedFailure` propagates)."""
        engine = self.engine
        self.points.in_order_here()   # (the positions it saves on the way are in that order too, if here is)
        theta = engine.graph.theta
        sources = [inst for (op, _), inst in engine.instances.items() if op == theta]
        steps = [0]

        def rank(inst: Instance):
            return (self.provenance.epoch(inst.i, inst.count), inst.i, inst.count)

        def before(inst: Instance, pos: int, ch) -> None:
            if stop_before is not None and steps[0] == stop_before:
                raise Stop
            if stop_at is not None and pos == stop_at.position and inst.key == (stop_at.op, stop_at.instance):
                raise Stop
            steps[0] += 1
        cuts, after_theta = self.cuts, self.after_theta

        def within(inst: Instance, epoch: int | None) -> bool:
            """Whether `inst` may take its next input while θ's next is in `epoch`: not past its
            position at the interaction that ends the epoch. An operator θ does not feed (a
            hooked job's other functions, each with its own logged input) was run to its end
            before θ's first input, so a run-until stopped in a state that never was: the other
            done, θ not started. One that takes θ's rows through Spark (a shuffle's other side)
            only from the interaction that ends the epoch on, once θ's inputs of the epoch are in:
            run up to it at the epoch's start, it stood far past θ, before θ's rows it takes."""
            cut = cuts.get(inst.key)
            if epoch is None or cut is None:
                return True
            if inst.node.id in after_theta:
                start = next((p for p in reversed(cut[:epoch]) if p is not None), 0)
                return inst.count < start
            if epoch >= len(cut) or cut[epoch] is None:
                return True
            return inst.count < cut[epoch]
        stopping = stop_before is not None or stop_at is not None
        with engine.hooks(on_consume=before if stopping else None, after_consume=after):
            try:
                engine.run_in_order(rank, sources, tick, within=within if cuts else None)
            except Stop:
                pass
            except RecordedFailure:
                if not failure_ends:
                    raise

    def until(self, condition: Condition, tick=None) -> TupleRef | None:
        """Forward until `condition` holds after a step: the tuple just consumed, or None at
        the end of the run (a failed run's `RecordedFailure` propagates)."""
        hit: list[TupleRef] = []

        def after(inst: Instance, pos: int, row: Any) -> None:
            if condition(inst, pos, row):
                hit.append(TupleRef(inst.node.id, inst.i, pos))
                raise Stop
        self.in_order(after=after, tick=tick, failure_ends=False)
        return hit[0] if hit else None

    def last_change(self, key: Key, field_path: str, tick=None) -> int | None:
        """Back to just before the last step of `key` that changed `field_path` before here:
        the position of that step's input, or None (the engine is then where the search left it).

        The search starts from the nearest saved position at or before here that the original
        order passes through (long actions in that order leave them along the way; see
        `Engine.in_order`), then from earlier ones, then from the start; each scans
        only up to where the newer one began, so every input is replayed at most once."""
        engine = self.engine
        here = engine.instances[key].count
        at = engine.position
        bases = sorted((s for s in self.points.saved if s.position[key] < here and s.covers(at) and s.in_order),
                       key=lambda s: s.position[key], reverse=True)
        until = here
        for base in [*bases, None]:
            start = base.position[key] if base is not None else 0
            if start >= until:
                continue
            self.points.restore(base)
            changes = self._changes(key, field_path, until, tick)
            until = start
            if changes:
                step, position = changes[-1]
                self.points.restore(base)
                self.in_order(stop_before=step, tick=tick)
                return position
            if start == 0:
                break
        return None

    def _changes(self, key: Key, field_path: str, until: int, tick=None) -> list[tuple[int, int]]:
        """(step index, position) of the steps at `key` that changed the field, going forward
        in the original order until `key` has consumed `until` inputs."""
        inst = self.engine.instances[key]
        prev = [lookup_dotted(inst.state(), field_path)]
        changes: list[tuple[int, int]] = []
        counter = [0]

        def after(i: Instance, pos: int, row: Any) -> None:
            counter[0] += 1
            if (i.node.id, i.i) == key:
                v = lookup_dotted(i.state(), field_path)
                if not values.same_encoded(prev[0], v):
                    changes.append((counter[0] - 1, pos))
                    prev[0] = v
                if i.count >= until:
                    raise Stop
        if inst.count < until:
            self.in_order(after=after, tick=tick)
        return changes


# --- what a condition sees ---------------------------------------------------------------------

class _OperatorProxy:
    """`FD` in a condition: the stepping instance's attributes, or FD[i]'s."""

    def __init__(self, name: str, current: Instance | None, instances: Callable[[str, int], Instance]):
        self._name, self._current, self._instances = name, current, instances

    def __getattr__(self, attr: str) -> Any:
        if self._current is None:
            raise _NotThisStep
        return _field(self._current.runner.op, attr)

    def __getitem__(self, i: int) -> Any:
        return _InstanceProxy(self._instances(self._name, i))


class _InstanceProxy:
    def __init__(self, inst: Instance):
        self._inst = inst

    def __getattr__(self, attr: str) -> Any:
        return _field(self._inst.runner.op, attr)


def _field(op: Any, attr: str) -> Any:
    """An operator's field as a condition reads it: an attribute, or for a hooked function
    (whose state is gathered from its callable, closure and frame) an entry of its state."""
    if isinstance(op, HookedOperator):
        state = op.state()
        if attr in state:
            return state[attr]
        if attr in op.empty_fields:
            return {}
        raise AttributeError(f"{op._tt_name or 'the operator'} has no field {attr!r} "
                             f"(it has: {', '.join(map(str, state)) or 'none yet'})")
    return getattr(op, attr)


class _NotThisStep(Exception):
    pass


def _describe(e: Exception) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _fields_read(tree: ast.AST, refs: set[str]) -> list[Field]:
    """(operator, instance or None, field or None) for each `OP.field`, `OP[i].field`, `OP[i]`."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in refs:
            out.append((node.value.id, None, node.attr))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in refs:
            index = node.slice.value if isinstance(node.slice, ast.Constant) and type(node.slice.value) is int \
                else None
            attr = None
            for parent in ast.walk(tree):
                if isinstance(parent, ast.Attribute) and parent.value is node:
                    attr = parent.attr
            out.append((node.value.id, index, attr))
    return out


def _has_field(op: Any, attr: str) -> bool:
    try:
        getattr(op, attr)
        return True
    except AttributeError:
        return attr in _state_fields(op) or attr in getattr(op, "empty_fields", ())
    except Exception:  # noqa: BLE001  (a property that raises: the field exists)
        return True


def _state_fields(op: Any) -> list[str]:
    try:
        state = op.state()
    except Exception:  # noqa: BLE001
        return []
    return [str(k) for k in state] if isinstance(state, dict) else []

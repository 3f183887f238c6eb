"""The module globals a hooked function keeps state in, read from its bytecode.

A function (or the methods of a processor's class) keeps state in a module global in two ways:
it assigns the name (`global MODEL`, then `MODEL = load()`: a model loaded once per worker, a
counter), or it writes into what the name holds (`CACHE[k] = v`, `SEEN.add(x)`,
`INDEX.setdefault(k, []).append(v)`, `STATS.count += 1`). Both are its state, which the
debugger shows and `tt verify` compares (core/hooked.py, `globals`). A global it only reads (a
lookup table, a setting) is its input, and is left out: encoding a big table at every
interaction would cost for nothing.

The functions of the same module that the code calls (by a global name) are read too: a
`flush(batch)` helper that adds to a global counter writes the caller's state. Assignments are
`STORE_GLOBAL`s. A write into a global is found by following, after each
`LOAD_GLOBAL`, what the following instructions do with the value it loaded and with the parts
taken from it (`G[k]`, `G.attr`, what a call on them returns) until none of them is left on the
stack: a subscript or attribute written or deleted in one of them, or one of `MUTATORS` called on
one, is a write. The walk gives up (no write) at a jump or an instruction it does not know, so
a write through another name (`cache = CACHE`, then `cache[k] = v`) is not seen. It knows the
instructions of CPython 3.11 to 3.13.

`written_attributes` follows the same walk from a method's `self`: the attributes a per-row UDF
that is a callable object keeps state in (`self.n += 1`), which tt does not hook, and says.
"""

from __future__ import annotations

import dis
import functools
import inspect
import types
from typing import Any

#: Methods that change their object in place (a list's, a dict's, a set's, a deque's, a
#: queue's, an ndarray's `fill`): a global one of these is called on is state the code changes.
MUTATORS = frozenset({"append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault",
                      "add", "discard", "difference_update", "intersection_update",
                      "symmetric_difference_update", "appendleft", "extendleft", "popleft", "rotate", "sort",
                      "reverse", "fill", "put", "put_nowait", "__setitem__", "__delitem__", "__iadd__"})

_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_CONST", "LOAD_DEREF",
                    "LOAD_CLOSURE", "LOAD_GLOBAL", "LOAD_NAME", "PUSH_NULL"})
_NOTHING = frozenset({"RESUME", "NOP", "CACHE", "PRECALL", "KW_NAMES", "EXTENDED_ARG"})
#: Instructions that take some values off the stack (as many as their net effect says) and
#: leave one: a value made from a global's part (`INDEX.setdefault(k, [])`) is taken as a part.
_ONE_RESULT = frozenset({"BINARY_OP", "COMPARE_OP", "IS_OP", "CONTAINS_OP", "BUILD_TUPLE", "BUILD_LIST",
                         "BUILD_SET", "BUILD_MAP", "BUILD_STRING", "BUILD_SLICE", "BUILD_CONST_KEY_MAP",
                         "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "FORMAT_VALUE", "FORMAT_SIMPLE",
                         "FORMAT_WITH_SPEC", "CONVERT_VALUE", "TO_BOOL", "CALL", "CALL_KW", "CALL_FUNCTION_EX",
                         "BINARY_SLICE", "CALL_INTRINSIC_1", "CALL_INTRINSIC_2"})
#: A call takes its arguments, the callable and what lies under it (NULL or `self`), and CALL_KW
#: its keywords' names too (3.11's PRECALL, which takes nothing, says it takes the arguments).
_CALLS = {"CALL": 2, "CALL_KW": 3}
#: Writes: how many values each takes, and how deep (1: the top) the object it writes into lies.
_WRITES = {"STORE_SUBSCR": (3, 2), "DELETE_SUBSCR": (2, 2), "STORE_ATTR": (2, 1), "DELETE_ATTR": (1, 1),
           "STORE_SLICE": (4, 3)}


def written_globals(fn: Any, in_place: bool = True) -> dict:
    """The module globals `fn`'s code assigns, and (`in_place`) writes into, with their values;
    for an object (a callable instance, a StatefulProcessor) or a class (a UDTF), those of the
    methods of its classes, PySpark's own aside. With `in_place`, the functions of its module it
    calls count too (a `flush(batch)` helper that adds to a global counter), and theirs. Code
    (modules, functions, classes) is left out."""
    if inspect.ismethod(fn):
        functions = [fn.__func__]
    elif isinstance(fn, types.FunctionType):
        functions = [fn]
    else:
        functions = _methods(fn if isinstance(fn, type) else type(fn))
    out: dict = {}
    seen = {id(f) for f in functions}
    for f in functions:   # (grows as helpers are found)
        found = f.__globals__
        names = _names(f.__code__, "STORE_GLOBAL") + (_written_into(f.__code__) if in_place else ())
        for name in names:
            if name in found and name not in out and not name.startswith("_") and not is_code(found[name]):
                out[name] = found[name]
        for name in _names(f.__code__, "LOAD_GLOBAL") if in_place else ():
            helper = found.get(name)
            if type(helper) is types.FunctionType and helper.__globals__ is found and id(helper) not in seen:
                seen.add(id(helper))
                functions.append(helper)
    return out


#: Methods that run where the object is made or pickled (the driver), not where it is called.
_NOT_CALLED_THERE = frozenset({"__init__", "__new__", "__getstate__", "__setstate__", "__reduce__",
                               "__reduce_ex__", "__repr__", "__str__"})


def written_attributes(fn: Any) -> list[str]:
    """The attributes of its own object that a callable object's methods (a bound method's
    function) write (`self.n += 1`, `self.cache[k] = v`), found as `written_globals` finds
    writes into a global, from `self` (the methods' first argument); `__init__` and pickling's
    methods aside. A function or a class: none."""
    if inspect.ismethod(fn):
        return _self_writes((fn.__func__,))
    if isinstance(fn, (types.FunctionType, type)):
        return []
    return list(_class_self_writes(type(fn)))


def shared_class_attributes(obj: Any) -> dict:
    """The attributes `obj`'s methods write into through `self` (`self.totals[k] += 1`) that are
    its class's, not its own (`totals = {}` in the class body), with their values: one object
    that every instance of the class shares, and in PySpark every task one Python worker runs
    (cloudpickle makes a job's class once a process), so a task finds there what the worker's
    earlier tasks left. An attribute the object has of its own (`self.n += 1` made one; `__init__`
    set it) is its own state, and code is none."""
    if obj is None or isinstance(obj, type) or inspect.isroutine(obj):
        return {}
    own = getattr(obj, "__dict__", None)
    if not isinstance(own, dict):
        return {}
    out: dict = {}
    for name in _class_self_writes(type(obj)):
        if name in own or name.startswith("_"):
            continue
        for c in type(obj).__mro__:
            if name in vars(c):
                value = vars(c)[name]
                if _shareable(value):
                    out[name] = value
                break
    return out


#: Values a write through `self` cannot change in place: `self.count += 1` on `count = 0` in the
#: class body makes the instance an attribute of its own, and shares nothing.
_IMMUTABLE = (int, float, complex, str, bytes, bool, tuple, frozenset, type(None), range)


_NO_VALUE = ()   # (immutable: not shareable)


def _shareable(value: Any) -> bool:
    """A class attribute that writes through `self` would change for every instance: no code (a
    method, a property: `__get__`), and nothing immutable."""
    return not is_code(value) and not hasattr(type(value), "__get__") and not isinstance(value, _IMMUTABLE)


def class_shared_writes(cls: type) -> list[str]:
    """`shared_class_attributes` read from a class alone, before any instance (a UDTF is handed
    over as its class): the attributes its methods write into through `self` that the class
    holds and `__init__` does not make the instance's own (`self.totals = {}`)."""
    made = set(_self_stores(cls.__dict__.get("__init__")))
    return [name for name in _class_self_writes(cls) if name not in made and not name.startswith("_")
            and _shareable(next((vars(c)[name] for c in cls.__mro__ if name in vars(c)), _NO_VALUE))]


@functools.lru_cache(maxsize=256)
def _class_self_writes(cls: type) -> tuple[str, ...]:
    """`written_attributes` of an instance of `cls` (read once a class: `state()` asks at every
    interaction)."""
    return tuple(_self_writes(tuple(_methods(cls, skip=_NOT_CALLED_THERE))))


def _self_stores(init: Any) -> list[str]:
    """The attributes a method assigns on `self` (`self.totals = {}`)."""
    if not isinstance(init, types.FunctionType) or not init.__code__.co_argcount:
        return []
    me = init.__code__.co_varnames[0]
    instructions = [i for i in dis.get_instructions(init.__code__) if i.opname != "CACHE"]
    return [i.argval for at, i in enumerate(instructions) if i.opname == "STORE_ATTR" and at
            and instructions[at - 1].opname in ("LOAD_FAST", "LOAD_FAST_CHECK") and instructions[at - 1].argval == me]


def _self_writes(functions: tuple) -> list[str]:
    """The attributes of `self` that `functions` (methods) write (`written_attributes`)."""
    out: list[str] = []
    for f in functions:
        code = f.__code__
        if not code.co_argcount:
            continue
        me = code.co_varnames[0]
        instructions = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
        for at, i in enumerate(instructions):
            if i.opname in ("LOAD_FAST", "LOAD_FAST_CHECK") and i.argval == me and _writes(instructions, at):
                attribute = _attribute_after(instructions, at)
                if attribute and attribute not in out:
                    out.append(attribute)
    return out


def _methods(cls: type, skip: frozenset = frozenset()) -> list:
    """The functions of `cls` and its bases, PySpark's own and builtins' aside (and those named in `skip`)."""
    return [f for c in cls.__mro__ if c.__module__ != "builtins" and not c.__module__.startswith("pyspark")
            for name, f in vars(c).items() if isinstance(f, types.FunctionType) and name not in skip]


def _attribute_after(instructions: list, at: int) -> str | None:
    """The attribute named just after `instructions[at]` loads `self` (`self.n += 1` copies it first)."""
    return next((i.argval for i in instructions[at + 1:at + 4] if i.opname in ("LOAD_ATTR", "STORE_ATTR")), None)


def is_code(value: Any) -> bool:
    """Code, not state: modules, functions, classes."""
    return isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type,
                              types.MethodType))


@functools.lru_cache(maxsize=2048)
def _names(code: types.CodeType, opname: str) -> tuple[str, ...]:
    """The global names that `code` and the code nested in it (a comprehension, an inner
    function) assign (`STORE_GLOBAL`) or read (`LOAD_GLOBAL`: a helper function it calls among them)."""
    names = [i.argval for i in dis.get_instructions(code) if i.opname == opname]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_names(const, opname))
    return tuple(dict.fromkeys(names))


@functools.lru_cache(maxsize=1024)
def _written_into(code: types.CodeType) -> tuple[str, ...]:
    """The global names whose values `code` and the code nested in it write into."""
    instructions = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    names = [i.argval for at, i in enumerate(instructions) if i.opname == "LOAD_GLOBAL" and _writes(instructions, at)]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_written_into(const))
    return tuple(dict.fromkeys(names))


def _writes(instructions: list, at: int) -> bool:
    """Whether what `instructions[at]` loads, or a part of it, is written into before the stack
    holds none of them (the walk the module's docstring tells)."""
    first = instructions[at]
    stack = [False] * dis.stack_effect(first.opcode, first.arg)   # (a NULL may come under it)
    stack[-1] = True   # the global's value, or a part of it
    for ins in instructions[at + 1:]:
        op = ins.opname
        if op in _NOTHING:
            continue
        if op in _LOADS:
            stack.extend([False] * dis.stack_effect(ins.opcode, ins.arg))
        elif op == "COPY":
            stack.append(stack[-ins.arg] if ins.arg <= len(stack) else False)
        elif op == "SWAP":
            if ins.arg > len(stack):
                return False
            stack[-1], stack[-ins.arg] = stack[-ins.arg], stack[-1]
        elif op in ("LOAD_ATTR", "LOAD_METHOD"):
            part = stack.pop()
            if part and ins.argval in MUTATORS:
                return True
            stack.extend([part] * (1 + dis.stack_effect(ins.opcode, ins.arg)))   # (a method: with its NULL or self)
        elif op == "BINARY_SUBSCR":
            del stack[-1]   # the key; the container's part takes the container's place
        elif op in _WRITES:
            taken, depth = _WRITES[op]   # (what lies under the global's value is none of its parts)
            if depth <= len(stack) and stack[-depth]:
                return True
            del stack[max(0, len(stack) - taken):]
        elif op in _ONE_RESULT:
            taken = _CALLS[op] + ins.arg if op in _CALLS else 1 - dis.stack_effect(ins.opcode, ins.arg)
            part = any(stack[max(0, len(stack) - taken):])
            del stack[max(0, len(stack) - taken):]
            stack.append(part)
        else:
            return False
        if not any(stack):
            return False
    return False


__all__ = ["written_globals", "written_attributes", "shared_class_attributes", "class_shared_writes", "is_code",
           "MUTATORS"]

"""The names a user's expression reads from outside it: a `--when` condition, a run-until
condition, an expression `e` evaluates. Each of them refuses a name it cannot give a value (a
typo, `__import__`), one line before anything runs; the names the expression binds itself (a
generator's `for k, t in ...`, a lambda's parameters, `:=`) are its own, and were refused too.
"""

from __future__ import annotations

import ast


def free_names(tree: ast.AST) -> set[str]:
    """The names `tree` uses but does not bind itself."""
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            bound |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Lambda):
            a = node.args
            bound |= {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None}
        elif isinstance(node, ast.NamedExpr):
            bound.add(node.target.id)
    return used - bound


__all__ = ["free_names"]

"""Shape expressions (TVM PrimExprs over T.const and T.dynamic vars) evaluated to sizes, for `T.empty` outputs
whose dims are arithmetic of a call's dims (`T.empty((N * 2,), ...)`): the runtime with ints, the torch
layer's fake implementations with symbolic sizes."""
from __future__ import annotations

__all__ = ["UnsupportedShapeExpr", "evaluate", "free_vars"]


class UnsupportedShapeExpr(ValueError):
    """A shape expression with an operation outside + - * // % min max (the message names it)."""


def _binary():
    from tvm import tirx

    return {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b, tirx.Mul: lambda a, b: a * b,
            tirx.FloorDiv: lambda a, b: a // b, tirx.FloorMod: lambda a, b: a % b,
            tirx.Min: lambda a, b: a if a <= b else b, tirx.Max: lambda a, b: a if a >= b else b}


def evaluate(expr, env: dict):
    """`expr` with each var replaced by `env[var name]` (ints or torch SymInts); a var missing from `env`
    raises KeyError with its name."""
    from tvm import tirx

    if isinstance(expr, int):
        return expr
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tirx.Var):
        return env[expr.name]
    if isinstance(expr, tirx.Cast):
        return evaluate(expr.value, env)
    for kind, fn in _binary().items():
        if isinstance(expr, kind):
            return fn(evaluate(expr.a, env), evaluate(expr.b, env))
    raise UnsupportedShapeExpr(
        f"shape expression {expr} ({type(expr).__name__}) is not + - * // % min max of dims"
    )


def free_vars(expr) -> set[str]:
    """The names of the vars in a shape expression."""
    from tvm import tirx

    return {v.name for v in tirx.analysis.undefined_vars(expr)}

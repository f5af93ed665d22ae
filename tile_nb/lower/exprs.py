"""A small expression rewriter: TVM 0.27 exposes no Python ExprMutator for tirx, so we rebuild nodes here.

`rewrite(expr, var_map, on_load)` returns `expr` with variables replaced through `var_map` and every
`BufferLoad` replaced by `on_load(load, new_indices)` (which may return the load unchanged).
"""
from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import tirx
from tvm.ir import prim

from .errors import LoweringError
from .narrow import wrap_narrow, wrap_narrow_not

__all__ = [
    "conjunction",
    "const_int",
    "fit_int32",
    "is_const_int",
    "offset_from",
    "reaches_int32_limit",
    "rewrite",
    "uses_var",
    "walk_loads",
    "widen_index",
]

_BINARY = tuple(
    getattr(prim.expr, name)
    for name in (
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "FloorDiv",
        "FloorMod",
        "Min",
        "Max",
        "EQ",
        "NE",
        "LT",
        "LE",
        "GT",
        "GE",
        "And",
        "Or",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "LShift",
        "RShift",
    )
    if hasattr(prim.expr, name)
)
_LEAF = (tvm.ir.expr.Var, prim.expr.IntImm, prim.expr.FloatImm)


_COMPARE = tuple(getattr(prim.expr, name) for name in ("EQ", "NE", "LT", "LE", "GT", "GE"))


def rewrite(expr, var_map: dict, on_load: Callable | None = None, fit: Callable | None = None,
            minmax: Callable | None = None, approx: Callable | None = None, narrow: bool = False):
    """`fit(comparison)`, when given, may replace each rebuilt comparison (the emitter widens index arithmetic
    that reaches the int32 limits there, `fit_int32`). The emitter's CUDA choices come as functions, so that
    this walker stays below the emitters: `minmax(kind, a, b, dtype)` builds a float max / min ("max" / "min":
    the NaN-propagating intrin.minmax_nan), and `approx(op, x, dtype)` may replace a call of `op` by an
    approximate instruction (intrin.approx_math where LoweringOptions.approx_math
    is on), None keeping the call. With `narrow`, 8- and 16-bit integer ops that C++ would compute
    unwrapped in int are rebuilt to wrap to their dtype (narrow.py)."""
    def go(e):
        if isinstance(e, tvm.ir.TensorLoad):  # a BufferLoad; `.source` is the buffer
            idx = [go(i) for i in e.indices]
            if on_load is not None:
                return on_load(e, idx)
            return tirx.BufferLoad(e.source, idx)
        if isinstance(e, tvm.ir.expr.Var):
            return var_map.get(e, e)
        if isinstance(e, _LEAF) or not isinstance(e, tvm.ir.Expr):
            return e
        if minmax is not None and isinstance(e, (prim.expr.Max, prim.expr.Min)) \
                and str(e.ty).startswith(("float", "bfloat")):
            # docs/IR.md: a NaN operand makes T.max / T.min NaN (CUDA's fmaxf would drop it)
            kind = "max" if isinstance(e, prim.expr.Max) else "min"
            return minmax(kind, go(e.a), go(e.b), str(e.ty))
        if fit is not None and isinstance(e, _COMPARE):
            return fit(type(e)(go(e.a), go(e.b)))
        if isinstance(e, _BINARY):
            return wrap_narrow(type(e), go(e.a), go(e.b)) if narrow else type(e)(go(e.a), go(e.b))
        if isinstance(e, prim.expr.Not):
            return prim.expr.Not(go(e.a))
        if isinstance(e, prim.expr.BitwiseNot):
            return wrap_narrow_not(go(e.a)) if narrow else prim.expr.BitwiseNot(go(e.a))
        if isinstance(e, prim.expr.Cast):
            value = go(e.value)
            if isinstance(value, int):  # the var of a loop of extent 1, mapped to 0
                value = tirx.const(value, str(e.value.ty))
            if {str(e.ty), str(value.ty)} == {"float16", "bfloat16"}:
                # CUDA converts between half and nv_bfloat16 by their bits; through float32 the value is kept,
                # as the interpreter keeps it
                # (docs/decisions.md#workarounds-for-what-the-toolchain-does-on-the-gpu).
                value = prim.expr.Cast("float32", value)
            return prim.expr.Cast(e.ty, value)
        if isinstance(e, prim.expr.Select):
            return prim.expr.Select(go(e.condition), go(e.true_value), go(e.false_value))
        if isinstance(e, prim.expr.Let):
            return prim.expr.Let(e.var, go(e.value), go(e.body))
        if isinstance(e, prim.expr.Ramp):
            return prim.expr.Ramp(go(e.base), go(e.stride), e.lanes)
        if isinstance(e, prim.expr.Broadcast):
            return prim.expr.Broadcast(go(e.value), e.lanes)
        if isinstance(e, tvm.ir.expr.Call):
            args = [go(a) for a in e.args]
            if approx is not None and args:
                fast = approx(getattr(e.op, "name", None), args[0], str(e.ty))
                if fast is not None:
                    return fast
            return tvm.ir.expr.Call(e.op, args, attrs=e.attrs, ret_ty=e.ty)
        if isinstance(e, (prim.expr.Shuffle,)):
            raise LoweringError(
                f"the expression {e} ({type(e).__name__}) is not supported by the CUDA lowering"
            )
        return e  # StringImm and other leaves

    return go(expr)


_INDEX_ARITH = tuple(
    getattr(prim.expr, name)
    for name in ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max")
)


def widen_index(expr):
    """An int32 index expression computed in int64, exactly: constants and arithmetic rebuilt in int64, every
    other leaf (variables, loads, calls) cast. Offsets into a tensor with int64 dims (frontend/indexing.py) go
    through it, so no intermediate wraps around at 2^31 (TVM's simplifier would push a cast over + and * by
    constants, not over // or a product of variables)."""
    if not isinstance(expr, tvm.ir.Expr) or str(expr.ty) != "int32":
        return expr
    if isinstance(expr, prim.expr.IntImm):
        return tirx.IntImm("int64", int(expr.value))
    if isinstance(expr, _INDEX_ARITH):
        return type(expr)(widen_index(expr.a), widen_index(expr.b))
    if isinstance(expr, prim.expr.Select):
        return prim.expr.Select(expr.condition, widen_index(expr.true_value), widen_index(expr.false_value))
    return prim.expr.Cast("int64", expr)


_INT32_MIN, _INT32_MAX = -2 ** 31, 2 ** 31 - 1


def _has_load(expr) -> bool:
    found = []
    walk_loads(expr, found.append)
    return bool(found)


def reaches_int32_limit(expr, analyzer) -> bool:
    """Whether int32 arithmetic `expr` can reach the int32 limits, from the ranges `analyzer` knows (grid,
    loops). False for an expression holding a load or a variable of unknown range: data-dependent and
    T.dynamic indices stay 32-bit (docs/IR.md)."""
    if not isinstance(expr, tvm.ir.Expr) or str(expr.ty) != "int32" or isinstance(expr, prim.expr.IntImm):
        return False
    if _has_load(expr):
        return False
    for var in tirx.analysis.undefined_vars(expr):
        bound = analyzer.const_int_bound(var)
        if bound.min_value <= _INT32_MIN and bound.max_value >= _INT32_MAX:
            return False
    bound = analyzer.const_int_bound(expr)
    # TVM's own passes fail on an int32 expression whose bound is the limit
    # itself ("Literal value 2147483648")
    return bound.max_value >= _INT32_MAX or bound.min_value <= _INT32_MIN


def fit_int32(cond, analyzer):
    """A comparison of int32 operands redone in int64 when either can reach the int32 limits
    (`bx * 1024 + i < N` over a grid that covers 2^31 elements), else `cond` itself."""
    if not isinstance(cond, _COMPARE) or str(cond.a.ty) != "int32":
        return cond
    if reaches_int32_limit(cond.a, analyzer) or reaches_int32_limit(cond.b, analyzer):
        return type(cond)(widen_index(cond.a), widen_index(cond.b))
    return cond


def walk_loads(expr, visit: Callable) -> None:
    """Call `visit(load)` for every BufferLoad in `expr` (outermost first)."""

    def on_load(load, idx):
        visit(load)
        return load

    rewrite(expr, {}, on_load)


def uses_var(expr, var) -> bool:
    """Whether `expr` reads the variable `var`."""
    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


def offset_from(index, var, analyzer):
    """`e` where `index` is `e + var` with `e` free of `var` (a unit step along `var`), else None."""
    rest = analyzer.simplify(index - var)
    return None if uses_var(rest, var) else rest


def const_int(e) -> int | None:
    """The value of a Python int or an IR integer constant, else None."""
    if isinstance(e, int):
        return e
    return int(e.value) if isinstance(e, prim.expr.IntImm) else None


def is_const_int(e, value=None) -> bool:
    if isinstance(e, int):
        return value is None or e == value
    return isinstance(e, prim.expr.IntImm) and (value is None or int(e.value) == value)


def conjunction(*conds):
    """The And of conditions, where None (no condition) and True are skipped: None when nothing is left.
    Python bools fold (one False makes False), so the same code serves int and IR coordinates."""
    out = None
    for c in conds:
        if c is None or c is True:
            continue
        if c is False:
            return False
        out = c if out is None else tirx.And(out, c)
    return out

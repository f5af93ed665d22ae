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

__all__ = ["conjunction", "const_int", "is_const_int", "rewrite", "walk_loads"]

_BINARY = tuple(
    getattr(prim.expr, name)
    for name in ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max", "EQ", "NE",
                 "LT", "LE", "GT", "GE", "And", "Or", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "LShift", "RShift")
    if hasattr(prim.expr, name)
)
_LEAF = (tvm.ir.expr.Var, prim.expr.IntImm, prim.expr.FloatImm)


def rewrite(expr, var_map: dict, on_load: Callable | None = None):
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
        if isinstance(e, _BINARY):
            return type(e)(go(e.a), go(e.b))
        if isinstance(e, prim.expr.Not):
            return prim.expr.Not(go(e.a))
        if isinstance(e, prim.expr.BitwiseNot):
            return prim.expr.BitwiseNot(go(e.a))
        if isinstance(e, prim.expr.Cast):
            value = go(e.value)
            if {str(e.ty), str(value.ty)} == {"float16", "bfloat16"}:
                # CUDA converts between half and nv_bfloat16 by their bits (seen on the H200: 45.0 became 8.6e10);
                # through float32 the value is kept, as the interpreter keeps it.
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
            return tvm.ir.expr.Call(e.op, args, attrs=e.attrs, ret_ty=e.ty)
        if isinstance(e, (prim.expr.Shuffle,)):
            raise LoweringError(f"the expression {e} ({type(e).__name__}) is not supported by the CUDA lowering")
        return e  # StringImm and other leaves

    return go(expr)


def walk_loads(expr, visit: Callable) -> None:
    """Call `visit(load)` for every BufferLoad in `expr` (outermost first)."""

    def on_load(load, idx):
        visit(load)
        return load

    rewrite(expr, {}, on_load)


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
    """The And of conditions, where None (no condition) and True are skipped: None when nothing is left. Python
    bools fold (one False makes False), so the same code serves int and IR coordinates."""
    out = None
    for c in conds:
        if c is None or c is True:
            continue
        if c is False:
            return False
        out = c if out is None else tirx.And(out, c)
    return out

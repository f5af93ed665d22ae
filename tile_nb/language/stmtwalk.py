"""Walking elaborated TIR (the passes the front end runs after elaboration, and the lowering): the
statements under a statement, the expressions a statement itself holds, and the sub-expressions of an
expression. Imports TVM: import it lazily from modules the package loads at import time."""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import prim
from tvm.tirx.tile_primitive import TilePrimitiveCall

from .reducers import REDUCER_OPS

__all__ = ["LEAF", "subexprs", "walk_expr", "stmt_exprs", "stmt_children", "iter_stmts", "atomic_op",
           "atomic_element"]

LEAF = (tvm.ir.expr.Var, prim.expr.IntImm, prim.expr.FloatImm)


def subexprs(e) -> list:
    """The expressions directly under `e` (a load's indices, a call's arguments, an operator's operands)."""
    if isinstance(e, tvm.ir.TensorLoad):
        return list(e.indices)
    if isinstance(e, LEAF) or not isinstance(e, tvm.ir.Expr):
        return []
    if isinstance(e, tvm.ir.expr.Call):
        return list(e.args)
    if isinstance(e, prim.expr.Select):
        return [e.condition, e.true_value, e.false_value]
    if isinstance(e, prim.expr.Let):
        return [e.value, e.body]
    if isinstance(e, prim.expr.Ramp):
        return [e.base, e.stride]
    if isinstance(e, (prim.expr.Cast, prim.expr.Broadcast)):
        return [e.value]
    if hasattr(e, "b"):
        return [e.a, e.b]
    if hasattr(e, "a"):  # Not, BitwiseNot
        return [e.a]
    return []


def walk_expr(e, fn) -> None:
    """`fn` on `e` and on every expression under it, outermost first."""
    fn(e)
    for x in subexprs(e):
        walk_expr(x, fn)


def stmt_exprs(s) -> list:
    """The expressions a statement itself holds (not those of the statements under it)."""
    if isinstance(s, tirx.BufferStore):
        return [s.value, *s.indices]
    if isinstance(s, (tirx.Evaluate, tirx.Bind)):
        return [s.value]
    if isinstance(s, tirx.For):
        return [s.min, s.extent]
    if isinstance(s, (tirx.IfThenElse, tirx.While)):
        return [s.condition]
    if isinstance(s, tirx.AttrStmt):
        return [s.value] if isinstance(s.value, tvm.ir.Expr) else []
    if isinstance(s, TilePrimitiveCall):
        out = []
        for a in s.args:
            if isinstance(a, tvm.ir.expr.TensorRegion):
                out += [x for r in a.region for x in (r.min, r.extent)]
            elif isinstance(a, tvm.ir.Expr):
                out.append(a)
        return out
    return []


def stmt_children(s) -> list:
    """The statements directly under `s`."""
    if isinstance(s, tirx.SeqStmt):
        return list(s.seq)
    if isinstance(s, tirx.IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    body = getattr(s, "body", None)
    return [body] if isinstance(body, tirx.Stmt) else []


def iter_stmts(s):
    """`s` and every statement under it, in program order."""
    yield s
    for c in stmt_children(s):
        yield from iter_stmts(c)


ATOMIC_OPS = {call: op for op, call in REDUCER_OPS.items()}  # the extern call -> what it does


def atomic_op(value) -> str | None:
    """"sum", "max" or "min" for an atomic update of one element (`atomicAdd(&buf[...], v)`: `T.atomic_add`
    and a reducer's updates), else None."""
    if getattr(getattr(value, "op", None), "name", "") != "tirx.call_extern" or len(value.args) < 2:
        return None
    return ATOMIC_OPS.get(str(getattr(value.args[0], "value", "")))


def atomic_element(value):
    """The element an atomic update of one element (atomic_op) combines into, else None."""
    if atomic_op(value) is None:
        return None
    address = value.args[1]
    is_address_of = getattr(getattr(address, "op", None), "name", "") == "tirx.address_of"
    return address.args[0] if is_address_of else address

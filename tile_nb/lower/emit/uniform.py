"""Masks that are false for a whole `T.Parallel` nest: tested once per block instead of once per element.

FlashAttention builds its mask element by element (`scores[i, j] = T.if_then_else(k * bN + j > bx * bM + i,
-inf, 0)`), yet on every KV block but the diagonal one (and the ragged last one) the condition is false for
every (i, j). `never_true(cond, domains)` gives a condition on the variables outside the nest (k, bx, a
T.dynamic S) that implies `cond` is false at every point of the nest: each integer comparison is bounded over
the loop variables' intervals with TVM's interval analysis (`tvm.sym.Analyzer.int_set`), and `and` / `or` /
`not` combine the bounds. loops.py then emits `if (never) { unmasked body } else { body }`: a branch every
thread of the CTA takes the same way.
"""
from __future__ import annotations

import tvm
import tvm.sym as sym
from tvm import tirx
from tvm.ir import prim

from ..exprs import walk_loads

__all__ = ["never_true", "split_masked_store"]

_COMPARISONS = {prim.expr.LT, prim.expr.LE, prim.expr.GT, prim.expr.GE}
_AND = (prim.expr.And, prim.expr.BitwiseAnd)
_OR = (prim.expr.Or, prim.expr.BitwiseOr)


def split_masked_store(body):
    """(cond, the store without its mask) for a body `buf[...] = if_then_else(cond, a, b)` (or `Select`),
    storing `b`; else None."""
    if not isinstance(body, tirx.BufferStore):
        return None
    value = body.value
    if isinstance(value, tvm.ir.expr.Call) and value.op.name == "prim.if_then_else":
        cond, _, otherwise = value.args
    elif isinstance(value, prim.expr.Select):
        cond, otherwise = value.condition, value.false_value
    else:
        return None
    return cond, tirx.BufferStore(body.buffer, otherwise, body.indices)


def never_true(cond, domains: dict, analyzer: sym.Analyzer | None = None):
    """A condition free of the variables in `domains` (var -> extent, iterated from 0) under which
    `cond` is false for all their values; None when the bounds say nothing (non-integer or
    memory-dependent comparisons)."""
    analyzer = analyzer or sym.Analyzer()
    intervals = {v: sym.IntervalSet(0, extent - 1) for v, extent in domains.items()}
    return _bound(cond, intervals, analyzer, want=False)


def _bound(cond, intervals, analyzer, want: bool):
    """A condition under which `cond` == `want` everywhere in `intervals`, or None."""
    if isinstance(cond, prim.expr.Not) or isinstance(cond, prim.expr.BitwiseNot) and str(cond.ty) == "bool":
        return _bound(cond.a, intervals, analyzer, not want)
    if isinstance(cond, _AND + _OR) and str(cond.ty) == "bool":  # `|` and `&` of the DSL are bitwise on bools
        a, b = (_bound(x, intervals, analyzer, want) for x in (cond.a, cond.b))
        # all-false of (x or y) needs both all-false; all-false of (x and y)
        # needs either (and dually for true)
        both = isinstance(cond, _OR) != want
        if both:
            return None if a is None or b is None else tirx.And(a, b)
        if a is None or b is None:
            return a if b is None else b
        return tirx.Or(a, b)
    if type(cond) not in _COMPARISONS or "int" not in str(cond.a.ty) or _reads_memory(cond):
        return None
    diff = analyzer.int_set(cond.a - cond.b, intervals)
    lo, hi = diff.min_value, diff.max_value
    if _unbounded(lo) or _unbounded(hi) or _mentions(lo, intervals) or _mentions(hi, intervals):
        return None
    # cond is `d OP 0` with d = a - b in [lo, hi]
    kind = type(cond)
    if want:  # true everywhere
        return {prim.expr.LT: hi < 0, prim.expr.LE: hi <= 0, prim.expr.GT: lo > 0, prim.expr.GE: lo >= 0}[
            kind
        ]
    return {prim.expr.LT: lo >= 0, prim.expr.LE: lo > 0, prim.expr.GT: hi <= 0, prim.expr.GE: hi < 0}[kind]


def _unbounded(e) -> bool:
    return isinstance(e, tvm.ir.expr.Var) and e.name in ("pos_inf", "neg_inf")


def _mentions(e, intervals) -> bool:
    return any(v.same_as(x) for v in tirx.analysis.undefined_vars(e) for x in intervals)


def _reads_memory(e) -> bool:
    loads = []
    walk_loads(e, loads.append)
    return bool(loads)

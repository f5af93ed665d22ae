"""Element accesses of shared memory and fragments that are out of bounds whatever the data (plan.make_plan).

`s[i]` in `for i in T.Parallel(128)` with `s` a fragment of shape [1] writes 127 elements past it: the
interpreter stops there with an OutOfBoundsError, and the GPU would write over the neighbouring buffers of the
shared pool (a fragment the lowering demotes to shared memory) or past a register array, silently. So the
lowering refuses such a kernel at the access's line, as the interpreter does at run time.

Only accesses whose range is known exactly are judged: the index a sum of distinct loop variables of
constant ranges, each times a constant, plus a constant, under no `if` or `while` inside those loops (a guard
may keep the index in bounds). Its extreme values are then reached, so the refusal is never a guess. Global
tensors are not judged: their shapes may be dynamic, and a store past them is the user's guard to write (the
interpreter checks it).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from ..errors import LoweringError
from ..exprs import const_int, walk_loads

__all__ = ["check_static_bounds"]

_LOCAL_SCOPES = ("shared", "shared.dyn", "local", "local.fragment", "local.var")


def check_static_bounds(func: tirx.PrimFunc, lines) -> None:
    """Raise a LoweringError at the first shared / fragment access that leaves its buffer on every run."""
    _visit(func.body, {}, lines)


def _visit(stmt, ranges: dict, lines) -> None:
    """Walk `stmt`; `ranges` maps each enclosing loop variable of constant range (not under an `if` inside
    that loop) to its (lowest, highest) value."""
    if isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            _visit(s, ranges, lines)
    elif isinstance(stmt, tirx.For):
        lo, extent = const_int(stmt.min), const_int(stmt.extent)
        if lo is None or extent is None or extent <= 0:
            _visit(stmt.body, {}, lines)  # it may run no iteration: nothing inside surely runs
        else:
            _visit(stmt.body, {**ranges, stmt.loop_var: (lo, lo + extent - 1)}, lines)
    elif isinstance(stmt, tirx.While):
        _visit(stmt.body, {}, lines)
    elif isinstance(stmt, tirx.IfThenElse):
        _check_loads(stmt.condition, stmt, ranges, lines)
        _visit(stmt.then_case, {}, lines)  # a guard may keep an index in bounds: judge nothing under it
        if stmt.else_case is not None:
            _visit(stmt.else_case, {}, lines)
    elif isinstance(stmt, tirx.BufferStore):
        _check(stmt.buffer, stmt.indices, stmt, ranges, lines)
        _check_loads(stmt.value, stmt, ranges, lines)
    elif isinstance(stmt, tirx.Evaluate):
        _check_loads(stmt.value, stmt, ranges, lines)
    elif hasattr(stmt, "body") and isinstance(stmt.body, tirx.Stmt):
        _visit(stmt.body, ranges, lines)


def _check_loads(expr, stmt, ranges, lines) -> None:
    if not ranges or not isinstance(expr, tvm.ir.Expr):
        return

    def visit(load):  # a BufferLoad is a tvm.ir.TensorLoad whose `.source` is the buffer
        _check(load.source, load.indices, stmt, ranges, lines)

    walk_loads(expr, visit)


def _check(buf, indices, stmt, ranges, lines) -> None:
    if not ranges or buf.scope() not in _LOCAL_SCOPES or len(indices) != len(buf.shape):
        return
    for axis, (index, dim) in enumerate(zip(indices, buf.shape, strict=True)):
        size, span = const_int(dim), _exact_range(index, ranges)
        if size is None or span is None or (span[0] >= 0 and span[1] < size):
            continue
        shown = ", ".join(str(i) for i in indices)
        shape = tuple(const_int(d) for d in buf.shape)
        reach = span[1] if span[1] >= size else span[0]
        raise lines.locate(
            LoweringError(
                f"{buf.name}[{shown}] is out of bounds: index {axis} ({index}) reaches {reach}, and "
                f"{buf.name} has shape {shape} (a {buf.scope()} buffer); the "
                f"GPU would touch memory past it. Make the buffer as large as the loop, or the loop as short "
                f"as the buffer"
            ),
            stmt,
        )


def _exact_range(index, ranges: dict) -> tuple[int, int] | None:
    """(lowest, highest) value of `index` over the loop ranges when both are reached (a sum of distinct loop
    variables times constants, plus a constant), else None."""
    terms: dict = {}
    constant = _linear(index, 1, ranges, terms)
    if constant is None:
        return None
    lo = hi = constant
    for var, coeff in terms.items():
        a, b = ranges[var][0] * coeff, ranges[var][1] * coeff
        lo, hi = lo + min(a, b), hi + max(a, b)
    return lo, hi


def _linear(expr, scale: int, ranges: dict, terms: dict) -> int | None:
    """Add scale * expr's loop-variable terms to `terms` (each variable once) and return its constant part;
    None where `expr` is not such a sum."""
    value = const_int(expr)
    if value is not None:
        return scale * value
    if isinstance(expr, tirx.Var):
        if expr not in ranges or expr in terms:
            return None
        terms[expr] = scale
        return 0
    if isinstance(expr, (tirx.Add, tirx.Sub)):
        left = _linear(expr.a, scale, ranges, terms)
        right = _linear(expr.b, scale if isinstance(expr, tirx.Add) else -scale, ranges, terms)
        return None if left is None or right is None else left + right
    if isinstance(expr, tirx.Mul):
        for const_side, other in ((expr.a, expr.b), (expr.b, expr.a)):
            factor = const_int(const_side)
            if factor is not None:
                return _linear(other, scale * factor, ranges, terms)
    return None

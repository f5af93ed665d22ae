"""The order of a reducer's uses (`T.alloc_reducer`, language/reducers.py), checked after each elaboration.

On the GPU an element of a reducer has a copy in every thread that holds it: `r[i] += v` adds into the
thread's own copy, and `T.finalize_reducer(r)` adds the copies up. The interpreter keeps one value per
element. The two give the same result when every copy starts at 0 and nothing reads the copies between the
updates and the finalize, so the uses that would make them differ are refused at their line:

- an update before the reducer is cleared (`T.clear(r)`, `T.fill(r, 0)`), or after a finalize with no new
  clear (every copy then holds the sum: adding the copies up again would count it once per copy);
- a fill with another value, or another write into the reducer (`T.copy` into it, ...), before updates;
- a read of the reducer (a load, or a tile operation reading it) between its updates and the finalize;
- a finalize of a reducer that is not being summed (never cleared, or finalized already).

Max and min reducers (op="max" / "min") only need a value before their updates and no reads before the
finalize: the max of a value and itself is the value, so copies that start from any fill, or from a finalized
result, agree with the interpreter.

A loop body is followed twice (the second pass sees what one iteration leaves for the next), and the states
after the two sides of an `if` are joined.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..errors import DSLError
from ..language.stmtwalk import atomic_element, iter_stmts, stmt_exprs, walk_expr

__all__ = ["check_reducers"]

UNSET, ZERO, PARTIAL, FINAL, OTHER = "not cleared", "cleared", "summing", "finalized", "written"
_SUMMING = frozenset({ZERO, PARTIAL})
_HINT = "T.clear(r); updates `r[i] += v` inside T.Parallel; T.finalize_reducer(r); then read r"


def check_reducers(body, reducers, filename: str | None, tile_op_lines=()) -> None:
    """Raise DSLError at the first use of a reducer in `body` (a PrimFunc body) out of the order above.
    `tile_op_lines`: the line of each tile operation of `body`, in program order."""
    if not reducers:
        return
    calls = [s for s in iter_stmts(body) if isinstance(s, TilePrimitiveCall)]
    lines = dict(zip(calls, tile_op_lines, strict=False))
    _Checker(dict(reducers), filename, lines).stmt(body, {r: frozenset({UNSET}) for r in reducers})


def _join(a: dict, b: dict) -> dict:
    return {r: a[r] | b[r] for r in a}


def _is_zero(value) -> bool:
    return isinstance(value, (tvm.ir.prim.expr.IntImm, tvm.ir.prim.expr.FloatImm)) and value.value == 0


class _Checker:
    def __init__(self, reducers: dict, filename: str | None, tile_op_lines: dict):
        self.reducers = reducers  # buffer -> "sum" / "max" / "min"
        self.filename = filename
        self.lines = tile_op_lines

    def error(self, message: str, stmt) -> DSLError:
        line = self.lines.get(stmt) or getattr(getattr(stmt, "span", None), "line", None)
        return DSLError(message, filename=self.filename, lineno=line, hint=_HINT)

    def stmt(self, s, states: dict) -> dict:
        if isinstance(s, tirx.SeqStmt):
            for child in s.seq:
                states = self.stmt(child, states)
            return states
        if isinstance(s, tirx.IfThenElse):
            self.reads(s, stmt_exprs(s), states)
            then = self.stmt(s.then_case, states)
            return _join(then, self.stmt(s.else_case, states) if s.else_case is not None else states)
        if isinstance(s, (tirx.For, tirx.While)):
            self.reads(s, stmt_exprs(s), states)
            once = self.stmt(s.body, states)
            return _join(states, self.stmt(s.body, _join(states, once)))
        if isinstance(s, tirx.AllocBuffer) and s.buffer in self.reducers:
            return {**states, s.buffer: frozenset({UNSET})}
        if isinstance(s, TilePrimitiveCall):
            return self.tile_op(s, states)
        if isinstance(s, tirx.Evaluate):
            element = atomic_element(s.value)
            if element is not None and element.source in self.reducers:
                return self.update(s, element.source, states)
        self.reads(s, stmt_exprs(s), states)
        if isinstance(s, tirx.BufferStore) and s.buffer in self.reducers:
            states = {**states, s.buffer: frozenset({OTHER})}
        body = getattr(s, "body", None)
        return self.stmt(body, states) if isinstance(body, tirx.Stmt) else states

    def allowed(self, r) -> frozenset:
        """The states an update or a finalize of `r` may start from."""
        return _SUMMING if self.reducers[r] == "sum" else frozenset({ZERO, PARTIAL, FINAL, OTHER})

    def update(self, s, r, states: dict) -> dict:
        """`r[i] += v` (an atomic add into the element; max and min alike)."""
        self.reads(s, s.value.args[2:], states)
        if not states[r] <= self.allowed(r):
            before = sorted(states[r] - self.allowed(r))
            why = {UNSET: "clear it first", FINAL: "clear it again after T.finalize_reducer (every copy "
                   "holds the sum: adding them up again would count it once per copy)",
                   OTHER: "it starts from 0: write other values after T.finalize_reducer, not before"}
            raise self.error(f"{r.name} is updated here while it may be {' or '.join(before)}: "
                             f"{why[before[0]]}", s)
        return {**states, r: frozenset({PARTIAL})}

    def tile_op(self, call, states: dict) -> dict:
        self.reads(call, stmt_exprs(call), states)
        regions = [a for a in call.args if isinstance(a, tvm.ir.expr.TensorRegion)]
        name = call.op.name.rsplit(".", 1)[-1]
        for k, region in enumerate(regions):
            r = region.source
            if r not in self.reducers:
                continue
            if name == "finalize_reducer":
                if not states[r] <= self.allowed(r):
                    before = " or ".join(sorted(states[r] - self.allowed(r)))
                    raise self.error(f"T.finalize_reducer({r.name}) here, while {r.name} may be {before}: a "
                                     "finalize adds up the copies of a cleared reducer's sums, once", call)
                states = {**states, r: frozenset({FINAL})}
            elif PARTIAL in states[r]:
                raise self.error(f"{r.name} is used by this tile operation while it holds partial sums: on "
                                 f"the GPU each copy has only its own thread's part until "
                                 f"T.finalize_reducer({r.name})", call)
            elif k == 0 and name == "fill":
                if self.reducers[r] == "sum" and not _is_zero(call.args[1]):
                    value = getattr(call.args[1], "value", call.args[1])
                    raise self.error(f"{r.name} is a reducer: fill it with 0 (every copy of an element "
                                     f"starts from the value the fill writes, and T.finalize_reducer adds "
                                     f"the copies up); got {value}", call)
                states = {**states, r: frozenset({ZERO})}
            elif k == 0:  # the destination
                states = {**states, r: frozenset({OTHER})}
        return states

    def reads(self, stmt, exprs, states: dict) -> None:
        def visit(e):
            if isinstance(e, tvm.ir.TensorLoad) and e.source in self.reducers and PARTIAL in states[e.source]:
                raise self.error(f"{e.source.name} is read here while it holds partial sums: on the GPU each "
                                 f"copy has only its own thread's part until "
                                 f"T.finalize_reducer({e.source.name})", stmt)

        for e in exprs:
            walk_expr(e, visit)

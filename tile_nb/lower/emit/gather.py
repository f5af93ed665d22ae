"""A gather loop issued ahead by a pipelined loop (analysis/schedule.py `Gather`: `T.im2col`'s form,
`col[i, j] = T.if_then_else(inside, img[...], 0)` over a whole shared tile) as cp.async.

The tile's last dim is cut into groups of v elements (16 bytes, else 8, else 4) that one cp.async moves when,
for j = v * g + t (0 <= t < v), the source's last index is its value at t = 0 plus t and starts on a multiple
of v, its other indices and the condition do not depend on t (`_Steps`: `im2col` over C channels, C a multiple
of v), and the tensor is contiguous and aligned (copy.py's checks). A group whose condition fails reads
nothing and writes zeros (source size 0), as the elementwise form stores 0. Where no v is proved, the loop's
elements are loaded and stored one by one into the stage (a synchronous gather: the pipeline's barrier still
orders it)."""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

from ..analysis.layout import tirx_bits
from ..analysis.schedule import Gather
from ..exprs import rewrite
from . import intrin
from .copy import tensor_vectors_ok
from .threads import distribute

__all__ = ["issue_async_gather"]


def issue_async_gather(em, gather: Gather) -> None:
    """Issue one iteration's gather into its stage (the pipeline binds the loop variable and the stage)."""
    v = _vector_elems(em, gather)
    extents = list(gather.extents)
    if v == 0:
        def element(idx):
            with em.bound("var_map", dict(zip(gather.loop_vars, idx, strict=True))):
                em.store(gather.dst, list(idx), em.expr(gather.store.value))

        distribute(em, extents, element)
        return
    nbytes = v * tirx_bits(gather.dst.dtype) // 8
    sync = not em.caps.cp_async

    def group(idx):
        idx = list(idx[:-1]) + [idx[-1] * v]
        with em.bound("var_map", dict(zip(gather.loop_vars, idx, strict=True))):
            sidx = [em.expr(i) for i in gather.load.indices]
            dptr = intrin.address_of(em.view(gather.dst), [em.shared_offset(gather.dst, idx)])
            if gather.cond is None:
                gptr = em.global_pointer(gather.src, sidx)
                T.evaluate(intrin.cp_async(dptr, gptr, nbytes, nbytes, sync=sync))
                return
            cond = em.expr(gather.cond)
            safe = [tirx.Select(cond, i, tirx.const(0, "int32")) for i in sidx]
            size = tirx.Select(cond, tirx.const(nbytes, "int32"), tirx.const(0, "int32"))
            T.evaluate(intrin.cp_async(dptr, em.global_pointer(gather.src, safe), nbytes, size, sync=sync))

    distribute(em, extents[:-1] + [extents[-1] // v], group)


def _vector_elems(em, gather: Gather) -> int:
    """The widest group (elements) that one cp.async may move (module docstring), or 0."""
    bits = tirx_bits(gather.dst.dtype)
    for nbytes in (16, 8, 4):
        v = nbytes * 8 // bits
        if v < 2 or gather.extents[-1] % v or not tensor_vectors_ok(em, gather.src, v):
            continue
        steps = _Steps(gather, v)
        *outer, last = gather.load.indices
        if (all(steps.of(i) == CONST for i in outer) and steps.of(last) == UNIT and steps.aligned(last)
                and (gather.cond is None or steps.of(gather.cond) == CONST)):
            return v
    return 0


CONST, UNIT = "const", "unit"  # how an expression moves from a group's first element to its t-th: not, by t


class _Steps:
    """How expressions of the gather move across one group of v elements, j = v * g + t: CONST (the same for
    every t), UNIT (the first element's value plus t), or None (unknown). Floor division and modulo by a
    multiple of v keep a UNIT operand whose first value is a multiple of v inside one block, so they give
    CONST and UNIT; a comparison of a UNIT difference starting on a multiple of v holds for all of the group
    or none."""

    def __init__(self, gather: Gather, v: int):
        self.j, self.v = gather.loop_vars[-1], v
        self.first = {self.j: tirx.Var("g", "int32") * v}  # the group's first element
        self.analyzer = tvm.sym.Analyzer()

    def aligned(self, e) -> bool:
        """Whether e's value at a group's first element is a multiple of v."""
        m = self.analyzer.modular_set(rewrite(e, self.first))
        return int(m.coeff) % self.v == 0 and int(m.base) % self.v == 0

    def of(self, e):
        if isinstance(e, tvm.ir.expr.Var):
            return UNIT if e.same_as(self.j) else CONST
        if isinstance(e, (tirx.IntImm, tirx.FloatImm)):
            return CONST
        if isinstance(e, tirx.Cast):
            return self.of(e.value) if self.of(e.value) == CONST else None
        if isinstance(e, (tirx.Add, tirx.Sub)):
            a, b = self.of(e.a), self.of(e.b)
            if CONST == a == b:
                return CONST
            return UNIT if (a, b) == (UNIT, CONST) or (isinstance(e, tirx.Add) and (a, b) == (CONST, UNIT)) \
                else None
        if isinstance(e, tirx.Mul):
            a, b = self.of(e.a), self.of(e.b)
            return CONST if CONST == a == b else None
        if isinstance(e, (tirx.FloorDiv, tirx.FloorMod)):
            a, b = self.of(e.a), self.of(e.b)
            if CONST == a == b:
                return CONST
            if a == UNIT and isinstance(e.b, tirx.IntImm) and int(e.b) % self.v == 0 and self.aligned(e.a):
                return CONST if isinstance(e, tirx.FloorDiv) else UNIT
            return None
        if isinstance(e, (tirx.LT, tirx.GE)) and self.of(e.a - e.b) == UNIT and self.aligned(e.a - e.b):
            return CONST  # a - b < 0 for every element of the group or for none
        if isinstance(e, tvm.ir.TensorLoad):
            return CONST if all(self.of(i) == CONST for i in e.indices) else None
        parts = [getattr(e, f) for f in ("a", "b", "condition", "true_value", "false_value") if hasattr(e, f)]
        if isinstance(e, tvm.ir.expr.Call):
            parts = list(e.args)
        if parts and all(isinstance(x, tvm.ir.Expr) for x in parts):
            return CONST if all(self.of(x) == CONST for x in parts) else None
        return None

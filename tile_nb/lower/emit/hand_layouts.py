"""Hand layouts of kernel parameters addressed in the CUDA kernel itself
(`T.annotate_layout({dQ: T.Layout(dQ.shape, fn)})`, analysis/global_layouts.py).

Element `dQ[idx]` lives at the row-major position of `fn(*idx)` over the outputs' ranges. The emitter
addresses such a tensor through a flat view at that position (`Emitter.global_ref`), so the call needs no
permuted copies around the launch (two passes over the tensor and the host time of two indexing ops: 47 us a
call for tilelang's FlashAttention backward at 1 x 16 x 512 x 64, where its kernel takes 26). The position is
exact for one element at a time; so after emission `unsupported_use` checks every use of the tensor's memory:
scalar loads and stores outside vectorized loops, and the address of one element given to a scalar atomic.
Anything else (a vector or cp.async copy of several elements, a TMA descriptor, a raw pointer) makes the
driver emit the kernel again with the copies around the launch (lowering.py), and the plan says why.

Only tensors whose dims are all static get this (the extents are computed at compile time); a `T.dynamic` dim
keeps the copies. The interpreter always permutes around the call (runtime/layouts.py): both leave the same
bytes in the tensor.
"""
from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.ir import prim

from ..analysis.global_layouts import evaluate

__all__ = ["LaidOut", "laid_out", "linear_index", "unsupported_use"]

# CUDA atomics on one element: `name(&view[position], value)` with a scalar value is exact
_SCALAR_ATOMICS = frozenset({"atomicAdd", "atomicMax", "atomicMin", "atomicExch", "atomicAnd", "atomicOr",
                             "atomicXor"})


class LaidOut:
    """The flat view an annotated parameter is addressed through, its layout and the outputs' extents."""

    def __init__(self, param, view, layout, extents: tuple, wide: bool = False):
        self.param, self.view, self.layout, self.extents = param, view, layout, extents
        self.wide = wide  # 2^31 elements or more: positions computed in int64


def laid_out(param, layout) -> tuple | None:
    """The extents of `layout`'s outputs when `param` (a tensor parameter) can be addressed in the kernel:
    static dims, no declared strides, and outputs that span exactly its elements (a layout that does not
    permute them is refused at the call, as on the interpreter). None otherwise."""
    if list(param.strides) or not all(isinstance(n, tirx.IntImm) for n in param.shape):
        return None
    shape = tuple(int(n) for n in param.shape)
    if math.prod(shape) == 0:
        return None
    extents = layout.extents(shape)
    if extents is None or math.prod(extents) != math.prod(shape):
        return None
    return extents


def _op(plain, tir):
    """A layout operator on positions: `plain` on two Python ints (constant parts of the tree, folded as
    Python's floor / truncating arithmetic), `tir` once an index expression is involved."""
    return lambda a, b: plain(a, b) if isinstance(a, int) and isinstance(b, int) else tir(a, b)


_TIR_OPS = {
    "+": _op(lambda a, b: a + b, lambda a, b: a + b),
    "-": _op(lambda a, b: a - b, lambda a, b: a - b),
    "*": _op(lambda a, b: a * b, lambda a, b: a * b),
    "//": _op(lambda a, b: a // b, tirx.floordiv),
    "%": _op(lambda a, b: a % b, tirx.floormod),
    "min": _op(min, tirx.min),
    "max": _op(max, tirx.max),
    "div": _op(lambda a, b: int(a / b), tirx.truncdiv),
    "mod": _op(lambda a, b: int(math.fmod(a, b)), tirx.truncmod),
}


def linear_index(entry: LaidOut, indices: list):
    """The position of element `indices` in the tensor's memory under its layout."""
    shape = tuple(int(n) for n in entry.param.shape)
    position = 0
    for tree, extent in zip(entry.layout.outputs, entry.extents, strict=True):
        position = position * extent + evaluate(tree, list(indices), shape, _TIR_OPS.__getitem__)
    return position


# -- checking every use after emission ----------------------------------------------------------------------

_BINARY = tuple(getattr(prim.expr, n) for n in (
    "Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max", "EQ", "NE", "LT", "LE", "GT",
    "GE", "And", "Or", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "LShift", "RShift") if hasattr(prim.expr, n))
_LEAVES = (prim.expr.IntImm, prim.expr.FloatImm)


def _lanes(e) -> int:
    return int(getattr(e.ty, "lanes", 1) or 1)


class _Uses:
    """Walks a lowered body and records the first use of an annotated tensor's memory that its in-kernel
    addressing would not make exact."""

    def __init__(self, entries: list[LaidOut]):
        self.datas = [(e.param.data, e) for e in entries]  # each parameter's pointer
        self.problem: str | None = None

    def _owner(self, buffer):
        """The entry whose memory `buffer` is (the parameter, its flat view, or another view on its pointer),
        else None. The flat view is matched as a buffer: TVM 0.27 gives a declared view a `data` that is a
        call over the parameter's pointer, made anew on each read, so it is never `same_as` itself."""
        return next((e for data, e in self.datas if buffer.data.same_as(data) or buffer.same_as(e.view)
                     or buffer.same_as(e.param)), None)

    def fail(self, what: str) -> None:
        if self.problem is None:
            self.problem = what

    def stmt(self, s, vectorized: bool) -> None:
        if self.problem is not None:
            return
        if isinstance(s, tirx.SeqStmt):
            for child in s.seq:
                self.stmt(child, vectorized)
        elif isinstance(s, tirx.BufferStore):
            self.access(s.buffer, s.indices, _lanes(s.value), vectorized, "a store")
            self.expr(s.value, vectorized)
        elif isinstance(s, tirx.Evaluate):
            self.expr(s.value, vectorized)
        elif isinstance(s, tirx.For):
            self.expr(s.min, vectorized)
            self.expr(s.extent, vectorized)
            self.stmt(s.body, vectorized or s.kind == tirx.ForKind.VECTORIZED)
        elif isinstance(s, tirx.IfThenElse):
            self.expr(s.condition, vectorized)
            self.stmt(s.then_case, vectorized)
            if s.else_case is not None:
                self.stmt(s.else_case, vectorized)
        elif isinstance(s, tirx.While):
            self.expr(s.condition, vectorized)
            self.stmt(s.body, vectorized)
        elif isinstance(s, tirx.AttrStmt):
            if isinstance(s.value, tvm.ir.Expr):
                self.expr(s.value, vectorized)
            self.stmt(s.body, vectorized)
        elif isinstance(s, tirx.Bind):
            self.expr(s.value, vectorized)
        elif isinstance(s, (tirx.DeclBuffer, tirx.AllocBuffer)):
            owner = self._owner(s.buffer)
            if owner is not None and not s.buffer.same_as(owner.view):
                self.fail(f"another view of its memory ({s.buffer.name})")
        else:
            self.fail(f"a statement the check does not know ({type(s).__name__})")

    def access(self, buffer, indices, lanes: int, vectorized: bool, what: str) -> None:
        owner = self._owner(buffer)
        if owner is not None:
            if not buffer.same_as(owner.view):
                self.fail(f"{what} that does not go through the layout")
            elif lanes > 1 or any(_lanes(i) > 1 for i in indices):
                self.fail(f"{what} of {max([lanes] + [_lanes(i) for i in indices])} elements at once")
            elif vectorized:
                self.fail(f"{what} in a vectorized loop")
        for i in indices:
            self.expr(i, vectorized)

    def expr(self, e, vectorized: bool) -> None:
        if self.problem is not None or not isinstance(e, tvm.ir.Expr) or isinstance(e, _LEAVES):
            return
        if isinstance(e, tvm.ir.TensorLoad):
            self.access(e.source, e.indices, _lanes(e), vectorized, "a load")
        elif isinstance(e, tvm.ir.expr.Var):
            if any(e.same_as(data) for data, _ in self.datas):
                self.fail("its pointer, used directly")
        elif isinstance(e, tvm.ir.expr.Call):
            self.call(e, vectorized)
        elif isinstance(e, _BINARY):
            self.expr(e.a, vectorized)
            self.expr(e.b, vectorized)
        elif isinstance(e, (prim.expr.Not, prim.expr.BitwiseNot)):
            self.expr(e.a, vectorized)
        elif isinstance(e, prim.expr.Cast):
            self.expr(e.value, vectorized)
        elif isinstance(e, prim.expr.Select):
            for x in (e.condition, e.true_value, e.false_value):
                self.expr(x, vectorized)
        elif isinstance(e, prim.expr.Let):
            self.expr(e.value, vectorized)
            self.expr(e.body, vectorized)
        elif isinstance(e, prim.expr.Ramp):
            self.expr(e.base, vectorized)
            self.expr(e.stride, vectorized)
        elif isinstance(e, prim.expr.Broadcast):
            self.expr(e.value, vectorized)
        elif not isinstance(e, tvm.ir.expr.StringImm):
            self.fail(f"an expression the check does not know ({type(e).__name__})")

    def call(self, e, vectorized: bool) -> None:
        name = getattr(e.op, "name", "")
        args = list(e.args)
        named = name in ("tirx.call_extern", "tirx.cuda.func_call") and args  # the callee's name first
        callee = str(getattr(args[0], "value", "")) if named else name
        if callee in _SCALAR_ATOMICS and len(args) == 3 and _lanes(args[2]) == 1 \
                and getattr(getattr(args[1], "op", None), "name", "") == "tirx.address_of" \
                and isinstance(args[1].args[0], tvm.ir.TensorLoad):
            target = args[1].args[0]  # `atomicAdd(&view[position], v)`: one element
            self.access(target.source, target.indices, 1, vectorized, "an atomic")
            self.expr(args[2], vectorized)
            return
        for a in args:
            pointed = a.args[0] if getattr(getattr(a, "op", None), "name", "") == "tirx.address_of" else None
            if isinstance(pointed, tvm.ir.TensorLoad) and self._owner(pointed.source) is not None:
                self.fail(f"the address of an element given to {callee}")
                return
            self.expr(a, vectorized)


def unsupported_use(body, entries: list[LaidOut]) -> str | None:
    """The first use of an annotated tensor in the lowered `body` that in-kernel addressing would not make
    exact, as words for the plan's note; None when every use is a scalar access or a scalar atomic."""
    uses = _Uses(entries)
    uses.stmt(body, False)
    return uses.problem

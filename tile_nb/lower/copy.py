"""`T.tile.copy(dst, src)` for every scope pair.

- global -> shared: `cp.async` in 16-byte vectors when the shapes allow (else 8 or 4 bytes, else plain loads);
  elements outside the global buffer are zero-filled by passing a source size of 0 (the address is clamped to
  a valid one). Inside `T.Pipelined` the pipeline issues these copies and manages commit/wait itself; elsewhere
  the copy is followed by commit + wait_group 0.
- register fragment <-> global/shared: each thread moves the elements it owns (unrolled over registers).
- any other pair: the element space is split over the threads; global accesses out of range are skipped
  (stores) or read as 0 (loads). `local` buffers are per-thread: copied by each thread alone.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

from . import intrin
from .loops import distribute
from .lowering import LoweringError, dtype_bits, region_of, register_tile_op, scope_of

__all__ = ["can_async", "issue_async_copy", "lower_copy"]


def _nonunit(extents):
    return [i for i, (_, e) in enumerate(extents) if not (isinstance(e, int) and e == 1)
            and not (isinstance(e, tvm.ir.prim.expr.IntImm) and int(e) == 1)]


class Operand:
    """One side of a copy: a buffer, the region's mins and which dims carry the iteration space."""

    def __init__(self, lw, region):
        self.lw = lw
        self.buf, rng = region_of(region)
        self.mins = [lw.expr(m) for m, _ in rng]
        self.extents = [e for _, e in rng]
        self.dims = _nonunit(rng)
        self.scope = scope_of(self.buf)

    def indices(self, it):
        idx = list(self.mins)
        for d, i in zip(self.dims, it):
            idx[d] = idx[d] + i
        return idx

    def in_bounds(self, idx):
        """Condition that idx lies inside a global buffer (None when provably true): both ends of every dim, so a
        region starting before the tensor (`X[bx * 128 - 1]`) reads zeros there, as docs/IR.md says."""
        conds = []
        for d, i in enumerate(idx):
            for c in (i >= 0, i < self.buf.shape[d]):
                if not self.lw.prove(c):
                    conds.append(c)
        if not conds:
            return None
        out = conds[0]
        for c in conds[1:]:
            out = tirx.And(out, c)
        return out


def _space(dst, src):
    de = [int(dst.extents[d]) for d in dst.dims]
    se = [int(src.extents[d]) for d in src.dims]
    if de != se:
        raise LoweringError(f"T.copy: region extents differ after dropping unit dims: "
                            f"{dst.buf.name}{de} <- {src.buf.name}{se}")
    return de


def global_strides(buf) -> list:
    """Element strides of a global buffer: its declared strides (T.StridedTensor), else row-major from its shape."""
    if list(buf.strides):
        return list(buf.strides)
    strides, acc = [], tirx.const(1, "int32")
    for d in reversed(list(buf.shape)):
        strides.append(acc)
        acc = acc * d
    return strides[::-1]


def _vector_elems(lw, dst, src, space) -> int:
    """Widest cp.async vector (elements) legal for this global->shared copy, or 0.

    A vector of v elements needs v contiguous source elements (the last dim's stride is 1) at a v-aligned
    address: the tensor's data pointer 16-byte aligned (checked at each call, `tile_nb.unaligned`), every other
    stride and the start of the region multiples of v, and whole vectors on both sides.
    """
    if not space or dst.dims[-1] != len(dst.buf.shape) - 1 or src.dims[-1] != len(src.buf.shape) - 1:
        return 0
    if not lw.aligned(src.buf):
        return 0
    strides = global_strides(src.buf)
    if not lw.prove(strides[-1] == 1):
        return 0
    bits = dtype_bits(src.buf.dtype)
    if bits != dtype_bits(dst.buf.dtype) or str(src.buf.dtype) != str(dst.buf.dtype):
        return 0
    for nbytes in (16, 8, 4):
        v = nbytes * 8 // bits
        if v < 1:
            continue
        ok = space[-1] % v == 0 and int(dst.buf.shape[-1]) % v == 0
        ok = ok and all(lw.prove(tirx.floormod(st, v) == 0) for st in strides[:-1])
        ok = ok and lw.prove(tirx.floormod(src.buf.shape[-1], v) == 0)  # a vector is wholly in or out of range
        ok = ok and lw.prove(tirx.floormod(src.mins[-1], v) == 0) and lw.prove(
            tirx.floormod(dst.mins[-1], v) == 0)
        if ok:
            return v
    return 0


def can_async(lw, call) -> bool:
    dst, src = Operand(lw, call.args[0]), Operand(lw, call.args[1])
    return _vector_elems(lw, dst, src, _space(dst, src)) > 0


def issue_async_copy(lw, call):
    """Issue the cp.async instructions of a global->shared copy (no commit); plain loads if not vectorizable."""
    dst, src = Operand(lw, call.args[0]), Operand(lw, call.args[1])
    space = _space(dst, src)
    v = _vector_elems(lw, dst, src, space)
    if v == 0:
        _copy_elementwise(lw, dst, src, space)
        return
    nbytes = v * dtype_bits(src.buf.dtype) // 8
    vspace = space[:-1] + [space[-1] // v]

    def body(it):
        it = list(it[:-1]) + [it[-1] * v]
        sidx, didx = src.indices(it), dst.indices(it)
        cond = src.in_bounds(sidx)
        dptr = _address(lw, dst.buf, didx)
        if cond is None:
            T.evaluate(intrin.cp_async(dptr, intrin.address_of(src.buf, sidx), nbytes, nbytes))
        else:
            safe = [tirx.Select(cond, i, tirx.const(0, "int32")) for i in sidx]
            size = tirx.Select(cond, tirx.const(nbytes, "int32"), tirx.const(0, "int32"))
            T.evaluate(intrin.cp_async(dptr, intrin.address_of(src.buf, safe), nbytes, size))

    distribute(lw, vspace, body)


def _address(lw, buf, idx):
    tile = lw.shared[buf]
    return intrin.address_of(tile.view, [tile.offset(idx, lw.stage.get(buf))])


def _copy_elementwise(lw, dst, src, space):
    def body(it):
        sidx, didx = src.indices(it), dst.indices(it)
        value = lw.load(src.buf, sidx)
        if src.scope == "global":
            cond = src.in_bounds(sidx)
            if cond is not None:
                value = tirx.Select(cond, value, tirx.const(0, str(src.buf.dtype)))
        value = _cast(value, dst.buf.dtype)
        cond = dst.in_bounds(didx) if dst.scope == "global" else None
        if cond is None:
            lw.store(dst.buf, didx, value)
        else:
            with T.If(cond), T.Then():
                lw.store(dst.buf, didx, value)

    if dst.buf in lw.frags or src.buf in lw.frags:
        _copy_fragment(lw, dst, src, space, body)
    elif dst.scope in ("local", "local.var") or src.scope in ("local", "local.var") or lw.in_thread_code:
        _serial(space, body)
    else:
        distribute(lw, space, body)


def _serial(space, body):
    def rec(k, it):
        if k == len(space):
            body(it)
            return
        with T.serial(0, space[k]) as i:
            rec(k + 1, it + [i])

    rec(0, [])


def _copy_fragment(lw, dst, src, space, body):
    frag = dst.buf if dst.buf in lw.frags else src.buf
    lay = lw.frags[frag]
    if space != [lay.bm, lay.bn]:
        raise LoweringError(f"T.copy of register fragment {frag.name}: the region must be the whole "
                            f"[{lay.bm}, {lay.bn}] fragment, got {space}")
    with T.unroll(0, lay.regs) as r:
        row, col = lay.element(lw.tx, r)
        saved = dict(lw.frag_reg)
        op = dst if frag.same_as(dst.buf) else src
        lw.frag_reg[frag] = (op.indices([row, col]), r)
        body([row, col])
        lw.frag_reg = saved


def _cast(value, dtype):
    dtype = str(dtype)
    if str(value.ty) == dtype:
        return value
    return tirx.Cast(dtype, value)


@register_tile_op("copy")
def lower_copy(lw, call):
    dst, src = Operand(lw, call.args[0]), Operand(lw, call.args[1])
    if dst.buf in lw.shared and src.scope == "global" and not lw.in_thread_code:
        issue_async_copy(lw, call)
        if can_async(lw, call):
            T.evaluate(intrin.cp_async_commit())
            lw.async_copies_landed(0)
        return
    _copy_elementwise(lw, dst, src, _space(dst, src))

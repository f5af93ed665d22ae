"""`T.tile.copy(dst, src)` for every scope pair.

- global -> shared: `cp.async` in 16-byte vectors when the shapes allow (else 8 or 4 bytes, else plain loads);
  elements outside the global buffer are zero-filled by passing a source size of 0 (the address is clamped to
  a valid one). Inside `T.Pipelined` the pipeline issues these copies and manages commit/wait itself;
  elsewhere the copy is followed by commit + wait_group 0.
- register fragment <-> global / shared: each thread moves the registers it holds (the fragment's layout,
  plan), a vector group of registers at a time (up to 16 bytes, converted between dtypes in registers) where
  the other side is contiguous and aligned, else element by element; rows and columns outside a global tensor
  read as 0 and are not written; only the first of a fragment's replicas writes.
- register fragment <-> register fragment (one layout, as inference makes it): register by register.
- any other pair: the element space is split over the threads; global accesses out of range are skipped
  (stores) or read as 0 (loads). `local` buffers are per-thread: copied by each thread alone.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

from ..analysis.layout import tirx_bits
from ..errors import LoweringError
from ..exprs import conjunction
from ..irwalk import region_of, scope_of
from . import intrin
from .threads import distribute, serial_nest

__all__ = ["Operand", "can_async", "global_strides", "issue_async_copy", "lower_copy", "tensor_vectors_ok"]


def _nonunit(extents):
    return [i for i, (_, e) in enumerate(extents) if not (isinstance(e, int) and e == 1)
            and not (isinstance(e, tvm.ir.prim.expr.IntImm) and int(e) == 1)]


class Operand:
    """One side of a copy: a buffer, the region's mins and which dims carry the iteration space."""

    def __init__(self, em, region):
        self.em = em
        self.buf, rng = region_of(region)
        self.mins = [em.expr(m) for m, _ in rng]
        self.extents = [e for _, e in rng]
        self.dims = _nonunit(rng)
        self.scope = scope_of(self.buf)

    def indices(self, it):
        idx = list(self.mins)
        for d, i in zip(self.dims, it, strict=True):
            idx[d] = idx[d] + i
        return idx

    def in_bounds(self, idx):
        """Condition that idx lies inside a global buffer (None when provably true): both ends of every dim,
        so a region starting before the tensor (`X[bx * 128 - 1]`) reads zeros there, as docs/IR.md says."""
        conds = []
        for d, i in enumerate(idx):
            for c in (i >= 0, i < self.buf.shape[d]):
                if not self.em.prove(c):
                    conds.append(self.em.fit_int32(c))
        return conjunction(*conds)


def _space(dst, src):
    de = [int(dst.extents[d]) for d in dst.dims]
    se = [int(src.extents[d]) for d in src.dims]
    if de != se:
        raise LoweringError(f"T.copy: region extents differ after dropping unit dims: "
                            f"{dst.buf.name}{de} <- {src.buf.name}{se}")
    return de


def global_strides(buf) -> list:
    """Element strides of a global buffer: its declared strides (T.StridedTensor),
    else row-major from its shape."""
    if list(buf.strides):
        return list(buf.strides)
    strides, acc = [], tirx.const(1, "int32")
    for d in reversed(list(buf.shape)):
        strides.append(acc)
        acc = acc * d
    return strides[::-1]


def tensor_vectors_ok(em, buf, v: int) -> bool:
    """Whether a global tensor can be read `v` elements at a time along its last dim, from any element whose
    last index is a multiple of v: its data pointer 16-byte aligned (checked at each call,
    `tile_nb.unaligned`), the last dim contiguous, every other stride a multiple of v."""
    strides = global_strides(buf)
    return (em.plan.aligned(buf) and em.prove(strides[-1] == 1)
            and all(em.prove(tirx.floormod(st, v) == 0) for st in strides[:-1]))


def _global_vector_ok(em, op: Operand, v: int) -> bool:
    """Whether `v` consecutive elements along the last dim of a global region can move as one aligned access:
    `tensor_vectors_ok`, the region's start a multiple of v, and the last dim a multiple of v (a vector is
    wholly inside or outside the tensor)."""
    return (tensor_vectors_ok(em, op.buf, v)
            and em.prove(tirx.floormod(op.buf.shape[-1], v) == 0)
            and em.prove(tirx.floormod(op.mins[-1], v) == 0))


def _vector_elems(em, dst, src, space) -> int:
    """Widest cp.async vector (elements) legal for this global->shared copy, or 0."""
    if not space or dst.dims[-1] != len(dst.buf.shape) - 1 or src.dims[-1] != len(src.buf.shape) - 1:
        return 0
    bits = tirx_bits(src.buf.dtype)
    if str(src.buf.dtype) != str(dst.buf.dtype):
        return 0
    for nbytes in (16, 8, 4):
        v = nbytes * 8 // bits
        if v < 1:
            continue
        ok = space[-1] % v == 0 and int(dst.buf.shape[-1]) % v == 0
        ok = ok and _global_vector_ok(em, src, v) and em.prove(tirx.floormod(dst.mins[-1], v) == 0)
        if ok:
            return v
    return 0


def can_async(em, call) -> bool:
    dst, src = Operand(em, call.args[0]), Operand(em, call.args[1])
    return _vector_elems(em, dst, src, _space(dst, src)) > 0


def issue_async_copy(em, call):
    """Issue the cp.async instructions of a global->shared copy (no commit);
    plain loads if not vectorizable."""
    dst, src = Operand(em, call.args[0]), Operand(em, call.args[1])
    space = _space(dst, src)
    v = _vector_elems(em, dst, src, space)
    if v == 0:
        _copy_elementwise(em, dst, src, space)
        return
    nbytes = v * tirx_bits(src.buf.dtype) // 8
    vspace = space[:-1] + [space[-1] // v]
    sync = not em.caps.cp_async  # sm_75: the same copy as a load and a store

    def body(it):
        it = list(it[:-1]) + [it[-1] * v]
        sidx, didx = src.indices(it), dst.indices(it)
        cond = src.in_bounds(sidx)
        dptr = intrin.address_of(em.view(dst.buf), [em.shared_offset(dst.buf, didx)])
        if cond is None:
            T.evaluate(intrin.cp_async(dptr, em.global_pointer(src.buf, sidx), nbytes, nbytes, sync=sync))
        else:
            safe = [tirx.Select(cond, i, tirx.const(0, "int32")) for i in sidx]
            size = tirx.Select(cond, tirx.const(nbytes, "int32"), tirx.const(0, "int32"))
            T.evaluate(intrin.cp_async(dptr, em.global_pointer(src.buf, safe), nbytes, size, sync=sync))

    distribute(em, vspace, body)


# ---- copies that involve a register fragment ---------------------------------------------------------------

def _memory_vector(em, frag: Operand, other: Operand, layout) -> int:
    """Registers moved per access between a register fragment and `other` (global or shared memory): the
    fragment's vector groups, narrowed to what `other` allows (16 bytes at most, aligned, contiguous)."""
    width = layout.vector()
    last_frag, last_other = len(frag.buf.shape) - 1, len(other.buf.shape) - 1
    if (
        width == 1
        or not frag.dims
        or frag.dims[-1] != last_frag
        or not other.dims
        or other.dims[-1] != last_other
    ):
        return 1
    bits = max(tirx_bits(other.buf.dtype), 8)
    while width > 1:
        ok = intrin.vector_bytes_ok(width, other.buf.dtype) and str(frag.buf.dtype) in intrin.C_TYPES \
            and width * bits <= 128
        if ok and other.scope == "global":
            ok = _global_vector_ok(em, other, width)
        elif ok and other.buf in em.plan.shared:
            tile = em.tile(other.buf)
            ok = tile.cols % width == 0 and em.prove(tirx.floormod(other.mins[-1], width) == 0) and (
                not (tile.swizzle or tile.panel) or bits >= 16)  # (a vector stays inside one swizzled chunk)
        elif ok:
            ok = False  # per-thread local arrays: element by element
        if ok:
            return width
        width //= 2
    return 1


def _register_pointer(em, buf, r):
    return intrin.address_of(em.registers[buf], [r])


def _memory_pointer(em, op: Operand, idx):
    if op.buf in em.plan.shared:
        return intrin.address_of(em.view(op.buf), [em.shared_offset(op.buf, idx)])
    return em.global_pointer(op.buf, idx)


def _copy_registers(em, dst: Operand, src: Operand, space):
    regs_side = dst if dst.buf in em.registers else src
    other = src if regs_side is dst else dst
    layout = em.plan.layout(regs_side.buf)
    # fragment dims the region does not cover whole (`acc_o[:valid_rows, :]`, or one row `acc_o[0:1, :]`)
    partial = [d for d, n in enumerate(layout.shape)
               if int(regs_side.extents[d]) != n or not em.prove(regs_side.mins[d] == 0)]
    if partial and (regs_side is dst or other.buf in em.registers):
        raise LoweringError(f"T.copy into part of register fragment {regs_side.buf.name} (or between two "
                            f"fragments): the region must be the whole fragment {list(layout.shape)}",
                            hint="copy the whole fragment, or stage it through a shared tile")
    if other.buf in em.registers:  # inference gives both one layout
        dst_regs, src_regs = em.registers[dst.buf], em.registers[src.buf]
        with T.unroll(0, layout.regs) as r:
            value = tirx.BufferLoad(src_regs, [r])
            T.buffer_store(dst_regs, _cast(value, dst_regs.dtype), [r])
        return
    tx = em.tx
    last = len(layout.shape) - 1
    # a vector group runs along the fragment's last dim: it stays whole only if that dim is copied whole
    width = 1 if last in partial else _memory_vector(em, regs_side, other, layout)
    loading = regs_side is dst
    regs = em.registers[regs_side.buf]
    with T.unroll(0, layout.regs // width) as g:
        # (index arithmetic near 2^31 must see its range: exprs.fit_int32)
        em.bind_range(g, layout.regs // width)
        r0 = g * width
        coords = layout.element(tx, r0)
        mins, extents = regs_side.mins, regs_side.extents
        # a register outside the region stores nothing; one inside goes to its place in the region
        in_region = [c for d in partial for c in (coords[d] >= mins[d], coords[d] < mins[d] + extents[d])
                     if not (c is True or (not isinstance(c, bool) and em.prove(c)))]
        oidx = other.indices([coords[d] - mins[d] if d in partial else coords[d] for d in regs_side.dims])
        inside = other.in_bounds(oidx) if other.scope == "global" else None
        valid = layout.valid(tx, r0)
        if loading:
            _load_group(em, regs, r0, width, other, oidx, conjunction(valid, inside), inside)
        else:
            guard = conjunction(valid, *in_region, inside, layout.replica_zero(tx))
            with _maybe_if(guard):
                if width > 1:
                    T.evaluate(intrin.vector_store(_memory_pointer(em, other, oidx), _register_pointer(
                        em, regs_side.buf, r0), width, regs.dtype, other.buf.dtype))
                else:
                    em.store(other.buf, oidx, _cast(tirx.BufferLoad(regs, [r0]), other.buf.dtype))


def _load_group(em, regs, r0, width, other, oidx, guard, inside):
    """Registers r0 .. r0 + width - 1 from memory at `oidx` (zeros outside a global tensor)."""
    dtype = str(regs.dtype)
    if width == 1:
        value = _cast(em.load(other.buf, oidx), dtype)
        if inside is not None:
            safe = [tirx.Select(inside, i, tirx.const(0, "int32")) for i in oidx]
            value = tirx.Select(inside, _cast(em.load(other.buf, safe), dtype), tirx.const(0, dtype))
        T.buffer_store(regs, value, [r0])
        return
    load = intrin.vector_load(intrin.address_of(regs, [r0]), _memory_pointer(em, other, oidx), width,
                              other.buf.dtype, dtype)
    if guard is None:
        T.evaluate(load)
        return
    with T.If(guard):
        with T.Then():
            T.evaluate(load)
        with T.Else():
            for e in range(width):
                T.buffer_store(regs, tirx.const(0, dtype), [r0 + e])


class _maybe_if:
    """`with T.If(cond), T.Then():` when there is a condition, nothing otherwise."""

    def __init__(self, cond):
        self.cond = cond
        self.frames = []

    def __enter__(self):
        if self.cond is not None:
            self.frames = [T.If(self.cond), T.Then()]
            for f in self.frames:
                f.__enter__()

    def __exit__(self, *exc):
        for f in reversed(self.frames):
            f.__exit__(*exc)


# ---- everything else: element by element -------------------------------------------------------------------

def _copy_elementwise(em, dst, src, space):
    def body(it):
        sidx, didx = src.indices(it), dst.indices(it)
        value = em.load(src.buf, sidx)
        if src.scope == "global":
            cond = src.in_bounds(sidx)
            if cond is not None:
                safe = [tirx.Select(cond, i, tirx.const(0, "int32")) for i in sidx]
                value = tirx.Select(cond, em.load(src.buf, safe), tirx.const(0, str(src.buf.dtype)))
        value = _cast(value, dst.buf.dtype)
        cond = dst.in_bounds(didx) if dst.scope == "global" else None
        with _maybe_if(cond):
            em.store(dst.buf, didx, value)

    if dst.scope in ("local", "local.var") or src.scope in ("local", "local.var") or em.scope.thread_code:
        serial_nest(space, body)
    else:
        distribute(em, space, body)


def _cast(value, dtype):
    dtype = str(dtype)
    if str(value.ty) == dtype:
        return value
    return tirx.Cast(dtype, value)


def lower_copy(em, call):
    dst, src = Operand(em, call.args[0]), Operand(em, call.args[1])
    if dst.buf in em.plan.shared and src.scope == "global" and not em.scope.thread_code:
        issue_async_copy(em, call)
        if can_async(em, call):
            em.commit_copies()
            em.async_copies_landed(0)
        return
    space = _space(dst, src)
    if dst.buf in em.registers or src.buf in em.registers:
        _copy_registers(em, dst, src, space)
        return
    _copy_elementwise(em, dst, src, space)

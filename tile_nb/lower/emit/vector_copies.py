"""Vector copies in per-thread code: a loop of one thread that copies consecutive elements between its
registers (a `T.alloc_local`) and a global tensor or shared tile, `for v in T.vectorized(8): A_local[v] =
A[row, k0 + v]`
(tilelang's GEMV and dequantization kernels), moves them as 4-, 8- or 16-byte accesses (`tnb_vld_*` /
`tnb_vst_*`), as `T.copy` moves tiles, instead of one load or store per element. The values are the same; the
loop stays a loop wherever the access would not be one aligned vector.

Taken when the loop has a constant extent and its body is one store `dst[..., e + v] = src[..., f + v]` of one
dtype, one side a register buffer and the other a global tensor whose last dim is contiguous and other strides
multiples of the width (`copy.tensor_vectors_ok`: its data pointer aligned, checked at each call) or a shared
tile whose layout keeps each chunk's elements side by side (proved on its swizzled offsets), only the last
index reading the loop variable, and each chunk's first element at a multiple of the width on both sides.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

from ..exprs import offset_from, uses_var
from ..irwalk import scope_of
from . import intrin
from .copy import tensor_vectors_ok

__all__ = ["VectorCopy", "emit_vector_copy", "vector_copy"]

WIDEST_BYTES = 16


@dataclass(frozen=True)
class VectorCopy:
    loop: object  # the tile-IR loop
    store: object  # its body: the BufferStore
    load: object  # the store's value: a TensorLoad
    width: int  # elements per access
    loads: bool  # True: memory (global or shared) -> registers; False: registers -> memory


def vector_copy(em, loop) -> VectorCopy | None:
    """The vector form of the per-thread loop `loop` (module docstring), or None."""
    if not isinstance(loop.extent, tvm.ir.prim.expr.IntImm) or not isinstance(loop.body, tirx.BufferStore):
        return None
    store, load = loop.body, loop.body.value
    if not isinstance(load, tvm.ir.TensorLoad) or str(load.source.dtype) != str(store.buffer.dtype):
        return None
    dst, src = store.buffer, load.source
    if dst in em.locals and _memory(em, src):
        loads = True
    elif src in em.locals and _memory(em, dst):
        loads = False
    else:
        return None
    var, extent = loop.loop_var, int(loop.extent)
    memory = src if loads else dst
    shared = scope_of(memory) != "global"
    # register and global sides: `[..., e + v]`; a shared side is proved on its offsets (_shared_chunks)
    sides = [(store.indices, dst), (load.indices, src)]
    sides = [(indices, buf) for indices, buf in sides if not (shared and buf is memory)]
    for indices, _ in sides:
        if any(uses_var(i, var) for i in indices[:-1]) or offset_from(indices[-1], var, em.analyzer) is None:
            return None
    with em.bound("var_map", {var: em.expr(loop.min)}):  # the first chunk's first element
        firsts = [em.expr(indices[-1]) for indices, _ in sides]
    bytes_each = intrin.tvm_bits(dst.dtype) // 8
    width = WIDEST_BYTES // bytes_each
    while width > 1:
        if (extent % width == 0 and intrin.vector_bytes_ok(width, dst.dtype)
                and all(em.prove(tirx.floormod(first, width) == 0) for first in firsts)
                and (_shared_chunks(em, loop, store if not loads else load, width) if shared
                     else tensor_vectors_ok(em, memory, width))):
            return VectorCopy(loop, store, load, width, loads)
        width //= 2
    return None


def _memory(em, buf) -> bool:
    """A global tensor addressed as written (no hand layout), or a shared tile of the plan's pool."""
    if scope_of(buf) == "global":
        return buf not in em.laid_out and buf not in em.registers
    return buf in em.plan.shared and buf not in em.registers


def _shared_chunks(em, loop, access, width: int) -> bool:
    """Whether each chunk of `width` elements of a shared tile's access is `width` consecutive elements of the
    pool, its first at a multiple of `width` (a swizzle moves whole 16-byte chunks: proved, not assumed)."""
    indices = access.indices
    buf = access.buffer if isinstance(access, tirx.BufferStore) else access.source
    lane = tirx.Var("lane", "int32")
    em.bind_range(lane, width)
    for chunk in range(int(loop.extent) // width):
        first = em.expr(loop.min) + chunk * width
        with em.bound("var_map", {loop.loop_var: first}):
            base = em.shared_offset(buf, [em.expr(i) for i in indices])
        with em.bound("var_map", {loop.loop_var: first + lane}):
            moved = em.shared_offset(buf, [em.expr(i) for i in indices])
        if not (em.prove(moved - base == lane) and em.prove(tirx.floormod(base, width) == 0)):
            return False
    return True


def emit_vector_copy(em, copy: VectorCopy):
    """One vector load (or store) per chunk of `copy.width` elements."""
    loop, width = copy.loop, copy.width
    dtype = str(copy.store.buffer.dtype)
    for chunk in range(int(loop.extent) // width):
        with em.bound("var_map", {loop.loop_var: em.expr(loop.min) + chunk * width}):
            dst = _address(em, copy.store.buffer, copy.store.indices)
            src = _address(em, copy.load.source, copy.load.indices)
        if copy.loads:
            T.evaluate(intrin.vector_load(dst, src, width, dtype, dtype))
            continue
        # a wgmma operand written by ordinary stores needs the proxy fence before the T.gemm reads it
        em.note_operand_write(copy.store.buffer)
        with contextlib.ExitStack() as guarded:
            if em.scope.replica_guard is not None:  # once per element: a replicated layout's first copy
                guarded.enter_context(T.If(em.scope.replica_guard))
                guarded.enter_context(T.Then())
            T.evaluate(intrin.vector_store(dst, src, width, dtype, dtype))


def _address(em, buf, indices):
    indices = [em.expr(i) for i in indices]
    if buf in em.locals:
        return intrin.address_of(em.locals[buf], em.local_index(buf, indices))
    if buf in em.plan.shared:
        return intrin.address_of(em.view(buf), [em.shared_offset(buf, indices)])
    return em.global_pointer(buf, indices)

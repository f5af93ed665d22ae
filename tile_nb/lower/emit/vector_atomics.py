"""Vector atomics: a `T.Parallel` nest over a register fragment whose body adds each element into a float32
global tensor (`T.atomic_add(dQ[b, k * 32 + i, h, j], dq[i, j])`, FlashAttention's backward; the tile form
`T.atomic_add(C[...], frag)` where no edge guard reads the last dim) runs, on sm_90 and later, one atomic per
group of registers a thread holds side by side along the last dim: `atomicAdd(float2*)` /
`atomicAdd(float4*)`, each element's add atomic as before, half or a quarter of the instructions.
Option `tile_nb.vector_atomics` (False: one atomicAdd per element).

Taken only when the group moves as one aligned access: the tensor's last dim contiguous and a multiple of the
width, its other strides too, its data pointer aligned (checked at each call, `tile_nb.unaligned`), the index
along the last dim the last loop variable plus a multiple of the width; a condition around the add (a row
mask) must not read the last loop variable or a register fragment, so it holds for the whole group.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

from ...language.stmtwalk import atomic_element, atomic_op
from ..exprs import conjunction, uses_var, walk_loads
from ..irwalk import scope_of
from . import intrin
from .copy import tensor_vectors_ok

__all__ = ["VectorAtomic", "emit_vector_atomics", "vector_atomic"]

MAX_WIDTH = 4  # float4: 16 bytes


@dataclass(frozen=True)
class VectorAtomic:
    width: int  # registers per atomic
    target: object  # the float32 global tensor
    indices: tuple  # its element's indices (tile IR, in the loop variables)
    fragment: object  # the register fragment added
    cond: object  # the condition around the add, or None


def vector_atomic(em, loops, body, layout) -> VectorAtomic | None:
    """The vector form of the nest `loops` with body `body` over `layout` (module docstring), or None."""
    if em.caps.sm < 90 or not em.plan.options.vector_atomics:
        return None
    cond = None
    if isinstance(body, tirx.IfThenElse) and body.else_case is None:
        cond, body = body.condition, body.then_case
    if not isinstance(body, tirx.Evaluate) or atomic_op(body.value) != "sum" or len(body.value.args) != 3:
        return None
    element, value = atomic_element(body.value), body.value.args[2]
    if not isinstance(element, tvm.ir.TensorLoad) or not isinstance(value, tvm.ir.TensorLoad):
        return None
    target, fragment = element.source, value.source
    loop_vars = [l.loop_var for l in loops]
    last = loop_vars[-1]
    if (scope_of(target) != "global" or str(target.dtype) != "float32" or target in em.laid_out
            or fragment not in em.registers or str(fragment.dtype) != "float32"
            or em.plan.layout(fragment) != layout or len(value.indices) != len(loop_vars)
            or any(not i.same_as(v) for i, v in zip(value.indices, loop_vars, strict=True))):
        return None
    offset = em.analyzer.simplify(element.indices[-1] - last)
    if uses_var(offset, last) or any(uses_var(i, last) for i in element.indices[:-1]):
        return None
    if cond is not None and (uses_var(cond, last) or _reads_registers(em, cond)):
        return None
    width = min(layout.vector(), MAX_WIDTH)
    while width > 1:
        if (int(layout.shape[-1]) % width == 0 and tensor_vectors_ok(em, target, width)
                and em.prove(tirx.floormod(target.shape[-1], width) == 0)
                and em.prove(tirx.floormod(em.expr(offset), width) == 0)):
            return VectorAtomic(width, target, tuple(element.indices), fragment, cond)
        width //= 2
    return None


def emit_vector_atomics(em, loops, atomic: VectorAtomic, layout):
    """Each thread adds its register groups of `atomic.fragment`, one vector atomic each."""
    tx, width = em.tx, atomic.width
    groups = layout.regs // width
    registers = em.registers[atomic.fragment]
    with T.unroll(0, groups) as g:
        em.bind_range(g, groups)
        r0 = g * width
        coords = layout.element(tx, r0)
        with em.bound("var_map", {l.loop_var: c for l, c in zip(loops, coords, strict=True)}):
            guard = conjunction(layout.valid(tx, r0), layout.replica_zero(tx),
                                em.expr(atomic.cond) if atomic.cond is not None else None)
            address = em.global_pointer(atomic.target, [em.expr(i) for i in atomic.indices])
            with contextlib.ExitStack() as guarded:
                if guard is not None:
                    guarded.enter_context(T.If(guard))
                    guarded.enter_context(T.Then())
                T.evaluate(intrin.atomic_add_float32_vector(address, intrin.address_of(registers, [r0]),
                                                            width))


def _reads_registers(em, expr) -> bool:
    read = []
    walk_loads(expr, lambda ld: read.append(ld.source))
    return any(b in em.registers for b in read)

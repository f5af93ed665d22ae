"""Vector atomics: a `T.Parallel` nest over a register fragment whose body adds each element into a float32
global tensor (`T.atomic_add(dQ[b, k * 32 + i, h, j], dq[i, j])`, FlashAttention's backward; the tile form
`T.atomic_add(C[...], frag)`, split-K GEMM's) runs, on sm_90 and later, one atomic per group of registers a
thread holds side by side along the last dim: `atomicAdd(float2*)` / `atomicAdd(float4*)`, each element's add
atomic as before, half or a quarter of the instructions. Option `tile_nb.vector_atomics` (False: one atomicAdd
per element).

Taken only when the group moves as one aligned access: the tensor's last dim contiguous and a multiple of the
width, its other strides too, its data pointer aligned (checked at each call, `tile_nb.unaligned`), the index
along the last dim the last loop variable plus a multiple of the width. A condition around the add must hold
for the whole group: it may not read a register fragment, and it reads the last loop variable only in edge
guards `j + c < E` with c and E multiples of the width (the tile form's guard at the edge of the tensor).

A shared tile's adds (`T.atomic_add(dQ[...], dq_shared)`) stay one per element: consecutive threads already
add consecutive elements there, and groups of 4 measured no faster on an H100 (1.03x / 0.98x,
benchmarks/results/atomics.md), where a fragment's scattered pairs gain 1.6-1.8x.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

from ...language.stmtwalk import atomic_element, atomic_op
from ..exprs import conjunction, offset_from, uses_var, walk_loads
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
    if not isinstance(element, tvm.ir.TensorLoad):
        return None
    target = element.source
    if scope_of(target) != "global" or str(target.dtype) != "float32" or target in em.laid_out:
        return None
    loop_vars = [l.loop_var for l in loops]
    last = loop_vars[-1]
    fragment = _register_operand(em, value, loop_vars, layout)
    if fragment is None:
        return None
    offset = offset_from(element.indices[-1], last, em.analyzer)
    if offset is None or any(uses_var(i, last) for i in element.indices[:-1]):
        return None
    if cond is not None and _reads_registers(em, cond):
        return None
    width = min(layout.vector(), MAX_WIDTH)
    while width > 1:
        if (int(layout.shape[-1]) % width == 0 and tensor_vectors_ok(em, target, width)
                and em.prove(tirx.floormod(target.shape[-1], width) == 0)
                and em.prove(tirx.floormod(em.expr(offset), width) == 0)
                and _whole_groups(em, cond, last, width)):
            return VectorAtomic(width, target, tuple(element.indices), fragment, cond)
        width //= 2
    return None


def _register_operand(em, value, loop_vars, layout):
    """The register fragment `value` reads at the loop's own coordinates (laid out as the loop), or None."""
    if not isinstance(value, tvm.ir.TensorLoad):
        return None
    fragment = value.source
    if (fragment not in em.registers or str(fragment.dtype) != "float32" or em.plan.layout(fragment) != layout
            or len(value.indices) != len(loop_vars)
            or any(not i.same_as(v) for i, v in zip(value.indices, loop_vars, strict=True))):
        return None
    return fragment


def _whole_groups(em, cond, last, width: int) -> bool:
    """Whether `cond` has one value over each group of `width` elements along `last` that starts at a multiple
    of `width`: the parts that read `last` are edge guards `last + c < E`, c and E multiples of the width."""
    for part in _conjuncts(cond):
        if not uses_var(part, last):
            continue
        if not isinstance(part, tvm.ir.prim.expr.LT) or uses_var(part.b, last):
            return False
        c = offset_from(part.a, last, em.analyzer)
        if c is None or not (em.prove(tirx.floormod(em.expr(c), width) == 0)
                                     and em.prove(tirx.floormod(em.expr(part.b), width) == 0)):
            return False
    return True


def _conjuncts(cond) -> list:
    if cond is None:
        return []
    if isinstance(cond, tvm.ir.prim.expr.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


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

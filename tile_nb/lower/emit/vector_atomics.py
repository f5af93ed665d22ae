"""Vector atomics: a `T.Parallel` nest whose body adds one value per element into a float32 global tensor
runs, on sm_90 and later, one atomic per group of elements side by side along the last dim:
`atomicAdd(float2*)` / `atomicAdd(float4*)`, each element's add atomic as before, half or a quarter of the
instructions. Two forms:
- the value is a register fragment's element (FlashAttention's backward,
  `T.atomic_add(dQ[b, k * 32 + i, h, j], dq[i, j])`, or the tile form `T.atomic_add(C[...], frag)`): each
  thread adds the register groups it holds;
- any other value (a shared tile's element: the tile form `T.atomic_add(dQ[...], dq_shared)` of tilelang's
  TMA-reduction examples): the groups go round-robin over the threads, consecutive threads on consecutive
  groups so that a warp's atomics cover contiguous memory, each lane's value put in an aligned local first.
Option `tile_nb.vector_atomics` (False: one atomicAdd per element).

Taken only when the group moves as one aligned access: the tensor's last dim contiguous and a multiple of the
width, its other strides too, its data pointer aligned (checked at each call, `tile_nb.unaligned`), the index
along the last dim the last loop variable plus a multiple of the width. A condition around the add must hold
for the whole group: it may not read a register fragment, and it reads the last loop variable only in edge
guards `j + c < E` with c and E multiples of the width (the tile form's guard at the edge of the tensor).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ...language.stmtwalk import atomic_element, atomic_op
from ..exprs import conjunction, uses_var, walk_loads
from ..irwalk import scope_of
from . import intrin
from .copy import tensor_vectors_ok
from .threads import distribute

__all__ = ["VectorAtomic", "emit_vector_atomics", "vector_atomic"]

MAX_WIDTH = 4  # float4: 16 bytes


@dataclass(frozen=True)
class VectorAtomic:
    width: int  # elements per atomic
    target: object  # the float32 global tensor
    indices: tuple  # its element's indices (tile IR, in the loop variables)
    fragment: object  # the register fragment whose element is added, or None (`value` is added)
    value: object  # the value added (tile IR, in the loop variables)
    cond: object  # the condition around the add, or None


def vector_atomic(em, loops, body, layout) -> VectorAtomic | None:
    """The vector form of the nest `loops` with body `body` over `layout` (None: no register layout), or
    None (module docstring)."""
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
    if fragment is None and _reads_registers(em, value):
        return None
    offset = em.analyzer.simplify(element.indices[-1] - last)
    if uses_var(offset, last) or any(uses_var(i, last) for i in element.indices[:-1]):
        return None
    if cond is not None and _reads_registers(em, cond):
        return None
    if fragment is not None:
        widest, extent = layout.vector(), int(layout.shape[-1])
    elif isinstance(loops[-1].extent, tvm.ir.prim.expr.IntImm):
        widest, extent = MAX_WIDTH, int(loops[-1].extent)
    else:
        return None
    width = min(widest, MAX_WIDTH)
    while width > 1:
        if (extent % width == 0 and tensor_vectors_ok(em, target, width)
                and em.prove(tirx.floormod(target.shape[-1], width) == 0)
                and em.prove(tirx.floormod(em.expr(offset), width) == 0)
                and _whole_groups(em, cond, last, width)):
            return VectorAtomic(width, target, tuple(element.indices), fragment, value, cond)
        width //= 2
    return None


def _register_operand(em, value, loop_vars, layout):
    """The register fragment `value` reads at the loop's own coordinates (laid out as the loop), or None."""
    if not isinstance(value, tvm.ir.TensorLoad) or layout is None:
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
        c = em.analyzer.simplify(part.a - last)
        if uses_var(c, last) or not (em.prove(tirx.floormod(em.expr(c), width) == 0)
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
    """One vector atomic per group (module docstring): over the register groups each thread holds, or, for a
    value that is not a register fragment's element, over groups dealt round-robin to the threads."""
    if atomic.fragment is None:
        _emit_distributed(em, loops, atomic)
        return
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
            _add_group(em, atomic, guard, intrin.address_of(registers, [r0]))


def _emit_distributed(em, loops, atomic: VectorAtomic):
    width = atomic.width
    extents = [em.expr(l.extent) for l in loops[:-1]] + [int(loops[-1].extent) // width]
    lanes = T.alloc_buffer((width,), "float32", scope="local")  # one 16- / 8-byte register group
    IRBuilder.name("atomic_lanes", lanes)

    def group(idx):
        starts = {l.loop_var: i for l, i in zip(loops[:-1], idx[:-1], strict=True)}
        first = idx[-1] * width
        for k in range(width):
            with em.bound("var_map", {**starts, loops[-1].loop_var: first + k}):
                T.buffer_store(lanes, em.expr(atomic.value), [k])
        with em.bound("var_map", {**starts, loops[-1].loop_var: first}):
            guard = em.expr(atomic.cond) if atomic.cond is not None else None
            _add_group(em, atomic, guard, intrin.address_of(lanes, [0]))

    distribute(em, extents, group)


def _add_group(em, atomic: VectorAtomic, guard, values):
    address = em.global_pointer(atomic.target, [em.expr(i) for i in atomic.indices])
    with contextlib.ExitStack() as guarded:
        if guard is not None:
            guarded.enter_context(T.If(guard))
            guarded.enter_context(T.Then())
        T.evaluate(intrin.atomic_add_float32_vector(address, values, atomic.width))


def _reads_registers(em, expr) -> bool:
    read = []
    walk_loads(expr, lambda ld: read.append(ld.source))
    return any(b in em.registers for b in read)

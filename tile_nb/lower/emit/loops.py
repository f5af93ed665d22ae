"""Loops: `T.serial` / `T.unroll` kept as loops, `while` on a run-time value kept as a While, `T.Parallel`
split over the CTA's threads, and `T.Pipelined` (a serial loop annotated `num_stages`) handed to pipeline.py.

`T.Parallel(e0, e1, ...)` (nested parallel loops, elementwise body) is distributed in one of two ways:
- when the plan gives the nest a driving register layout (a fragment it indexes by all its loop variables, see
  infer.py), each thread runs over the registers it holds: the loop variables become that register's
  coordinates, fragments of the same layout are that register, row and column fragments the register of their
  slice; padding registers are skipped, and stores to memory run on the first replica only;
- otherwise the flattened iteration space is split round-robin over the threads (consecutive threads take
  consecutive iterations, so row-major global accesses coalesce).
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..errors import LoweringError
from ..exprs import is_const_int
from .threads import distribute
from .uniform import never_true, split_masked_store
from .vector_atomics import emit_vector_atomics, vector_atomic
from .vector_copies import emit_vector_copy, vector_copy

__all__ = ["emit_for", "emit_while"]


def _is_parallel(loop) -> bool:
    return isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.PARALLEL


def emit_for(em, loop):
    if _is_parallel(loop):
        emit_parallel(em, loop)
        return
    if em.scope.thread_code and (copy := vector_copy(em, loop)) is not None:
        emit_vector_copy(em, copy)  # a thread's loop of element copies (vector_copies.py)
        return
    start, extent = em.expr(loop.min), em.expr(loop.extent)
    maker = T.unroll if loop.kind == tirx.ForKind.UNROLLED else T.serial
    with maker(start, start + extent) as v:
        IRBuilder.name(loop.loop_var.name, v)
        em.var_map[loop.loop_var] = v
        if isinstance(extent, tvm.ir.prim.expr.IntImm):
            em.bind_range(v, extent)
        with em.scoped(loop_depth=em.scope.loop_depth + 1):
            em.emit(loop.body)
        # A later iteration may overwrite what this one read (or read what it wrote) in shared memory.
        _, writes_shared = em.touches_shared(loop.body)
        if writes_shared and em.tx is not None and not em.scope.thread_code:
            em.sync()


def emit_while(em, loop):
    """A block-level `while`: every thread of the CTA tests the same condition (block-level code computes the
    same values in every thread), so barriers inside the loop are reached by all of them."""
    if em.scope.thread_code:
        raise em.lines.locate(LoweringError("a `while` loop inside T.Parallel is not supported by the CUDA "
                                            "lowering"), loop)
    with T.While(em.expr(loop.condition)):
        with em.scoped(loop_depth=em.scope.loop_depth + 1):
            em.emit(loop.body)
        # The next test and iteration may read what this one wrote in shared
        # memory (or overwrite what it read).
        _, writes_shared = em.touches_shared(loop.body)
        if writes_shared and em.tx is not None:
            em.sync()


def emit_parallel(em, loop):
    loops = [loop]
    while _is_parallel(loops[-1].body):
        loops.append(loops[-1].body)
    body = loops[-1].body
    masked = _uniform_mask(em, loops, body)
    if masked is None:
        _emit_parallel(em, loops, body)
        return
    # The mask is false for the whole nest on most blocks (uniform.py): test that once, skip it there.
    never, unmasked = masked
    if em.prove(never):
        _emit_parallel(em, loops, unmasked)
        return
    with T.If(never):
        with T.Then():
            _emit_parallel(em, loops, unmasked)
        with T.Else():
            _emit_parallel(em, loops, body)


def _uniform_mask(em, loops, body):
    """(a condition on the code outside the nest under which the body's mask is false everywhere, the body
    without its mask) for a masked store with constant extents, or None."""
    split = split_masked_store(body)
    extents = [l.extent for l in loops]
    if split is None or not all(isinstance(e, tvm.ir.prim.expr.IntImm) for e in extents):
        return None
    cond, unmasked = split
    never = never_true(cond, {l.loop_var: int(e) for l, e in zip(loops, extents, strict=True)})
    if never is None:
        return None
    never = em.analyzer.simplify(em.expr(never))
    if is_const_int(never, 0):  # nothing proven: the nest keeps its mask
        return None
    return never, unmasked


def _emit_parallel(em, loops, body):
    loop = loops[0]
    extents = [em.expr(l.extent) for l in loops]
    layout = em.plan.fragments.loop_layouts.get(loop)
    with em.scoped(thread_code=True):
        if layout is None:  # a T.dynamic extent, too: the iterations go round-robin over the threads
            distribute(em, extents, lambda idx: _emit_body(em, loops, body, idx))
        elif (atomic := vector_atomic(em, loops, body, layout)) is not None:
            emit_vector_atomics(em, loops, atomic, layout)
        else:
            _emit_over_registers(em, loops, body, layout)


def _emit_body(em, loops, body, idx):
    with em.bound("var_map", {l.loop_var: i for l, i in zip(loops, idx, strict=True)}):
        em.emit(body)


def _emit_over_registers(em, loops, body, layout):
    """Each thread runs the body once per register of `layout` it holds (unrolled: registers are indexed by
    compile-time constants once nvcc unrolls the loop)."""
    tx = em.tx
    rank = len(layout.shape)
    related = {}  # fragment -> (indices it must be accessed at, register), from the loop's point of view
    with T.unroll(0, layout.regs) as r:
        em.bind_range(r, layout.regs)  # (index arithmetic near 2^31 must see its range: exprs.fit_int32)
        coords = layout.element(tx, r)
        loop_vars = [l.loop_var for l in loops]
        for buf in em.registers:
            other = em.plan.layout(buf)
            if other == layout:
                related[buf] = (coords, r)
            elif rank == 2 and other == layout.slice(1):
                related[buf] = (coords[:1], layout.slice_register(1, r))
            elif rank == 2 and other == layout.slice(0):
                related[buf] = (coords[1:], layout.slice_register(0, r))
        valid = layout.valid(tx, r)
        with (
            em.bound("var_map", dict(zip(loop_vars, coords, strict=True))),
            em.bound("loop_registers", related),
            em.scoped(replica_guard=layout.replica_zero(tx)),
        ):
            if valid is None:
                em.emit(body)
            else:
                with T.If(valid), T.Then():
                    em.emit(body)

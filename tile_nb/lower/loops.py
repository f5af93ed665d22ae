"""Loops: `T.serial` / `T.unroll` kept as loops, `T.Parallel` split over the CTA's threads, and
`T.Pipelined` (a serial loop annotated `num_stages`) handed to pipeline.py.

`T.Parallel(e0, e1, ...)` (nested parallel loops, elementwise body) is distributed in one of two ways:
- when the body touches a register fragment (a `T.gemm` accumulator), each thread runs over the registers it
  owns, and the loop variables become that register's (row, col) (`MmaAccLayout.element`);
- otherwise the flattened iteration space is split round-robin over the threads (consecutive threads take
  consecutive iterations, so row-major global accesses coalesce).
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .lowering import LoweringError, buffers_touched

__all__ = ["distribute", "emit_for"]


def _is_parallel(loop) -> bool:
    return isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.PARALLEL


def emit_for(lw, loop):
    ann = loop.annotations or {}
    if "num_stages" in ann:
        from .pipeline import emit_pipelined

        emit_pipelined(lw, loop, int(ann["num_stages"]))
        return
    if _is_parallel(loop):
        emit_parallel(lw, loop)
        return
    start, extent = lw.expr(loop.min), lw.expr(loop.extent)
    maker = T.unroll if loop.kind == tirx.ForKind.UNROLLED else T.serial
    with maker(start, start + extent) as v:
        IRBuilder.name(loop.loop_var.name, v)
        lw.var_map[loop.loop_var] = v
        if isinstance(extent, tvm.ir.prim.expr.IntImm):
            lw.bind_range(v, extent)
        lw.emit(loop.body)
        # A later iteration may overwrite what this one read (or read what it wrote) in shared memory.
        _, writes_shared = lw.touches_shared(loop.body)
        if writes_shared and lw.tx is not None and not lw.in_thread_code:
            lw.sync()


def distribute(lw, extents, body_fn):
    """Run `body_fn(indices)` for every point of `extents`, split over the threads round-robin."""
    total = 1
    for e in extents:
        total *= int(e)
    threads = lw.threads
    steps = (total + threads - 1) // threads
    with T.serial(0, steps) as it:
        flat = it * threads + lw.tx
        idx, rest = [], flat
        for e in reversed(extents):
            idx.append(tirx.floormod(rest, int(e)))
            rest = tirx.floordiv(rest, int(e))
        idx.reverse()
        if total % threads:
            with T.If(flat < total), T.Then():
                body_fn(idx)
        else:
            body_fn(idx)


def emit_parallel(lw, loop):
    loops = [loop]
    while _is_parallel(loops[-1].body):
        loops.append(loops[-1].body)
    body = loops[-1].body
    extents = [lw.expr(l.extent) for l in loops]
    if not all(isinstance(e, tvm.ir.prim.expr.IntImm) for e in extents):
        raise LoweringError("T.Parallel extents must be compile-time constants after specialization")
    reads, writes = buffers_touched(body)
    frags = [b for b in reads + writes if b in lw.frags]
    prev = lw.in_thread_code
    lw.in_thread_code = True
    if frags:
        lay = lw.frags[frags[0]]
        if len(loops) != 2 or (int(extents[0]), int(extents[1])) != (lay.bm, lay.bn):
            raise LoweringError(
                f"T.Parallel over {[int(e) for e in extents]} touches the register fragment {frags[0].name} "
                f"of shape [{lay.bm}, {lay.bn}]; the loop must cover the fragment exactly")
        others = [b for b in frags if lw.frags[b] is not lay and (lw.frags[b].bm, lw.frags[b].bn, lw.frags[b].wm)
                  != (lay.bm, lay.bn, lay.wm)]
        if others:
            raise LoweringError(f"T.Parallel mixes register fragments with different layouts: "
                                f"{frags[0].name} and {others[0].name}")
        # Unrolled: registers are indexed by compile-time constants once nvcc unrolls the loop.
        with T.unroll(0, lay.regs) as r:
            row, col = lay.element(lw.tx, r)
            saved = dict(lw.frag_reg)
            for b in set(frags):
                lw.frag_reg[b] = ([row, col], r)
            emit_parallel_body(lw, loops, body, [row, col])
            lw.frag_reg = saved
    else:
        distribute(lw, [int(e) for e in extents], lambda idx: emit_parallel_body(lw, loops, body, idx))
    lw.in_thread_code = prev


def emit_parallel_body(lw, loops, body, idx):
    for l, i in zip(loops, idx):
        lw.var_map[l.loop_var] = i
    lw.emit(body)

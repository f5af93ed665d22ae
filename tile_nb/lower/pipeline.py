"""`T.Pipelined(n, num_stages=s)`: a multi-stage cp.async software pipeline.

The loop body's global->shared copies are the producer; everything else is the consumer. Each shared tile
written by the producer has `s` copies (stage i % s holds iteration i). The emitted schedule:

    for i in [0, s-1):            prologue: issue the copies of iteration i (if i < n), commit
    for k in [0, n):
        cp.async.wait_group(s-2)  the group of iteration k has landed (this thread's part)
        __syncthreads()           ... everybody's part; and everybody finished consuming iteration k-1
        issue copies of k+s-1 into stage (k+s-1) % s == (k-1) % s   (if k+s-1 < n), commit
        consume stage k % s
    cp.async.wait_group(0); __syncthreads()

A group is committed every iteration, even an empty one, so the wait counts stay uniform.
With s == 1 the copies complete (wait_group 0 + barrier) before the consumer runs, and a barrier follows it.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from . import intrin
from .copy import issue_async_copy
from .lowering import region_of, seq_items

__all__ = ["emit_pipelined"]


def _issue(lw, copies, loop_var, iteration, stages):
    """Issue the producer copies of `iteration` (the user's loop var bound to it) into its stage."""
    saved_var = lw.var_map.get(loop_var)
    lw.var_map[loop_var] = iteration
    saved_stage = dict(lw.stage)
    for c in copies:
        dst = region_of(c.args[0])[0]
        lw.stage[dst] = tirx.floormod(iteration, stages) if stages > 1 else 0
        issue_async_copy(lw, c)
    lw.stage = saved_stage
    if saved_var is None:
        lw.var_map.pop(loop_var, None)
    else:
        lw.var_map[loop_var] = saved_var


def emit_pipelined(lw, loop, stages: int):
    body = seq_items(loop.body)
    schedule = lw.schedules[loop]
    copies = list(schedule.prefetched)
    rest = [s for s in body if not schedule.is_prefetched(s)]
    start, n = lw.expr(loop.min), lw.expr(loop.extent)
    stages = max(1, stages)
    if not copies:  # nothing to overlap: a plain serial loop
        stages = 1
    const_n = int(n) if isinstance(n, tirx.IntImm if hasattr(tirx, "IntImm") else int) else None
    commit = lambda: T.evaluate(intrin.cp_async_commit())
    # Copies run `ahead` iterations ahead. With wgmma overlap (one MMA group left in flight across iterations,
    # wgmma.py) the stage read by that group must not be refilled yet, so the copies run one step less ahead.
    ahead = stages - 1 - (1 if stages >= 3 and lw.wgmma_overlap() else 0)
    lw.after_pipeline = []

    if stages > 1:
        for i in range(ahead):
            if const_n is not None and i >= const_n:
                commit()
                continue
            if const_n is None:
                with T.If(i < n), T.Then():
                    _issue(lw, copies, loop.loop_var, start + i, stages)
            else:
                _issue(lw, copies, loop.loop_var, start + i, stages)
            commit()

    lw.in_pipeline_stages = stages
    with T.serial(0, n) as k:
        IRBuilder.name(loop.loop_var.name, k)
        lw.bind_range(k, n)
        it = start + k
        if stages > 1:
            lw.async_copies_landed(ahead - 1)
            lw.sync()
            nxt = k + ahead
            with T.If(nxt < n), T.Then():
                # Under this guard the analyzer may drop the copies' own K-bound checks.
                with lw.analyzer.constraint_scope(nxt < n):
                    _issue(lw, copies, loop.loop_var, start + nxt, stages)
            commit()
        else:
            _issue(lw, copies, loop.loop_var, it, 1)
            commit()
            lw.async_copies_landed(0)
            lw.sync()
        lw.var_map[loop.loop_var] = it
        saved_stage = dict(lw.stage)
        for c in copies:
            lw.stage[region_of(c.args[0])[0]] = tirx.floormod(k, stages) if stages > 1 else 0
        lw.emit_seq(rest)
        lw.stage = saved_stage
        if stages == 1:
            lw.sync()
    lw.in_pipeline_stages = 0
    for fn in lw.after_pipeline:  # e.g. drain the last wgmma group
        fn()
    lw.after_pipeline = []
    if stages > 1:
        T.evaluate(intrin.cp_async_wait(0))
        lw.sync()

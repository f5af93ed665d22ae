"""`T.Pipelined(n, num_stages=s)`: a multi-stage cp.async software pipeline.

Without cp.async (sm_75: arch.py) the same schedule is emitted with the copies as plain loads and stores, and
no commit or wait: each thread's copy has landed when the next instruction runs, so the barrier alone
publishes it. The stages stay (a stage is still written only while no warp reads it), but a thread waits for
its own loads, so memory overlaps the MMAs only across warps.

The copies the plan prefetches (schedule.py; gather loops such as T.im2col's too, gather.py) are the producer;
everything else in the body is the consumer.
Each shared tile written by the producer has `s` copies (stage i % s holds iteration i). The emitted schedule:

    for i in [0, s-1):            prologue: issue the copies of iteration i (if i < n), commit
    for k in [0, n):
        cp.async.wait_group(s-2)  the group of iteration k has landed (this thread's part)
        __syncthreads()           ... everybody's part; and everybody finished consuming iteration k-1
        issue copies of k+s-1 into stage (k+s-1) % s == (k-1) % s   (if k+s-1 < n), commit
        consume stage k % s
    cp.async.wait_group(0); __syncthreads()

A group is committed every iteration, even an empty one, so the wait counts stay uniform.
With s == 1 the copies complete (wait_group 0 + barrier) before the consumer runs, and a barrier follows it.
When the loop's wgmma group stays in flight (plan.keeps_mma_in_flight), copies run one step less ahead, so the
stage that group reads is not refilled yet, and the group is drained after the loop.
"""
from __future__ import annotations

import contextlib

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..analysis.schedule import as_gather, prefetched_tile
from ..irwalk import seq_items
from . import intrin
from .copy import issue_async_copy
from .gather import issue_async_gather
from .wgmma import drain_accumulators

__all__ = ["emit_pipelined"]


def _issue(em, schedule, copies, loop_var, iteration, stages):
    """Issue the producer copies (and gather loops) of `iteration` (the user's loop var bound to it) into its
    stage; a copy under an `if` where its condition holds for that iteration, with the Binds it reads computed
    again for it (schedule.AheadIssue)."""
    stage = {prefetched_tile(c): tirx.floormod(iteration, stages) if stages > 1 else 0 for c in copies}
    ahead = [schedule.issue_of(c) for c in copies]
    with em.bound("var_map", {loop_var: iteration}), em.bound("stage", stage):
        # every Bind some copy reads, once, in body order
        needed = [b for a in ahead for b in a.binds]
        binds = [s for s in seq_items(schedule.loop.body) if any(s.same_as(b) for b in needed)]
        for b in binds:
            value = T.Bind(em.expr(b.value))
            IRBuilder.name(f"{b.var.name}_ahead", value)
            em.var_map[b.var] = value
        for c, a in zip(copies, ahead, strict=True):
            with contextlib.ExitStack() as guarded:
                if a.guard is not None:
                    guarded.enter_context(T.If(em.expr(a.guard)))
                    guarded.enter_context(T.Then())
                with em.marked(c):
                    if isinstance(c, tirx.TilePrimitiveCall):
                        issue_async_copy(em, c)
                    else:
                        issue_async_gather(em, as_gather(c))


def emit_pipelined(em, loop):
    schedule = em.plan.pipelines[loop]
    body = seq_items(loop.body)
    copies = list(schedule.prefetched)
    rest = [s for s in body if not schedule.is_prefetched(s)]
    start, n = em.expr(loop.min), em.expr(loop.extent)
    stages = schedule.stages if copies else 1  # nothing to overlap: a plain serial loop
    const_n = int(n) if isinstance(n, tirx.IntImm) else None
    commit = em.commit_copies
    in_flight = em.plan.keeps_mma_in_flight(loop)
    ahead = stages - 1 - (1 if in_flight else 0)

    if stages > 1:
        for i in range(ahead):
            if const_n is not None and i >= const_n:
                commit()
                continue
            if const_n is None:
                with T.If(i < n), T.Then():
                    _issue(em, schedule, copies, loop.loop_var, start + i, stages)
            else:
                _issue(em, schedule, copies, loop.loop_var, start + i, stages)
            commit()

    with T.serial(0, n) as k:
        IRBuilder.name(loop.loop_var.name, k)
        em.bind_range(k, n)
        it = start + k
        if stages > 1:
            em.async_copies_landed(ahead - 1)
            em.sync()
            nxt = k + ahead
            with T.If(nxt < n), T.Then():
                # Under this guard the analyzer may drop the copies' own K-bound checks.
                with em.analyzer.constraint_scope(nxt < n):
                    _issue(em, schedule, copies, loop.loop_var, start + nxt, stages)
            commit()
        else:
            _issue(em, schedule, copies, loop.loop_var, it, 1)
            commit()
            em.async_copies_landed(0)
            em.sync()
        stage = {prefetched_tile(c): tirx.floormod(k, stages) if stages > 1 else 0 for c in copies}
        with (
            em.bound("var_map", {loop.loop_var: it}),
            em.bound("stage", stage),
            em.scoped(pipeline_stages=stages, mma_in_flight=in_flight, loop_depth=em.scope.loop_depth + 1,
                      issued_ahead=tuple(copies)),
        ):
            em.emit_seq(rest)
        if stages == 1:
            em.sync()
    if in_flight:
        drain_accumulators(em, rest)
    if stages > 1:
        if em.caps.cp_async:
            T.evaluate(intrin.cp_async_wait(0))
        em.sync()

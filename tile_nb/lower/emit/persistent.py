"""Persistent CTAs for warp-specialized TMA kernels: one CTA per SM walks the kernel's tiles.

The kernel's grid of CTAs becomes a list of tiles (in the grouped order of `Emitter.bind_tile`); `ctas` CTAs are
launched (one per SM) and CTA b runs tiles b, b + ctas, b + 2 ctas, ... The stage ring and its mbarriers are set
up once and carry on from tile to tile: k-tile k of the CTA's i-th tile sits at ring position i * n + k (n: the
loop's trip count, the same for every tile). So the producer, which runs ahead of the consumers by up to the
ring's depth, loads the first k-tiles of the next tile while the consumers run the epilogue of this one, and the
consumers find them waiting: the pipeline fills once per CTA instead of once per tile.

    producer (its first thread):  for each of its tiles: bind the tile's grid coordinates; the k-loop's loads
    consumers:                    for each of its tiles: bind them; the kernel body (the k-loop at ring position
                                  i * n; its last stage released at the end), a consumer barrier when the body
                                  outside the loop uses shared memory (the next tile rewrites it)

Legal when the grid's extents are constants, the loop's trip count does not depend on the tile, and the loop's
copies depend only on the grid variables, the loop variable and the parameters (the producer binds nothing
else). Built by default where legal, the kernel has two or more consumer warpgroups (one CTA fills an SM) and
the grid has more tiles than the GPU has SMs, which is where it was measured to pay
(docs/decisions.md#persistent-ctas). `tile_nb.persistent` (or TILE_NB_PERSISTENT) = 0 turns it off, = 1 also
says in the plan why a kernel did not get it; `tile_nb.sm_count` (TILE_NB_SM_COUNT; runtime.compile sets it
from the GPU) is the number of SMs.

Where the tiles do not fill the last wave, stream_k.py shares that wave's k-tiles among all the CTAs instead: every
CTA runs `tiles // ctas` whole tiles, then its range of the rest (`Persistent.stream_k`).
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..analysis.cluster import CLUSTER_SIZE, Multicast, plan_multicast
from .emitter import register_statement
from ..analysis.decisions import Refusal
from ..irwalk import buffers_touched, region_of, seq_items, vars_bound_in
from .stream_k import StreamK, emit_fixup, emit_partial_sums, emit_signal, plan_stream_k, tail_range
from .epilogue import emit_producer_stores, finish_producer_stores
from ..exprs import const_int
from .tma import (emit_producer_loads, emit_producer_role, emit_producer_tail, enter_consumer_role, last_stage,
                  release_stage, wait_stage_free)

__all__ = ["DEFAULT_SM_COUNT", "Persistent", "describe_persistent", "emit_persistent_body", "plan_persistent"]

DEFAULT_SM_COUNT = 132  # H100 SXM and H200


@dataclass(frozen=True)
class Persistent:
    body: tirx.Stmt  # the statement under the threadIdx.x launch: emitted once per tile
    tiles: int  # CTAs of the kernel's grid as written: the tiles
    ctas: int  # CTAs launched
    barrier_per_tile: bool  # statements outside the pipelined loop touch shared memory
    multicast: Multicast | None = None  # clusters of two CTAs sharing a tile by TMA multicast (cluster.py)
    stream_k: StreamK | None = None  # the last wave's tiles shared by k-tiles (stream_k.py)


def plan_persistent(func, options, tma, grid: dict, threads: int, threads_body, shared: dict,
                    accumulators: dict) -> tuple[Persistent | None, tuple[Refusal, ...]]:
    """The persistent form of a kernel with a TMA pipeline (`tma`) and what its cluster and stream-K analyses
    declined, or (None, why not). On by default where legal; the reason it was refused is given only when it was
    asked for (`tile_nb.persistent` = 1)."""
    mode = options.persistent
    if mode is False:
        return None, ()
    plan, why = _plan(func, options, tma, grid, threads, threads_body, shared, accumulators)
    if plan is not None and mode is not True and threads < 256:
        # One consumer warpgroup (TMA forced): several such CTAs share an SM, which one CTA per SM would give up.
        return None, ()
    if plan is None:
        return None, (why,) if mode else ()
    return plan, why


def _plan(func, options, tma, grid, threads, threads_body, shared, accumulators):
    if tma is None:
        return None, Refusal("persistent.no_tma", "no persistent CTAs (they need the TMA pipeline's producer)")
    if tma.producer_threads == 0:
        return None, Refusal("persistent.no_producer", "no persistent CTAs (they need a producer warp: tile_nb.producer_warp = 1 adds one)")
    if set(grid) - {"blockIdx.x", "blockIdx.y"} or "blockIdx.x" not in grid:
        return None, Refusal("persistent.grid_rank", "no persistent CTAs (a grid of one or two dimensions is supported)")
    extents = [v[1] for v in grid.values()]
    if not all(isinstance(e, tvm.ir.prim.expr.IntImm) for e in extents):
        return None, Refusal("persistent.dynamic_grid", "no persistent CTAs (the grid depends on a T.dynamic dimension)")
    tiles = 1
    for e in extents:
        tiles *= int(e)
    sm_count = DEFAULT_SM_COUNT if options.sm_count is None else options.sm_count
    # One CTA per SM: ptxas may give a TMA kernel's threads all of an SM's registers (plan_tma's budget), and a
    # persistent CTA that has to wait for a free SM would run all of its tiles late.
    ctas = min(tiles, sm_count)
    if tiles <= sm_count:
        return None, Refusal("persistent.fits", f"no persistent CTAs ({tiles} tiles fit on {sm_count} SMs at once)")
    loop = tma.loop
    grid_vars = [v[0] for v in grid.values()]
    local = vars_bound_in(func.body)
    for e in (loop.min, loop.extent):
        used = tirx.analysis.undefined_vars(e)
        if any(v.same_as(g) for v in used for g in grid_vars + local):
            return None, Refusal("persistent.trip_count", "no persistent CTAs (the pipelined loop's trip count differs from tile to tile)")
    for c in tma.copies:
        for start, _ in region_of(c.call.args[1])[1]:
            for v in tirx.analysis.undefined_vars(start):
                if any(v.same_as(x) for x in local) and not v.same_as(loop.loop_var):
                    return None, Refusal("persistent.copy_index", f"no persistent CTAs (the copy into {c.tile_buffer.name} uses {v.name}, which the "
                                  "producer does not compute)")
    outside = [s for s in seq_items(threads_body) if not s.same_as(loop)]
    barrier = any(b in shared for s in outside for b in sum(buffers_touched(s), []))
    multicast, why_not = plan_multicast(options, tma, grid, ctas)
    stream_k, why_sk = plan_stream_k(options, tma, threads_body, accumulators, tiles, ctas, multicast is not None,
                                     threads)
    return Persistent(threads_body, tiles, ctas, barrier, multicast, stream_k), tuple(
        r for r in (why_not, why_sk) if r is not None)


def describe_persistent(pp: Persistent) -> str:
    """The plan's note on persistent CTAs, for people."""
    return (f"persistent: {pp.ctas} CTA{'s' if pp.ctas > 1 else ''} (one per SM) walk the {pp.tiles} tiles; the "
            "producer loads the next tile's first k-tiles during the epilogue")


@register_statement(lambda em, s: em.plan.persistent is not None and s.same_as(em.plan.persistent.body), priority=2)
def emit_persistent_body(em, body):
    """The threads' code of a persistent kernel: the roles split first, then each walks this CTA's tiles (and, with
    stream-K, its share of the last wave's k-tiles)."""
    pp, tma = em.plan.persistent, em.plan.tma
    cta = em.plan.grid["blockIdx.x"][0]
    sk = pp.stream_k
    if pp.multicast is None:
        walker, walkers, walked, pair = cta, pp.ctas, pp.tiles, None
    else:  # a cluster walks pairs of tiles (2c, 2c + 1 along the pair axis); its CTA of rank r takes tile 2c + r
        walker, walkers, walked = tirx.floordiv(cta, CLUSTER_SIZE), pp.ctas // CLUSTER_SIZE, pp.tiles // CLUSTER_SIZE
        pair = (pp.multicast.axis, em.cluster_rank)
    # this CTA's whole tiles
    count = sk.waves if sk is not None else tirx.floordiv(walked - walker + (walkers - 1), walkers)
    n = const_int(tma.loop.extent) if sk is not None else em.expr(tma.loop.extent)

    def tile_of(i):
        return walker + i * walkers  # the linear index of this CTA's i-th whole tile

    def tail_tile(t):
        return sk.waves * pp.ctas + t  # the linear index of tail tile t (stream-K)

    def tiles(name):
        """A loop over this CTA's whole tiles with the grid variables bound: yields (loop counter, var_map entries)."""
        with T.serial(0, count) as i:
            IRBuilder.name(name, i)
            em.bind_range(i, count)
            yield i, em.bind_tile(tile_of(i), pair)

    store = em.plan.tma_store if em.plan.tma_store is not None and em.plan.tma_store.by_producer else None

    def stores(lin, stage, final=False):
        """The TMA stores of tile `lin`, staged in the consumers' epilogue with the last k-tile's stage `stage`."""
        with em.bound("var_map", em.bind_tile(lin, pair)):
            emit_producer_stores(em, stage, final)

    def whole_tile_stores(i, final=False):
        stores(tile_of(i), last_stage(tma, i * n, n), final)

    def loads():
        for i, coords in tiles("tile_load"):
            before = None
            if store is not None:
                def before(k, i=i):  # the previous tile's stores, before its last stage is refilled
                    with T.If(tirx.And(k == tma.stages - 1, i > 0)), T.Then():
                        whole_tile_stores(i - 1)
            with em.bound("var_map", coords):
                emit_producer_loads(em, tma, i * n, before)
        if sk is not None:
            _stream_k_loads(em, sk, cta, tail_tile, store, stores, whole_tile_stores)
        elif store is not None:
            with T.If(count > 0), T.Then():
                wait_stage_free(em, tma, count * n + tma.stages - 1)
                whole_tile_stores(count - 1, final=True)
        emit_producer_tail(em, tma, count * n)

    with T.If(tirx.Not(em.is_consumer())):
        with T.Then():
            emit_producer_role(em, tma, loads)
        with T.Else(), em.scoped(consumer=True):
            enter_consumer_role(em, tma)
            for i, coords in tiles("tile"):
                with em.bound("var_map", coords), em.scoped(pipeline_base=i * n):
                    em.emit_seq(seq_items(body))
                if pp.barrier_per_tile:
                    em.sync()
            if sk is not None:
                _stream_k_consumers(em, sk, cta, tail_tile, body, store is not None, pair)


def _stream_k_loads(em, sk, cta, tail_tile, store, stores, whole_tile_stores):
    """The producer's share of the tail: the loads of its contribution, then of its finish. With producer stores,
    the last whole tile's stores go before ring position base + S - 1 is refilled (each range has more than S
    k-tiles: stream_k.py), and the finished tile's after the loads."""
    tma, stages = em.plan.tma, em.plan.tma.stages
    base = sk.waves * sk.n
    with T.If(cta < sk.ctas):
        with T.Then():
            r = tail_range(sk, cta)

            def before_at(offset):
                if store is None:
                    return None

                def before(k):
                    with T.If(offset + k == stages - 1), T.Then():
                        whole_tile_stores(sk.waves - 1)
                return before

            with T.If(r.partial_count > 0), T.Then():
                with em.bound("var_map", em.bind_tile(tail_tile(r.partial_tile))), \
                        em.scoped(k_segment=(r.partial_start, r.partial_count)):
                    emit_producer_loads(em, tma, base, before_at(0))
            with T.If(r.finishes), T.Then():
                with em.bound("var_map", em.bind_tile(tail_tile(r.finish_tile))), \
                        em.scoped(k_segment=(r.finish_start, r.finish_count)):
                    emit_producer_loads(em, tma, base + r.partial_count, before_at(r.partial_count))
            if store is not None:
                with T.If(r.finishes):
                    with T.Then():
                        end = base + r.partial_count + r.finish_count
                        wait_stage_free(em, tma, end + stages - 1)
                        stores(tail_tile(r.finish_tile), last_stage(tma, base + r.partial_count, r.finish_count),
                               final=True)
                    with T.Else():
                        finish_producer_stores()
        if store is not None:
            with T.Else():
                wait_stage_free(em, tma, base + stages - 1)
                whole_tile_stores(sk.waves - 1, final=True)


def _stream_k_consumers(em, sk, cta, tail_tile, body, by_producer: bool, pair):
    """The consumers' share of the tail: the contribution (k-loop, then the registers to the workspace), then the
    finish (k-loop, the contributors' partial sums added, then the kernel's statements after the loop)."""
    tma = em.plan.tma
    items = seq_items(body)
    upto = next(i for i, s in enumerate(items) if s.same_as(tma.loop)) + 1
    base = sk.waves * sk.n
    with T.If(cta < sk.ctas), T.Then():
        r = tail_range(sk, cta)
        with T.If(r.partial_count > 0), T.Then():
            with em.bound("var_map", em.bind_tile(tail_tile(r.partial_tile), pair)), \
                    em.scoped(pipeline_base=base, k_segment=(r.partial_start, r.partial_count)):
                em.emit_seq(items[:upto])
                if by_producer:  # no epilogue releases the last k-tile's stage
                    release_stage(em, tma, last_stage(tma, base, r.partial_count))
                emit_partial_sums(em, sk, cta)

        def signal():
            with T.If(r.partial_count > 0), T.Then():
                emit_signal(em, sk, cta)

        with T.If(r.finishes):
            with T.Then(), em.bound("var_map", em.bind_tile(tail_tile(r.finish_tile), pair)), \
                    em.scoped(pipeline_base=base + r.partial_count, k_segment=(r.finish_start, r.finish_count)):
                em.emit_seq(items[:upto])
                signal()  # only now: the contribution's stores drained under this k-loop's MMAs
                emit_fixup(em, sk, cta, r.finish_tile)  # its consumer barrier also orders the loop and what follows
                em.emit_seq(items[upto:])
            with T.Else():
                signal()

"""Persistent CTAs (`KernelPlan.persistent`, planned by `analysis/persistent.py`), emitted: each CTA walks its
tiles with the kernel body, and the stream-K roles of the last wave (stream_k.py).
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..analysis.cluster import CLUSTER_SIZE
from ..exprs import const_int
from ..irwalk import seq_items
from .epilogue import emit_producer_stores, finish_producer_stores
from .stream_k import emit_fixup, emit_partial_sums, emit_signal, tail_range
from .tma import (
    emit_producer_loads,
    emit_producer_role,
    emit_producer_tail,
    enter_consumer_role,
    last_stage,
    release_stage,
    wait_stage_free,
)

__all__ = ["emit_persistent_body"]


def emit_persistent_body(em, body):
    """The threads' code of a persistent kernel: the roles split first, then each walks this CTA's tiles (and,
    with stream-K, its share of the last wave's k-tiles)."""
    pp, tma = em.plan.persistent, em.plan.tma
    cta = em.plan.grid["blockIdx.x"][0]
    sk = pp.stream_k
    if pp.multicast is None:
        walker, walkers, walked, pair = cta, pp.ctas, pp.tiles, None
    # a cluster walks pairs of tiles (2c, 2c + 1 along the pair axis); its CTA of rank r takes tile 2c + r
    else:
        walker, walkers, walked = (
            tirx.floordiv(cta, CLUSTER_SIZE),
            pp.ctas // CLUSTER_SIZE,
            pp.tiles // CLUSTER_SIZE,
        )
        pair = (pp.multicast.axis, em.cluster_rank)
    # this CTA's whole tiles
    count = sk.waves if sk is not None else tirx.floordiv(walked - walker + (walkers - 1), walkers)
    n = const_int(tma.loop.extent) if sk is not None else em.expr(tma.loop.extent)

    def tile_of(i):
        return walker + i * walkers  # the linear index of this CTA's i-th whole tile

    def tail_tile(t):
        return sk.waves * pp.ctas + t  # the linear index of tail tile t (stream-K)

    def tiles(name):
        """A loop over this CTA's whole tiles with the grid variables bound: yields
        (loop counter, var_map entries)."""
        with T.serial(0, count) as i:
            IRBuilder.name(name, i)
            em.bind_range(i, count)
            yield i, em.bind_tile(tile_of(i), pair)

    store = em.plan.tma_store if em.plan.tma_store is not None and em.plan.tma_store.by_producer else None

    def stores(lin, stage, final=False):
        """The TMA stores of tile `lin`, staged in the consumers' epilogue with the
        last k-tile's stage `stage`."""
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
    """The producer's share of the tail: the loads of its contribution, then of its finish. With producer
    stores, the last whole tile's stores go before ring position base + S - 1 is refilled (each range has more
    than S k-tiles: stream_k.py), and the finished tile's after the loads."""
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
                        stores(
                            tail_tile(r.finish_tile),
                            last_stage(tma, base + r.partial_count, r.finish_count),
                            final=True,
                        )
                    with T.Else():
                        finish_producer_stores()
        if store is not None:
            with T.Else():
                wait_stage_free(em, tma, base + stages - 1)
                whole_tile_stores(sk.waves - 1, final=True)


def _stream_k_consumers(em, sk, cta, tail_tile, body, by_producer: bool, pair):
    """The consumers' share of the tail: the contribution (k-loop, then the registers to the workspace), then
    the finish (k-loop, the contributors' partial sums added, then the kernel's statements after the loop)."""
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
            with (
                T.Then(),
                em.bound("var_map", em.bind_tile(tail_tile(r.finish_tile), pair)),
                em.scoped(pipeline_base=base + r.partial_count, k_segment=(r.finish_start, r.finish_count)),
            ):
                em.emit_seq(items[:upto])
                signal()  # only now: the contribution's stores drained under this k-loop's MMAs
                # its consumer barrier also orders the loop and what follows
                emit_fixup(em, sk, cta, r.finish_tile)
                em.emit_seq(items[upto:])
            with T.Else():
                signal()

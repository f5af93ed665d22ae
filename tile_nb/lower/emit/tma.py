"""The warp-specialized TMA pipeline that `analysis/tma.py` plans (`KernelPlan.tma`), emitted: the tensor maps
on the host, the stage barriers, the producer warp's loads and the consumers' loop.
"""
from __future__ import annotations

import contextlib

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..analysis.cluster import CLUSTER_SIZE
from ..analysis.layout import tirx_bits
from ..analysis.tma import TmaPlan
from ..irwalk import buffers_touched
from . import intrin
from .mbarrier import (
    cluster_sync,
    fence_mbarrier_init,
    mbarrier_arrive,
    mbarrier_arrive_cluster,
    mbarrier_expect_tx,
    mbarrier_init,
    mbarrier_wait,
    tma_load,
)
from .wgmma import PINGPONG_BARRIER, drain_accumulators, fence_registers, wait_for_gemm

__all__ = ["emit_barrier_init", "emit_consumer_loop", "emit_producer_loads", "emit_producer_role",
           "emit_producer_tail", "emit_tensor_maps", "emit_ws_loop", "enter_consumer_role", "last_stage",
           "loop_bounds", "release_stage", "tensormap", "wait_stage_free"]


_L2_PROMOTION_256B = 3


# ---- host side: one tensor map per (tensor, box, swizzle) --------------------------------------------------

def emit_tensor_maps(em):
    """Bind and encode the tensor maps (host code, before the kernel launch): `em.tensor_maps[copy]`."""
    plan = em.plan.tma
    if plan is None:
        return
    seen = {}
    multicast = _multicast(em)
    for i, c in enumerate(plan.copies):
        # a multicast copy is loaded in halves (cluster.py), which may be boxes of their own extent
        box = (
            multicast.halves[0][0].dims if multicast is not None and i == multicast.copy else c.boxes[0].dims
        )
        key = (c.global_buf, box, c.swizzle)
        if key not in seen:
            seen[key] = tensormap(c.global_buf, box, c.swizzle)
        em.tensor_maps[c] = seen[key]


def tensormap(buf, box, swizzle: int):
    """A tensor map of the global tensor `buf` for boxes of `box` elements (innermost first), encoded on the
    host (emitted where host code goes, before the launch); the handle the kernel's TMA calls take."""
    rank = len(buf.shape)
    dims = [buf.shape[rank - 1 - i] for i in range(rank)]  # innermost first
    elem = tirx_bits(buf.dtype) // 8
    strides, acc = [], elem
    for d in dims[:-1]:
        acc = acc * d
        strides.append(acc)  # bytes to step dims 1.. (dim 0 is contiguous)
    tmap = T.Bind(tirx.tvm_stack_alloca("tensormap", 1), T.handle("tensormap"))
    IRBuilder.name(f"{buf.name}_tensormap", tmap)
    T.evaluate(tirx.tensormap_encode_tiled(
        tmap, buf.data, *dims, *strides, *box, *([1] * rank),
        descriptor_dtype=_descriptor_dtype(buf.dtype), rank=rank, swizzle=swizzle,
        l2_promotion=_L2_PROMOTION_256B))
    return tmap


def _descriptor_dtype(dtype) -> str:
    """The tensor map's element type: TMA only moves bytes, so 8-bit floats travel as uint8 (the driver's
    tensor map types have no fp8 entry)."""
    return "uint8" if tirx_bits(dtype) == 8 else str(dtype)


# ---- device side ------------------------------------------------------------------------------------

def _full(em, plan: TmaPlan, s, group: int):
    return intrin.address_of(em.barriers, [s * len(plan.arrivals) + group])


def _empty(em, plan: TmaPlan, s, group: int):
    return intrin.address_of(em.barriers, [(plan.stages + s) * len(plan.arrivals) + group])


def _multicast(em):
    """The persistent kernel's cluster multicast (cluster.py), or None."""
    return em.plan.persistent.multicast if em.plan.persistent is not None else None


def _release(em, plan: TmaPlan, s, groups, when=None):
    """Lane 0 of each consumer warp: the warp is done with these arrival groups' tiles of stage `s`. In a
    cluster, a multicast tile's stage is released in both CTAs (the peer's producer writes it too): lane r
    arrives on CTA r's barrier, as CUTLASS spreads them."""
    lane = tirx.floormod(em.tx, 32)
    multicast = _multicast(em)
    shared = multicast.groups if multicast is not None else ()
    local, remote = [g for g in groups if g not in shared], [g for g in groups if g in shared]
    if local:
        with T.If(lane == 0 if when is None else tirx.And(when, lane == 0)), T.Then():
            for g in local:
                T.evaluate(mbarrier_arrive(_empty(em, plan, s, g)))
    if remote:
        lanes = lane < CLUSTER_SIZE
        with T.If(lanes if when is None else tirx.And(when, lanes)), T.Then():
            for g in remote:
                T.evaluate(mbarrier_arrive_cluster(_empty(em, plan, s, g), lane))


def emit_barrier_init(em):
    """Thread 0 initialises the stage barriers; every thread (producer included) waits for that."""
    plan = em.plan.tma
    if plan is None:
        return
    view = T.decl_buffer(
        (plan.barrier_count,),
        "uint64",
        data=em.pool.data,
        byte_offset=em.plan.barrier_offset,
        scope="shared.dyn",
    )
    IRBuilder.name("stage_barriers", view)
    em.barriers = view
    multicast = _multicast(em)
    with T.If(em.tx == 0), T.Then():
        for s in range(plan.stages):
            for g in range(len(plan.arrivals)):
                # the producer's expect_tx arrival (+ bytes)
                T.evaluate(mbarrier_init(_full(em, plan, s, g), 1))
                # one arrival per consumer warp (of both CTAs of a cluster for a multicast tile)
                ctas = CLUSTER_SIZE if multicast is not None and g in multicast.groups else 1
                T.evaluate(mbarrier_init(_empty(em, plan, s, g), ctas * em.threads // 32))
        T.evaluate(fence_mbarrier_init())
    T.evaluate(cluster_sync() if multicast is not None else intrin.cta_sync())


def emit_ws_loop(em, loop):
    """The loop at its place in the kernel body: the producer's branch and the consumers' branch.
    In a persistent kernel (persistent.py) the roles split around the loop over tiles instead, and
    only the consumers' part of the loop is emitted here, at ring position `em.scope.pipeline_base`
    (the k-tiles of earlier tiles)."""
    plan = em.plan.tma
    start, n = loop_bounds(em, plan)
    if em.plan.persistent is not None:
        emit_consumer_loop(em, plan, start, n, em.scope.pipeline_base)
        return
    if plan.producer_threads == 0:  # the consumers' first thread issues the loads, stages - 1 k-tiles ahead
        with T.If(em.tx == 0), T.Then():
            _emit_producer(em, plan, start, tirx.min(n, plan.stages - 1))
        emit_consumer_loop(em, plan, start, n)
        return
    with T.If(tirx.Not(em.is_consumer())):
        with T.Then():
            emit_producer_role(em, plan, lambda: _emit_producer(em, plan, start, n))
        with T.Else(), em.scoped(consumer=True):
            enter_consumer_role(em, plan)
            emit_consumer_loop(em, plan, start, n)


def loop_bounds(em, plan: TmaPlan) -> tuple:
    """(first k-tile, trip count) of the pipelined loop being emitted: the whole loop, or the segment of its
    k-tiles a stream-K CTA runs of a tile (`em.scope.k_segment`, stream_k.py)."""
    start, n = em.expr(plan.loop.min), em.expr(plan.loop.extent)
    if em.scope.k_segment is None:
        return start, n
    first, count = em.scope.k_segment
    return start + first, count


def emit_producer_role(em, plan: TmaPlan, loads):
    """The producer threads' branch: hand registers over, `loads()` on the producer's first thread, leave."""
    if plan.registers:
        T.evaluate(intrin.set_max_registers("dec", plan.registers[0]))
    with T.If(em.tx == em.threads), T.Then():
        loads()
    if plan.registers:
        # Leave now: ptxas honours setmaxnreg only where what is live fits, and the consumers' fragments
        # would otherwise be live here (used after the loop, on paths the producer does not take).
        T.evaluate(T.thread_return())


def enter_consumer_role(em, plan: TmaPlan):
    """What the consumer threads do once, before their first k-tile."""
    if plan.registers:
        T.evaluate(intrin.set_max_registers("inc", plan.registers[1]))
    if plan.pingpong:
        _let_first_warpgroup_start(em, plan.pingpong)


def emit_consumer_loop(em, plan: TmaPlan, start, n, base=0):
    """The consumers' k-loop. `base`: k-tiles of the stage ring used before this loop (persistent kernels);
    then every stage is released by the end, so that the producer can refill it for the next tile."""
    if plan.overlap is not None:
        _emit_overlapped_consumer(em, plan, start, n, base)
    else:
        _emit_consumer(em, plan, start, n, base)


class _Iteration:
    """Emitting statements of the loop body as iteration `k` (stage k % S) of the consumers' loop."""

    def __init__(self, em, plan: TmaPlan, start, k, base=0):
        self.em, self.plan, self.k = em, plan, k
        self.s = tirx.floormod(base + k, plan.stages)
        self.parity = tirx.floormod(tirx.floordiv(base + k, plan.stages), 2)
        self.start = start
        self.waits = {use: g for g, (use, _) in enumerate(plan.arrivals)}

    @contextlib.contextmanager
    def scope(self, **changes):
        em = self.em
        stage = {c.tile_buffer: self.s for c in self.plan.copies}
        with em.bound("var_map", {self.plan.loop.loop_var: self.start + self.k}), em.bound("stage", stage), \
                em.scoped(loop_depth=em.scope.loop_depth + 1, **changes):
            yield

    def emit(self, index: int):
        """rest[index], after waiting for the tiles it is the first to read."""
        if index in self.waits:
            T.evaluate(mbarrier_wait(_full(self.em, self.plan, self.s, self.waits[index]), self.parity))
        self.em.emit_seq([self.plan.rest[index]])


def _emit_consumer(em, plan: TmaPlan, start, n, base):
    everything = range(len(plan.arrivals))
    with T.serial(0, n) as k:
        IRBuilder.name(plan.loop.loop_var.name, k)
        em.bind_range(k, n)
        it = _Iteration(em, plan, start, k, base)
        if plan.producer_threads == 0 and not plan.in_flight:
            _load_ahead(em, plan, start, k, n)  # into the stage released at the end of iteration k - 1
        with it.scope(mma_in_flight=plan.in_flight, pingpong=plan.pingpong):
            for i in range(len(plan.rest)):  # register-only besides the T.gemm: no CTA barriers
                it.emit(i)
        if plan.in_flight:
            # wait_group 1 in the gemm: k-1's MMAs are done, so its stage can be refilled.
            _release(em, plan, tirx.floormod(base + k + plan.stages - 1, plan.stages), everything, when=k > 0)
        else:
            # wait_group 0 in the gemm: this iteration's MMAs are done with stage s.
            _release(em, plan, it.s, everything)
        if plan.producer_threads == 0 and plan.in_flight:
            _load_ahead(em, plan, start, k, n)  # into k - 1's stage, released just now
    if plan.in_flight:
        drain_accumulators(em, plan.rest)
        # the last k-tile's stage, which no later iteration releases (the epilogue does, when the producer
        # issues the TMA stores: epilogue.py)
        if em.plan.persistent is not None and not (
            em.plan.tma_store is not None and em.plan.tma_store.by_producer
        ):
            _release(em, plan, tirx.floormod(base + n + plan.stages - 1, plan.stages), everything, when=n > 0)


def _emit_overlapped_consumer(em, plan: TmaPlan, start, n, base):
    """Iteration k: head and G1 of k; G2 of k-1; wait for G1; release G1's tiles; early
    statements (under G2 of k-1); wait for G2; release its tiles of stage k-1; late statements.
    Iteration 0 is peeled (no G2 before it):
    under a branch around G2's issue ptxas no longer lets the early statements run under it. After the loop:
    G2 of the last iteration. (Overlap says when this keeps the loop's meaning.)"""
    ov, rest = plan.overlap, plan.rest
    g1, g2 = rest[ov.first], rest[-1]
    early_groups = tuple(g for g in range(len(plan.arrivals)) if g not in ov.late_groups)
    last = len(rest) - 1
    with T.If(n > 0), T.Then():
        first = _Iteration(em, plan, start, tirx.const(0, "int32"), base)
        with first.scope(mma_deferred=True):
            for i in range(ov.first + 1):
                first.emit(i)
        with first.scope():
            wait_for_gemm(em, g1, 0)
            _release(em, plan, first.s, early_groups)
            for i in range(ov.first + 1, last):
                first.emit(i)
    with T.serial(0, n - 1) as j:
        IRBuilder.name(plan.loop.loop_var.name, j)
        em.bind_range(j, n - 1)
        it, prev = _Iteration(em, plan, start, j + 1, base), _Iteration(em, plan, start, j, base)
        with it.scope(mma_deferred=True):
            for i in range(ov.first + 1):
                it.emit(i)
        with prev.scope(mma_deferred=True):
            prev.emit(last)
        with it.scope():
            wait_for_gemm(em, g1, 1)  # G1 of k is done; G2 of k-1 may still run
            _release(em, plan, it.s, early_groups)
            for i in range(ov.first + 1, ov.late):
                it.emit(i)
            # what the early statements compute is done before the wait, not scheduled after it
            fence_registers(em, _written(rest[ov.first + 1:ov.late]))
            wait_for_gemm(em, g2, 0)
        _release(em, plan, prev.s, ov.late_groups)
        with it.scope():
            for i in range(ov.late, last):
                it.emit(i)
    with T.If(n > 0), T.Then():
        final = _Iteration(em, plan, start, n - 1, base)
        with final.scope(mma_deferred=True):
            final.emit(last)
        wait_for_gemm(em, g2, 0)
        if em.plan.persistent is not None:  # the tiles of the last k-tile that G2 read
            _release(em, plan, final.s, ov.late_groups)


def _written(stmts) -> list:
    """The buffers these statements write, in first-write order."""
    out = []
    for st in stmts:
        for b in buffers_touched(st)[1]:
            if not any(b.same_as(x) for x in out):
                out.append(b)
    return out


def _let_first_warpgroup_start(em, groups: int):
    """The last warpgroup's arrival that lets warpgroup 0 issue its first T.gemm (wgmma.py:
    lower_gemm_wgmma waits for its turn)."""
    with T.If(tirx.floordiv(em.tx, 128) == groups - 1), T.Then():
        T.evaluate(intrin.named_barrier_arrive(PINGPONG_BARRIER, 256))


def _emit_producer(em, plan: TmaPlan, start, n, base=0, before=None):
    """The producer's k-loop: k-tile k goes to ring position base + k (stage (base + k) % S). `before(k)` is
    emitted in each iteration once the stage is free, before its loads."""
    with T.serial(0, n) as k:
        IRBuilder.name(plan.loop.loop_var.name + "_load", k)
        em.bind_range(k, n)
        _load_position(em, plan, start, k, base, before)


def _load_ahead(em, plan: TmaPlan, start, k, n):
    """Without a producer warp: in iteration k the consumers' first thread loads k-tile k + S - 1 (stage
    (k - 1) % S), once every consumer warp has released that stage."""
    ahead = k + plan.stages - 1
    with T.If(tirx.And(em.tx == 0, ahead < n)), T.Then():
        _load_position(em, plan, start, ahead)


def _load_position(em, plan: TmaPlan, start, k, base=0, before=None):
    """k-tile k of the loop into ring position base + k (stage (base + k) % S), once its stage is free."""
    s = tirx.floormod(base + k, plan.stages)
    with em.bound("var_map", {plan.loop.loop_var: start + k}):
        if before is not None:
            wait_stage_free(em, plan, base + k)
            before(k)
        for g, (_, group) in enumerate(plan.arrivals):
            if before is None:
                _wait_empty(em, plan, base + k, g)
            T.evaluate(mbarrier_expect_tx(_full(em, plan, s, g), plan.group_bytes(group)))
            for ci in group:
                c = plan.copies[ci]
                with em.marked(c.call):
                    _emit_loads(em, c, s, _full(em, plan, s, g))


def emit_producer_loads(em, plan: TmaPlan, base, before=None):
    """The producer's k-loop of the current tile (persistent kernels: the grid variables are bound by the
    caller; a stream-K segment by `em.scope.k_segment`); `before(k)` as in `_emit_producer`."""
    start, n = loop_bounds(em, plan)
    _emit_producer(em, plan, start, n, base, before)


def last_stage(plan: TmaPlan, base, n):
    """The stage of the last k-tile of a loop of `n` k-tiles at ring position `base`."""
    return tirx.floormod(base + n - 1, plan.stages)


def wait_stage_free(em, plan: TmaPlan, position):
    """The producer waits until ring position `position`'s stage is free in every arrival group."""
    for g in range(len(plan.arrivals)):
        _wait_empty(em, plan, position, g)


def release_stage(em, plan: TmaPlan, s):
    """Lane 0 of each consumer warp releases stage `s` in every arrival group (after a warp sync: the lane
    publishes what the whole warp wrote there)."""
    T.evaluate(intrin.warp_sync())
    _release(em, plan, s, range(len(plan.arrivals)))


def emit_producer_tail(em, plan: TmaPlan, end):
    """After the producer's last load (ring position `end`): wait until every stage of the shared tiles was
    released, by both CTAs of a cluster. The peer's consumers arrive on this CTA's barriers until
    then, so this CTA, which the producer's thread keeps alive, must not exit before (CUTLASS's
    producer tail does the same)."""
    multicast = _multicast(em)
    if multicast is None:
        return
    for j in range(plan.stages):
        for g in multicast.groups:
            _wait_empty(em, plan, end + j, g)


def _wait_empty(em, plan: TmaPlan, position, group: int):
    """The producer waits until ring position `position`'s stage is free: released after its use at position -
    stages (the first round passes at once: parity 1 of a fresh barrier counts as complete)."""
    stages = plan.stages
    T.evaluate(mbarrier_wait(_empty(em, plan, tirx.floormod(position, stages), group),
                             tirx.bitwise_xor(tirx.floormod(tirx.floordiv(position, stages), 2), 1)))


def _emit_loads(em, c, s, full):
    """The TMA loads of one copy into stage `s` (a box per TMA call)."""
    from .copy import Operand

    src = Operand(em, c.call.args[1])
    rank = len(c.global_buf.shape)
    start_coords = [src.mins[rank - 1 - i] for i in range(rank)]  # innermost first

    def load(box, multicast: bool):
        dst = intrin.address_of(em.view(c.tile_buffer), [s * c.tile_elems + box.elem_offset])
        coords = [tirx.Cast("int32", x + d) if str(getattr(x, "ty", "int32")) != "int32" else x + d
                  for x, d in zip(start_coords, box.coord_shift, strict=True)]
        T.evaluate(
            tma_load(rank, dst, em.tensor_maps[c], full, coords, (1 << CLUSTER_SIZE) - 1 if multicast else 0)
        )

    multicast = _multicast(em)
    if multicast is None or not c.call.same_as(em.plan.tma.copies[multicast.copy].call):
        for box in c.boxes:
            load(box, False)
        return
    # each CTA of the cluster loads its half of the tile into both (CLUSTER_SIZE == 2)
    with T.If(em.cluster_rank == 0):
        with T.Then():
            for box in multicast.halves[0]:
                load(box, True)
        with T.Else():
            for box in multicast.halves[1]:
                load(box, True)

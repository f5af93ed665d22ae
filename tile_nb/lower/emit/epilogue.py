"""The epilogue of a TMA GEMM through shared memory and TMA stores.

`T.copy(C_local, C[...])` after the pipelined loop, with C_local the wgmma accumulator: instead of every thread
storing its registers to global memory (4-byte stores, half a 32-byte sector each), the consumers write them into
a staging tile in shared memory (64-column, 128-byte-swizzled panels: conflict-free, and the layout a TMA box with
SWIZZLE_128B reads), and one thread hands each panel to the TMA unit (`cp.async.bulk.tensor` global <- shared),
which writes the tile in the background (clipping it at C's edges) while the consumers go on to the next tile's
main loop. The staging tile holds the whole output tile, or as many panels as the shared memory left allows: the
tile is then staged a chunk at a time.

    per chunk of panels: thread 0 waits until earlier stores have read the staging tile (wait_group.read 0);
                         consumer barrier; every consumer writes its registers of the chunk's columns;
                         fence.proxy.async (the TMA unit sees those writes); consumer barrier;
                         thread 0: one TMA store per panel, commit_group
    at the kernel's end: thread 0 waits for its stores (wait_group 0)

Stores by the producer (the default for a persistent kernel with a producer warp, one wgmma group in flight, no
cluster, and a static loop of at least `stages` k-tiles; `tile_nb.producer_stores` / TILE_NB_PRODUCER_STORES = 0
turns it off): the consumers write the whole tile, the panels the staging tile lacks into the stage of the tile's
last k-tile (free once every warpgroup's MMAs are done, which one consumer barrier before those panels ensures; B's
32 KiB stage holds two panels of a 128x256 tile), then fence and release that stage, and go on to the next tile
without a store wait. The producer waits for that
stage anyway before refilling it (k-tile S - 1 of the next tile); there it issues the stores, waits until they have
read shared memory (wait_group.read 0) and only then refills the stage. The consumers reach the next epilogue
only after consuming that refill, so they never overwrite panels a store has not read. The last tile's stores are
issued after the producer's loop, and waited for in full.

    consumers:  registers -> staging tile; consumer barrier; registers -> last k-tile's stage (the spill, if any);
                fence.proxy.async; release that stage
    producer:   for tile i, k-tile S - 1: wait for the stage (released by tile i - 1's epilogue); tile i - 1's
                stores; commit; wait_group.read 0; load k-tile S - 1 of tile i

Chosen for kernels with the TMA pipeline when C is a contiguous 16-bit global tensor of static shape with 16-byte
rows, aligned, and the copy writes whole [rows <= 256, 64k] accumulator tiles. In a persistent kernel (persistent.py) the stores
overlap the next tile; in a grid of one wave the CTA waits for them before it exits, and still gains from the
full-line writes (docs/decisions.md#the-tma-store-epilogue). `tile_nb.tma_store` (TILE_NB_TMA_STORE) = 0
turns it off, = 1 also says in the plan why a kernel did not get it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from . import intrin
from ..analysis.budget import SHARED_PER_SM, WGMMA_HEADROOM, ctas_per_sm, layout_pool, max_shared_bytes
from .emitter import register_kernel_hook, register_statement
from ..exprs import conjunction, const_int
from ..analysis.decisions import Refusal
from ..irwalk import region_of, scope_of, seq_items
from ..analysis.layout import SharedTile, WgmmaAccLayout, tirx_bits
from .intrin import device_helper
from .tma import last_stage, loop_bounds, release_stage, tensormap

__all__ = ["TmaStore", "describe_store", "emit_producer_stores", "emit_store_map", "emit_tma_store", "finish_producer_stores", "finish_stores",
           "plan_tma_store"]

_PANEL = 64  # columns of a 128-byte panel of 16-bit elements


@dataclass(frozen=True)
class TmaStore:
    call: tirx.Stmt  # the T.copy(C_local -> C[...]) it replaces
    stage: tirx.Buffer  # the staging tile's buffer (a key of plan.shared)
    global_buf: tirx.Buffer
    rows: int
    panels: int  # 64-column panels of the output tile
    chunk: int  # panels staged at a time (in the staging tile)
    by_producer: bool = False  # the producer warp issues the stores (see "Stores by the producer" above)
    spill: object = None  # by_producer: the tma.TmaCopy whose last-k-tile stage holds panels [chunk, panels)


def plan_tma_store(options, tma, persistent, threads, threads_body, accumulators, shared, barrier_bytes, arch, unaligned):
    """(TmaStore or None, the plan's note on it, the staging SharedTile or None): `barrier_bytes` are the pool's
    mbarriers, placed after the tiles; `unaligned` the tensors whose data pointer is not 16-byte aligned in this
    call."""
    mode = options.tma_store
    if mode is False:
        return None, None, None
    if tma is None:
        return None, (Refusal("tma_store.no_tma", "no TMA store (it comes with the TMA pipeline)") if mode else None), None
    plan, why, tile = _plan(threads_body, accumulators, shared, barrier_bytes, arch, unaligned,
                            threads + tma.producer_threads)
    if plan is not None and persistent is not None:
        plan = _by_producer(options, plan, tma, persistent)
    return plan, (why if plan is None and mode else None), tile


def describe_store(store: TmaStore, persistent) -> str:
    """The plan's note on the TMA-store epilogue, for people."""
    if store.by_producer:
        where = (f", {store.panels - store.chunk} of them in the last k-tile's stage of {store.spill.tile_buffer.name}"
                 if store.spill is not None else "")
        return f"epilogue through shared memory ({store.panels} panels{where}) and TMA stores issued by the producer warp"
    note = f"epilogue through shared memory and TMA stores ({store.chunk} of {store.panels} panels at a time)"
    return note + ("; a CTA of one tile waits for its stores before it exits" if persistent is None else "")


def _by_producer(options, store: TmaStore, tma, persistent) -> TmaStore:
    """The store with the producer warp issuing it, where that is legal (a persistent kernel with a producer warp,
    no cluster, one wgmma group in flight, a static trip count of at least `stages`, and room in the last
    k-tile's stage for the panels the staging tile lacks); else the store as planned."""
    if options.producer_stores is False:
        return store
    n = const_int(tma.loop.extent)
    if persistent.multicast is not None or tma.producer_threads == 0 or tma.overlap is not None \
            or not tma.in_flight or n is None or n < tma.stages:
        return store
    spill = None
    if store.chunk < store.panels:
        need = (store.panels - store.chunk) * store.rows * _PANEL * tirx_bits(store.global_buf.dtype) // 8
        stage_bytes = {c: c.tile_elems * tirx_bits(c.tile_buffer.dtype) // 8 for c in tma.copies}
        fits = [c for c in tma.copies if stage_bytes[c] >= need and stage_bytes[c] % 1024 == 0]  # swizzled panels
        if not fits:
            return store
        spill = fits[0]
    return dataclasses.replace(store, by_producer=True, spill=spill)


def _plan(threads_body, accumulators, shared, barrier_bytes, arch, unaligned, launched):
    copies = [s for s in seq_items(threads_body) if isinstance(s, tirx.TilePrimitiveCall)
              and s.op.name == "tirx.tile.copy" and region_of(s.args[1])[0] in accumulators]
    if len(copies) != 1:
        return None, Refusal("tma_store.epilogue", "no TMA store (the epilogue is not one T.copy of the accumulator to global memory)"), None
    call = copies[0]
    dst, drng = region_of(call.args[0])
    acc = region_of(call.args[1])[0]
    if scope_of(dst) != "global" or not isinstance(accumulators[acc], WgmmaAccLayout):
        return None, Refusal("tma_store.not_wgmma", "no TMA store (the accumulator is not copied to a global tensor from wgmma registers)"), None
    rows, cols = (int(x) for x in acc.shape)
    if tirx_bits(dst.dtype) != 16 or len(dst.shape) != 2 or list(dst.strides) or cols % _PANEL or rows > 256:
        return None, Refusal("tma_store.shape", f"no TMA store ({dst.name} is not a 2-d 16-bit tensor written in 64-column panels of at "
                      "most 256 rows)"), None
    if [const_int(e) for _, e in drng] != [rows, cols]:
        return None, Refusal("tma_store.partial", f"no TMA store (the copy does not write the whole tile into {dst.name})"), None
    if dst.name in unaligned:
        return None, Refusal("tma_store.unaligned", f"no TMA store ({dst.name}'s data pointer is not 16-byte aligned in this call)"), None
    if any(const_int(d) is None for d in dst.shape):
        # Kept to static shapes until the GPU tests cover T.dynamic outputs (TMA loads of dynamic tensors are).
        return None, Refusal("tma_store.dynamic", f"no TMA store ({dst.name} has a T.dynamic dimension)"), None
    inner = const_int(dst.shape[-1])
    if inner * 2 % 16:
        return None, Refusal("tma_store.rows", f"no TMA store ({dst.name}'s rows are not a multiple of 16 bytes)"), None
    panels = cols // _PANEL
    used = list(shared.values())
    limit = _pool_limit(arch, launched, accumulators, used, barrier_bytes)
    chunk = panels
    while chunk >= 1:
        tile = SharedTile(_stage_buffer(rows, chunk, dst.dtype), (rows, chunk * _PANEL), str(dst.dtype), panel=True,
                          name=f"{dst.name}_stage")
        _, end = layout_pool(used + [tile])
        if (end + 7) // 8 * 8 + barrier_bytes <= limit:
            return TmaStore(call, tile.buffer, dst, rows, panels, chunk), None, tile
        chunk //= 2
    return None, Refusal("tma_store.no_room", "no TMA store (no shared memory left for a 64-column staging panel)"), None


def _pool_limit(arch, launched, accumulators, used, barrier_bytes) -> int:
    """The shared pool the staging tile may grow to: what one CTA may have, but no more than keeps as many CTAs on
    an SM as registers and the other tiles allow (the seed GEMM has three of 48 KiB; its whole 32 KiB output tile
    staged at once would leave room for two)."""
    registers = max(a.regs for a in accumulators.values()) + WGMMA_HEADROOM
    _, end = layout_pool(used)
    keep = ctas_per_sm(launched, registers, (end + 7) // 8 * 8 + barrier_bytes)
    return min(max_shared_bytes(arch), SHARED_PER_SM // keep - 1024)


def _stage_buffer(rows, panels, dtype):
    return tirx.decl_buffer((rows, panels * _PANEL), str(dtype), "C_stage", scope="shared.dyn")


# ---- host: C's tensor map --------------------------------------------------------------------------------------

@register_kernel_hook("host")
def emit_store_map(em):
    store = em.plan.tma_store
    if store is not None:
        em.store_map = tensormap(store.global_buf, (_PANEL, store.rows), swizzle=3)


# ---- device ---------------------------------------------------------------------------------------------------

@register_kernel_hook("thread")
def declare_spill_view(em):
    """The spill tile's stages seen as C's dtype (an fp8 B tile holds 16-bit output panels): `em.spill_view`."""
    store = em.plan.tma_store
    if store is None or store.spill is None:
        return
    tile = em.tile(store.spill.tile_buffer)
    view = T.decl_buffer((tile.stages * _spill_stage_elems(store),), str(store.global_buf.dtype), data=em.pool.data,
                         byte_offset=tile.byte_offset, scope="shared.dyn")
    IRBuilder.name(f"{tile.buffer.name}_as_{store.global_buf.name}", view)
    em.spill_view = view


def _spill_stage_elems(store: TmaStore) -> int:
    """One stage of the spill tile, in elements of C's dtype."""
    bits = tirx_bits(store.spill.tile_buffer.dtype)
    return store.spill.tile_elems * bits // tirx_bits(store.global_buf.dtype)


def tma_store(dst_smem, tmap, coords):
    ops = ", ".join(f"%{2 + i}" for i in range(len(coords)))
    names = ", ".join(f"int c{i}" for i in range(len(coords)))
    cons = "".join(f', "r"(c{i})' for i in range(len(coords)))
    body = ('  unsigned s = (unsigned)__cvta_generic_to_shared(src);\n'
            f'  asm volatile("cp.async.bulk.tensor.{len(coords)}d.global.shared::cta.bulk_group"\n'
            f'               " [%1, {{{ops}}}], [%0];\\n" :: "r"(s), "l"(tmap){cons} : "memory");')
    return device_helper(f"tnb_tma_store_{len(coords)}d", f"void* src, unsigned long long tmap, {names}", body,
                      dst_smem, tirx.address_of(tmap), *coords)


def _bulk_commit():
    return intrin.asm_statement("tnb_bulk_commit", "cp.async.bulk.commit_group;")


def _bulk_wait_read():
    return intrin.asm_statement("tnb_bulk_wait_read0", "cp.async.bulk.wait_group.read 0;")


def _bulk_wait():
    return intrin.asm_statement("tnb_bulk_wait0", "cp.async.bulk.wait_group 0;")


@register_statement(lambda em, s: em.plan.tma_store is not None and s.same_as(em.plan.tma_store.call), priority=1)
def emit_tma_store(em, call):
    store = em.plan.tma_store
    if store.by_producer:
        _stage_for_the_producer(em, call, store)
        return
    acc = region_of(call.args[1])[0]
    layout = em.plan.layout(acc)
    regs = em.registers[acc]
    view, tile = em.view(store.stage), em.tile(store.stage)
    starts = [em.expr(m) for m, _ in region_of(call.args[0])[1]]
    issuer = em.tx == 0
    chunk_cols = store.chunk * _PANEL
    for first in range(0, store.panels, store.chunk):
        with T.If(issuer), T.Then():
            T.evaluate(_bulk_wait_read())  # earlier stores have read the staging tile
        em.sync()
        low = first * _PANEL
        _write_registers(em, layout, regs, store, lambda row, col, low=low: [
            (tirx.And(col >= low, col < low + chunk_cols), view, tile.offset2(row, col - low))])
        T.evaluate(intrin.fence_proxy_async())
        em.sync()
        with T.If(issuer), T.Then():
            for p in range(store.chunk):
                if first + p >= store.panels:
                    break
                smem = intrin.address_of(view, [p * store.rows * _PANEL])
                T.evaluate(tma_store(smem, em.store_map, [starts[1] + (first + p) * _PANEL, starts[0]]))
            T.evaluate(_bulk_commit())


def _stage_for_the_producer(em, call, store: TmaStore):
    """Consumers: every register of the tile into its panel (the staging tile's, or the spill tile's stage of this
    tile's last k-tile), a proxy fence, and the release of that stage, which tells the producer the tile is
    staged. The stores of the previous tile have read both places before the producer refilled that stage, which
    these consumers waited for. The spill panels wait for a consumer barrier: every warpgroup's MMAs read the whole
    B tile of that stage, and a warpgroup's own wait covers only its own MMAs
    (docs/decisions.md#the-producer-warp-issues-the-epilogues-stores)."""
    tma = em.plan.tma
    acc = region_of(call.args[1])[0]
    tile = em.tile(store.stage)
    last = last_stage(tma, em.scope.pipeline_base, loop_bounds(em, tma)[1])
    staged_cols = store.chunk * _PANEL
    layout, regs = em.plan.layout(acc), em.registers[acc]

    _write_registers(em, layout, regs, store,
                     lambda row, col: [(col < staged_cols, em.view(store.stage), tile.offset2(row, col))])
    if store.spill is not None:
        em.sync()
        _write_registers(em, layout, regs, store, lambda row, col: [
            (col >= staged_cols, em.spill_view, last * _spill_stage_elems(store) + tile.offset2(row, col - staged_cols))])
    T.evaluate(intrin.fence_proxy_async())
    release_stage(em, tma, last)


def _write_registers(em, layout, regs, store: TmaStore, places):
    """Each thread's accumulator registers, converted to C's dtype, into shared memory: `places(row, col)` lists
    (condition, view, element offset) for the element at (row, col) of the tile."""
    width = layout.vector()
    with T.unroll(0, layout.regs // width) as g:
        r0 = g * width
        row, col = layout.element(em.tx, r0)
        for inside, view, offset in places(row, col):
            with T.If(conjunction(layout.valid(em.tx, r0), inside)), T.Then():
                T.evaluate(intrin.vector_store(intrin.address_of(view, [offset]), intrin.address_of(regs, [r0]),
                                               width, regs.dtype, store.global_buf.dtype))


def emit_producer_stores(em, stage, final: bool = False):
    """The producer's thread, once the consumers released `stage` (the tile's last k-tile's) after staging the
    tile (its grid variables bound by the caller): one TMA store per panel, then wait until they have read shared
    memory (before the stage is refilled), or at the kernel's end until they are done."""
    store = em.plan.tma_store
    starts = [em.expr(m) for m, _ in region_of(store.call.args[0])[1]]
    panel_elems = store.rows * _PANEL
    for p in range(store.panels):
        if p < store.chunk:
            smem = intrin.address_of(em.view(store.stage), [p * panel_elems])
        else:
            smem = intrin.address_of(em.spill_view,
                                     [stage * _spill_stage_elems(store) + (p - store.chunk) * panel_elems])
        T.evaluate(tma_store(smem, em.store_map, [starts[1] + p * _PANEL, starts[0]]))
    T.evaluate(_bulk_commit())
    T.evaluate(_bulk_wait() if final else _bulk_wait_read())


def finish_producer_stores():
    """The producer's thread, at its end where its last stores were waited for only until they read shared memory:
    wait until they are done."""
    T.evaluate(_bulk_wait())


@register_kernel_hook("end")
def finish_stores(em):
    """The issuing thread's stores complete before the CTA (and its shared memory) goes."""
    if em.plan.tma_store is not None and not em.plan.tma_store.by_producer:
        with T.If(em.tx == 0), T.Then():
            T.evaluate(_bulk_wait())

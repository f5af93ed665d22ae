"""The epilogue of a TMA GEMM through shared memory and TMA stores.

`T.copy(C_local, C[...])` after the pipelined loop, with C_local the wgmma accumulator: instead of every
thread storing its registers to global memory (4-byte stores, half a 32-byte sector each), the consumers write
them into a staging tile in shared memory (128-byte-wide, 128-byte-swizzled panels: conflict-free, and the
layout a TMA box with SWIZZLE_128B reads), and one thread hands each panel to the TMA unit
(`cp.async.bulk.tensor` global <- shared), which writes the tile in the background (clipping it at C's edges)
while the consumers go on to the next tile's main loop. The staging tile holds the whole output tile, or as
many panels as the shared memory left allows: the tile is then staged a chunk at a time.

    per chunk of panels: thread 0 waits until earlier stores have read the staging tile (wait_group.read 0);
                         consumer barrier; every consumer writes its registers of the chunk's columns;
                         fence.proxy.async (the TMA unit sees those writes); consumer barrier;
                         thread 0: one TMA store per panel, commit_group
    at the kernel's end: thread 0 waits for its stores (wait_group 0)

Stores by the producer (the default for a persistent kernel with a producer warp, one wgmma group in flight,
no cluster, and a static loop of at least `stages` k-tiles; `tile_nb.producer_stores` /
TILE_NB_PRODUCER_STORES = 0 turns it off): the consumers write the whole tile, the panels the staging tile
lacks into the stage of the tile's last k-tile (free once every warpgroup's MMAs are done, which one consumer
barrier before those panels ensures; B's 32 KiB stage holds two panels of a 128x256 tile), then fence and
release that stage, and go on to the next tile without a store wait. The producer waits for that
stage anyway before refilling it (k-tile S - 1 of the next tile); there it issues the stores, waits until they
have read shared memory (wait_group.read 0) and only then refills the stage. The consumers reach the next
epilogue only after consuming that refill, so they never overwrite panels a store has not read. The last
tile's stores are issued after the producer's loop, and waited for in full.

    consumers:  registers -> staging tile; consumer barrier; registers -> last k-tile's stage (the spill, if
                any); fence.proxy.async; release that stage
    producer:   for tile i, k-tile S - 1: wait for the stage (released by tile i - 1's epilogue); tile i - 1's
                stores; commit; wait_group.read 0; load k-tile S - 1 of tile i

Chosen for kernels with the TMA pipeline when C is a contiguous 8- or 16-bit global tensor of static shape
with 16-byte rows, aligned, and the copy writes whole [rows <= 256, k panels] accumulator tiles (a panel is
128 bytes of a row: 64 columns of 16-bit, 128 of 8-bit elements). An 8-bit C gains most: without it each
thread stores its values one byte at a time. In a
persistent kernel (persistent.py) the stores overlap the next tile; in a grid of one wave the CTA waits
for them before it exits, and still gains from the full-line writes
(docs/decisions.md#the-tma-store-epilogue). `tile_nb.tma_store` (TILE_NB_TMA_STORE) = 0 turns it off, =
1 also says in the plan why a kernel did not get it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tvm import tirx

from ..exprs import const_int
from ..irwalk import region_of, scope_of, seq_items
from .budget import SHARED_PER_SM, WGMMA_HEADROOM, ctas_per_sm, layout_pool, max_shared_bytes
from .decisions import Refusal
from .layout import SharedTile, WgmmaAccLayout, tirx_bits

__all__ = ["TmaStore", "describe_store", "panel_cols", "plan_tma_store"]


def panel_cols(dtype) -> int:
    """Columns of a 128-byte panel of `dtype` (the inner extent of a SWIZZLE_128B TMA box)."""
    return 1024 // tirx_bits(dtype)


@dataclass(frozen=True)
class TmaStore:
    call: tirx.Stmt  # the T.copy(C_local -> C[...]) it replaces
    stage: tirx.Buffer  # the staging tile's buffer (a key of plan.shared)
    global_buf: tirx.Buffer
    rows: int
    panels: int  # 128-byte panels (panel_cols columns) of the output tile
    chunk: int  # panels staged at a time (in the staging tile)
    by_producer: bool = False  # the producer warp issues the stores (see "Stores by the producer" above)
    spill: object = None  # by_producer: the tma.TmaCopy whose last-k-tile stage holds panels [chunk, panels)

    @property
    def panel_cols(self) -> int:
        return panel_cols(self.global_buf.dtype)


def plan_tma_store(
    options, tma, persistent, threads, threads_body, accumulators, shared, barrier_bytes, arch, unaligned,
    declared_in_kernel,
):
    """(TmaStore or None, the plan's note on it, the staging SharedTile or None): `barrier_bytes` are the
    pool's mbarriers, placed after the tiles; `unaligned` the tensors whose data pointer is not 16-byte
    aligned in this call; `declared_in_kernel` the global tensors the kernel declares (PlanFacts)."""
    mode = options.tma_store
    if mode is False:
        return None, None, None
    if tma is None:
        return (
            None,
            (Refusal("tma_store.no_tma", "no TMA store (it comes with the TMA pipeline)") if mode else None),
            None,
        )
    plan, why, tile = _plan(threads_body, accumulators, shared, barrier_bytes, arch, unaligned,
                            declared_in_kernel, threads + tma.producer_threads)
    if plan is not None and persistent is not None:
        plan = _by_producer(options, plan, tma, persistent)
    return plan, (why if plan is None and mode else None), tile


def describe_store(store: TmaStore, persistent) -> str:
    """The plan's note on the TMA-store epilogue, for people."""
    if store.by_producer:
        where = (
            f", {store.panels - store.chunk} of them in the last k-tile's stage of "
            f"{store.spill.tile_buffer.name}"
            if store.spill is not None
            else ""
        )
        return (f"epilogue through shared memory ({store.panels} panels{where}) and TMA stores issued by the "
                "producer warp")
    note = f"epilogue through shared memory and TMA stores ({store.chunk} of {store.panels} panels at a time)"
    return note + ("; a CTA of one tile waits for its stores before it exits" if persistent is None else "")


def _by_producer(options, store: TmaStore, tma, persistent) -> TmaStore:
    """The store with the producer warp issuing it, where that is legal (a persistent kernel with a producer
    warp, no cluster, one wgmma group in flight, a static trip count of at least `stages`, and room in the
    last k-tile's stage for the panels the staging tile lacks); else the store as planned."""
    if options.producer_stores is False:
        return store
    n = const_int(tma.loop.extent)
    if persistent.multicast is not None or tma.producer_threads == 0 or tma.overlap is not None \
            or not tma.in_flight or n is None or n < tma.stages:
        return store
    spill = None
    if store.chunk < store.panels:
        need = (store.panels - store.chunk) * store.rows * 128
        stage_bytes = {c: c.tile_elems * tirx_bits(c.tile_buffer.dtype) // 8 for c in tma.copies}
        # swizzled panels
        fits = [c for c in tma.copies if stage_bytes[c] >= need and stage_bytes[c] % 1024 == 0]
        if not fits:
            return store
        spill = fits[0]
    return dataclasses.replace(store, by_producer=True, spill=spill)


def _plan(threads_body, accumulators, shared, barrier_bytes, arch, unaligned, declared_in_kernel, launched):
    copies = [s for s in seq_items(threads_body) if isinstance(s, tirx.TilePrimitiveCall)
              and s.op.name == "tirx.tile.copy" and region_of(s.args[1])[0] in accumulators]
    if len(copies) != 1:
        return (
            None,
            Refusal(
                "tma_store.epilogue",
                "no TMA store (the epilogue is not one T.copy of the accumulator to global memory)",
            ),
            None,
        )
    call = copies[0]
    dst, drng = region_of(call.args[0])
    acc = region_of(call.args[1])[0]
    if scope_of(dst) != "global" or not isinstance(accumulators[acc], WgmmaAccLayout):
        return (
            None,
            Refusal(
                "tma_store.not_wgmma",
                "no TMA store (the accumulator is not copied to a global tensor from wgmma registers)",
            ),
            None,
        )
    rows, cols = (int(x) for x in acc.shape)
    bits = tirx_bits(dst.dtype)
    if bits not in (8, 16) or len(dst.shape) != 2 or list(dst.strides) or cols % panel_cols(dst.dtype) \
            or rows > 256:
        return (
            None,
            Refusal(
                "tma_store.shape",
                f"no TMA store ({dst.name} is not a 2-d 8- or 16-bit tensor written in 128-byte panels (64 "
                "16-bit or 128 8-bit columns) of at most 256 rows)",
            ),
            None,
        )
    if [const_int(e) for _, e in drng] != [rows, cols]:
        return (
            None,
            Refusal(
                "tma_store.partial", f"no TMA store (the copy does not write the whole tile into {dst.name})"
            ),
            None,
        )
    if dst.name in declared_in_kernel:  # the host encodes tensor maps, and knows no such tensor
        return None, Refusal("tma_store.declared", f"no TMA store ({dst.name} is "
                             f"{declared_in_kernel[dst.name]})"), None
    if dst.name in unaligned:
        return (
            None,
            Refusal(
                "tma_store.unaligned",
                f"no TMA store ({dst.name}'s data pointer is not 16-byte aligned in this call)",
            ),
            None,
        )
    if any(const_int(d) is None for d in dst.shape):
        # Kept to static shapes until the GPU tests cover T.dynamic outputs (TMA
        # loads of dynamic tensors are).
        return (
            None,
            Refusal("tma_store.dynamic", f"no TMA store ({dst.name} has a T.dynamic dimension)"),
            None,
        )
    inner = const_int(dst.shape[-1])
    if inner * bits % 128:
        return (
            None,
            Refusal("tma_store.rows", f"no TMA store ({dst.name}'s rows are not a multiple of 16 bytes)"),
            None,
        )
    panels = cols // panel_cols(dst.dtype)
    used = list(shared.values())
    limit = _pool_limit(arch, launched, accumulators, used, barrier_bytes)
    chunk = panels
    while chunk >= 1:
        tile = SharedTile(
            _stage_buffer(rows, chunk, dst.dtype),
            (rows, chunk * panel_cols(dst.dtype)),
            str(dst.dtype),
            panel=True,
            name=f"{dst.name}_stage",
        )
        _, end = layout_pool(used + [tile])
        if (end + 7) // 8 * 8 + barrier_bytes <= limit:
            return TmaStore(call, tile.buffer, dst, rows, panels, chunk), None, tile
        chunk //= 2
    return (
        None,
        Refusal("tma_store.no_room",
                "no TMA store (no shared memory left for a 128-byte-wide staging panel)"),
        None,
    )


def _pool_limit(arch, launched, accumulators, used, barrier_bytes) -> int:
    """The shared pool the staging tile may grow to: what one CTA may have, but no more than keeps as many
    CTAs on an SM as registers and the other tiles allow (the seed GEMM has three of 48 KiB; its whole 32 KiB
    output tile staged at once would leave room for two)."""
    registers = max(a.regs for a in accumulators.values()) + WGMMA_HEADROOM
    _, end = layout_pool(used)
    keep = ctas_per_sm(launched, registers, (end + 7) // 8 * 8 + barrier_bytes)
    return min(max_shared_bytes(arch), SHARED_PER_SM // keep - 1024)


def _stage_buffer(rows, panels, dtype):
    return tirx.decl_buffer((rows, panels * panel_cols(dtype)), str(dtype), "C_stage", scope="shared.dyn")

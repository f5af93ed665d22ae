"""The TMA-store epilogue (`KernelPlan.tma_store`, planned by `analysis/epilogue.py`), emitted: C's tensor
map, the staging tile, the consumers' register writes into it and the TMA stores, by a consumer thread or the
producer warp.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..analysis.epilogue import TmaStore
from ..analysis.layout import tirx_bits
from ..exprs import conjunction
from ..irwalk import region_of
from . import intrin
from .intrin import device_helper
from .tma import last_stage, loop_bounds, release_stage, tensormap

__all__ = ["declare_spill_view", "emit_producer_stores", "emit_store_map", "emit_tma_store",
           "finish_producer_stores", "finish_stores", "tma_store"]


# ---- host: C's tensor map ----------------------------------------------------------------------------------

def emit_store_map(em):
    store = em.plan.tma_store
    if store is not None:
        em.store_map = tensormap(store.global_buf, (store.panel_cols, store.rows), swizzle=3)


# ---- device ------------------------------------------------------------------------------------------------

def declare_spill_view(em):
    """The spill tile's stages seen as C's dtype (an fp8 B tile holds 16-bit
    output panels): `em.spill_view`."""
    store = em.plan.tma_store
    if store is None or store.spill is None:
        return
    tile = em.tile(store.spill.tile_buffer)
    view = T.decl_buffer(
        (tile.stages * _spill_stage_elems(store),),
        str(store.global_buf.dtype),
        data=em.pool.data,
        byte_offset=tile.byte_offset,
        scope="shared.dyn",
    )
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
    return device_helper(
        f"tnb_tma_store_{len(coords)}d",
        f"void* src, unsigned long long tmap, {names}",
        body,
        dst_smem,
        tirx.address_of(tmap),
        *coords,
    )


def _bulk_commit():
    return intrin.asm_statement("tnb_bulk_commit", "cp.async.bulk.commit_group;")


def _bulk_wait_read():
    return intrin.asm_statement("tnb_bulk_wait_read0", "cp.async.bulk.wait_group.read 0;")


def _bulk_wait():
    return intrin.asm_statement("tnb_bulk_wait0", "cp.async.bulk.wait_group 0;")


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
    panel = store.panel_cols
    chunk_cols = store.chunk * panel
    for first in range(0, store.panels, store.chunk):
        with T.If(issuer), T.Then():
            T.evaluate(_bulk_wait_read())  # earlier stores have read the staging tile
        em.sync()
        low = first * panel
        _write_registers(em, layout, regs, store, lambda row, col, low=low: [
            (tirx.And(col >= low, col < low + chunk_cols), view, tile.offset2(row, col - low))])
        T.evaluate(intrin.fence_proxy_async())
        em.sync()
        with T.If(issuer), T.Then():
            for p in range(store.chunk):
                if first + p >= store.panels:
                    break
                smem = intrin.address_of(view, [p * store.rows * panel])
                T.evaluate(tma_store(smem, em.store_map, [starts[1] + (first + p) * panel, starts[0]]))
            T.evaluate(_bulk_commit())


def _stage_for_the_producer(em, call, store: TmaStore):
    """Consumers: every register of the tile into its panel (the staging tile's, or the spill tile's stage of
    this tile's last k-tile), a proxy fence, and the release of that stage, which tells the producer the tile
    is staged. The stores of the previous tile have read both places before the producer refilled that stage,
    which these consumers waited for. The spill panels wait for a consumer barrier: every warpgroup's MMAs
    read the whole B tile of that stage, and a warpgroup's own wait covers only its own MMAs
    (docs/decisions.md#the-producer-warp-issues-the-epilogues-stores)."""
    tma = em.plan.tma
    acc = region_of(call.args[1])[0]
    tile = em.tile(store.stage)
    last = last_stage(tma, em.scope.pipeline_base, loop_bounds(em, tma)[1])
    staged_cols = store.chunk * store.panel_cols
    layout, regs = em.plan.layout(acc), em.registers[acc]

    _write_registers(em, layout, regs, store,
                     lambda row, col: [(col < staged_cols, em.view(store.stage), tile.offset2(row, col))])
    if store.spill is not None:
        em.sync()
        _write_registers(
            em,
            layout,
            regs,
            store,
            lambda row, col: [
                (
                    col >= staged_cols,
                    em.spill_view,
                    last * _spill_stage_elems(store) + tile.offset2(row, col - staged_cols),
                )
            ],
        )
    T.evaluate(intrin.fence_proxy_async())
    release_stage(em, tma, last)


def _write_registers(em, layout, regs, store: TmaStore, places):
    """Each thread's accumulator registers, converted to C's dtype, into shared memory: `places(row, col)`
    lists (condition, view, element offset) for the element at (row, col) of the tile."""
    width = layout.vector()
    with T.unroll(0, layout.regs // width) as g:
        r0 = g * width
        row, col = layout.element(em.tx, r0)
        for inside, view, offset in places(row, col):
            with T.If(conjunction(layout.valid(em.tx, r0), inside)), T.Then():
                T.evaluate(
                    intrin.vector_store(
                        intrin.address_of(view, [offset]),
                        intrin.address_of(regs, [r0]),
                        width,
                        regs.dtype,
                        store.global_buf.dtype,
                    )
                )


def emit_producer_stores(em, stage, final: bool = False):
    """The producer's thread, once the consumers released `stage` (the tile's last k-tile's) after staging the
    tile (its grid variables bound by the caller): one TMA store per panel, then wait until they have read
    shared memory (before the stage is refilled), or at the kernel's end until they are done."""
    store = em.plan.tma_store
    starts = [em.expr(m) for m, _ in region_of(store.call.args[0])[1]]
    panel_elems = store.rows * store.panel_cols
    for p in range(store.panels):
        if p < store.chunk:
            smem = intrin.address_of(em.view(store.stage), [p * panel_elems])
        else:
            smem = intrin.address_of(em.spill_view,
                                     [stage * _spill_stage_elems(store) + (p - store.chunk) * panel_elems])
        T.evaluate(tma_store(smem, em.store_map, [starts[1] + p * store.panel_cols, starts[0]]))
    T.evaluate(_bulk_commit())
    T.evaluate(_bulk_wait() if final else _bulk_wait_read())


def finish_producer_stores():
    """The producer's thread, at its end where its last stores were waited for
    only until they read shared memory:
    wait until they are done."""
    T.evaluate(_bulk_wait())


def finish_stores(em):
    """The issuing thread's stores complete before the CTA (and its shared memory) goes."""
    if em.plan.tma_store is not None and not em.plan.tma_store.by_producer:
        with T.If(em.tx == 0), T.Then():
            T.evaluate(_bulk_wait())

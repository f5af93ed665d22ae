"""The emitter's rules, in the order they run: the one list of what emits each tile op, each statement the
plan gives a schedule, and the code a kernel gets at its start and end. The rule modules do not register
themselves; emitter.py reads these tables.
"""
from __future__ import annotations

from types import MappingProxyType

from tvm import tirx
from tvm.script.ir_builder import tirx as T

from . import copy, debug, elementwise, epilogue, gemm, intrin, loops, persistent, pipeline, reduce, scan, tma

__all__ = ["KERNEL_HOOKS", "STATEMENT_RULES", "TILE_OPS"]

def emit_grid_sync(em, call):
    """T.sync_grid (language/sync.py): cooperative groups' grid barrier, which every thread of the block
    reaches (a tile op); the kernel is launched cooperatively (backend/pipeline.py)."""
    T.evaluate(intrin.grid_sync())


# op name (as `T.tile.<name>` prints) -> emit function(emitter, call)
TILE_OPS = MappingProxyType({
    "tirx.tile.copy": copy.lower_copy,
    "tirx.tile.fill": elementwise.lower_fill,
    "tirx.tile.sum": reduce.lower_reduce,
    "tirx.tile.max": reduce.lower_reduce,
    "tirx.tile.min": reduce.lower_reduce,
    "tirx.tile.cumsum": scan.lower_cumsum,
    "tirx.tile.gemm": gemm.lower_gemm,
    "tirx.tile.sync_grid": emit_grid_sync,
    "tirx.tile.finalize_reducer": reduce.lower_finalize_reducer,
})

# (matches(emitter, stmt), emit(emitter, stmt)), tried in this order: the first that matches emits the
# statement; the emitter emits the others itself (emitter.Emitter.emit).
STATEMENT_RULES = (
    (lambda em, s: debug.debug_call(s) is not None, debug.emit_debug),  # T.print / T.device_assert / ...
    # the kernel body of persistent CTAs, walked once per tile (it holds the TMA loop and store below)
    (
        lambda em, s: em.plan.persistent is not None and s.same_as(em.plan.persistent.body),
        persistent.emit_persistent_body,
    ),
    # T.Pipelined as the warp-specialized TMA pipeline
    (lambda em, s: em.plan.tma is not None and s.same_as(em.plan.tma.loop), tma.emit_ws_loop),
    # the accumulator's T.copy to global memory as the TMA-store epilogue
    (
        lambda em, s: em.plan.tma_store is not None and s.same_as(em.plan.tma_store.call),
        epilogue.emit_tma_store,
    ),
    # serial / unroll / Parallel
    (lambda em, s: isinstance(s, tirx.For) and s not in em.plan.pipelines, loops.emit_for),
    (lambda em, s: isinstance(s, tirx.While), loops.emit_while),
    # cp.async pipeline
    (lambda em, s: isinstance(s, tirx.For) and s in em.plan.pipelines, pipeline.emit_pipelined),
)

# Functions(emitter) run, in this order, at: "host" (before the first launch dimension: host code), "thread"
# (at the threads' entry, after the shared pool), "end" (after the kernel body, on the threads that reach it).
KERNEL_HOOKS = MappingProxyType({
    "host": (tma.emit_tensor_maps, epilogue.emit_store_map),
    "thread": (tma.emit_barrier_init, epilogue.declare_spill_view),
    "end": (epilogue.finish_stores,),
})

"""tile_nb.lower: phase-2 tile IR -> thread-level TIRx for
`tvm.compile(mod, target=..., tir_pipeline="tirx")`.

    mod = tile_nb.lower.lower(func, tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))
    with target:
        exe = tvm.compile(mod, target=target, tir_pipeline="tirx")

`lowering.py` runs the two steps: the analyses make one frozen `KernelPlan` (analysis/plan.py), the emitter
follows it. The package, bottom up (tests/test_layers.py holds each part to importing only those below it):
- shared leaves, at the top: errors.py (LoweringError), options.py (LoweringOptions: what the user sets),
  irwalk.py and exprs.py (walking and rebuilding tile-IR statements and expressions), diagnostics.py (the
  user's lines), sourcemap.py (marks from statements to lowered lines). Both halves below use them, and so do
  layers outside lower/ (jit, runtime, torch, bench), which is why they belong to neither; written_order.py
  (a `T.ws` kernel made one program in an order its barriers allow, before the analyses see it);
- analysis/: what decides. Functions from the function, the options and earlier results to typed results:
  arch.py and arch_rules.py (what a target has and refuses), mma.py (which instruction each T.gemm gets),
  layout.py, fragments.py and infer.py (register and shared layouts), budget.py, schedule.py, the planning
  halves of tma.py, persistent.py, stream_k.py and epilogue.py, cluster.py, decisions.py, and plan.py, which
  calls them in order and returns the `KernelPlan`. Nothing here imports emit/;
- emit/: what the decisions become. emitter.py walks the body and hands each tile op and statement to the rule
  that rules.py lists (copy, elementwise, reduce, scan, gemm with wgmma / fma_gemm / tf32_gemm, loops,
  pipeline, debug, and the emitting halves of tma, persistent, stream_k and epilogue), over intrin.py,
  mbarrier.py, threads.py and uniform.py.
Fragments live in registers with inferred layouts (fragments.py, infer.py) unless the plan says why not;
`T.gemm` uses Hopper wgmma on sm_90a where the tile fits (16-bit and 8-bit inputs; a register fragment as A is
read from registers, `tile_nb.wgmma_register_a` = 0 stages it through shared memory instead), mma.sync
m16n8k16 otherwise (two m16n8k8 per step on sm_75, whose copies are plain loads and stores: no cp.async);
float32 / float64 operands, and 8-bit ones off wgmma, run as FMAs on the CUDA cores (fma_gemm.py) and
`T.tfloat32` ones as mma.sync m16n8k8 .tf32 (tf32_gemm.py), both in mma.sync's accumulator layout. What each
target architecture has is `arch.ArchCaps`; what it lacks is refused at the user's line (arch_rules.py,
docs/architectures.md). Lowering choices can be
set per PrimFunc with attributes: `tile_nb.wgmma` (0 forces mma.sync), `tile_nb.raster_group` (CTA grouping,
default 8; 1 turns it off), `tile_nb.wgmma_overlap` (keep one wgmma group in flight; off by default),
`tile_nb.wgmma_late_wait` (outside TMA loops, wait for a wgmma T.gemm only where a later statement needs
it; on by default, emitter.py's LateWaits),
`tile_nb.tma` (TMA + a producer warp on sm_90a, tma.py: 1 wherever legal, 0 never; by default wherever legal
except loops with several T.gemm over one consumer warpgroup (128 threads)) with `tile_nb.producer_warp` (0:
the first consumer thread issues the loads, no extra warp; 1: always a producer warp; by default none only for
256-thread loops with several T.gemm whose two CTAs fit an SM, FlashAttention at head dim 64),
`tile_nb.wgmma_pingpong` (1: consumer warpgroups of a TMA loop with several T.gemm
take turns at the tensor cores; off by default), `tile_nb.softmax_overlap` (0: a TMA loop with two T.gemm,
such as FlashAttention's, runs in order instead of overlapping the second T.gemm with the next iteration's
register work; on by default), `tile_nb.persistent` (one CTA per SM walks the tiles of a TMA kernel's grid
larger than the GPU, persistent.py; on by default, 0 turns it off) with `tile_nb.sm_count` (the SMs to fill;
runtime.compile sets it from the GPU), `tile_nb.tma_store` (0: the epilogue of a TMA kernel stores its
accumulator from registers instead of through shared memory and TMA stores, epilogue.py; on by default) with
`tile_nb.producer_stores` (0: in a persistent kernel the consumers issue those stores instead of the producer
warp), `tile_nb.stream_k` (0: a persistent GEMM runs the tiles of its last, partial wave whole instead of
sharing their k-tiles among all CTAs, stream_k.py; on by default where legal), `tile_nb.cluster` (2: a
persistent TMA kernel runs in clusters of two CTAs sharing one operand by TMA multicast, cluster.py; off by
default). These are the fields of `LoweringOptions` (options.py: each documented, with its environment
variable in `ENV_SWITCHES`), resolved once per compilation (function attribute > the kernel's options >
`tile_nb.set_options` > environment > default) and part of every compile-cache key.
"""
from __future__ import annotations

from .options import ENV_SWITCHES, LoweringOptionError, LoweringOptions, resolve

__all__ = ["ENV_SWITCHES", "LINE_ATTRS", "TILE_OPS", "KernelPlan", "LoweringError", "LoweringOptionError",
           "LoweringOptions", "lower", "lower_with_plan", "resolve"]

# The rest loads TVM: imported on first use, so that `tile_nb.lower.options`
# (the JIT's cache keys) stays light.
_LAZY = {"LINE_ATTRS": ".diagnostics", "TILE_OPS": ".emit.rules", "LoweringError": ".errors",
         "lower_with_plan": ".lowering", "KernelPlan": ".analysis.plan"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def lower(func, target=None, options: LoweringOptions | None = None):
    """Lower a phase-2 tile-IR PrimFunc (docs/IR.md) to an IRModule of thread-level TIRx; `options` (resolved:
    `resolve(func, ...)`) default to the function's attributes over the process's options and environment.

    Raises `LoweringError` (a TileNBError and NotImplementedError) naming the op and operands it cannot lower,
    at the user's line.
    """
    import tvm

    from .lowering import lower_with_plan

    name = str((func.attrs or {}).get("global_symbol", "main"))
    # marks: see runtime.compile
    lowered, _ = lower_with_plan(func, target, source_marks=False, options=options)
    lowered = lowered.with_attr("global_symbol", name)
    return tvm.IRModule({name: lowered})

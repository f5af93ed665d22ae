"""Stream-K's last wave (`KernelPlan.persistent.stream_k`, planned by `analysis/stream_k.py`), emitted: each
CTA's range of the tail's k-tiles, the partial sums it writes to the workspace, the flags it raises and the
fix-up of the tiles it finishes.
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx
from tvm.backend.cuda.op import cuda_func_call
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..analysis.stream_k import StreamK
from . import intrin

__all__ = ["Range", "contributors", "emit_fixup", "emit_partial_sums", "emit_signal", "tail_range"]


# ---- the ranges --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Range:
    """CTA `cta`'s share of the tail (bound once per role): a contribution to tile `partial_tile` (its k-tiles
    [partial_start, partial_start + partial_count); count 0: none), then the end of tile `finish_tile`, its
    `finish_count` k-tiles from `finish_start` (when `finishes`). Tiles are numbered within the tail."""
    partial_tile: object
    partial_start: object
    partial_count: object
    finish_tile: object
    finish_start: object
    finish_count: object
    finishes: object


def tail_range(sk: StreamK, cta, bind=None) -> Range:
    """CTA `cta`'s range [a, b) of the tail's k-tiles and what it covers; `bind(name, value)`
    emits each value as a Bind (the default), or, given a constant `cta` and `lambda name, v: v`,
    folds them to constants (tests)."""
    n, iters, m = sk.n, sk.iters, sk.ctas
    bind = bind or _bind
    a = bind("sk_begin", tirx.floordiv(cta * iters, m))
    b = bind("sk_end", tirx.floordiv((cta + 1) * iters, m))
    first, last = bind("sk_first_tile", tirx.floordiv(a, n)), bind("sk_last_tile", tirx.floordiv(b - 1, n))
    partial_start = bind("sk_partial_start", tirx.max(a, last * n) - last * n)
    partial_count = bind(
        "sk_partial_count", tirx.Select(tirx.floormod(b, n) != 0, b - last * n - partial_start, 0)
    )
    finish_start = a - first * n
    return Range(
        last, partial_start, partial_count, first, finish_start, n - finish_start, (first + 1) * n <= b
    )


def _bind(name, value):
    var = T.Bind(value)
    IRBuilder.name(name, var)
    return var


def contributors(sk: StreamK, tile):
    """The first CTA whose partial sum tail tile `tile` takes (its finisher takes those of the CTAs from there
    up to itself): the owner of the tile's first k-tile, the largest c with c * iters // ctas <= tile * n."""
    return tirx.floordiv((tile * sk.n + 1) * sk.ctas - 1, sk.iters)


# ---- device code -------------------------------------------------------------------------------------------

def _helpers(sk: StreamK) -> str:
    """The workspace (module globals, declared once whichever helper is printed first) and the helpers."""
    tag, regs, threads = sk.tag, sk.registers, sk.threads
    quads = regs // 4
    return f"""
#ifndef TNB_STREAM_K_{tag}
#define TNB_STREAM_K_{tag}
// Stream-K (tile_nb/lower/stream_k.py): CTA c's partial sums, thread-major (float4 j of thread t at j * threads + t),
// and its flag: 2 once written, 1 once added (the finisher resets it). The flags' initial 1s are data of the module
// (.nv.global.init, copied when it loads): uninitialized device globals are not guaranteed to be zero.
__device__ __align__(16) float tnb_sk_partials_{tag}[{sk.ctas * regs * threads}];
__device__ unsigned tnb_sk_flags_{tag}[{sk.ctas}] = {{{", ".join(["1u"] * sk.ctas)}}};
__forceinline__ __device__ float4* tnb_sk_slot_{tag}(int cta, int tid) {{
  return reinterpret_cast<float4*>(tnb_sk_partials_{tag}) + (size_t)cta * {quads * threads} + tid;
}}
__forceinline__ __device__ void tnb_sk_put_{tag}(int cta, int tid, const float* regs) {{
  float4* slot = tnb_sk_slot_{tag}(cta, tid);
#pragma unroll
  for (int j = 0; j < {quads}; ++j)
    __stcg(slot + j * {threads}, make_float4(regs[4 * j], regs[4 * j + 1], regs[4 * j + 2], regs[4 * j + 3]));
}}
__forceinline__ __device__ void tnb_sk_add_{tag}(int cta, int tid, float* regs) {{
  const float4* slot = tnb_sk_slot_{tag}(cta, tid);
#pragma unroll
  for (int j = 0; j < {quads}; ++j) {{
    float4 v = __ldcg(slot + j * {threads});  // L2: another SM wrote it
    regs[4 * j] += v.x; regs[4 * j + 1] += v.y; regs[4 * j + 2] += v.z; regs[4 * j + 3] += v.w;
  }}
}}
__forceinline__ __device__ void tnb_sk_signal_{tag}(int cta) {{
  __threadfence();  // after a consumer barrier: every consumer thread's stores of the slot come before the flag
  asm volatile("st.release.gpu.global.u32 [%0], %1;\\n" :: "l"(tnb_sk_flags_{tag} + cta), "r"(2u) : "memory");
}}
__forceinline__ __device__ void tnb_sk_wait_{tag}(int cta) {{
  unsigned* flag = tnb_sk_flags_{tag} + cta;
  unsigned ready;
  do {{
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\\n" : "=r"(ready) : "l"(flag) : "memory");
  }} while (ready != 2);
  *flag = 1;  // consumed: the next launch on this stream finds it clear
}}
#endif
"""


def _call(sk: StreamK, what: str, *args):
    return cuda_func_call(f"tnb_sk_{what}_{sk.tag}", *args, source_code=_helpers(sk))


def emit_partial_sums(em, sk: StreamK, cta):
    """Consumers, after a contributor's k-loop: the accumulator into CTA `cta`'s slot. Stores only:
    emit_signal publishes them, after the CTA's next k-loop where it has one, so they drain under its MMAs."""
    regs = intrin.address_of(em.registers[sk.accumulator], [0])
    T.evaluate(_call(sk, "put", cta, em.tx, regs))


def emit_signal(em, sk: StreamK, cta):
    """Consumers: once every thread has stored its part of the slot (a consumer barrier), one
    thread fences and sets CTA `cta`'s flag with release semantics (CUTLASS's barrier does the
    same: bar.sync, fence, flag)."""
    em.sync()
    with T.If(em.tx == 0), T.Then():
        T.evaluate(_call(sk, "signal", cta))


def emit_fixup(em, sk: StreamK, cta, tile):
    """Consumers, after a finisher's k-loop of tail tile `tile`: add the partial sums of its contributors (the
    CTAs from the owner of its first k-tile up to `cta`)."""
    first = _bind("sk_contributor", contributors(sk, tile))
    with T.If(em.tx == 0), T.Then():
        with T.serial(first, cta) as j:
            T.evaluate(_call(sk, "wait", j))
    em.sync()
    regs = intrin.address_of(em.registers[sk.accumulator], [0])
    with T.serial(first, cta) as j:
        T.evaluate(_call(sk, "add", j, em.tx, regs))

"""tile_nb's own GEMM tile heuristic, behind `MatmulTemplate.recommend_hints` (not tilelang's roller).

It enumerates the tiles tile_nb's lowering builds well, keeps those that fit, and ranks them by a small
throughput model:

- candidates: block_M and block_N in 64 / 128 / 256, K steps of 64 or 128 bytes (block_K 32 / 64 for 16-bit
  inputs), 128 or 256 threads, 2 to 4 pipeline stages;
- kept when: the warp split exists (sm_90a's wgmma: block_M a multiple of 64 per warpgroup, block_N a
  multiple of 64 up to 256, as `lower/analysis/mma.wgmma_eligible` asks; mma.sync: `layout.choose_warp_grid`'s
  16x16 warp tiles); the accumulator fits a thread's registers with the headroom `budget.WGMMA_HEADROOM`
  leaves; the stages of A and B plus one output tile (1 KiB-aligned, as `budget.layout_pool` places them) fit
  the shared memory a block may use (`arch.smem_cap`); there are not more stages than K steps; a tile is not
  larger than the problem's next power of two along M or N (64 always stays);
- ranked by estimated time, the larger of: compute (the busiest SM's tiles, padded edges included, at the
  SM's share of the peak, scaled by how well the MMA shape feeds the tensor cores: a wgmma of m64 x block_N
  reads A and B from shared memory for 64*N MACs, so N = 256 feeds best; an mma.sync warp tile wm x wn by
  wm*wn/(wm+wn), full at 64x64, and on sm_90a at two thirds of wgmma's rate; and by latency hiding: more
  stages and more CTAs per SM hide more; 64-byte K steps cost 5% against 128-byte ones), tile traffic
  through L2 (every tile reads its A and B panels; L2 taken as 4x DRAM bandwidth) and DRAM traffic (A, B
  read once, C written once). Ties go to larger tiles, then fewer stages, threads and K steps.
float32 / float64 products run on the CUDA cores (`mma.fma_gemm`), taken at a sixteenth of the tensor-core
peak; 8-bit ones at twice it. The constants are rough. For 4096^3 fp16 on sm_90a the first hint is 128x256x64
with 256 threads and 3 stages, the tiling of tile_nb's fastest GEMM measured on the H200
(notebooks/06_tuning.ipynb).
Time it on the GPU to choose: the hints are a search space, not an answer.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...language.dtypes import as_dtype
from ...lower.analysis.budget import MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM, WGMMA_HEADROOM
from ...lower.analysis.layout import choose_warp_grid
from ...lower.analysis.mma import FMA_INPUTS, WGMMA_TYPES
from ...lower.errors import LoweringError
from .roller import Hint, NoRasterization

__all__ = ["GemmProblem", "gemm_path", "recommend_gemm_hints"]

BLOCKS = (64, 128, 256)
K_STEP_BYTES = (64, 128)
THREADS = (128, 256)
STAGES = (2, 3, 4)
_STAGE_HIDING = {1: 0.6, 2: 0.85, 3: 0.97, 4: 1.0}
_L2_OVER_DRAM = 4.0
_SHORT_K_STEP = 0.95           # 64-byte K steps: twice the barriers and copies per byte of 128-byte ones
_MMA_SYNC_ON_HOPPER = 2 / 3
_NOMINAL_SM_TFLOPS = 1.0      # ranking only, when the device's peaks are unknown
_NOMINAL_GBPS = 2000.0


def _bytes(dtype) -> int:
    import tvm

    return max(1, tvm.DataType(str(dtype)).bits // 8)


def gemm_path(in_dtype, accum_dtype, caps, trans_A: bool = False, trans_B: bool = True) -> str:
    """The instruction tile_nb's T.gemm uses for these types on `caps` (an ArchCaps): "wgmma", "mma.sync" or
    "fma" (CUDA cores); ValueError naming the dtype where the arch lacks it."""
    a, c = str(as_dtype(in_dtype)), str(as_dtype(accum_dtype))
    if a == "bfloat16" and not caps.bf16:
        raise ValueError(f"in_dtype bfloat16: {caps.lacks('bf16')}")
    if a.startswith("float8") and not caps.fp8:
        raise ValueError(f"in_dtype {a}: {caps.lacks('fp8')}")
    if a in FMA_INPUTS and c in FMA_INPUTS and not (a in ("float16", "bfloat16") and c != "float64"):
        return "fma"
    if a not in WGMMA_TYPES:
        raise ValueError(f"in_dtype {a} with accum_dtype {c}: tile_nb's T.gemm multiplies float16, "
                         f"bfloat16, float8, int8 (into int32) and float32/float64 (CUDA cores)")
    if (a in ("int8", "uint8")) != (c == "int32"):
        raise ValueError(f"in_dtype {a} with accum_dtype {c}: integer products accumulate in int32, "
                         f"float ones in a float accumulator")
    if _bytes(a) == 1:
        if not (caps.wgmma and trans_B and not trans_A):
            raise ValueError(f"in_dtype {a}: tile_nb's T.gemm runs 8-bit inputs on Hopper wgmma only (target "
                             f"sm_90a, trans_A=False, trans_B=True: B stored [N, K]); here {caps.arch}, "
                             f"trans_A={trans_A}, trans_B={trans_B}")
        return "wgmma"
    return "wgmma" if caps.wgmma and not trans_A else "mma.sync"


@dataclass(frozen=True)
class GemmProblem:
    M: int
    N: int
    K: int
    in_dtype: str
    out_dtype: str
    accum_dtype: str
    trans_A: bool = False
    trans_B: bool = True


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _align(n: int, to: int = 1024) -> int:
    return -(-n // to) * to


def _warp_tile(path: str, bm: int, bn: int, warps: int) -> tuple[int, int] | None:
    if path == "wgmma":
        groups = warps // 4
        if warps % 4 or bm % (64 * groups) or bn % 64 or bn > 256:
            return None
        return bm // warps, bn        # warpgroups stacked along M, a warp holds 16 rows of each m64 block
    try:
        wm, wn = choose_warp_grid(bm, bn, warps)
    except LoweringError:
        return None
    return bm // wm, bn // wn


def _mma_efficiency(path: str, warp_tile, bn: int, caps) -> float:
    if path == "wgmma":
        fed = 64 * bn / (64 + bn)
        return min(1.0, fed / (64 * 256 / (64 + 256)))
    wm, wn = warp_tile
    fed = min(1.0, (wm * wn / (wm + wn)) / 32.0)
    return fed * (_MMA_SYNC_ON_HOPPER if caps.wgmma else 1.0)


def _candidates(p: GemmProblem, arch, path: str):
    a, o, acc = _bytes(p.in_dtype), _bytes(p.out_dtype), _bytes(p.accum_dtype)
    acc_words = 2 if acc == 8 else 1
    k_steps = sorted({s // a for s in K_STEP_BYTES if s // a >= 16 or path == "fma"})
    for bm in BLOCKS:
        if bm > max(BLOCKS[0], _pow2_ceil(p.M)):
            continue
        for bn in BLOCKS:
            if bn > max(BLOCKS[0], _pow2_ceil(p.N)):
                continue
            for threads in THREADS:
                warps = threads // 32
                warp_tile = _warp_tile(path, bm, bn, warps)
                if warp_tile is None:
                    continue
                regs = bm * bn * acc_words // threads
                if regs + WGMMA_HEADROOM > MAX_REGISTERS_PER_THREAD:
                    continue
                for bk in k_steps:
                    if bk > max(k_steps[0], _pow2_ceil(p.K)):
                        continue
                    k_iters = -(-p.K // bk)
                    for stages in STAGES:
                        if stages > max(STAGES[0], k_iters):
                            continue
                        shared = stages * (_align(bm * bk * a) + _align(bn * bk * a)) + _align(bm * bn * o)
                        if shared > arch.smem_cap:
                            continue
                        yield bm, bn, bk, threads, stages, warp_tile, regs, shared


def _estimate(p: GemmProblem, arch, path, bm, bn, bk, threads, stages, warp_tile, regs, shared):
    """(seconds by the model, CTAs per SM, waves); see the module docstring."""
    sms = arch.compute_max_core
    tiles = -(-p.M // bm) * -(-p.N // bn)
    by_regs = REGISTERS_PER_SM // (threads * (-(-(regs + WGMMA_HEADROOM) // 8) * 8))
    by_smem = arch.smem_per_sm // (shared + 1024) if arch.smem_per_sm else 1
    ctas = max(1, min(by_regs, by_smem, 2048 // threads))
    waves = -(-tiles // (sms * ctas))
    hiding = _STAGE_HIDING[min(stages, 4)]
    if ctas > 1:
        hiding = 1 - (1 - hiding) / 2
    peak = arch.peak_tflops or _NOMINAL_SM_TFLOPS * sms
    if path == "fma":
        peak = peak / 16          # the CUDA cores: a sixteenth of the tensor cores, roughly
    elif _bytes(p.in_dtype) == 1:
        peak = peak * 2
    sm_rate = peak * 1e12 / sms
    if bk * _bytes(p.in_dtype) < max(K_STEP_BYTES):
        hiding *= _SHORT_K_STEP
    per_sm_tiles = -(-tiles // sms)
    efficiency = _mma_efficiency(path, warp_tile, bn, arch.caps) * hiding
    compute = per_sm_tiles * 2 * bm * bn * p.K / (sm_rate * efficiency)
    gbps = arch.bandwidth_GBps or _NOMINAL_GBPS
    a, o = _bytes(p.in_dtype), _bytes(p.out_dtype)
    l2 = tiles * p.K * (bm + bn) * a / (gbps * 1e9 * _L2_OVER_DRAM)
    dram = ((p.M + p.N) * p.K * a + p.M * p.N * o) / (gbps * 1e9)
    return max(compute, l2, dram), ctas, waves


def recommend_gemm_hints(p: GemmProblem, arch, topk: int) -> list[Hint]:
    """The `topk` best-ranked hints for `p` on `arch` (a carver CUDA), best first."""
    path = gemm_path(p.in_dtype, p.accum_dtype, arch.caps, p.trans_A, p.trans_B)
    ranked = []
    for cand in _candidates(p, arch, path):
        bm, bn, bk, threads, stages, warp_tile, regs, shared = cand
        seconds, ctas, waves = _estimate(p, arch, path, *cand)
        ranked.append(((seconds, -bm * bn, stages, threads, bk), Hint(
            block=[bm, bn], warp=list(warp_tile), rstep=[bk], pipeline_stage=stages,
            rasterization_plan=NoRasterization(), use_tc=path != "fma", threads=threads,
            instruction=path, shared_bytes=shared, registers=regs, ctas_per_sm=ctas, waves=waves,
            estimated_ms=seconds * 1e3 if arch.peak_tflops and arch.bandwidth_GBps else None, arch=arch)))
    ranked.sort(key=lambda item: item[0])
    return [hint for _, hint in ranked[:topk]]

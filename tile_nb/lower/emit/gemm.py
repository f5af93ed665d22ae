"""`T.tile.gemm(C, A, B, C, transpose_A, transpose_B, alpha, beta)` on tensor cores with mma.sync m16n8k16,
or the instruction the plan chose for the call (`plan.gemms`, a GemmKind): FMAs on the CUDA cores for
float32 / float64 operands and 8-bit ones that wgmma does not take (fma_gemm.py), mma.sync .tf32 for
T.tfloat32 ones (tf32_gemm.py), wgmma (wgmma.py).

On sm_75 (no m16n8k16, arch.py) each m16n8k16 step is two m16n8k8 MMAs on the same fragments (float16 only;
arch_rules.py refuses bfloat16 there at the user's line); ldmatrix is the same from sm_75 on.

C is a register fragment (`MmaAccLayout`: the CTA tile split over a grid of warps, each warp owning a
WM x WN block of 16x8 atoms); A and B are shared tiles in the swizzled layout (layout.py). Per 16-wide k-step,
each warp loads its A fragments (one ldmatrix.x4 per 16 rows) and B fragments (one ldmatrix.x4 per 16
columns; `.trans` when B is stored [K, N], and for A when stored [K, M]), then issues MI x NI mma.sync.

ldmatrix.x4 address of lane l: matrix q = l // 8, row l % 8 of that 8x8 matrix. Register q of the result is
matrix q, so we order the matrices as the mma fragment registers expect:
- A (16x16, registers a0..a3): q -> rows (q % 2) * 8, k (q // 2) * 8;
- B for two n8 atoms (b0 b1 of atom 0, b0 b1 of atom 1): q -> k (q % 2) * 8, n (q // 2) * 8.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..analysis.decisions import GemmKind
from ..analysis.mma import FP8_FLOATS, INT8S
from ..errors import LoweringError
from ..irwalk import gemm_k, region_of
from . import intrin
from .fma_gemm import lower_gemm_fma
from .tf32_gemm import lower_gemm_tf32

__all__ = ["lower_gemm"]


def _float(x) -> float:
    return float(x.value) if hasattr(x, "value") else float(x)


def lower_gemm(em, call):
    (c_buf, c_rng), (a_buf, a_rng), (b_buf, b_rng) = (region_of(call.args[i]) for i in range(3))
    trans_a, trans_b = bool(call.args[4]), bool(call.args[5])
    alpha, beta = _float(call.args[6]), _float(call.args[7])
    lay = em.plan.accumulators[c_buf]
    kind = em.plan.gemms[call]  # the plan's choice (analysis/mma.py, gemm_kind)
    if kind is GemmKind.FMA:
        lower_gemm_fma(em, call)
        return
    if kind is GemmKind.TF32:
        lower_gemm_tf32(em, call)
        return
    if kind is GemmKind.WGMMA:
        from .wgmma import lower_gemm_wgmma

        lower_gemm_wgmma(em, call)
        return
    a_tile, b_tile = em.tile(a_buf), em.tile(b_buf)
    in_dtype = str(a_buf.dtype)
    if in_dtype not in ("float16", "bfloat16") or str(b_buf.dtype) != in_dtype:
        dtypes = (in_dtype, str(b_buf.dtype))
        hint = ""
        accumulators = (
            ("integer", INT8S, "an int32 accumulator"),
            ("float", FP8_FLOATS, "a float accumulator (float32, float16, bfloat16 or float64)"),
        )
        for kind, family, acc in accumulators:
            if any(t in family for t in dtypes):
                hint = (
                    f"; 8-bit {kind} inputs need 8-bit {kind}s ({' or '.join(family)}) for both A and B and "
                    f"{acc}, here {c_buf.name} is {c_buf.dtype}; such gemms run on Hopper wgmma where the "
                    "tile fits, else on the CUDA cores"
                )
                break
        raise LoweringError(f"T.gemm: inputs {a_buf.name}:{a_buf.dtype}, {b_buf.name}:{b_buf.dtype}; "
                            f"tensor-core lowering supports float16 or bfloat16 A and B of one dtype{hint}")
    if str(c_buf.dtype) not in ("float32", "float16", "bfloat16"):
        raise LoweringError(
            f"T.gemm: accumulator {c_buf.name} is {c_buf.dtype}; use float32 (or float16/bfloat16, "
            f"which accumulate in float32 registers)"
        )
    if alpha != 1.0:
        raise LoweringError("T.gemm: alpha != 1 is not supported")
    k = gemm_k(a_rng, b_rng, trans_a, trans_b, lay.bm, lay.bn)
    if k % 16:
        raise LoweringError(f"T.gemm: K = {k} must be a multiple of 16 for mma.m16n8k16")
    if not (a_tile.swizzle and b_tile.swizzle):
        raise LoweringError("T.gemm: A and B shared tiles need a last dim that is a multiple of 8 elements")
    a0 = [em.expr(mn) for mn, _ in a_rng]
    b0 = [em.expr(mn) for mn, _ in b_rng]
    acc = em.registers[c_buf]

    if beta == 0.0:
        with T.unroll(0, lay.regs) as r:
            T.buffer_store(acc, tirx.const(0, "float32"), [r])

    tx = em.tx
    lane = tirx.floormod(tx, 32)
    q, li = tirx.floordiv(lane, 8), tirx.floormod(lane, 8)
    wy, wx = lay.warp_coords(tx)
    mi_n, ni_n = lay.mi, lay.ni
    a_frag = T.alloc_buffer((mi_n * 4,), "uint32", scope="local")
    IRBuilder.name("a_frag", a_frag)
    b_frag = T.alloc_buffer((ni_n * 2,), "uint32", scope="local")
    IRBuilder.name("b_frag", b_frag)

    def smem_ptr(tile, buf, base, row, col):
        idx = list(base)
        idx[-2] = idx[-2] + row
        idx[-1] = idx[-1] + col
        return intrin.address_of(em.view(buf), [tile.offset(idx, em.stage.get(buf))])

    with T.unroll(0, k // 16) as kk:
        with T.unroll(0, mi_n) as mi:
            m_off = lay.row_base(wy, mi) + tirx.floormod(q, 2) * 8
            k_off = kk * 16 + tirx.floordiv(q, 2) * 8
            if trans_a:  # stored [K, M]: rows are k
                ptr = smem_ptr(a_tile, a_buf, a0, k_off + li, m_off)
            else:
                ptr = smem_ptr(a_tile, a_buf, a0, m_off + li, k_off)
            T.evaluate(intrin.ldmatrix_x4(intrin.address_of(a_frag, [mi * 4]), ptr, trans=trans_a))
        with T.unroll(0, ni_n // 2) as nj:
            n_off = wx * lay.warp_n + nj * 16 + tirx.floordiv(q, 2) * 8
            k_off = kk * 16 + tirx.floormod(q, 2) * 8
            if trans_b:  # stored [N, K]: rows are n
                ptr = smem_ptr(b_tile, b_buf, b0, n_off + li, k_off)
            else:
                ptr = smem_ptr(b_tile, b_buf, b0, k_off + li, n_off)
            T.evaluate(intrin.ldmatrix_x4(intrin.address_of(b_frag, [nj * 4]), ptr, trans=not trans_b))
        with T.unroll(0, mi_n) as mi, T.unroll(0, ni_n) as ni:
            T.evaluate(intrin.mma_m16n8k16(
                intrin.address_of(acc, [(mi * ni_n + ni) * 4]),
                intrin.address_of(a_frag, [mi * 4]),
                intrin.address_of(b_frag, [ni * 2]),
                in_dtype,
                k8=not em.caps.mma_k16,
            ))
    em.round_accumulator(c_buf)

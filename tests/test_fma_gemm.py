"""`T.gemm` with float32 / float64 operands (or a float64 accumulator): exact products by FMA on the CUDA
cores (tile_nb/lower/emit/fma_gemm.py), in the register layout of the mma.sync accumulator.

CPU: the register arithmetic of the FMA path covers each accumulator element once, where the layout puts it;
the plan names the path; the CUDA and PTX for sm_90a, sm_80 and sm_75 build with nvcc and hold FMAs and no
tensor-core instruction; the interpreter against torch at odd shapes. GPU (marked gpu): the same kernels
against torch's float64 product within the float32 (float64) rounding bound of a K-term sum, and against
torch's float32 matmul with TF32 off.
"""
import re

import pytest
import torch
from kernels.seed import SMALL_TILES, gemm_minus_row_max, gemm_variant, two_gemms_one_accumulator

import tile_nb
from tile_nb.backend import toolchain
from tile_nb.lower.analysis.layout import MmaAccLayout
from tile_nb.lower.emit.fma_gemm import position, reg_digits, register_part

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
_DT = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
_UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}


def fma(a_dtype="float32", b_dtype="float32", acc_dtype="float32", **options):
    """Options of the shared GEMM (tests/kernels/seed.py `gemm_variant`) here: float32 operands and
    accumulator unless named, C of the accumulator's dtype, small tiles."""
    dtypes = {"in_dtype": a_dtype, "b_dtype": b_dtype, "acc_dtype": acc_dtype, "out_dtype": acc_dtype}
    return {**SMALL_TILES, **dtypes, **options}


def _inputs(M, N, K, a_dtype="float32", b_dtype="float32", trans_A=False, trans_B=False, seed=0):
    g = torch.Generator().manual_seed(seed * 7919 + M * 131 + N * 17 + K)
    A = torch.randn(*((K, M) if trans_A else (M, K)), generator=g, dtype=torch.float64).to(_DT[a_dtype])
    B = torch.randn(*((N, K) if trans_B else (K, N)), generator=g, dtype=torch.float64).to(_DT[b_dtype])
    return A, B


def _as_mk_kn(A, B, trans_A, trans_B):
    return (A.T if trans_A else A), (B.T if trans_B else B)


def _check(C, A, B, K, acc_dtype, trans_A=False, trans_B=False):
    """|C - A B| <= (K + 1) u sum_k |a b| elementwise (u: the accumulator's unit roundoff): the worst case of
    a K-term sum of exact products, each addition rounded once, and the stored result's rounding. TF32 inputs
    (10-bit mantissas) would miss it by a factor of about 2^13 / K."""
    a, b = _as_mk_kn(A.double(), B.double(), trans_A, trans_B)
    exact = a @ b
    bound = (K + 1) * _UNIT_ROUNDOFF[acc_dtype] * (a.abs() @ b.abs())
    err = (C.double().cpu() - exact).abs()
    assert not torch.isnan(C).any()
    assert bool((err <= bound).all()), f"worst error {float((err - bound).max()):.3g} over the bound"


# ---- the register arithmetic of the FMA path ---------------------------------------------------------------

@pytest.mark.parametrize(
    "bm, bn, warps, rows_per_warp",
    [(64, 64, 4, False), (128, 128, 4, False), (64, 64, 4, True), (128, 64, 8, True), (32, 16, 2, False)],
)
def test_each_register_multiplies_the_row_and_column_its_layout_holds(bm, bn, warps, rows_per_warp):
    """For every thread and register: the A row and B column the FMA path loads for it (fma_gemm.position of
    register_part) are the element the accumulator's layout puts there (what copies and T.Parallel loops
    read), and the threads' registers cover the tile exactly once."""
    lay = MmaAccLayout.choose(bm, bn, warps, rows_per_warp=rows_per_warp, fma=True)
    layout = lay.linear()
    rows, cols = reg_digits(layout, 0), reg_digits(layout, 1)
    seen = set()
    for tx in range(warps * 32):
        row0, col0 = layout.element(tx, 0)
        for r in range(layout.regs):
            got = (
                position(rows, register_part(layout, r, 0), row0),
                position(cols, register_part(layout, r, 1), col0),
            )
            assert got == tuple(layout.element(tx, r)), (tx, r)
            assert got not in seen
            seen.add(got)
    assert len(seen) == bm * bn


# ---- plan, CUDA, PTX ---------------------------------------------------------------------------------------

_TENSOR_CORE = ("mma.sync", "wgmma", "ldmatrix", "tnb_mma", "tnb_wgmma")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80", "sm_75"])
@pytest.mark.parametrize(
    "case",
    [
        dict(),
        dict(trans_A=True, trans_B=True),
        dict(acc_dtype="float64", a_dtype="float64", b_dtype="float64"),
    ],
)
def test_builds_with_fmas_and_no_tensor_core_instruction(arch, case):
    dt = case.get("a_dtype", "float32")
    A, B = _inputs(70, 45, 33, dt, dt, case.get("trans_A", False), case.get("trans_B", False))
    C = torch.empty(70, 45, dtype=_DT[case.get("acc_dtype", "float32")])
    k = gemm_variant.compile(A, B, C, target=arch, **fma(**case))
    assert [m["kind"] for m in k.plan["mma"]] == ["fma (CUDA cores, exact products)"]
    body = k.cuda_source.split('extern "C"')[-1]
    assert not any(t in body for t in _TENSOR_CORE), [t for t in _TENSOR_CORE if t in body]
    assert k.cubin
    # (--use_fast_math, the default build, flushes float32 subnormals: fma.rn.ftz.f32)
    assert re.search(r"fma\.rn\.f64" if dt == "float64" else r"fma\.rn(\.ftz)?\.f32", k.ptx)
    assert not any(t in k.ptx for t in ("mma.sync", "wgmma", "ldmatrix"))


@needs_nvcc
def test_row_statistics_of_an_fma_accumulator_build():
    A, B = _inputs(100, 50, 40)
    k = gemm_minus_row_max.compile(A, B, torch.empty(100, 50), target="sm_90a")
    assert "fma" in k.plan["mma"][0]["kind"] and k.cubin
    assert all(f["where"] == "registers" for f in k.plan["fragments"])


def test_float16_inputs_into_a_float64_accumulator_take_the_fma_path():
    """The tensor cores add in float32; a float64 accumulator gets float64 sums, as
    the interpreter computes them."""
    A, B = _inputs(70, 45, 33, "float16", "float16")
    k = gemm_variant.compile(A, B, torch.empty(70, 45, dtype=torch.float64), target="sm_90a",
                             **fma(a_dtype="float16", b_dtype="float16", acc_dtype="float64"))
    assert "fma" in k.plan["mma"][0]["kind"]
    assert "double C_local" in k.cuda_source


def test_float64_accumulator_counts_two_registers_per_element():
    """A 128x128 float64 accumulator over 128 threads is 128 doubles, 256 32-bit registers per
    thread: refused by the register budget (it spilled 9.7 KB to local memory before the budget
    counted 64-bit elements twice)."""
    from tile_nb.lower import LoweringError

    A = torch.randn(256, 256, dtype=torch.float64)
    with pytest.raises(LoweringError, match="256 32-bit registers per thread"):
        gemm_variant.compile(A, A, torch.empty(256, 256, dtype=torch.float64), target="sm_90a",
                             **fma("float64", "float64", "float64", block_M=128, block_N=128))


def test_float16_gemm_keeps_the_tensor_cores():
    A, B = _inputs(128, 128, 64, "float16", "float16")
    k = gemm_variant.compile(A, B, torch.empty(128, 128), target="sm_80", **fma("float16", "float16"))
    assert k.plan["mma"][0]["kind"].startswith("mma.sync")


# ---- numerics: interpreter (CPU) and GPU -------------------------------------------------------------------

SHAPES = [(70, 45, 33), (1, 1, 1), (129, 64, 100)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("trans", [(False, False), (True, False), (False, True), (True, True)])
def test_float32_gemm_within_the_rounding_bound(backend, shape, trans):
    M, N, K = shape
    A, B = _inputs(M, N, K, trans_A=trans[0], trans_B=trans[1])
    C = torch.full((M, N), float("nan"), device=backend)
    gemm_variant(A.to(backend), B.to(backend), C, **fma(trans_A=trans[0], trans_B=trans[1]))
    _check(C, A, B, K, "float32", *trans)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M", [1, 70, 200])
def test_dynamic_M_one_kernel_for_every_M(backend, M):
    A, B = _inputs(M, 45, 33)
    C = torch.full((M, 45), float("nan"), device=backend)
    gemm_variant(A.to(backend), B.to(backend), C, **fma(dynamic_M=True))
    _check(C, A, B, 33, "float32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_agrees_with_torch_float32_matmul_without_tf32(backend):
    """Against torch's own float32 product (TF32 off): both within K u sum |a b| of the exact one, so within
    twice that of each other."""
    M, N, K = 70, 45, 33
    A, B = _inputs(M, N, K, seed=3)
    C = torch.full((M, N), float("nan"), device=backend)
    gemm_variant(A.to(backend), B.to(backend), C, **fma())
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = (A.to(backend) @ B.to(backend)).double().cpu()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    bound = 2 * (K + 1) * 2.0 ** -24 * (A.double().abs() @ B.double().abs())
    assert bool(((C.double().cpu() - ref).abs() <= bound).all())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a_dtype, b_dtype, acc_dtype", [("float64", "float64", "float64"),
                                                        ("float16", "float16", "float64"),
                                                        ("float32", "float16", "float32"),
                                                        ("float64", "float64", "float32")])
def test_float64_and_mixed_operands(backend, a_dtype, b_dtype, acc_dtype):
    """Operands are converted to the accumulator's precision (float64 for a float64 accumulator, else float32)
    before the product, as docs/IR.md's accumulation rule says."""
    M, N, K = 70, 45, 33
    A, B = _inputs(M, N, K, a_dtype, b_dtype)
    C = torch.full((M, N), float("nan"), dtype=_DT[acc_dtype], device=backend)
    gemm_variant(A.to(backend), B.to(backend), C, **fma(a_dtype, b_dtype, acc_dtype))
    a, b = A.to(_DT[acc_dtype]), B.to(_DT[acc_dtype])  # what the product multiplies
    _check(C, a, b, K, acc_dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N, K", [(100, 50, 40), (1, 1, 1), (64, 64, 70)])
def test_row_statistics_read_the_fma_accumulator_in_its_layout(backend, M, N, K):
    A, B = _inputs(M, N, K, seed=5)
    C = torch.full((M, N), float("nan"), device=backend)
    gemm_minus_row_max(A.to(backend), B.to(backend), C)
    s = A.double() @ B.double()
    expected = s - s.max(dim=1, keepdim=True).values
    # each S element within (K + 1) u sum |a b| of the exact one, the row max within the row's largest such
    # bound, then the subtraction's rounding
    per = (K + 1) * 2.0 ** -24 * (A.double().abs() @ B.double().abs())
    bound = per + per.max(dim=1, keepdim=True).values + 2.0 ** -24 * expected.abs()
    assert bool(((C.double().cpu() - expected).abs() <= bound).all())


# ---- a whole kernel: FlashAttention in float32 (both T.gemm on the FMA path, a fragment as A) --------------

def _attention_inputs(S, D=64, B=1, H=4, HK=2, seed=0):
    g = torch.Generator().manual_seed(seed * 101 + S)
    return tuple(torch.randn(B, h, S, D, generator=g) for h in (H, HK, HK))


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_float32_flash_attention_builds_on_the_fma_path(arch):
    from kernels.reference import flash_attention_gqa

    Q, K, V = _attention_inputs(100)
    k = flash_attention_gqa.compile(Q, K, V, torch.empty_like(Q), dtype="float32", target=arch)
    assert [m["kind"] for m in k.plan["mma"]] == ["fma (CUDA cores, exact products)"] * 2
    assert k.cubin and "mma.sync" not in k.ptx and "wgmma" not in k.ptx


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("S", [1, 100, 129])
def test_float32_flash_attention_against_torch(backend, S):
    """Against float64 SDPA: float32 exp2 and sums over S keys (each softmax weight within a few ulp, the
    output a convex combination of V's rows), so within 2^-16 of max |V| here."""
    from kernels.reference import flash_attention_gqa

    Q, K, V = _attention_inputs(S)
    O = torch.full_like(Q, float("nan"), device=backend)
    flash_attention_gqa(Q.to(backend), K.to(backend), V.to(backend), O, dtype="float32")
    Kr, Vr = K.repeat_interleave(2, 1), V.repeat_interleave(2, 1)
    ref = torch.nn.functional.scaled_dot_product_attention(Q.double(), Kr.double(), Vr.double())
    assert float((O.double().cpu() - ref).abs().max()) <= 2.0 ** -16 * float(V.abs().max())


@needs_nvcc
def test_mixed_paths_into_one_accumulator_keep_mma_sync_layout():
    """A B (float16, wgmma-eligible on sm_90a) + A2 B2 (float32, FMA) in one accumulator keeps mma.sync's
    layout (the float16 product on mma.sync), so no FMA touches registers an asynchronous wgmma group still
    owns."""
    A, B = _inputs(128, 128, 64, "float16", "float16")
    A2, B2 = _inputs(128, 128, 64)
    k = two_gemms_one_accumulator.compile(A, B, A2, B2, torch.empty(128, 128), target="sm_90a")
    assert "wgmma" not in k.ptx and "mma.sync.aligned.m16n8k16" in k.ptx and "fma.rn" in k.ptx and k.cubin


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_paths_into_one_accumulator(backend):
    M, N, K = 70, 45, 33
    A, B = _inputs(M, N, K, "float16", "float16", seed=1)
    A2, B2 = _inputs(M, N, K, seed=2)
    C = torch.full((M, N), float("nan"), device=backend)
    two_gemms_one_accumulator(*(x.to(backend) for x in (A, B, A2, B2)), C)
    P = A.double().abs() @ B.double().abs() + A2.double().abs() @ B2.double().abs()
    exact = A.double() @ B.double() + A2.double() @ B2.double()
    # the float16 products are exact in float32; the tensor cores' sums: twice the round-to-nearest bound
    assert bool(((C.double().cpu() - exact).abs() <= 2 * (2 * K + 1) * 2.0 ** -24 * P).all())


# ---- shared operands: swizzled 16-byte chunks (option wide_swizzle) ----------------------------------------

@needs_nvcc
@pytest.mark.parametrize("wide_swizzle", [True, False])
def test_operand_tiles_swizzled_unless_the_option_says_not(wide_swizzle):
    A, B = _inputs(70, 45, 33)
    with tile_nb.options(wide_swizzle=wide_swizzle):
        k = gemm_variant.compile(A, B, torch.empty(70, 45), target="sm_90a", **fma(block_K=32))
    tiles = {t["name"]: t["swizzle"] for t in k.plan["shared"]}
    assert tiles == {"A_shared": wide_swizzle, "B_shared": wide_swizzle}
    assert k.cubin and ("^" in k.cuda_source.split('extern "C"')[-1]) == wide_swizzle
    assert k.plan["options"] == ({} if wide_swizzle else {"wide_swizzle": False})


@pytest.mark.gpu
@pytest.mark.parametrize("wide_swizzle", [True, False])
@pytest.mark.parametrize("trans", [(False, False), (True, True)])
def test_swizzled_and_plain_operands_on_the_gpu(wide_swizzle, trans):
    M, N, K = 129, 70, 100
    A, B = _inputs(M, N, K, trans_A=trans[0], trans_B=trans[1], seed=9)
    C = torch.full((M, N), float("nan"), device="cuda")
    with tile_nb.options(wide_swizzle=wide_swizzle):
        gemm_variant(A.cuda(), B.cuda(), C, **fma(block_K=32, trans_A=trans[0], trans_B=trans[1]))
    _check(C, A, B, K, "float32", *trans)

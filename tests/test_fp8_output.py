"""GEMMs with an 8-bit float C (tilelang's fp8 GEMM example writes its result in fp8): the accumulator leaves
through 128-column staging panels and TMA stores, or, where the TMA store does not apply, two values per
16-bit store (the accumulator's register pairs are adjacent columns). Before, each thread stored its values
one byte at a time. The lowering on the CPU (plans, code, ptxas); the results on the GPU against torch and the
interpreter."""
import pytest
import torch
from kernels.cuda import NVCC, cuda_source, plan, ptxas_report, spills
from kernels.hopper import needs_hopper_plan
from kernels.seed import gemm_fp8

import tile_nb.language as T

_FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
# half an ulp of the 8-bit formats relative to the value (3 and 2 mantissa bits), and the spacing of their
# smallest subnormals (2^-9, 2^-16), where relative rounding does not hold
_ROUNDING = {"float8_e4m3fn": 2.0 ** -4, "float8_e5m2": 2.0 ** -3}
_SUBNORMAL = {"float8_e4m3fn": 2.0 ** -9, "float8_e5m2": 2.0 ** -16}
# of sum |a b|: docs/IR.md, "8-bit floats" (Hopper's FP8 MMAs accumulate with fewer bits than float32)
FP8_ACCUMULATION_BOUND = 2.0 ** -9

# the example's launch shape: 128 x 128 tiles, one warpgroup (tilelang's example_tilelang_gemm_fp8.py)
ONE_WARPGROUP = dict(block_N=128, block_K=64, threads=128, num_stages=3)


def _ir(M, N, K, out_dtype="float8_e4m3fn", **cfg):
    return gemm_fp8.specialize(M=M, N=N, K=K, out_dtype=getattr(T, out_dtype), **cfg)


@pytest.mark.parametrize("out_dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_an_8_bit_c_leaves_through_128_column_panels(out_dtype):
    # one wave of tiles: the consumers stage and store (two 128-column panels of a 128 x 256 tile)
    store = plan(_ir(1024, 1024, 1024, out_dtype)).tma_store
    assert store is not None and not store.by_producer
    assert (store.panels, store.chunk, store.panel_cols, store.rows) == (2, 2, 128, 128)
    # persistent CTAs: the producer warp issues the stores
    big = plan(_ir(4096, 4096, 1024, out_dtype))
    assert big.persistent is not None and big.tma_store.by_producer
    assert "TMA stores issued by the producer warp" in big.pipeline_note
    # the example's one-warpgroup tile: one panel
    assert "TMA stores (1 of 1 panels at a time)" in plan(_ir(4096, 4096, 4096, out_dtype, **ONE_WARPGROUP)
                                                        ).pipeline_note


def test_the_staging_panels_take_two_values_per_store_and_the_map_128_byte_boxes():
    src = cuda_source(_ir(1024, 1024, 1024))
    # float32 register pairs -> two fp8 values in one 16-bit shared-memory store
    assert "tnb_vst_float32x2_float8_e4m3fn(" in src and "unsigned short raw" in src
    assert "(__nv_fp8_e4m3)C_local" not in src  # no byte-by-byte stores left
    assert src.count("tnb_tma_store_2d(") >= 2


def test_without_the_tma_store_two_values_go_per_global_store():
    """tile_nb.tma_store = 0 (or a C the TMA store cannot take): register pairs straight to global memory,
    two fp8 values per 16-bit store."""
    src = cuda_source(_ir(1024, 1024, 1024).with_attr("tile_nb.tma_store", 0))
    assert "tnb_tma_store" not in src and "tnb_vst_float32x2_float8_e4m3fn(" in src
    assert "(__nv_fp8_e4m3)C_local" not in src


def test_an_8_bit_c_with_rows_not_a_multiple_of_16_bytes_is_stored_by_registers():
    """N = 1000: C's rows are 1000 bytes, which a TMA map cannot stride (16-byte multiples)."""
    func = _ir(1024, 1000, 1024).with_attr("tile_nb.tma_store", 1)
    assert plan(func).tma_store is None
    assert "rows are not a multiple of 16 bytes" in plan(func).pipeline_note


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("cfg", [{}, ONE_WARPGROUP], ids=["128x256", "128x128"])
def test_the_fp8_output_kernels_build_without_spills(cfg, tmp_path):
    report = ptxas_report(cuda_source(_ir(4096, 4096, 4096, **cfg)), "sm_90a", tmp_path)
    assert spills(report) == 0, report


@pytest.mark.gpu
@needs_hopper_plan
@pytest.mark.parametrize("shape", [(1000, 1024, 1024), (1, 128, 32), (130, 384, 1000), (4000, 4096, 1024),
                                   (1024, 1000, 512)])
@pytest.mark.parametrize("out_dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("mode", ["default", "consumer-stores", "no-tma-store", "one-warpgroup"])
def test_fp8_output_agrees_with_torch_and_the_interpreter(shape, out_dtype, mode):
    """fp8 A, B and C: every element written (NaN poison), within the accumulation bound of a float64 product
    rounded to C's format, and within twice that of the interpreter. Edges cut in M and N, M = 1, a C whose
    rows are not 16-byte multiples (N = 1000: register stores), A's neither (K = 1000: cp.async and register
    stores), persistent CTAs (4000 x 4096)."""
    from tile_nb.runtime import compile as rt_compile

    M, N, K = shape
    a = (torch.randn(M, K, device="cuda") * 3).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, device="cuda") * 3).to(torch.float8_e4m3fn)
    # scales that keep most of C inside the 8-bit range (|A B^T| ~ 9 sqrt(K); e4m3 saturates at 448)
    scale = 8.0 / (9 * K ** 0.5)
    sa, sb = torch.tensor([scale], device="cuda"), torch.tensor([1.0], device="cuda")
    c = torch.full((M, N), float("nan"), device="cuda", dtype=_FP8[out_dtype])
    cfg = dict(out_dtype=getattr(T, out_dtype), **(ONE_WARPGROUP if mode == "one-warpgroup" else {}))
    func = gemm_fp8.specialize(a, b, c, sa, sb, **cfg)
    if mode == "consumer-stores":
        func = func.with_attr("tile_nb.producer_stores", 0)
    if mode == "no-tma-store":
        func = func.with_attr("tile_nb.tma_store", 0)
    kernel = rt_compile(func, None)
    # the TMA store comes with the TMA pipeline: A's and C's rows 16-byte multiples (K = 1000: cp.async)
    tma_store = mode != "no-tma-store" and N % 16 == 0 and K % 16 == 0
    assert kernel.plan["tma_store"] == tma_store, kernel.pipeline
    kernel(a, b, c, sa, sb)
    torch.cuda.synchronize()
    assert not torch.isnan(c.float()).any(), "unwritten (NaN) output elements"
    exact = (a.double() @ b.double().T) * scale
    ref = exact.to(_FP8[out_dtype]).double()
    magnitude = (a.double().abs() @ b.double().abs().T) * scale
    bound = FP8_ACCUMULATION_BOUND * magnitude + _ROUNDING[out_dtype] * exact.abs() + _SUBNORMAL[out_dtype]
    inside = exact.abs() < 400  # saturation past 448 (e4m3) is its own rounding
    worst = ((c.double() - ref).abs() / bound)[inside].max().item()
    assert worst <= 2.0, f"error reaches {worst:.2f} of the bound"  # two roundings: C's and the reference's
    if M * N * K <= 2 ** 27:
        c_cpu = torch.empty(M, N, dtype=_FP8[out_dtype])
        gemm_fp8(a.cpu(), b.cpu(), c_cpu, sa.cpu(), sb.cpu(), **cfg)
        assert ((c.cpu().double() - c_cpu.double()).abs() <= 2 * bound.cpu()).all()

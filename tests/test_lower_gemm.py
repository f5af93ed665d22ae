"""Lowering of the seed GEMM and its variants: structure of the lowered IR /
CUDA, and nvcc builds with 0 spills.

CPU only (CI): CUDA source through TVM, then `nvcc -cubin` + `ptxas -v` for sm_80 and sm_90a (skipped with a
reason when nvcc is absent).
"""
import re

import pytest
from kernels.cuda import cuda_source, ptxas_report, spills, target
from kernels.seed import gemm_ir

from tile_nb.lower import lower, lower_with_plan

VARIANTS = {
    "seed": dict(M=1024, N=1024, K=1024),
    "trans_A": dict(M=1024, N=1024, K=1024, trans_A=True),
    "trans_B": dict(M=1024, N=1024, K=1024, trans_B=True),
    "trans_AB": dict(M=1024, N=1024, K=1024, trans_A=True, trans_B=True),
    "bf16": dict(M=1024, N=1024, K=1024, in_dtype="bfloat16"),
    "fp16_out": dict(M=1024, N=1024, K=1024, out_dtype="float16"),
    "edges": dict(M=1000, N=1030, K=999),
    "stages2": dict(M=1024, N=1024, K=1024, num_stages=2),
    "stages4": dict(M=1024, N=1024, K=1024, num_stages=4),
    "big_tile": dict(M=8192, N=8192, K=8192, block_N=256, block_K=64, threads=256),
}


def cp_async(func):
    """The same kernel with the cp.async pipeline instead of TMA + a producer warp (sm_90a's default)."""
    return func.with_attr("tile_nb.tma", 0)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_builds_without_spills(name, arch, tmp_path):
    report = ptxas_report(cuda_source(gemm_ir(**VARIANTS[name]), arch), arch, tmp_path)
    assert spills(report) == 0, report
    assert "0 bytes stack frame" in report


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_pipeline_structure(stages):
    """Prologue of stages-1 commits, one commit + wait_group(stages-2) + barrier
    per iteration, a final drain."""
    lowered = lower(cp_async(gemm_ir(1024, 1024, 1024, num_stages=stages)), target("sm_90a")).script()
    assert lowered.count('func_call("tnb_cp_async_commit"') == stages  # (stages - 1) prologue + 1 in the loop
    assert f'func_call("tnb_cp_async_wait_{stages - 2}"' in lowered
    # the prefetch in the steady state needs no K-bound check (the loop guard implies it)
    assert "T.Select" not in lowered
    assert "tnb_cp_async_wait_0" in lowered  # drain after the loop
    # one loop over the 32 k-tiles, with the prefetch guarded by k + stages - 1 < 32
    assert re.search(rf"< {32 - (stages - 1)}|\+ {stages - 1} < 32", lowered)


def test_tensor_core_ops_present():
    """sm_80: mma.sync + ldmatrix; sm_90a: Hopper wgmma from shared-memory
    descriptors (mma.sync when forced)."""
    src90 = cuda_source(cp_async(gemm_ir(1024, 1024, 1024)), "sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in src90 and "fence.proxy.async" in src90
    big = cuda_source(gemm_ir(1024, 1024, 1024, block_N=256, block_K=64, threads=256), "sm_90a")
    assert "m64n256k16" in big
    src = cuda_source(gemm_ir(1024, 1024, 1024), "sm_80")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src  # A
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in src  # B stored [K, N]
    assert "cp.async.cg.shared.global" in src and ", 16, %2" in src  # 16-byte vectors
    src_bf16 = cuda_source(gemm_ir(1024, 1024, 1024, in_dtype="bfloat16"), "sm_80")
    assert "m16n8k16.row.col.f32.bf16.bf16.f32" in src_bf16


def test_edge_tiles_are_guarded():
    """1000 x 1030 x 999: rows/cols past the end are zero-filled on load and skipped on store."""
    src = cuda_source(gemm_ir(1000, 1030, 999), "sm_80")
    # K = 999 (odd row stride of A): A cannot use cp.async; B's rows (1030 halves) allow 4-byte cp.async.
    assert "tnb_cp_async_4(" in src
    lowered = lower(gemm_ir(1000, 1030, 999), target("sm_90a")).script()
    assert "T.Select" in lowered  # zero-fill: src-size 0 / value 0 outside the buffer
    assert lowered.count("if ") >= 2  # the prefetch guard and the guarded copy-out


def test_big_tile_uses_dynamic_shared_memory_above_48k():
    mod = lower(gemm_ir(8192, 8192, 8192, block_N=256, block_K=64, threads=256), target("sm_90a"))
    m = re.search(r"smem_pool = T.alloc_buffer\(\((\d+),\)", mod.script())
    # 144 KiB for 3 stages, then 3 full + 3 empty mbarriers of the TMA pipeline (8 bytes each)
    assert m and int(m.group(1)) == 3 * (128 * 64 + 64 * 256) * 2 + 6 * 8


def test_warp_layout_128x256_over_8_warps():
    from tile_nb.lower.analysis.layout import MmaAccLayout, choose_warp_grid

    assert choose_warp_grid(128, 128, 4) == (2, 2)
    assert choose_warp_grid(128, 256, 8) == (2, 4)
    lay = MmaAccLayout.choose(128, 128, 4)
    assert lay.regs == 128  # 128*128 floats over 128 threads


def test_split_k_accumulator_stays_in_registers_and_adds_atomically(tmp_path):
    """The split-K GEMM (a third grid axis, partial tiles summed with T.atomic_add): wgmma into registers, one
    atomicAdd(float2*) per pair of accumulator registers straight from registers (the tile's edge guard holds
    for whole pairs: lower/emit/vector_atomics.py), no spills."""
    from kernels.seed import gemm_split_k

    func = gemm_split_k.specialize(M=1024, N=1024, K=1024)
    src = cuda_source(func, "sm_90a")
    assert "wgmma.mma_async" in src
    # 128x256 fp32 over 256 threads: 128 registers, side by side in pairs, one atomic each
    assert src.count("tnb_atomic_add_float32x2((") == 64 and src.count("atomicAdd(") == 1  # 1: the helper
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


@pytest.mark.parametrize("a_dtype,b_dtype,types", [("float8_e4m3fn", "float8_e4m3fn", "e4m3.e4m3"),
                                                    ("float8_e5m2", "float8_e4m3fn", "e5m2.e4m3")])
@pytest.mark.parametrize("block_K", [64, 128])
def test_fp8_gemm_on_wgmma_with_tma(a_dtype, b_dtype, types, block_K, tmp_path):
    """8-bit float operands: m64nNk32 wgmma (no transpose immediates: both operands K-major), TMA loads into
    64B/128B-swizzled tiles (tensor maps of uint8), float32 accumulators in registers, no spills."""
    from kernels.seed import gemm_fp8

    import tile_nb.language as T

    func = gemm_fp8.specialize(
        M=1024, N=1024, K=1024, a_dtype=getattr(T, a_dtype), b_dtype=getattr(T, b_dtype), block_K=block_K
    )
    src = cuda_source(func, "sm_90a")
    assert re.findall(r"wgmma\.mma_async[\w.]+", src) == [
        f"wgmma.mma_async.sync.aligned.m64n256k32.f32.{types}"
    ]
    assert "cp.async.bulk.tensor" in src and "cp.async.cg" not in src
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


def test_8bit_gemm_with_b_stored_k_by_n_is_off_wgmma():
    """8-bit operands with B stored [K, N] cannot go to wgmma (PTX reads them K-major only): 8-bit floats run
    as FMAs on the CUDA cores, int8 as integer multiply-adds, and the plan says why (test_fp8_fma_gemm.py)."""
    from kernels.seed import gemm_variant

    import tile_nb.language as T
    from tile_nb.lower.analysis.plan import make_plan

    int8 = dict(in_dtype=T.int8, acc_dtype=T.int32, out_dtype=T.int32)
    for dtypes in (dict(in_dtype=T.float8_e4m3fn), int8):
        func = gemm_variant.specialize(M=256, N=256, K=256, block_K=128, threads=256, **dtypes)
        plan = make_plan(func, target("sm_90a"))
        assert [k.value for k in plan.gemms.values()] == ["fma"]
        assert any("B is stored [K, N]; wgmma reads 8-bit B stored [N, K] only (transpose_B=True)" in n
                   for n in plan.notes), plan.notes


def test_int8_gemm_on_wgmma_accumulates_in_int32_registers(tmp_path):
    """int8 x int8 -> int32: m64nNk32.s32.s8.s8 wgmma with "+r" (integer) accumulator registers, TMA loads."""
    from kernels.seed import gemm_int8

    src = cuda_source(gemm_int8.specialize(M=1024, N=1024, K=1024), "sm_90a")
    assert re.findall(r"wgmma\.mma_async[\w.]+", src) == ["wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8"]
    assert '"+r"(d[0])' in src and '"+f"' not in src
    assert "cp.async.bulk.tensor" in src
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


@pytest.mark.parametrize("trans_B", [False, True])
def test_block_k_128_uses_k_major_panels_on_wgmma(trans_B, tmp_path):
    """K-major operands of 256-byte rows are stored as two 64-column panels: still wgmma (not mma.sync), a TMA
    box per panel, and the descriptors of k-steps 4..7 start in the second panel."""
    func = gemm_ir(1024, 1024, 1024, block_N=128, block_K=128, threads=256, trans_B=trans_B)
    lowered, plan = lower_with_plan(func, target("sm_90a"))
    assert plan.uses_wgmma and plan.tma is not None
    a_tile = next(t for b, t in plan.shared.items() if b.name == "A_shared")
    assert a_tile.panel
    assert all(len(c.boxes) == 2 for c in plan.tma.copies)  # a 64-column box per panel, A and B alike
    report = ptxas_report(cuda_source(func, "sm_90a"), "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


@pytest.mark.parametrize("arch, dtypes, kind", [
    ("sm_90a", {}, "WGMMA"),
    ("sm_80", {}, "MMA_SYNC"),
    ("sm_90a", {"in_dtype": "float32"}, "FMA"),
    ("sm_90a", {"in_dtype": "float32", "tile_dtype": "tfloat32"}, "TF32"),
    ("sm_90a", {"in_dtype": "float64", "acc_dtype": "float64", "out_dtype": "float64"}, "FMA"),
])
def test_each_gemm_instruction_is_a_plan_field(arch, dtypes, kind):
    """plan.gemms: T.gemm call -> GemmKind, decided in analysis/ (mma.gemm_kind); emit/gemm.py reads it."""
    from tile_nb.lower.analysis.decisions import GemmKind

    _, plan = lower_with_plan(gemm_ir(256, 256, 256, block_M=64, block_N=64, **dtypes), target(arch))
    assert list(plan.gemms.values()) == [GemmKind[kind]]
    (call,) = plan.gemms
    assert call.op.name == "tirx.tile.gemm"


def test_flash_attention_head_dim_128_runs_both_gemms_on_wgmma():
    from kernels.reference import flash_attention

    _, plan = lower_with_plan(
        flash_attention.specialize(B=1, H=2, S=256, D=128, block_M=128, block_N=64), target("sm_90a")
    )
    assert [type(a).__name__ for a in plan.accumulators.values()] == ["WgmmaAccLayout", "WgmmaAccLayout"]
    assert [k.value for k in plan.gemms.values()] == ["wgmma", "wgmma"]


@pytest.mark.parametrize("make", [
    lambda: __import__("kernels.seed", fromlist=["x"]).gemm_a_in_registers.specialize(M=256, N=256, K=256),
    lambda: __import__("kernels.reference", fromlist=["x"]).flash_attention.specialize(B=1, H=2, S=256, D=64),
])
def test_fragment_a_operand_uses_the_register_form_of_wgmma(make, tmp_path):
    """A register fragment as T.gemm's A: wgmma reads it from registers (no shared tile, no spills)."""
    func = make()
    _, plan = lower_with_plan(func, target("sm_90a"))
    a_name = "A_frag" if "A_frag" in func.script() else "probs"
    assert a_name in {b.name for b in plan.fragments.layouts} and a_name not in {b.name for b in plan.shared}
    src = cuda_source(func, "sm_90a")
    assert "tnb_wgmma_rs_m64n64k16_f16_tb1" in src
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


def test_register_a_falls_back_to_shared_when_registers_run_out():
    """Head dim 128 with block_M = 128: acc (128) + scores (64) + probs (32, packed) registers
    would push the row statistics out of registers; probs goes through shared memory instead, as
    before, and the plan says why."""
    from kernels.reference import flash_attention

    _, plan = lower_with_plan(
        flash_attention.specialize(B=1, H=2, S=256, D=128, block_M=128), target("sm_90a")
    )
    assert [n.split(" ")[0] for n in plan.notes] == ["probs"], plan.notes

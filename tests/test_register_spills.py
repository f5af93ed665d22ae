"""Register fragments past a thread's registers: ptxas spills, within budget.SPILL_ALLOWANCE.

A GEMM that promotes its accumulator into a second one every k-tile (DeepSeek's fp8 GEMM with two accumulators
in tilelang's examples does this every few tiles) holds two 128x128 float32 fragments over 128 threads: 256
registers per thread. In shared memory the second accumulator would take the pipelined loop off TMA (the
loop's other statements may not touch shared memory there), so the plan keeps it in registers and lets ptxas
spill, and says so. Fragments past the allowance are refused, naming the fragments.

Two wgmma accumulators of 128 registers each (FlashAttention at head dim 128 on 128x128 tiles has them) build
with the spill noted; a float64 FMA accumulator of 256 stays refused (tests/test_fma_gemm.py: ptxas spilled
9.7 KB there).

CPU: the plans (TMA, both fragments in registers, the notes), ptxas's spill report (with nvcc), the
interpreter against torch at odd shapes and M = 1, the refusal. GPU (marked gpu): the same kernels against
torch.
"""
import pytest
import torch

import tile_nb
from tile_nb import language as T
from tile_nb.backend import toolchain
from tile_nb.lower import LoweringError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")


@tile_nb.jit
def gemm_two_accumulators(A, B, C, block_M: int = 128, block_N: int = 128, block_K: int = 64,
                          num_stages: int = 3):
    """C = A @ B^T, each k-tile's product summed in C_local and added into C_accum (a second accumulator)."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[N, K], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), T.float16)
        B_shared = T.alloc_shared((block_N, block_K), T.float16)
        C_local = T.alloc_fragment((block_M, block_N), T.float32)
        C_accum = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_accum)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[bx * block_N, k * block_K], B_shared)
            T.gemm(A_shared, B_shared, C_local, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(block_M, block_N):
                C_accum[i, j] += C_local[i, j]
        T.copy(C_accum, C[by * block_M, bx * block_N])


@tile_nb.jit
def products_summed(A, B, C, count: int = 3):
    """`count` 128x128 float32 accumulators over 128 threads (128 registers each), summed into the first."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[N, K], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
        A_shared = T.alloc_shared((128, K), T.float16)
        B_shared = T.alloc_shared((128, K), T.float16)
        first = T.alloc_fragment((128, 128), T.float32)
        second = T.alloc_fragment((128, 128), T.float32)
        T.copy(A[by * 128, 0], A_shared)
        T.copy(B[bx * 128, 0], B_shared)
        T.gemm(A_shared, B_shared, first, transpose_B=True, clear_accum=True)
        T.gemm(A_shared, B_shared, second, transpose_B=True, clear_accum=True)
        if count == 3:
            third = T.alloc_fragment((128, 128), T.float32)
            T.gemm(A_shared, B_shared, third, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(128, 128):
                first[i, j] += second[i, j] + third[i, j]
        else:
            for i, j in T.Parallel(128, 128):
                first[i, j] += second[i, j]
        T.copy(first, C[by * 128, bx * 128])


def inputs(M, N, K, device="cpu"):
    g = torch.Generator().manual_seed(M * 7 + N * 3 + K)
    A = (torch.rand(M, K, generator=g) - 0.5).half()
    B = (torch.rand(N, K, generator=g) - 0.5).half()
    C = torch.full((M, N), float("nan"))
    return A.to(device), B.to(device), C.to(device)


def test_the_plan_keeps_both_accumulators_in_registers_for_tma():
    plan = gemm_two_accumulators.compile(*inputs(256, 256, 512), target="sm_90a").plan
    where = {f["name"]: f["where"] for f in plan["fragments"]}
    assert where == {"C_local": "registers", "C_accum": "registers"}
    assert plan["fragment_registers"] == 256
    assert plan["pipeline"].startswith("TMA")
    notes = "\n".join(plan["notes"])
    assert "C_accum kept in registers past what a thread can spare" in notes
    assert "the pipelined loop would run on cp.async" in notes
    assert "take 256 32-bit registers per thread, a thread has 255: ptxas spills" in notes


def test_without_the_pipeline_at_stake_the_second_accumulator_goes_to_shared_memory():
    # num_stages=1: no TMA to keep, so the spare-register budget moves C_accum to shared memory as before
    plan = gemm_two_accumulators.compile(*inputs(256, 256, 512), num_stages=1, target="sm_90a").plan
    where = {f["name"]: f["where"] for f in plan["fragments"]}
    assert where == {"C_local": "registers", "C_accum": "shared memory"}
    assert not any("ptxas spills" in n for n in plan["notes"])


@needs_nvcc
def test_ptxas_reports_the_spill():
    kernel = gemm_two_accumulators.compile(*inputs(256, 256, 512), target="sm_90a")
    resources = kernel.resources
    assert resources is not None and resources.registers <= 255
    assert resources.spill_stores > 0 and resources.spill_loads > 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N, K", [(200, 130, 330), (1, 256, 128), (128, 1, 64)])
def test_two_accumulators_agree_with_torch(backend, M, N, K):
    A, B, C = inputs(M, N, K, backend)
    gemm_two_accumulators(A, B, C)
    expected = A.cpu().double() @ B.cpu().double().T
    torch.testing.assert_close(C.cpu().double(), expected, rtol=1e-3, atol=1e-3)


def test_wgmma_accumulators_past_the_registers_build_with_the_spill_noted():
    # two 128x128 wgmma accumulators over 128 threads: 256 registers, one past the register file (tilelang's
    # FlashAttention at head dim 128 and 128x128 tiles has the same two)
    plan = products_summed.compile(*inputs(128, 128, 64), count=2, target="sm_90a").plan
    assert plan["fragment_registers"] == 256
    assert any("ptxas spills to local memory" in n for n in plan["notes"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_wgmma_accumulators_agree_with_torch(backend):
    A, B, C = inputs(130, 257, 64, backend)
    products_summed(A, B, C, count=2)
    expected = 2 * (A.cpu().double() @ B.cpu().double().T)
    torch.testing.assert_close(C.cpu().double(), expected, rtol=1e-3, atol=1e-3)


def test_fragments_past_the_spill_allowance_are_refused():
    with pytest.raises(LoweringError) as err:
        products_summed.compile(*inputs(128, 128, 64), count=3, target="sm_90a")
    text = str(err.value)
    assert "register fragments need 384 32-bit registers per thread; a thread has at most 255" in text
    assert "at most 32 more to spill" in text


def test_one_accumulator_past_the_registers_stays_refused():
    # a wgmma group holds its whole accumulator live: 128x256 float32 over 128 threads is 256 registers in one
    # accumulator, which no spill can serve (tutorial 06 shows this refusal)
    from kernels.seed import gemm_variant

    A, B = (torch.randn(256, 256).half() for _ in range(2))
    with pytest.raises(LoweringError) as err:
        gemm_variant.compile(A, B, torch.empty(256, 256), block_M=128, block_N=256, threads=128,
                             target="sm_90a")
    text = str(err.value)
    assert "need 256 32-bit registers per thread; a thread has at most 255:" in text
    assert "spill" not in text.splitlines()[0]

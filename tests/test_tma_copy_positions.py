"""A TMA copy whose position the kernel computes before its pipelined loop (a grouped GEMM's group, found by a
loop over the group offsets into a `T.alloc_var`): a producer warp skips the code before the loop, so it would
read that variable uninitialized. The first consumer thread issues the loads instead, the plan says why, and
a producer warp asked for is refused (cp.async). Found by tilelang's grouped GEMM example on the H100
(2026-12-06: persistent CTAs failed to build; without them the producer read garbage positions)."""
import pytest
import torch
from kernels.cuda import target

import tile_nb
import tile_nb.language as T
from tile_nb.lower import lower_with_plan
from tile_nb.lower.analysis.decisions import PipelineKind


@tile_nb.jit
def grouped_gemm(A, B, offsets, padded, block_M: int = 64, block_N: int = 128, block_K: int = 64,
                 threads: int = 256, m_blocks: int = 2):
    """C[rows of group g] = A[rows of group g] @ B[g]; row block bx belongs to the last group whose padded
    start is <= bx * block_M."""
    M, K, N, G = T.const('M, K, N, G')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[G, K, N], T.float16]
    offsets: T.Tensor[[G + 1], T.int32]   # group g has rows offsets[g] .. offsets[g + 1]
    padded: T.Tensor[[G], T.int32]        # its first row block starts at row padded[g] of the padded grid
    C = T.empty((M, N), T.float16)
    with T.Kernel(m_blocks, T.ceildiv(N, block_N), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.float16)
        B_s = T.alloc_shared((block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        g = T.alloc_var(T.int32)
        g = 0
        for i in T.serial(G):
            g = T.if_then_else(bx * block_M >= padded[i], i, g)
        row = bx * block_M - padded[g] + offsets[g]
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[row:row + block_M, k * block_K:(k + 1) * block_K], A_s)
            T.copy(B[g, k * block_K:(k + 1) * block_K, by * block_N:(by + 1) * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        for i, j in T.Parallel(block_M, block_N):
            if row + i < offsets[g + 1] and by * block_N + j < N:
                C[row + i, by * block_N + j] = acc[i, j]
    return C


@tile_nb.jit
def grouped_gemm_by_table(A, B, group_of, row_of, block_M: int = 64, block_N: int = 128, block_K: int = 64,
                          threads: int = 256):
    """The same GEMM with each row block's group and first row read from tables in global memory: variables
    bound to global loads, which a producer warp evaluates as well as the consumers."""
    M, K, N, G, MB = T.const('M, K, N, G, MB')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[G, K, N], T.float16]
    group_of: T.Tensor[[MB], T.int32]
    row_of: T.Tensor[[MB], T.int32]
    C = T.empty((MB * block_M, N), T.float16)
    with T.Kernel(MB, T.ceildiv(N, block_N), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.float16)
        B_s = T.alloc_shared((block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        g = group_of[bx]
        row = row_of[bx]
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[row:row + block_M, k * block_K:(k + 1) * block_K], A_s)
            T.copy(B[g, k * block_K:(k + 1) * block_K, by * block_N:(by + 1) * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[bx * block_M:(bx + 1) * block_M, by * block_N:(by + 1) * block_N])
    return C


def _inputs(sizes, K, N, block_M=64, device="cpu"):
    offsets, padded = [0], []
    for s in sizes:
        padded.append(sum(-(-t // block_M) * block_M for t in sizes[:len(padded)]))
        offsets.append(offsets[-1] + s)
    A = torch.randn(offsets[-1], K, device=device).half()
    B = torch.randn(len(sizes), K, N, device=device).half()
    m_blocks = sum(-(-s // block_M) for s in sizes)
    as_int = dict(dtype=torch.int32, device=device)
    return A, B, torch.tensor(offsets, **as_int), torch.tensor(padded, **as_int), m_blocks


def _reference(A, B, offsets):
    out = torch.empty(A.shape[0], B.shape[2], dtype=torch.float32, device=A.device)
    for g in range(B.shape[0]):
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        out[lo:hi] = A[lo:hi].float() @ B[g].float()
    return out.half()


def _plan(sizes=(64, 128), K=512, N=256, **options):
    A, B, offsets, padded, m_blocks = _inputs(list(sizes), K, N)
    func = grouped_gemm.specialize(A, B, offsets, padded, m_blocks=m_blocks)
    for name, value in options.items():
        func = func.with_attr(f"tile_nb.{name}", value)
    return lower_with_plan(func, target("sm_90a"))[1]


def test_the_first_consumer_thread_issues_the_loads_and_the_plan_says_why():
    plan = _plan()
    assert plan.pipeline_kind is PipelineKind.TMA and not plan.tma.producer_warp
    assert plan.persistent is None  # persistent CTAs need a producer warp
    assert "a copy's position reads g (a local.var buffer), which the threads compute before the loop" \
        in plan.pipeline_note


def test_a_producer_warp_asked_for_is_refused_with_the_reason():
    plan = _plan(producer_warp=1)
    assert plan.pipeline_kind is PipelineKind.CP_ASYNC
    assert plan.refusal("tma").code == "tma.copy_index"
    assert "reads g (a local.var buffer)" in plan.refusal("tma").text


def test_copies_placed_by_global_tables_keep_the_producer_warp():
    A, B = torch.randn(300, 256).half(), torch.randn(3, 256, 256).half()
    tables = dict(group_of=torch.tensor([0, 2, 1], dtype=torch.int32),
                  row_of=torch.tensor([0, 100, 236], dtype=torch.int32))
    func = grouped_gemm_by_table.specialize(A, B, **tables)
    plan = lower_with_plan(func, target("sm_90a"))[1]
    assert plan.pipeline_kind is PipelineKind.TMA and plan.tma.producer_warp and plan.tma.no_producer == ""
    C = grouped_gemm_by_table(A, B, **tables)
    for bx, (g, row) in enumerate(zip(tables["group_of"].tolist(), tables["row_of"].tolist(), strict=True)):
        expected = (A[row:row + 64].float() @ B[g].float()).half()
        torch.testing.assert_close(C[bx * 64:(bx + 1) * 64], expected, rtol=2e-2, atol=2e-2)


def test_copies_placed_by_block_indices_alone_keep_the_producer_warp():
    """The same GEMM placed by blockIdx only (one group) is unaffected."""
    from kernels.seed import gemm_ir

    plan = lower_with_plan(gemm_ir(1024, 1024, 1024, block_N=256, block_K=64, threads=256),
                           target("sm_90a"))[1]
    assert plan.tma.producer_warp and plan.tma.no_producer == ""


@pytest.mark.parametrize("sizes", [[64, 128], [63, 1, 130], [1]])
def test_on_the_interpreter_against_torch(sizes):
    A, B, offsets, padded, m_blocks = _inputs(sizes, 96, 200)
    C = grouped_gemm(A, B, offsets, padded, m_blocks=m_blocks)
    torch.testing.assert_close(C, _reference(A, B, offsets), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_on_the_gpu_copies_placed_by_global_tables():
    A = torch.randn(300, 256, device="cuda").half()
    B = torch.randn(3, 256, 200, device="cuda").half()
    group_of = torch.tensor([0, 2, 1, 2], dtype=torch.int32, device="cuda")
    row_of = torch.tensor([0, 100, 236, 7], dtype=torch.int32, device="cuda")
    C = grouped_gemm_by_table(A, B, group_of, row_of)
    for bx, (g, row) in enumerate(zip(group_of.tolist(), row_of.tolist(), strict=True)):
        expected = (A[row:row + 64].float() @ B[g].float()).half()
        torch.testing.assert_close(C[bx * 64:(bx + 1) * 64], expected, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("sizes,K,N", [([64, 128], 512, 256), ([63, 1, 130], 192, 200), ([1], 64, 128),
                                       ([700, 900, 555], 1024, 8192)])
def test_on_the_gpu_against_torch(sizes, K, N):
    """The last shape has 35 x 64 = 2240 tiles: more than the SMs (persistent CTAs were chosen there)."""
    A, B, offsets, padded, m_blocks = _inputs(sizes, K, N, device="cuda")
    C = grouped_gemm(A, B, offsets, padded, m_blocks=m_blocks)
    torch.testing.assert_close(C, _reference(A, B, offsets), rtol=2e-2, atol=2e-2)

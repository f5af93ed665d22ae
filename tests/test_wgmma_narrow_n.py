"""wgmma for a T.gemm whose 16-bit B is stored [N, K] (transpose_B=True) with N a multiple of 16 below 64 or
between multiples of 64 (FlashAttention backward's 128x32 S^T and dP^T tiles at block_N=32): one warpgroup's
m64nNk16 over the whole N (analysis/mma.py, wgmma_split). A [K, N] B keeps N a multiple of 64 (its 64-column
panels), and so do 8-bit operands."""
from __future__ import annotations

import pytest
import torch

import tile_nb
import tile_nb.language as T

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def abt(A, B, block_M=128, block_N=32, threads=256):
    """C = A @ B^T in float32, B stored [N, K]."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[N, K], T.float16]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        a = T.alloc_shared((block_M, 64), T.float16)
        b = T.alloc_shared((block_N, 64), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, 64), num_stages=2):
            T.copy(A[by * block_M, k * 64], a)
            T.copy(B[bx * block_N, k * 64], b)
            T.gemm(a, b, acc, transpose_B=True)
        T.copy(acc, C[by * block_M, bx * block_N])
    return C


@tile_nb.jit
def scores_then_values(Q, K, V, block_N=32):
    """O = softmax-free attention's two products over key blocks of block_N: S = Q K^T (128 x block_N, B
    stored [N, K]), then O += S (cast to float16, wgmma's register A) @ V."""
    M, N = T.const("M, N")
    Q: T.Tensor[[M, 64], T.float16]
    K: T.Tensor[[N, 64], T.float16]
    V: T.Tensor[[N, 64], T.float16]
    O = T.empty((M, 64), T.float32)
    with T.Kernel(T.ceildiv(M, 128), threads=256) as bx:
        q = T.alloc_shared((128, 64), T.float16)
        k_s = T.alloc_shared((block_N, 64), T.float16)
        v_s = T.alloc_shared((block_N, 64), T.float16)
        s = T.alloc_fragment((128, block_N), T.float32)
        s16 = T.alloc_fragment((128, block_N), T.float16)
        o = T.alloc_fragment((128, 64), T.float32)
        T.copy(Q[bx * 128, 0], q)
        T.clear(o)
        for kb in T.Pipelined(T.ceildiv(N, block_N), num_stages=2):
            T.copy(K[kb * block_N, 0], k_s)
            T.copy(V[kb * block_N, 0], v_s)
            T.clear(s)
            T.gemm(q, k_s, s, transpose_B=True)
            for i, j in T.Parallel(128, block_N):
                s16[i, j] = s[i, j] * 0.125
            T.gemm(s16, v_s, o)
        T.copy(o, O[bx * 128, 0])
    return O


def _mma_kinds(kernel, *args, **kw):
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower.analysis.plan import make_plan

    plan = make_plan(kernel.specialize(*args, **kw), resolve_target("sm_90a"))
    return {m["name"]: (m["kind"], m["tile"]) for m in plan.summary()["mma"]}


@pytest.mark.parametrize("block_M, block_N, threads", [(128, 32, 256), (64, 16, 128), (64, 48, 128),
                                                       (128, 80, 256), (64, 144, 128)])
def test_narrow_and_uneven_n_go_to_wgmma_with_b_stored_n_by_k(block_M, block_N, threads):
    a, b = torch.randn(130, 64).half(), torch.randn(70, 64).half()
    kinds = _mma_kinds(abt, a, b, block_M=block_M, block_N=block_N, threads=threads)
    assert kinds == {"acc": ("wgmma", [block_M, block_N])}


def test_the_register_operand_chain_stays_on_wgmma():
    q, k, v = torch.randn(130, 64).half(), torch.randn(70, 64).half(), torch.randn(70, 64).half()
    kinds = _mma_kinds(scores_then_values, q, k, v)
    assert kinds == {"s": ("wgmma", [128, 32]), "o": ("wgmma", [128, 64])}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block_M, block_N, threads", [(128, 32, 256), (64, 16, 128), (64, 48, 128),
                                                       (128, 80, 256), (64, 144, 128)])
@pytest.mark.parametrize("M, N, K", [(130, 70, 200), (1, 16, 64), (64, 1, 8)])
def test_abt_agrees_with_torch(device, block_M, block_N, threads, M, N, K):
    torch.manual_seed(0)
    a, b = torch.randn(M, K).half(), torch.randn(N, K).half()
    c = abt(a.to(device), b.to(device), block_M=block_M, block_N=block_N, threads=threads)
    torch.testing.assert_close(c.cpu(), a.float() @ b.float().T, atol=2e-2, rtol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("M, N, block_N", [(130, 70, 32), (128, 32, 32), (1, 5, 16), (200, 96, 48)])
def test_scores_then_values_agrees_with_torch(device, M, N, block_N):
    torch.manual_seed(1)
    q, k, v = torch.randn(M, 64).half(), torch.randn(N, 64).half(), torch.randn(N, 64).half()
    o = scores_then_values(q.to(device), k.to(device), v.to(device), block_N=block_N)
    s = ((q.float() @ k.float().T) * 0.125).half().float()
    torch.testing.assert_close(o.cpu(), s @ v.float(), atol=5e-2, rtol=5e-3)

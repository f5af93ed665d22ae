"""wgmma reads its shared-memory operands through the async proxy: a tile the kernel's threads stored to (from
registers, not by cp.async or TMA) must be followed by `fence.proxy.async.shared::cta` before the barrier that
precedes the wgmma, or the wgmma may read what the tile held before. On the H200 (2026-12-05) the backward
attention kernel's dK, whose dS tile is stored from registers each query block, missed by 3-9% at S = 1000
without the fence (that kernel now keeps dS in registers as a T.gemm operand: no tile to fence). CPU tests of
the generated sm_90a CUDA, and the kernel below on the GPU."""
import pytest
import torch

import tile_nb
import tile_nb.language as T

FENCE, WGMMA_FENCE = "tnb_fence_proxy_async();", "tnb_wgmma_fence();"


@tile_nb.jit
def scaled_gemm(A, B, C, block: int = 64):
    """C = (2 A) B, with 2 A made in registers and stored into the shared tile the T.gemm reads."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
        a = T.alloc_fragment((block, 32), T.float32)
        A_s = T.alloc_shared((block, 32), T.float16)
        B_s = T.alloc_shared((32, block), T.float16)
        acc = T.alloc_fragment((block, block), T.float32)
        T.clear(acc)
        for k in range(T.ceildiv(K, 32)):
            T.copy(B[k * 32, bx * block], B_s)  # first: its cp.async fence must not be what covers A_s
            T.copy(A[by * block, k * 32], a)
            for i, j in T.Parallel(block, 32):
                a[i, j] = a[i, j] * 2
            T.copy(a, A_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * block, bx * block])


def _cuda(kernel, **consts) -> str:
    from tile_nb.runtime import compile as rt_compile

    return rt_compile(kernel.specialize(**consts), "sm_90a", options={"cache": False}).cuda_source


def test_a_register_tile_stored_for_wgmma_is_fenced():
    src = _cuda(scaled_gemm, M=128, N=128, K=96)
    assert "wgmma.mma_async" in src and FENCE in src
    body = src[src.index("extern \"C\" __global__"):]
    first_wgmma = body.index(WGMMA_FENCE)
    store = body.rfind("tnb_vst_", 0, first_wgmma)  # the vector stores of `a` into A_s
    assert store >= 0 and body.rfind(FENCE, 0, first_wgmma) > store


@pytest.mark.parametrize("M,N,K", [(64, 64, 32), (100, 72, 70), (1, 1, 1)])
def test_scaled_gemm_on_the_interpreter(M, N, K):
    torch.manual_seed(M + N + K)
    A, B = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    C = torch.empty(M, N)
    scaled_gemm(A, B, C)
    torch.testing.assert_close(C, (2 * A.float()) @ B.float(), atol=1e-2 * K ** 0.5, rtol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(64, 64, 32), (1000, 130, 4096), (1, 1, 1)])
def test_scaled_gemm_on_the_gpu(M, N, K):
    torch.manual_seed(M + N + K)
    A = torch.randn(M, K, dtype=torch.float16, device="cuda")
    B = torch.randn(K, N, dtype=torch.float16, device="cuda")
    C = torch.empty(M, N, device="cuda")
    scaled_gemm(A, B, C)
    ref = (2 * A.float()) @ B.float()
    # fp16 products are exact in float32; sums of K terms round at 2^-24 each
    torch.testing.assert_close(C, ref, atol=2.0 ** -20 * K * ref.abs().max().item() + 1e-6, rtol=0)

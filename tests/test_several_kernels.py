"""A function with several T.Kernel (tilelang's MoE, decode and backward examples): each runs after the one
before, on the interpreter and on the GPU. The CUDA lowering plans the function once, so: no barrier between
two kernels (it was emitted on the host: a TVM InternalError for any two kernels that touch shared memory),
the grid-order schedules (CTA raster groups, persistent CTAs) off (they followed one kernel's grid: another
InternalError, in tilelang's fused MoE example), and kernels with different `threads=` refused (their
fragments would have been laid out for the wrong number of threads: stores out of range). Interpreter
against torch, the CUDA build, and the GPU (marked gpu)."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.lower import LoweringError


@tile_nb.jit
def two_gemms(A, W, V, block: int = 64):
    """B = A @ W^T, then C = B @ V^T (as fp16), each in its own T.Kernel over a 2-d grid."""
    M, K, N, P = T.const('M, K, N, P')
    A: T.Tensor[[M, K], T.float16]
    W: T.Tensor[[N, K], T.float16]
    V: T.Tensor[[P, N], T.float16]
    B = T.empty((M, N), T.float16)
    C = T.empty((M, P), T.float32)
    with T.Kernel(T.ceildiv(M, block), T.ceildiv(N, block), threads=128) as (bx, by):
        a_s = T.alloc_shared((block, 64), T.float16)
        w_s = T.alloc_shared((block, 64), T.float16)
        acc = T.alloc_fragment((block, block), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, 64), num_stages=2):
            T.copy(A[bx * block, k * 64], a_s)
            T.copy(W[by * block, k * 64], w_s)
            T.gemm(a_s, w_s, acc, transpose_B=True)
        T.copy(acc, B[bx * block, by * block])
    with T.Kernel(T.ceildiv(M, block), T.ceildiv(P, block), threads=128) as (bx, by):
        b_s = T.alloc_shared((block, 64), T.float16)
        v_s = T.alloc_shared((block, 64), T.float16)
        acc2 = T.alloc_fragment((block, block), T.float32)
        T.clear(acc2)
        for k in T.Pipelined(T.ceildiv(N, 64), num_stages=2):
            T.copy(B[bx * block, k * 64], b_s)
            T.copy(V[by * block, k * 64], v_s)
            T.gemm(b_s, v_s, acc2, transpose_B=True)
        T.copy(acc2, C[bx * block, by * block])
    return B, C


SHAPES = [(100, 70, 130, 50), (1, 1, 1, 1), (256, 128, 256, 192)]


def _check(M, K, N, P, device):
    g = torch.Generator().manual_seed(M + K + N + P)
    a, w, v = (torch.randn(*s, generator=g).half() for s in ((M, K), (N, K), (P, N)))
    b, c = two_gemms(a.to(device), w.to(device), v.to(device))
    b_ref = (a.float() @ w.float().T).half()
    torch.testing.assert_close(b.cpu(), b_ref, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(c.cpu(), b_ref.float() @ v.float().T, atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("M,K,N,P", SHAPES)
def test_two_gemm_kernels_in_one_function_on_the_interpreter(M, K, N, P):
    _check(M, K, N, P, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("M,K,N,P", SHAPES)
def test_two_gemm_kernels_in_one_function_on_gpu(M, K, N, P):
    _check(M, K, N, P, "cuda")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_two_gemm_kernels_build_with_no_barrier_on_the_host(arch):
    a, w, v = torch.zeros(256, 128).half(), torch.zeros(256, 128).half(), torch.zeros(192, 256).half()
    kernel = two_gemms.compile(a, w, v, target=arch)
    assert kernel.cuda_source.count("extern \"C\" __global__") >= 2
    assert kernel.plan["persistent_ctas"] is None and "_raster" not in kernel.cuda_source


def test_kernels_with_different_thread_counts_are_refused_at_the_second():
    @tile_nb.jit
    def two(A):
        A: T.Tensor[[64, 64], T.float32]
        B = T.empty((64, 64), T.float32)
        C = T.empty((64, 64), T.float32)
        with T.Kernel(1, threads=256) as _:
            f = T.alloc_fragment((64, 64), T.float32)
            T.copy(A, f)
            for i, j in T.Parallel(64, 64):
                f[i, j] = f[i, j] + 1.0
            T.copy(f, B)
        with T.Kernel(1, threads=128) as _:
            g = T.alloc_fragment((64, 64), T.float32)
            T.copy(B, g)
            for i, j in T.Parallel(64, 64):
                g[i, j] = g[i, j] * 2.0
            T.copy(g, C)
        return B, C

    a = torch.randn(64, 64)
    b, c = two(a)                                              # the interpreter runs it as written
    torch.testing.assert_close(c, (a + 1) * 2)
    expected = "threads=128, an earlier one in the same function threads=256"
    with pytest.raises(LoweringError, match=expected) as info:
        two.compile(a, target="sm_90a")
    assert info.value.lineno is not None

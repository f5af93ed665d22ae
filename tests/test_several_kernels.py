"""A function with several T.Kernel (tilelang's MoE, decode and backward examples): each runs after the one
before, on the interpreter and on the GPU. The CUDA lowering plans and emits each kernel on its own
(lowering.py): its own threads, pipelines, registers, shared memory and grid-order schedule (CTA raster
groups, persistent CTAs follow its own grid). Before, one plan served the whole function: one thread count
(kernels with different `threads=` were refused), one shared pool and one register budget for all, no TMA
where the function had more than one pipelined loop. Interpreter against torch, the CUDA build, and the GPU
(marked gpu)."""
import pytest
import torch

import tile_nb
import tile_nb.language as T


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
def test_each_kernel_is_planned_on_its_own(arch):
    a, w, v = torch.zeros(256, 128).half(), torch.zeros(256, 128).half(), torch.zeros(192, 256).half()
    kernel = two_gemms.compile(a, w, v, target=arch)
    assert kernel.cuda_source.count("extern \"C\" __global__") >= 2
    plans = kernel.plan["kernels"]
    assert len(plans) == 2 and [p["threads"] for p in plans] == [128, 128]
    assert [p["mma"][0]["name"] for p in plans] == ["acc", "acc2"]  # each plan holds its own kernel only
    assert kernel.plan["pipeline"].startswith("kernel 1: ") and "; kernel 2: " in kernel.plan["pipeline"]
    # each kernel's own shared memory (two stages of its two 8 KiB tiles, and on sm_90a the TMA pipeline's
    # mbarriers), not the two kernels' together
    for r in kernel.resources_by_kernel.values():
        assert 2 * 2 * 64 * 64 * 2 <= r.dynamic_shared_bytes <= 2 * 2 * 64 * 64 * 2 + 256


@tile_nb.jit
def two_thread_counts(A, first: int = 256, second: int = 128):
    """Two kernels over one [64, 64] fragment each, with different `threads=`."""
    A: T.Tensor[[64, 64], T.float32]
    B = T.empty((64, 64), T.float32)
    C = T.empty((64, 64), T.float32)
    with T.Kernel(1, threads=first) as _:
        f = T.alloc_fragment((64, 64), T.float32)
        T.copy(A, f)
        for i, j in T.Parallel(64, 64):
            f[i, j] = f[i, j] + 1.0
        T.copy(f, B)
    with T.Kernel(1, threads=second) as _:
        g = T.alloc_fragment((64, 64), T.float32)
        T.copy(B, g)
        for i, j in T.Parallel(64, 64):
            g[i, j] = g[i, j] * 2.0
        T.copy(g, C)
    return B, C


def test_kernels_with_different_thread_counts_build_each_with_its_own():
    a = torch.randn(64, 64)
    b, c = two_thread_counts(a)                                    # the interpreter runs it as written
    torch.testing.assert_close(c, (a + 1) * 2)
    kernel = two_thread_counts.compile(a, target="sm_90a")
    assert [p["threads"] for p in kernel.plan["kernels"]] == [256, 128]
    assert "__launch_bounds__(256" in kernel.cuda_source and "__launch_bounds__(128" in kernel.cuda_source


@pytest.mark.gpu
@pytest.mark.parametrize("first, second", [(256, 128), (128, 384), (32, 64)])
def test_kernels_with_different_thread_counts_on_gpu(first, second):
    a = torch.randn(64, 64)
    b, c = two_thread_counts(a.cuda(), first=first, second=second)
    torch.testing.assert_close(b.cpu(), a + 1)
    torch.testing.assert_close(c.cpu(), (a + 1) * 2)


def test_the_notebook_plan_view_shows_each_kernel():
    from tile_nb.notebook.plan import plan_text

    a, w, v = torch.zeros(256, 128).half(), torch.zeros(256, 128).half(), torch.zeros(192, 256).half()
    text = plan_text(two_gemms.compile(a, w, v, target="sm_90a").plan)
    first = text.index("Kernel 1 of 2, lowering plan: sm_90a, 128 threads")
    second = text.index("Kernel 2 of 2")
    assert first < text.index("T.gemm into acc:") < second < text.index("T.gemm into acc2:")

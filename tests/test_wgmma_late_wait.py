"""Late wgmma waits (emit/emitter.py's LateWaits, the `wgmma_late_wait` lowering option): outside TMA loops a
wgmma T.gemm is waited for before the first later statement that needs its accumulator or operands, not
right after it, so that the tensor cores run it while the statements between run. CPU tests of the sm_90a
CUDA; the GPU agreement of the kernels below is tests/test_backward_kernels.py::test_gpu_attention_bwd and
test_gpu_late_wait_agrees here."""
import sys

import pytest
import torch

import tile_nb
import tile_nb.language as T

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from kernels import attention_backward as ab  # noqa: E402


@tile_nb.jit
def two_products(A, B, X, C, Y, block: int = 64):
    """C = A B (wgmma) and, in the same block, Y = 2 X (independent of the product): the product's wait
    belongs after Y's statements, before C's store."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    X: T.Tensor[[M, N], T.float32]
    C: T.Tensor[[M, N], T.float32]
    Y: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
        A_s = T.alloc_shared((block, K), T.float16)
        B_s = T.alloc_shared((K, block), T.float16)
        acc = T.alloc_fragment((block, block), T.float32)
        x = T.alloc_fragment((block, block), T.float32)
        T.copy(A[by * block, 0], A_s)
        T.copy(B[0, bx * block], B_s)
        T.clear(acc)
        T.gemm(A_s, B_s, acc)
        T.copy(X[by * block, bx * block], x)
        for i, j in T.Parallel(block, block):
            x[i, j] = x[i, j] * 2
        T.copy(x, Y[by * block, bx * block])
        T.copy(acc, C[by * block, bx * block])


def _source(func, late: bool) -> str:
    from tile_nb.runtime import compile as rt_compile

    compiled = rt_compile(func, "sm_90a", options={"cache": False}, lowering={"wgmma_late_wait": late})
    return compiled.cuda_source


def _body(src: str) -> str:
    return src[src.index('extern "C" __global__'):]


def test_the_wait_moves_past_independent_statements():
    func = two_products.specialize(M=128, N=128, K=64)
    late, early = _body(_source(func, True)), _body(_source(func, False))
    for body in (late, early):
        assert body.count("tnb_wgmma_commit();") == 1 and body.count("tnb_wgmma_wait0_r32") == 1
    # early: the wait right after the commit, before Y's work (its loads of X); late: after Y's stores,
    # before C's
    assert early.index("tnb_wgmma_wait0") < early.index("X_ptr[")
    assert late.index("tnb_wgmma_commit") < late.index("X_ptr[") < late.rindex("Y_ptr[") < \
        late.index("tnb_wgmma_wait0") < late.index("C_ptr[")


def test_the_backward_attention_kernel_overlaps_dv():
    """dV's group waits (wait_group 1 lets it run) while dpT's result is used for dS; with the option off
    every group is waited for at once."""
    func = ab.attention_bwd_dkdv.specialize(B=1, H=2, HK=2, D=64, dtype="float16")
    late, early = _body(_source(func, True)), _body(_source(func, False))
    dpT_wait = late.index("tnb_wgmma_wait1_r32((&(dpT_ptr[0])));")
    dv_wait = late.index("tnb_wgmma_wait0_r32((&(dv_ptr[0])));")
    assert dpT_wait < dv_wait and "rsqrtf" in late[dpT_wait:dv_wait]  # dS = P (dP - Delta) / sqrt(D) between
    assert "tnb_wgmma_wait1" not in early
    dpT_done = early.index("tnb_wgmma_wait0_r32((&(dpT_ptr[0])));")
    assert dpT_done < early.index("tnb_wgmma_wait0_r32((&(dv_ptr[0])));") < early.index("rsqrtf", dpT_done)


def test_a_statement_reading_the_accumulator_waits_first():
    """In the backward kernel the score tile's gemm is followed by its masking, which reads it: the wait comes
    right after the commit, late waits or not."""
    body = _body(_source(ab.attention_bwd_dkdv.specialize(B=1, H=2, HK=2, D=64, dtype="float16"), True))
    first_commit = body.index("tnb_wgmma_commit();")
    assert body.index("tnb_wgmma_wait0_r32((&(sT_ptr[0])));") < body.index("tnb_wgmma_fence();", first_commit)


@pytest.mark.parametrize("M,N,K", [(64, 64, 64), (100, 72, 64), (1, 1, 64)])
def test_two_products_on_the_interpreter(M, N, K):
    torch.manual_seed(M + N)
    A, B = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    X = torch.randn(M, N)
    C, Y = torch.empty(M, N), torch.empty(M, N)
    two_products(A, B, X, C, Y)
    torch.testing.assert_close(C, A.float() @ B.float(), atol=1e-2, rtol=1e-3)
    torch.testing.assert_close(Y, 2 * X)


@pytest.mark.gpu
@pytest.mark.parametrize("late", [True, False])
@pytest.mark.parametrize("M,N", [(128, 128), (100, 72)])
def test_gpu_late_wait_agrees(late, M, N):
    from tile_nb.runtime import compile as rt_compile

    torch.manual_seed(M)
    A = torch.randn(M, 64, dtype=torch.float16, device="cuda")
    B = torch.randn(64, N, dtype=torch.float16, device="cuda")
    X = torch.randn(M, N, device="cuda")
    C, Y = torch.empty(M, N, device="cuda"), torch.empty(M, N, device="cuda")
    kernel = rt_compile(two_products.specialize(M=M, N=N, K=64), lowering={"wgmma_late_wait": late})
    kernel(A, B, X, C, Y)
    torch.testing.assert_close(C, A.float() @ B.float(), atol=1e-2, rtol=1e-3)
    torch.testing.assert_close(Y, 2 * X)

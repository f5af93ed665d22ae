"""Each tile-language construct: the IR it elaborates to (docs/IR.md) and, on the
interpreter, what it computes."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb import errors


@tile_nb.jit
def loops_and_vars(A, B):
    N = T.const('N')
    A: T.Tensor[[N], T.float32]
    B: T.Tensor[[4], T.float32]
    with T.Kernel(1, threads=32):
        acc = T.alloc_var(T.float32, init=0.0)
        for i in range(N):
            acc[0] = acc[0] + A[i]
        for j in T.unroll(2):
            B[j] = acc[0] + j
        for k in T.serial(2, 4):
            if A[k] > 0:
                B[k] = 1.0
            else:
                B[k] = -1.0


def test_loops_vars_and_if_elaborate_to_ir():
    script = loops_and_vars.specialize(N=8).script()
    # TVMScript prints a local.var buffer as a scalar variable
    assert "acc: T.float32 = T.float32(0.0)" in script and "acc = acc + A[i]" in script
    assert "for i in range(8):" in script or "for i in T.serial(8):" in script
    assert "for j in T.unroll(2):" in script
    assert "for k in range(2, 4):" in script or "for k in T.serial(2, 4):" in script
    assert "if A[k] > T.float32(0.0):" in script and "else:" in script


def test_loops_vars_and_if_run():
    A = torch.tensor([1.0, 2.0, -3.0, 4.0, 0.5, 0.5, 0.5, 0.5])
    B = torch.zeros(4)
    loops_and_vars(A, B)
    assert B.tolist() == [6.0, 7.0, -1.0, 1.0]


@tile_nb.jit
def slices_and_strides(A, B, block: int = 8):
    M, N = T.const('M, N')
    A: T.Tensor[[M, N], T.float32]
    B: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, block)) as bx:
        tile = T.alloc_shared((block, N), T.float32)
        T.copy(A[bx * block:bx * block + block, 0:N], tile)
        for i, j in T.Parallel(block, N):
            tile[i, j] = T.max(tile[i, j], 0.0) + T.if_then_else(j == 0, 100.0, 0.0)
        T.copy(tile, B[bx * block, 0])


def test_slice_copy_parallel_and_edge_guards():
    A = torch.randn(13, 5)
    B = torch.full_like(A, float("nan"))
    slices_and_strides(A, B)
    expected = A.clamp(min=0)
    expected[:, 0] += 100
    assert torch.allclose(B, expected)


@pytest.mark.parametrize("op, torch_op", [("reduce_max", torch.amax), ("reduce_min", torch.amin),
                                          ("reduce_sum", torch.sum)])
def test_reductions(op, torch_op):
    @tile_nb.jit
    def reduce(X, Y, which: str):
        M, N = T.const('M, N')
        X: T.Tensor[[M, N], T.float32]
        Y: T.Tensor[[M], T.float32]
        with T.Kernel(1):
            x = T.alloc_fragment((M, N), T.float32)
            y = T.alloc_fragment((M,), T.float32)
            T.copy(X, x)
            getattr(T, which)(x, y, dim=1)
            T.copy(y, Y)

    X = torch.randn(6, 10)
    Y = torch.zeros(6)
    reduce(X, Y, op)
    assert torch.allclose(Y, torch_op(X, dim=1), atol=1e-5)
    assert f"T.tile.{op.split('_')[1]}(" in reduce.specialize(M=6, N=10, which=op).script()


def test_gemm_transposes():
    @tile_nb.jit
    def mm(A, B, C, ta: bool, tb: bool):
        M, N, K = T.const('M, N, K')
        A: T.Tensor[[K, M] if ta else [M, K], T.float16]
        B: T.Tensor[[N, K] if tb else [K, N], T.float16]
        C: T.Tensor[[M, N], T.float32]
        with T.Kernel(1):
            a = T.alloc_shared((K, M) if ta else (M, K), T.float16)
            b = T.alloc_shared((N, K) if tb else (K, N), T.float16)
            c = T.alloc_fragment((M, N), T.float32)
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, c, transpose_A=ta, transpose_B=tb, clear_accum=True)
            T.copy(c, C)

    a, b = torch.randn(16, 32).half(), torch.randn(32, 24).half()
    for ta in (False, True):
        for tb in (False, True):
            C = torch.full((16, 24), float("nan"))
            # 16x24 does not split over 4 warps in 16x16 tiles: the interpreter
            # runs it and says the GPU won't.
            with pytest.warns(tile_nb.NotLowerableWarning, match="cannot be split over 4 warps"):
                mm(a.t().contiguous() if ta else a, b.t().contiguous() if tb else b, C, ta, tb)
            assert torch.allclose(C, a.float() @ b.float(), rtol=1e-3, atol=1e-2)


def test_scalar_param_in_body():
    @tile_nb.jit
    def axpy(X, Y, a):
        N = T.const('N')
        X: T.Tensor[[N], T.float32]
        Y: T.Tensor[[N], T.float32]
        a: T.float32
        with T.Kernel(1):
            for i in T.Parallel(N):
                Y[i] = a * X[i] + Y[i]

    X, Y = torch.randn(7), torch.randn(7)
    expected = 3 * X + Y
    axpy(X, Y, 3.0)
    assert torch.allclose(Y, expected)
    assert "a: T.float32" in axpy.specialize(N=7).script()


def test_dsl_errors_are_specific():
    @tile_nb.jit
    def outside(A):
        A: T.Tensor[[4], T.float32]
        buf = T.alloc_shared((4,), T.float32)

    with pytest.raises(errors.DSLError, match=r"T.alloc_shared must be called inside `with T.Kernel"):
        outside(torch.zeros(4))

    @tile_nb.jit
    def bad_threads(A):
        A: T.Tensor[[4], T.float32]
        with T.Kernel(1, threads=100):
            A[0] = 0.0

    with pytest.raises(errors.DSLError, match=r"multiple of 32 between 32 and 1024; got 100"):
        bad_threads(torch.zeros(4))

    @tile_nb.jit
    def breaks(A):
        A: T.Tensor[[4], T.float32]
        with T.Kernel(1):
            for i in T.serial(4):
                break

    with pytest.raises(errors.DSLError, match=r"`break` inside a kernel loop is not supported"):
        breaks(torch.zeros(4))


def test_language_calls_outside_a_kernel_explain_themselves():
    with pytest.raises(
        errors.DSLError, match=r"T.Kernel can only run inside the body of a @tile_nb.jit kernel"
    ):
        T.Kernel(1)


def test_infinity_in_every_float_dtype():
    @tile_nb.jit
    def fill_inf(X, dt: T.dtype):
        X: T.Tensor[[4], dt]
        with T.Kernel(1):
            for i in T.Parallel(4):
                X[i] = -T.infinity(dt) if i == 0 else T.infinity(dt)

    for dt, tdt in (("bfloat16", torch.bfloat16), ("float16", torch.float16), ("float32", torch.float32)):
        X = torch.zeros(4, dtype=tdt)
        fill_inf(X, dt)
        assert X.tolist() == [float("-inf")] + [float("inf")] * 3

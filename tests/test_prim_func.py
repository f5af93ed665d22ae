"""`@T.prim_func` kernels and kernel factories with `out_idx`, `T.macro`, and `T.dynamic` made in a factory
(tilelang's older kernel style, issue 30): on the interpreter against torch at odd shapes and sizes of 1, and
the same kernels on the GPU (marked gpu)."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DSLError, SignatureError, TileNBError

GPU = pytest.mark.gpu


@tile_nb.jit(out_idx=[-1])
def matmul(M, N, K, block_M=32, block_N=32, block_K=16, dtype=T.float16, accum_dtype=T.float32):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), accum_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def _gemm_check(M, N, K, device):
    torch.manual_seed(M * 7 + N)
    a = torch.randn(M, K, dtype=torch.float16, device=device)
    b = torch.randn(K, N, dtype=torch.float16, device=device)
    c = matmul(M, N, K)(a, b)
    assert c.shape == (M, N) and c.dtype == torch.float32 and c.device == a.device
    ref = a.float() @ b.float()
    torch.testing.assert_close(c, ref, atol=1e-3 * K ** 0.5, rtol=1e-3)


@pytest.mark.parametrize("M,N,K", [(70, 45, 33), (1, 1, 1), (32, 32, 16)])
def test_factory_gemm_with_out_idx_agrees_with_torch(M, N, K):
    _gemm_check(M, N, K, "cpu")


@GPU
@pytest.mark.parametrize("M,N,K", [(70, 45, 33), (1, 1, 1), (256, 128, 64)])
def test_factory_gemm_with_out_idx_on_gpu(M, N, K):
    _gemm_check(M, N, K, "cuda")


def test_factory_runs_once_per_argument_values():
    @tile_nb.jit(out_idx=1)
    def fill(n, value):
        @T.prim_func
        def main(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
            with T.Kernel(1, threads=32) as _:
                for i in T.serial(n):
                    B[i] = A[i] + value

        return main

    k1 = fill(5, 1.0)
    assert fill(5, 1.0) is k1  # a second run of the factory would make a new kernel object
    k2 = fill(5, 2.0)
    assert k2 is not k1
    a = torch.randn(5)
    torch.testing.assert_close(k1(a), a + 1.0)
    torch.testing.assert_close(k2(a), a + 2.0)
    # 1 and 1.0 build different IR (an int and a float constant), so they are different factory calls
    assert fill(5, 1) is not k1


FACTORY_OFFSET = 2.0


def _offset_of(scale):  # a helper the factory calls: what it reads is followed too
    return FACTORY_OFFSET * scale


def test_a_global_the_factory_reads_changed_since_the_last_call_runs_it_again():
    """A notebook cell changes a global that only the factory (or a helper it calls) reads: the
    kernel built from the old value must not come back (the kernel inside holds the value in a
    closure cell, not as a global)."""
    global FACTORY_OFFSET

    @tile_nb.jit(out_idx=1)
    def shift(n):
        offset = _offset_of(1.0)

        @T.prim_func
        def main(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
            with T.Kernel(1, threads=32) as _:
                for i in T.serial(n):
                    B[i] = A[i] + offset

        return main

    a = torch.randn(7)
    first = shift(7)
    torch.testing.assert_close(first(a), a + 2.0)
    try:
        FACTORY_OFFSET = 3.0
        torch.testing.assert_close(shift(7)(a), a + 3.0)
        assert shift(7) is not first
    finally:
        FACTORY_OFFSET = 2.0
    assert shift(7) is first  # the old value again: the kernel built for it


def test_a_factory_reading_a_value_that_cannot_be_keyed_says_which():
    import numpy as np

    from tile_nb.errors import UnhashableArgumentError
    from tile_nb.frontend.environment import ARRAY_HASH_LIMIT

    table = np.ones(ARRAY_HASH_LIMIT // 8 + 1)

    @tile_nb.jit(out_idx=1)
    def scaled(n):
        factor = float(table[0])

        @T.prim_func
        def main(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
            with T.Kernel(1, threads=32) as _:
                for i in T.serial(n):
                    B[i] = A[i] * factor

        return main

    with pytest.raises(UnhashableArgumentError, match="factory scaled\\(\\) reads 'table'"):
        scaled(4)


@tile_nb.jit(out_idx=[1, 3])
def split_stats(R, C):
    @T.prim_func
    def main(
        X: T.Tensor((R, C), T.float32),
        Sums: T.Tensor((R,), T.float32),
        Scale: T.Tensor((C,), T.float32),
        Scaled: T.Tensor((R, C), T.float32),
    ):
        with T.Kernel(R, threads=32) as r:
            acc = T.alloc_var(T.float32, init=0.0)
            for j in T.serial(C):
                acc[0] = acc[0] + X[r, j]
                Scaled[r, j] = X[r, j] * Scale[j]
            Sums[r] = acc[0]

    return main


@pytest.mark.parametrize("R,C", [(5, 7), (1, 1)])
def test_outputs_between_inputs_are_skipped_by_the_call(R, C):
    """out_idx=[1, 3] of (X, Sums, Scale, Scaled): the call takes (X, Scale) and returns (Sums, Scaled)."""
    kernel = split_stats(R, C)
    assert [p.name for p in kernel.signature.params] == ["X", "Scale"]
    x, scale = torch.randn(R, C), torch.randn(C)
    sums, scaled = kernel(x, scale)
    torch.testing.assert_close(sums, x.sum(1))
    torch.testing.assert_close(scaled, x * scale)
    sums2, _ = kernel(X=x, Scale=scale)  # by keyword too
    torch.testing.assert_close(sums2, sums)


@tile_nb.jit(out_idx=[1])
def triple_rows(N, block=32):
    M = T.dynamic("M")   # made in the factory, outside any kernel body

    @T.prim_func
    def main(A: T.Tensor((M, N), T.float32), B: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(M, block), threads=32) as bx:
            for i, j in T.Parallel(block, N):
                if bx * block + i < M:
                    B[bx * block + i, j] = A[bx * block + i, j] * 3.0

    return main


def _dynamic_check(device):
    kernel = triple_rows(7)
    for m in (1, 33, 70):
        a = torch.randn(m, 7, device=device)
        torch.testing.assert_close(kernel(a), 3 * a)
    assert kernel.stats["templates"] == 1
    assert "M" in kernel.template().dynamic


def test_dynamic_dim_made_in_a_factory():
    _dynamic_check("cpu")
    assert triple_rows(7).stats["specializations"] == 1  # one kernel for every M


@GPU
def test_dynamic_dim_made_in_a_factory_on_gpu():
    _dynamic_check("cuda")


def test_jit_of_a_prim_func_with_out_idx():
    @T.prim_func
    def negate(A: T.Tensor((9,), T.float32), B: T.Tensor((9,), T.float32)):
        with T.Kernel(1, threads=32) as _:
            for i in T.serial(9):
                B[i] = -A[i]

    kernel = tile_nb.jit(negate, out_idx=[-1])
    a = torch.randn(9)
    torch.testing.assert_close(kernel(a), -a)
    with pytest.raises(DSLError, match="is a @T.prim_func kernel definition; compile it"):
        negate(a, a)


def test_out_idx_errors_name_the_parameter():
    def make(out_idx):
        @T.prim_func
        def k(A: T.Tensor((4,), T.float32), n: T.int32, B: T.Tensor((4,), T.float32)):
            with T.Kernel(1) as _:
                B[0] = A[0]

        return tile_nb.jit(k, out_idx=out_idx)

    with pytest.raises(
        SignatureError, match=r"out_idx names parameter 1 of kernel 'k', 'n', which is not a tensor"
    ):
        make([1])
    with pytest.raises(SignatureError, match=r"out_idx 3 is out of range: kernel 'k' has 3 parameters"):
        make([3])
    with pytest.raises(SignatureError, match=r"names parameter 2 \('B'\) twice"):
        make([2, -1])
    with pytest.raises(SignatureError, match="out_idx must be a parameter position"):
        make("B")


def test_factory_must_return_its_prim_func():
    @tile_nb.jit(out_idx=[-1])
    def broken(n):
        @T.prim_func
        def main(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
            with T.Kernel(1) as _:
                B[0] = A[0]

        return None if n else main

    with pytest.raises(SignatureError, match="the kernel factory 'broken' returned NoneType"):
        broken(3)


# -- T.macro -------------------------------------------------------------------------------------------------

@T.macro
def scaled_copy(src, dst, rows, factor):
    """Kernel code: a loop, a run-time `if`, stores."""
    for i, j in T.Parallel(32, dst.shape[1]):
        if rows * 32 + i < dst.shape[0]:
            dst[rows * 32 + i, j] = src[rows * 32 + i, j] * factor


@T.macro
def make_twice(A):
    M, N = A.shape
    B = T.empty(M, N, dtype=A.dtype)   # tilelang's T.empty(*shape, dtype=) spelling
    with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
        scaled_copy(A, B, bx, 2.0)     # a macro calling a macro
    return B


@tile_nb.jit
def twice(A):
    M, N = T.const("M, N")
    A: T.Tensor[[M, N], T.float32]
    return make_twice(A)


@pytest.mark.parametrize("M,N", [(70, 5), (1, 1), (32, 3)])
def test_macro_body_is_kernel_code(M, N):
    a = torch.randn(M, N)
    torch.testing.assert_close(twice(a), 2 * a)


@GPU
@pytest.mark.parametrize("M,N", [(70, 5), (1, 1)])
def test_macro_on_gpu(M, N):
    a = torch.randn(M, N, device="cuda")
    torch.testing.assert_close(twice(a), 2 * a)


def test_macro_return_inside_a_kernel_loop_is_refused():
    @T.macro
    def early(A, i):
        for j in T.serial(4):
            return A[i, j]

    @tile_nb.jit
    def k(A, B):
        A: T.Tensor[[4, 4], T.float32]
        B: T.Tensor[[4], T.float32]
        with T.Kernel(1) as _:
            for i in T.serial(4):
                B[i] = early(A, i)

    with pytest.raises(
        DSLError, match="`return` inside a kernel loop or a run-time `if` of a T.macro"
    ) as info:
        k(torch.randn(4, 4), torch.empty(4))
    assert info.value.lineno == early.fn.__code__.co_firstlineno + 3


def test_macro_call_with_wrong_arguments_points_at_the_call():
    @tile_nb.jit
    def k(A, B):
        A: T.Tensor[[4, 4], T.float32]
        B: T.Tensor[[4, 4], T.float32]
        with T.Kernel(1) as bx:
            scaled_copy(A, B, bx)

    with pytest.raises(
        DSLError, match="calling the T.macro 'scaled_copy'.*missing 1 required positional"
    ) as info:
        k(torch.randn(4, 4), torch.empty(4, 4))
    assert info.value.lineno == k.fn.__code__.co_firstlineno + 5


def test_macro_outside_a_kernel_raises():
    with pytest.raises(TileNBError, match="the T.macro 'scaled_copy' can only run inside the body"):
        scaled_copy(None, None, 0, 1.0)


def test_redefined_macro_rebuilds_the_kernel():
    """A notebook cell that redefines a macro: the kernel's key follows the macro's code."""
    namespace = {"T": T, "tile_nb": tile_nb}
    tile_nb.run_source("@T.macro\ndef body(A, B):\n    B[0] = A[0] + 1.0\n", namespace)
    tile_nb.run_source(
        "@tile_nb.jit\ndef k(A, B):\n    A: T.Tensor[[1], T.float32]\n    B: T.Tensor[[1], T.float32]\n"
        "    with T.Kernel(1) as _:\n        body(A, B)\n",
        namespace,
    )
    a, b = torch.ones(1), torch.empty(1)
    namespace["k"](a, b)
    assert b.item() == 2.0
    tile_nb.run_source("@T.macro\ndef body(A, B):\n    B[0] = A[0] + 5.0\n", namespace)
    namespace["k"](a, b)
    assert b.item() == 6.0


# -- T.Ref and macros passed as arguments --------------------------------------------------------------------

@T.macro
def collatz_scale(x, var: T.Ref):
    """Recursion ends on a compile-time value; `var = ...` stores where the caller's `var` points."""
    if x == 1:
        pass
    elif x % 2 == 0:
        var = var // 2
        collatz_scale(x // 2, var)
    else:
        var = var * 3 + 1
        collatz_scale(x * 3 + 1, var)


@tile_nb.jit
def collatz(A: T.Tensor[[1], T.int32], n: int):
    with T.Kernel(1) as _:
        collatz_scale(n, A[0])


def _collatz_ref(a: int, x: int) -> int:
    while x != 1:
        a, x = (a // 2, x // 2) if x % 2 == 0 else (a * 3 + 1, x * 3 + 1)
    return a


@pytest.mark.parametrize("n", [1, 5, 6])
def test_ref_parameter_stores_into_the_callers_location(n):
    a = torch.tensor([100], dtype=torch.int32)
    collatz(a, n)
    assert a.item() == _collatz_ref(100, n)


@GPU
def test_ref_parameter_on_gpu():
    a = torch.tensor([100], dtype=torch.int32, device="cuda")
    collatz(a, 5)
    assert a.item() == _collatz_ref(100, 5)


def test_ref_parameter_needs_a_location():
    @T.macro
    def set_one(x: T.Ref):
        x = 1

    @tile_nb.jit
    def k(A: T.Tensor[[2], T.int32]):
        with T.Kernel(1) as _:
            set_one(A[0] + 1)

    with pytest.raises(DSLError, match="a T.Ref parameter must be given a location"):
        k(torch.zeros(2, dtype=torch.int32))


@T.macro
def plus_one(x):
    return x + 1


@tile_nb.jit
def element_wise(A, fn):
    N = T.dynamic("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), dtype=A.dtype)
    with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
        for i in T.Parallel(128):
            if bx * 128 + i < N:
                B[bx * 128 + i] = fn(A[bx * 128 + i])
    return B


@pytest.mark.parametrize("n", [1, 300])
def test_macro_passed_as_a_compile_time_argument(n):
    a = torch.randn(n)
    torch.testing.assert_close(element_wise(a, plus_one), a + 1)


@GPU
def test_macro_passed_as_a_compile_time_argument_on_gpu():
    a = torch.randn(300, device="cuda")
    torch.testing.assert_close(element_wise(a, plus_one), a + 1)

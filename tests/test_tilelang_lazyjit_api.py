"""The host calls of tilelang's LazyJIT / EagerJIT tests and tutorial on the stand-in:
`f.get_tir(T.Tensor(...))` (annotations standing for tensors), `tilelang.par_compile`, `f.parse_cache_key`,
`T.ptr()` in configuration lists, `tilelang.compile(prim_func, out_idx=...)`. Kernels here are this
project's own, in tilelang's spellings."""
import torch

import tile_nb
import tile_nb.language as T
import tile_nb.tilelang as tilelang


def _copy_kernel():
    @tilelang.jit
    def copy(A, B):
        N = T.dynamic("N")
        M = T.const("M")
        A: T.Tensor[[N, M], T.float32]
        B: T.Tensor[[N, M], T.float32]
        M_, N_ = B.shape[1], B.shape[0]
        assert N == N_ and M == M_
        with T.Kernel(N) as r:
            for j in T.serial(M):
                B[r, j] = A[r, j]

    return copy


def test_get_tir_of_annotations_and_par_compile():
    copy = _copy_kernel()
    func = copy.get_tir(T.Tensor((16, 8)), T.Tensor((16, 8)))
    assert "def copy" in func.script() and "M" not in [str(p) for p in func.params]
    kernels = tilelang.par_compile([func, copy.get_tir(T.Tensor((4, 3)), T.Tensor((4, 3)))], num_workers=2)
    assert all("__global__" in k.cuda_source for k in kernels)
    a, b = torch.randn(5, 8), torch.empty(5, 8)
    copy(a, b)
    torch.testing.assert_close(b, a)


def test_par_compile_ignore_error_gives_none():
    assert tilelang.par_compile(["not a function"], ignore_error=True) == [None]


def test_parse_cache_key_follows_consts_not_dynamic_dims():
    copy = _copy_kernel()
    key = copy.parse_cache_key(torch.empty(5, 8), torch.empty(5, 8))
    assert key == copy.parse_cache_key(torch.empty(9, 8), torch.empty(9, 8))   # N is dynamic
    assert key != copy.parse_cache_key(torch.empty(5, 4), torch.empty(5, 4))   # M is a const
    assert dict(key[1]) == {"M": 8}


def test_ptr_placeholders_in_configuration_lists_are_not_bound():
    @tilelang.jit
    def fill(A: T.ptr, M: int, value: float = 1.0):
        A = T.make_tensor(A, (M,), T.float32)
        with T.Kernel(1) as _:
            for i in T.serial(M):
                A[i] = value

    kernels = fill.par_compile([{"A": T.ptr(), "M": 4, "value": 2.0}])
    a = torch.zeros(4)
    kernels[0](a)
    assert torch.equal(a, torch.full((4,), 2.0))


def test_compile_of_a_prim_func_with_out_idx():
    @T.prim_func
    def negate(A: T.Tensor((6,), T.float32), B: T.Tensor((6,), T.float32)):
        with T.Kernel(1) as _:
            for i in T.serial(6):
                B[i] = -A[i]

    kernel = tilelang.compile(negate, out_idx=[1])
    a = torch.randn(6)
    torch.testing.assert_close(kernel(a), -a)
    assert "__global__" in kernel.get_kernel_source()
    assert isinstance(kernel.tile_nb_kernel, tile_nb.JITFunction)


def test_compile_with_compile_time_values_by_position():
    """`f.compile(x, 8)` for `def f(X, blk_m)`: 8 is bound by name for calls, and compiled() (behind
    get_kernel_source) gives it once (it passed it by position and by name: "multiple values for
    argument")."""
    @tilelang.jit
    def halve(X, blk_m):
        M = T.const("M")
        X: T.Tensor((M,), T.float32)
        Y = T.empty((M,), T.float32)
        with T.Kernel(T.ceildiv(M, blk_m), threads=32) as bx:
            for i in T.Parallel(blk_m):
                if bx * blk_m + i < M:
                    Y[bx * blk_m + i] = X[bx * blk_m + i] / 2
        return Y

    x = torch.randn(37)
    kernel = halve.compile(x, 8)
    assert "__global__" in kernel.get_kernel_source()
    torch.testing.assert_close(kernel(x), x / 2)
    torch.testing.assert_close(halve(x, 16), x / 2)

"""Dims given by scalar parameters (`M: T.int32`, sizing outputs and grids) and by a `T.ptr` parameter passed
a tensor (its `T.make_tensor` shape gives consts), as the EagerJIT tutorial writes them; and `assert` on dims
that are equal whatever their values (one T.dynamic dim compared with itself)."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import MissingConstError, TileNBError


@tile_nb.jit
def doubled(A, M, N):
    M: T.int32
    N: T.int32
    A: T.Tensor[[M, N], T.float32]
    C = T.empty((M, N), T.float32)            # sized by the scalar arguments
    with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:    # a grid over a scalar argument
        for i, j in T.Parallel(32, N):
            if bx * 32 + i < M:
                C[bx * 32 + i, j] = A[bx * 32 + i, j] * 2.0
    return C


@pytest.mark.parametrize("m,n", [(70, 9), (1, 1), (0, 3)])
def test_scalar_parameters_size_outputs_and_grids(m, n):
    a = torch.randn(m, n)
    c = doubled(a, m, n)
    assert c.shape == (m, n)
    torch.testing.assert_close(c, 2 * a)


def test_scalar_dims_are_checked_against_the_tensors():
    with pytest.raises(TileNBError, match=r"argument 'A' must have shape \(71, 9\); got \(70, 9\)"):
        doubled(torch.randn(70, 9), 71, 9)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n", [(70, 9), (1, 1)])
def test_scalar_parameters_size_outputs_and_grids_on_gpu(m, n):
    a = torch.randn(m, n, device="cuda")
    torch.testing.assert_close(doubled(a, m, n), 2 * a)


@tile_nb.jit
def last_to_first(A: T.ptr, is_2d: bool = False):
    if is_2d:
        M, N = T.const("M, N")
        A = T.make_tensor(A, [M, N], T.float32)
        with T.Kernel(1) as _:
            A[0, 0] = A[M - 1, N - 1]
    else:
        L = T.const("L")
        A = T.make_tensor(A, [L], T.float32)
        with T.Kernel(1) as _:
            A[0] = A[L - 1]


def test_pointer_parameter_given_a_tensor_reads_its_consts():
    a = torch.randn(5, 7)
    last_to_first(a, is_2d=True)
    assert a[0, 0] == a[4, 6]
    b = torch.randn(3)
    last_to_first(b)
    assert b[0] == b[2]


def test_pointer_parameter_given_an_address_needs_the_consts():
    b = torch.randn(3)
    with pytest.raises(
        MissingConstError, match="it is a dim of the pointer argument 'A', which was given as an address"
    ):
        last_to_first(b.data_ptr())


@pytest.mark.gpu
def test_pointer_parameter_given_a_tensor_on_gpu():
    a = torch.randn(5, 7, device="cuda")
    last_to_first(a, is_2d=True)
    assert a[0, 0] == a[4, 6]


def test_assert_on_a_dynamic_dim_compared_with_itself():
    @tile_nb.jit
    def copy(A, B):
        N = T.dynamic("N")
        A: T.Tensor[[N, 4], T.float32]
        B: T.Tensor[[N, 4], T.float32]
        M, M_ = A.shape[0], B.shape[0]
        assert M == M_, "one dim"
        with T.Kernel(N) as r:
            for j in T.serial(4):
                B[r, j] = A[r, j]

    a, b = torch.randn(3, 4), torch.empty(3, 4)
    copy(a, b)
    torch.testing.assert_close(b, a)

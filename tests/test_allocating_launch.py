"""Kernels that return T.empty outputs take the direct launch path too: from the second call of a shape
on, the call allocates its outputs and launches the compiled host function without binding or checking
in Python (benchmarks/results/dispatch.md measured 38 us for such a call before, against 7 us for a
kernel without outputs). The CPU tests check the allocating launch itself; the GPU tests check the
whole cached path against torch."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.runtime.launch import allocating_launch


def _filling(calls):
    """A stand-in for a compiled host function: records its arguments and writes each allocated tensor."""
    def host_function(*args):
        calls.append(args)
        for k, out in enumerate(args[1:]):
            out.fill_(k + 1)
    return host_function


def test_an_allocating_launch_returns_fresh_outputs_of_the_compiled_shapes_each_call():
    calls = []
    launch = allocating_launch(_filling(calls), [torch.empty(3, 5, dtype=torch.float16)], 1, device_arg=0)
    x = torch.randn(4)
    first, second = launch(x), launch(x)
    assert first is not second and first.data_ptr() != second.data_ptr()
    assert first.shape == (3, 5) and first.dtype == torch.float16 and first.device == x.device
    assert torch.equal(first, torch.ones(3, 5, dtype=torch.float16)) and len(calls) == 2 and calls[0][0] is x


def test_an_allocating_launch_returns_a_tuple_of_outputs_and_keeps_scratch_tensors_to_itself():
    calls = []
    outputs = [torch.empty(2, dtype=torch.float32), torch.empty(7, dtype=torch.int32), torch.empty(9)]
    # the third is T.alloc_global scratch
    launch = allocating_launch(_filling(calls), outputs, 2, device_arg=0)
    a, b = launch(torch.zeros(1))
    assert a.shape == (2,) and b.shape == (7,) and b.dtype == torch.int32
    assert torch.equal(b, torch.full((7,), 2, dtype=torch.int32)) and len(calls[0]) == 4
    only_scratch = allocating_launch(_filling(calls), [torch.empty(4)], 0, device_arg=0)
    assert only_scratch(torch.zeros(1)) is None and calls[-1][1].shape == (4,)


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@tile_nb.jit
def doubled_rows(X):
    M, N = T.dynamic('M'), T.const('N')
    X: T.Tensor[[M, N], T.float32]
    Y = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
        for i, j in T.Parallel(32, N):
            if bx * 32 + i < M:
                Y[bx * 32 + i, j] = X[bx * 32 + i, j] * 2.0
    return Y


@tile_nb.jit
def split_sums(X):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float32]
    S = T.empty((M,), T.float32)
    D = T.empty((M, N), T.float32)
    with T.Kernel(M, threads=32) as bx:
        row = T.alloc_fragment((N,), T.float32)
        total = T.alloc_fragment((1,), T.float32)
        T.copy(X[bx, 0:N], row)
        T.reduce_sum(row, total, dim=0)
        S[bx] = total[0]
        for j in T.Parallel(N):
            D[bx, j] = row[j] + 1.0
    return S, D


@pytest.mark.gpu
def test_t_empty_outputs_launch_directly_from_the_second_call_of_a_shape():
    _cuda()
    kept = []
    for m in (1, 100, 100, 100, 33, 100, 33):       # 100 and 33: not multiples of the 32-row tile
        x = torch.randn(m, 48, device="cuda")
        y = doubled_rows(x)
        kept.append((x, y))
    torch.cuda.synchronize()
    for x, y in kept:                               # every call got its own output, none overwritten later
        torch.testing.assert_close(y, 2 * x)
    assert len({y.data_ptr() for _, y in kept}) == len(kept)
    (fast,) = doubled_rows._fast.values()
    assert len(fast.direct) >= 2                    # M = 100 and M = 33 each under their direct key
    compilations = doubled_rows.stats["compilations"]
    for _ in range(3):
        x = torch.randn(100, 48, device="cuda")
        torch.testing.assert_close(doubled_rows(x), 2 * x)
    assert doubled_rows.stats["compilations"] == compilations


@pytest.mark.gpu
def test_several_t_empty_outputs_come_back_as_a_tuple_on_the_direct_path():
    _cuda()
    for _ in range(3):
        x = torch.randn(5, 19, device="cuda")
        s, d = split_sums(x)
        torch.testing.assert_close(s, x.sum(dim=1), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(d, x + 1)
    (fast,) = split_sums._fast.values()
    assert fast.direct


@tile_nb.jit
def first_rows(A, M):
    M: T.int32
    N = T.const('N')
    A: T.Tensor[[100, N], T.float32]
    C = T.empty((M, N), T.float32)            # sized by the scalar's value, which no tensor shape fixes
    with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
        for i, j in T.Parallel(32, N):
            if bx * 32 + i < M:
                C[bx * 32 + i, j] = A[bx * 32 + i, j] * 2.0
    return C


@pytest.mark.gpu
def test_outputs_sized_by_a_scalar_argument_stay_on_the_checked_path():
    _cuda()
    a = torch.randn(100, 9, device="cuda")
    for m in (70, 70, 70, 3, 3):
        torch.testing.assert_close(first_rows(a, m), 2 * a[:m])
    (fast,) = first_rows._fast.values()
    assert not fast.direct                          # a scalar's value is not in the direct key


@tile_nb.jit
def scaled_rows(A, count):
    count: T.int32
    M, N = T.dynamic('M'), T.const('N')
    A: T.Tensor[[M, N], T.float32]
    C = T.empty((M, N), T.float32)            # sized by A's shape: the scalar only scales the values
    with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
        for i, j in T.Parallel(32, N):
            if bx * 32 + i < M:
                C[bx * 32 + i, j] = A[bx * 32 + i, j] * T.cast(count, T.float32)
    return C


def test_only_a_scalar_that_sizes_an_output_keeps_the_checked_path():
    """The direct key holds the tensor arguments' shapes, not scalar values: a kernel whose outputs a scalar
    sizes cannot take an allocating launch; one whose scalar only enters the computation can (tilelang's
    varlen attention passes `max_seqlen` so, and paid ~85 us a call on the checked path; H100, 2026-12-06)."""
    a = torch.randn(100, 9)
    first_rows(a, 5)
    scaled_rows(torch.randn(7, 9), 3)
    specs = {}
    for kernel in (first_rows, scaled_rows):
        (fast,) = kernel._fast.values()
        (spec,) = fast.specs.values()
        specs[kernel.__name__] = spec
    assert specs["first_rows"].sized_by_scalars and specs["first_rows"].scalar_dims
    assert not specs["scaled_rows"].sized_by_scalars and specs["scaled_rows"].scalar_dims


@pytest.mark.gpu
def test_a_scalar_that_does_not_size_an_output_takes_the_direct_path():
    _cuda()
    for m, count in ((70, 2), (70, 3), (70, 3), (1, 5), (70, -1)):
        a = torch.randn(m, 9, device="cuda")
        torch.testing.assert_close(scaled_rows(a, count), a * count)
    (fast,) = scaled_rows._fast.values()
    assert fast.direct                               # M = 70 and M = 1, each under its direct key
    a = torch.randn(70, 9, device="cuda")
    torch.testing.assert_close(scaled_rows(a, 4), a * 4)   # the direct launch passes the call's own value


def test_the_direct_key_reads_only_the_calls_own_arguments():
    """The direct key of a kernel with T.empty outputs is computed on the caller's arguments, which do not
    include the outputs: it once read an output's data pointer past the end of them (an IndexError that the
    fast path took for "no direct launch", so such kernels never took it; seen on the H100, 2026-12-05)."""
    for _ in range(2):
        doubled_rows(torch.randn(40, 48))
        split_sums(torch.randn(5, 19))
    for kernel, x in ((doubled_rows, torch.randn(40, 48)), (split_sums, torch.randn(5, 19))):
        (fast,) = kernel._fast.values()
        key = fast.direct_key((x,))
        assert key is not None and False in key          # the outputs' alignment: fresh tensors are aligned
        shifted = torch.randn(x.numel() + 1)[1:].view(x.shape)    # same shape, 4 bytes off alignment
        assert fast.direct_key((shifted,)) != key

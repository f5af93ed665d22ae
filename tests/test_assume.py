"""`T.assume(cond)` (tilelang's): a fact the GPU's compiler may rely on (`__builtin_assume`), which the
interpreter checks as `T.device_assert` does, so a false one is an error at the user's line on the CPU rather
than undefined behaviour on the GPU.

CPU: kernels whose facts hold agree with torch (a dynamic dim, a size of 1, a T.Parallel loop); a false fact
raises DeviceAssertError naming the line, the loop index and the values; a compile-time False is refused at
elaboration; the sm_90a build (nvcc) holds the assumption. GPU (marked gpu): the same kernels against torch.
"""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import DeviceAssertError, TileNBError

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def zero_range(A, l: T.int32, r: T.int32):
    """A[l..r] = 0, with the range assumed inside A (tilelang's test_assume_remove_boundary_check)."""
    N = T.dynamic("N")
    A: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=32):
        for i in T.serial(r - l + 1):
            T.assume(l + i >= 0 and l + i < N)
            A[l + i] = 0


@tile_nb.jit
def scaled_rows(X, block: int = 4):
    """Y = 2 X over rows of a width assumed to be a multiple of 4, in T.Parallel."""
    M, N = T.dynamic("M"), T.dynamic("N")
    X: T.Tensor[[M, N], T.float32]
    Y = T.empty((M, N), T.float32)
    with T.Kernel(M, threads=32) as bx:
        T.assume(N % block == 0)
        for j in T.Parallel(N):
            Y[bx, j] = X[bx, j] * 2
    return Y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size, l, r", [(10, 2, 5), (1, 0, 0), (37, 0, 36)])
def test_facts_that_hold(backend, size, l, r):
    A = torch.randn(size, device=backend) + 5
    expected = A.clone()
    expected[l:r + 1] = 0
    zero_range(A, l, r)
    assert torch.equal(A, expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(3, 8), (1, 4), (5, 64)])
def test_in_a_parallel_kernel(backend, shape):
    X = torch.randn(*shape, device=backend)
    assert torch.equal(scaled_rows(X), X * 2)


def test_a_false_fact_names_the_line_and_the_values():
    with open(__file__) as source:
        line = next(n for n, text in enumerate(source, 1) if "T.assume(l + i" in text)
    with pytest.raises(DeviceAssertError) as info:
        zero_range(torch.ones(10), 7, 12)
    text = str(info.value)
    assert text.startswith("T.assume failed (block (0); l = 7, i = 3, N = 10)") and f"line {line}" in text
    with pytest.raises(DeviceAssertError, match=r"T.assume failed \(block \(0\); N = 6\)"):
        scaled_rows(torch.ones(2, 6))   # N = 6 is not a multiple of 4


@tile_nb.jit
def never(A, fact: bool = False, of_a_buffer: bool = False):
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=32):
        T.assume(A if of_a_buffer else fact)
        A[0] = 1


def test_compile_time_facts_and_non_conditions():
    with pytest.raises(DeviceAssertError, match="T.assume failed at elaboration"):
        never(torch.zeros(4))
    A = torch.zeros(4)
    never(A, fact=True)
    assert A[0] == 1
    with pytest.raises(TileNBError, match=r"T.assume takes a condition"):
        never(torch.zeros(4), of_a_buffer=True)


@needs_nvcc
def test_the_gpu_build_holds_the_assumption():
    k = zero_range.compile(torch.ones(10), 2, 5, target="sm_90a")
    assert "__builtin_assume(cond)" in k.cuda_source and "tnb_assume(" in k.cuda_source and k.cubin

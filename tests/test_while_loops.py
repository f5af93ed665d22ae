"""`while` in a kernel body: on a run-time value it is a TIR While (the condition is tested before every
iteration, on the interpreter and on the GPU); on a Python value it is Python's own loop while the
kernel is built. A stream-K GEMM in tilelang's style (example_tilelang_gemm_streamk) and a
data-dependent loop, against torch on the interpreter, built for sm_90a and sm_80, and on the GPU
(marked gpu); misuse refused at the user's line."""
import linecache
import re

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DSLError, UnsupportedSyntaxError


@tile_nb.jit
def halvings(X, block: int = 32):
    """For each block: how many halvings bring |X[first row of the block]| below 1 (a loop whose trip count is
    known only at run time), written to every element of the block; the block's tile is halved in shared
    memory as often, and written to Z."""
    N = T.dynamic("N")
    X: T.Tensor[[N], T.float32]
    Y = T.empty((N,), T.int32)
    Z = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        v = T.alloc_var(T.float32)
        n = T.alloc_var(T.int32)
        s = T.alloc_shared((block,), T.float32)
        T.copy(X[bx * block], s)
        n = 0
        v = T.abs(s[0])
        while v >= 1.0:
            v = v * 0.5
            n += 1
            for i in T.Parallel(block):
                s[i] = s[i] * 0.5
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = n
        T.copy(s, Z[bx * block])
    return Y, Z


def _halvings_reference(x, block=32):
    y = torch.empty(x.numel(), dtype=torch.int32)
    z = x.clone().cpu()
    for b in range(0, x.numel(), block):
        v, n = abs(float(x[b])), 0
        while v >= 1.0:
            v, n = v * 0.5, n + 1
        y[b:b + block] = n
        z[b:b + block] = z[b:b + block] * 0.5 ** n
    return y, z


def _check_halvings(N, device):
    torch.manual_seed(N)
    x = torch.randn(N, device=device) * 300
    x[0] = 0.25                      # the first block runs no iteration
    y, z = halvings(x)
    ry, rz = _halvings_reference(x)
    assert torch.equal(y.cpu(), ry)
    torch.testing.assert_close(z.cpu(), rz, atol=0, rtol=0)


@pytest.mark.parametrize("N", [70, 1, 32, 200])
def test_data_dependent_while(N):
    _check_halvings(N, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("N", [70, 1, 4096])
def test_data_dependent_while_on_gpu(N):
    _check_halvings(N, "cuda")


@tile_nb.jit
def streamk(A, B, C, programs: int = 7, block_M: int = 32, block_N: int = 32, block_K: int = 16):
    """Stream-K as tilelang's example writes it: each CTA walks a contiguous range of (tile,
    k-step) iterations with a `while`, a pipelined k-loop of run-time length inside, and
    adds its partial tile into C."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[N, K], T.float16]
    C: T.Tensor[[M, N], T.float32]
    iters_per_tile = T.ceildiv(K, block_K)
    total = T.ceildiv(M, block_M) * T.ceildiv(N, block_N) * iters_per_tile
    per_cta = T.ceildiv(total, programs)
    with T.Kernel(programs, threads=128) as pid:
        A_s = T.alloc_shared((block_M, block_K), T.float16)
        B_s = T.alloc_shared((block_N, block_K), T.float16, "shared")
        C_l = T.alloc_fragment((block_M, block_N), T.float32)
        start = T.alloc_fragment((1,), T.int32, "local")
        end = T.alloc_fragment((1,), T.int32, "local")
        start[0] = pid * per_cta
        last = T.min((pid + 1) * per_cta, total)
        while start[0] < last:
            end[0] = T.min(start[0] + (iters_per_tile - start[0] % iters_per_tile), last)
            tile = start[0] // iters_per_tile
            pid_m = tile // T.ceildiv(N, block_N)
            pid_n = tile % T.ceildiv(N, block_N)
            T.clear(C_l)
            for k in T.Pipelined(end[0] - start[0], num_stages=2):
                kk = k + start[0] % iters_per_tile
                T.copy(A[pid_m * block_M, kk * block_K], A_s)
                T.copy(B[pid_n * block_N, kk * block_K], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.atomic_add(C[pid_m * block_M, pid_n * block_N], C_l)
            start[0] = end[0]


def _check_streamk(M, N, K, programs, device):
    torch.manual_seed(M * 7 + N + K)
    a = torch.randn(M, K, dtype=torch.float16, device=device)
    b = torch.randn(N, K, dtype=torch.float16, device=device)
    c = torch.full((M, N), -1.0, device=device)       # added to
    streamk(a, b, c, programs=programs)
    torch.testing.assert_close(c, a.float() @ b.float().T - 1.0, atol=2e-3 * K ** 0.5, rtol=1e-3)


@pytest.mark.parametrize("M,N,K,programs", [(37, 50, 70, 7), (1, 1, 1, 3), (32, 64, 48, 1), (20, 33, 16, 40)])
def test_streamk_with_a_while_loop(M, N, K, programs):
    _check_streamk(M, N, K, programs, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,programs", [(37, 50, 70, 7), (1, 1, 1, 3), (256, 1024, 512, 108)])
def test_streamk_on_gpu(M, N, K, programs):
    _check_streamk(M, N, K, programs, "cuda")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_while_builds_for_cuda(arch):
    source = streamk.compile(M=37, N=50, K=70, target=arch).cuda_source
    assert "while (1)" in source or "while (" in source
    source = halvings.compile(torch.zeros(70), target=arch).cuda_source
    assert "while (" in source


@tile_nb.jit
def python_while(X, block: int = 24):
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    Y = T.empty((N,), T.float32)
    width = 1
    while width < block:            # a Python loop: runs while the kernel is built
        width *= 2
    with T.Kernel(T.ceildiv(N, width), threads=32) as bx:
        for i in T.Parallel(width):
            if bx * width + i < N:
                Y[bx * width + i] = X[bx * width + i] + width
    return Y


def test_while_on_python_values_is_pythons():
    x = torch.randn(45)
    torch.testing.assert_close(python_while(x), x + 32)
    script = python_while.specialize(x).script()
    assert "T.parallel(32)" in script and not re.search(r"^\s*while ", script, re.M)
    assert re.search(r"^\s*while ", halvings.specialize(torch.zeros(70)).script(), re.M)


@tile_nb.jit
def _misuse(X, case: str = "parallel"):
    N = T.const("N")
    X: T.Tensor[[N], T.int32]
    if case == "outside":
        while X[0] < 3:  # error: outside `with T.Kernel
            X[0] = 1
    with T.Kernel(1, threads=32):
        i = X[0]
        if case == "parallel":
            for j in T.Parallel(4):
                while X[j] < 3:  # error: inside a T.Parallel loop
                    X[j] = X[j] + 1
        elif case == "rebound":
            while i < 3:  # error: read and then reassigned
                i = i + 1
        elif case == "rebound_test_only":
            while i < 3:  # error: read and then reassigned
                i = X[1]
        elif case == "break":
            while X[0] < 3:
                X[0] = X[0] + 1
                break  # error: inside a kernel loop


@pytest.mark.parametrize("case,message", [
    ("outside", "`while` on a runtime value"),
    ("parallel", "inside a T.Parallel loop is not supported"),
    ("rebound", "read and then reassigned in the kernel loop"),
    ("rebound_test_only", "read and then reassigned in the kernel loop"),
    ("break", "`break` inside a kernel loop is not supported"),
])
def test_misuse_is_refused_at_the_line(case, message):
    with pytest.raises(DSLError) as info:
        _misuse(torch.zeros(4, dtype=torch.int32), case=case)
    err = info.value
    assert message in err.message
    assert "# error:" in linecache.getline(err.filename, err.lineno)


def test_while_else_is_refused():
    def while_else(X):
        N = T.const("N")
        X: T.Tensor[[N], T.int32]
        with T.Kernel(1, threads=32):
            while X[0] < 3:  # error: `while ... else`
                X[0] = X[0] + 1
            else:
                X[0] = 0

    with pytest.raises(UnsupportedSyntaxError) as info:
        tile_nb.jit(while_else)
    assert "`while ... else` is not supported" in info.value.message
    assert "# error:" in linecache.getline(info.value.filename, info.value.lineno)


def test_while_true_without_break_is_refused_rather_than_hanging():
    """A Python-level `while True:` with no break would run forever while the kernel is built (a notebook cell
    that never returns): refused at its line."""
    from tile_nb.errors import UnsupportedSyntaxError

    with pytest.raises(UnsupportedSyntaxError, match="never ends") as info:
        @tile_nb.jit
        def spin(X):
            X: T.Tensor[[4], T.float32]
            with T.Kernel(1) as _:
                while True:
                    pass

        spin(torch.zeros(4))
    assert "while True:" in str(info.value)

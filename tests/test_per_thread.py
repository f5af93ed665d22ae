"""Per-thread code (tilelang's SIMT style, frontend/per_thread.py): statements that use the thread index of
T.get_thread_binding() as a value run once per thread; the front end elaborates them into T.Parallel loops
over the threads and per-thread locals into `local.thread` buffers, which both back ends run. GEMV kernels in
the forms of tilelang's examples/gemv (one row per thread; split K with a shared atomic; split K with a thread
all-reduce), with bounds guards, at shapes that are not multiples of the blocks, sizes of 1 and a T.dynamic
dim, against torch; the IR and CUDA they become; the refusals. GPU twins are marked gpu."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import DSLError
from tile_nb.frontend.source import run_source

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")


@tile_nb.jit
def row_per_thread(A, B, BLOCK_N: int = 64, BLOCK_K: int = 32):
    """tilelang's naive_gemv: thread tn owns row tn of the block; A's slice is staged by every thread."""
    N, K = T.const("N, K")
    A: T.Tensor((K,), T.float16)
    B: T.Tensor((N, K), T.float16)
    C = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, BLOCK_N), threads=BLOCK_N) as bn:
        tn = T.get_thread_binding(0)
        A_s = T.alloc_shared((BLOCK_K,), T.float16)
        B_s = T.alloc_shared((BLOCK_N, BLOCK_K), T.float16)
        acc = T.alloc_local((1,), T.float32)
        T.clear(acc)
        for bk in T.serial(T.ceildiv(K, BLOCK_K)):
            for tk in T.serial(BLOCK_K):
                A_s[tk] = T.if_then_else(bk * BLOCK_K + tk < K, A[T.min(bk * BLOCK_K + tk, K - 1)], 0)
                B_s[tn, tk] = T.if_then_else(
                    bn * BLOCK_N + tn < N and bk * BLOCK_K + tk < K,
                    B[T.min(bn * BLOCK_N + tn, N - 1), T.min(bk * BLOCK_K + tk, K - 1)], 0)
            for tk in T.serial(BLOCK_K):
                acc[0] += A_s[tk].astype(T.float32) * B_s[tn, tk].astype(T.float32)
        if bn * BLOCK_N + tn < N:
            C[bn * BLOCK_N + tn] = acc[0]
    return C


@tile_nb.jit
def split_k_atomic(A, B, BLOCK_N: int = 32, BLOCK_K: int = 8):
    """tilelang's naive_splitk_gemv: threads (tn, tk); partial sums added into shared memory atomically."""
    N = T.const("N")
    K = T.dynamic("K")
    A: T.Tensor((K,), T.float16)
    B: T.Tensor((N, K), T.float16)
    C = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, BLOCK_N), threads=(BLOCK_N, BLOCK_K)) as bn:
        tn = T.get_thread_binding(0)
        tk = T.get_thread_binding(1)
        part = T.alloc_local((1,), T.float32)
        sums = T.alloc_shared((BLOCK_N,), T.float32)
        if tk == 0:
            sums[tn] = 0
        T.clear(part)
        for bk in T.serial(T.ceildiv(K, BLOCK_K)):
            k = bk * BLOCK_K + tk
            if k < K and bn * BLOCK_N + tn < N:
                part[0] += A[k].astype(T.float32) * B[bn * BLOCK_N + tn, k].astype(T.float32)
        T.atomic_add(sums[tn], part[0])
        if tk == 0 and bn * BLOCK_N + tn < N:
            C[bn * BLOCK_N + tn] = sums[tn]
    return C


@tile_nb.jit
def split_k_allreduce(A, B, BLOCK_N: int = 2, reduce_threads: int = 32, op: str = "sum"):
    """tilelang's splitk_gemv_vectorized_tvm: a thread all-reduce over tk (T.tvm_thread_allreduce)."""
    N, K = T.const("N, K")
    A: T.Tensor((K,), T.float16)
    B: T.Tensor((N, K), T.float16)
    C = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, BLOCK_N), threads=(BLOCK_N, reduce_threads)) as bn:
        tn = T.get_thread_binding(0)
        tk = T.get_thread_binding(1)
        part = T.alloc_local((1,), T.float32)
        total = T.alloc_local((1,), T.float32)
        T.clear(part)
        for bk in T.serial(T.ceildiv(K, reduce_threads)):
            k = bk * reduce_threads + tk
            if k < K and bn * BLOCK_N + tn < N:
                v = A[k].astype(T.float32) * B[bn * BLOCK_N + tn, k].astype(T.float32)
                if op == "sum":
                    part[0] += v
                else:
                    part[0] = T.max(part[0], v)
        combine = (lambda x, y: x + y) if op == "sum" else (lambda x, y: T.max(x, y))  # noqa: E731
        with T.attr(T.comm_reducer(combine, [T.cast(0, T.float32)]), "reduce_scope",
                    T.reinterpret(T.uint64(0), dtype="handle")):
            T.evaluate(T.tvm_thread_allreduce(T.uint32(1), part[0], True, total[0], tk, dtype="handle"))
        if bn * BLOCK_N + tn < N:
            C[bn * BLOCK_N + tn] = total[0]
    return C


def _inputs(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(k, generator=g).half(), torch.randn(n, k, generator=g).half()


def _reference(a, b):
    return b.float() @ a.float()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, k", [(1, 1), (64, 32), (100, 77), (129, 300)])
def test_one_row_per_thread(backend, n, k):
    a, b = _inputs(n, k, n + k)
    c = row_per_thread(a.to(backend), b.to(backend)).cpu()
    torch.testing.assert_close(c, _reference(a, b), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, k", [(1, 5), (32, 8), (45, 100), (200, 1)])
def test_split_k_with_a_shared_atomic_and_a_dynamic_k(backend, n, k):
    a, b = _inputs(n, k, 3 * n + k)
    c = split_k_atomic(a.to(backend), b.to(backend)).cpu()
    torch.testing.assert_close(c, _reference(a, b), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, k, block_n, threads", [(1, 1, 2, 32), (7, 100, 2, 32), (130, 513, 4, 32),
                                                     (33, 64, 8, 16)])
def test_split_k_with_a_thread_allreduce(backend, n, k, block_n, threads):
    a, b = _inputs(n, k, n * k)
    c = split_k_allreduce(a.to(backend), b.to(backend), BLOCK_N=block_n, reduce_threads=threads).cpu()
    torch.testing.assert_close(c, _reference(a, b), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_max_allreduce(backend):
    a, b = _inputs(37, 90, 5)
    c = split_k_allreduce(a.to(backend), b.to(backend), op="max").cpu()
    products = b.float() * a.float()
    # every thread's partial max starts at 0, as the kernel's does
    torch.testing.assert_close(c, products.clamp(min=0).max(dim=1).values)


def test_the_ir_has_loops_over_the_threads_and_per_thread_rows():
    a, b = _inputs(256, 64, 0)
    ir = row_per_thread.specialize(a, b).script()
    assert 'acc = T.alloc_buffer((64, 1), scope="local.thread")' in ir
    assert ir.count("for tid in T.parallel(64):") == 3  # staging, accumulating, the store
    assert "acc[tid, 0] = acc[tid, 0] +" in ir


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_the_cuda_kernel_runs_one_iteration_per_thread(arch):
    a, b = _inputs(256, 64, 0)
    k = row_per_thread.compile(a, b, target=arch)
    body = k.cuda_source.split('extern "C" __global__')[-1]
    assert "float acc_ptr[1];" in body  # one register per thread, not a row per thread
    assert body.count("tnb_cta_sync()") == 2  # after staging, and before the next staging
    assert k.cubin
    k = split_k_allreduce.compile(a, b, target=arch)
    assert k.cubin and k.cuda_source.count("tnb_cta_sync()") >= 1


def _kernel_source(body: str, threads: str = "64") -> str:
    return f'''
import tile_nb
import tile_nb.language as T

@tile_nb.jit
def bad(A):
    A: T.Tensor[[64], T.float32]
    with T.Kernel(1, threads={threads}) as bx:
        s = T.alloc_shared((64,), T.float32)
        tx = T.get_thread_binding()
        {body}
'''


@pytest.mark.parametrize("body, message", [
    ("for i in T.Parallel(64):\n            s[i] = A[tx]", r"per-thread code .* inside T.Parallel"),
    ("for i in T.serial(tx):\n            T.copy(A, s)", r"a tile operation under control flow that differs"),
    ("T.copy(A[tx:tx + 1], s[0:1])", r"the tile operation T.copy is given a region or value that depends"),
    ("r = T.alloc_local((1,), T.float32)\n        "
     "T.evaluate(T.tvm_thread_allreduce(T.uint32(1), A[tx], True, r[0], tx))",
     r"T.tvm_thread_allreduce needs its reducer"),
])
def test_refusals_name_the_users_line(body, message):
    ns = run_source(_kernel_source(body), {}, filename="per_thread_bad.py")
    with pytest.raises(DSLError, match=message) as info:
        ns["bad"](torch.randn(64))
    assert info.value.lineno is not None and info.value.lineno >= 11


@tile_nb.jit
def racy(A, same: bool = False):
    A: T.Tensor[[64], T.float32]
    with T.Kernel(1, threads=64) as _:
        s = T.alloc_shared((64,), T.float32)
        tx = T.get_thread_binding()
        s[0] = 1.0 if same else T.Cast("float32", tx)  # every thread writes s[0]
        A[tx] = s[0]


def test_threads_writing_different_values_to_one_element_is_a_race_error():
    from tile_nb.interp.errors import RaceError

    with pytest.raises(RaceError, match=r"write different values to s\[0\] here \(0.0 and 1.0") as info:
        racy(torch.zeros(64))
    assert info.value.lineno is not None
    a = torch.zeros(64)
    racy(a, same=True)  # the same value from every thread: no race
    assert torch.equal(a, torch.ones(64))


@tile_nb.jit
def split_by_warps(A):
    """mhc_pre's form: `if tx < 32:` around tile operations, in a 96-thread block; per-thread code inside."""
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), T.float32)
    C = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=96) as bx:
        tx = T.get_thread_binding()
        s = T.alloc_shared((64,), T.float32)
        T.copy(A[bx * 64], s)
        if tx < 32:
            f = T.alloc_fragment((64,), T.float32)
            T.copy(s, f)
            for i in T.Parallel(64):
                f[i] = f[i] * 2.0
            T.copy(f, B[bx * 64])
        else:
            lead = s[0]  # read the same by every thread: a block-level value under the per-thread branch
            for i in T.Parallel(64):
                if bx * 64 + i < N:
                    C[bx * 64 + i] = s[i] + 1.0 + lead
            if bx * 64 + tx - 32 < N:
                C[bx * 64 + tx - 32] = C[bx * 64 + tx - 32] + 10.0  # threads 32..95: elements 0..63
    return B, C


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 64, 150])
def test_an_if_on_the_thread_index_around_tile_operations_runs_both_branches(backend, n):
    a = torch.randn(n)
    b, c = split_by_warps(a.to(backend))
    torch.testing.assert_close(b.cpu(), a * 2)
    lead = a[torch.arange(n) // 64 * 64]  # each block's first element
    torch.testing.assert_close(c.cpu(), a + 11 + lead)
    hints = split_by_warps.specialize(a).attrs["tile_nb.hints"]
    assert any("holds tile operations: its branches run one after the other, each in all threads" in h
               for h in hints)


@tile_nb.jit
def butterfly(A, width: int = 32):
    """hadamard's warp step: each thread takes its partner's value by T.tvm_warp_shuffle in a T.Pipelined loop
    (no tile operations: a serial loop) and keeps the sum or the difference, round after round."""
    N = T.const("N")
    A: T.Tensor[[N, 64], T.float32]
    B = T.empty((N, 64), T.float32)
    with T.Kernel(N, threads=64) as bx:
        tx = T.get_thread_binding()
        v = T.alloc_local((2,), T.float32)
        other = T.alloc_local((2,), T.float32)
        for j in T.serial(2):
            v[j] = A[bx, tx] * (j + 1)
        for i in T.serial(5 if width == 32 else 3):
            partner = tx ^ (1 << i)
            for j in T.Pipelined(2, num_stages=1):
                other[j] = T.tvm_warp_shuffle(0xFFFFFFFF, v[j], partner % width, width, 32)
                v[j] = T.if_then_else((tx >> i) & 1 == 0, v[j] + other[j], other[j] - v[j])
        B[bx, tx] = v[0] + v[1]
    return B


def _butterfly_reference(a, width):
    rounds = 5 if width == 32 else 3
    v = a.clone()
    t = torch.arange(64)
    for i in range(rounds):
        partner = t ^ (1 << i)
        src = (t // width) * width + partner % width
        other = v[:, src]
        v = torch.where(((t >> i) & 1) == 0, v + other, other - v)
    return v * 3  # v[0] + v[1], the second scaled by 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("width", [32, 8])
def test_a_warp_shuffle_butterfly(backend, width):
    a = torch.randn(3, 64)
    b = butterfly(a.to(backend), width=width).cpu()
    torch.testing.assert_close(b, _butterfly_reference(a, width))
    ir = butterfly.specialize(a, width=width).script()
    assert "num_stages" not in ir


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_every_per_thread_kernel_here_builds_to_a_cubin(arch):
    """ptxas accepts what the lowering makes of each form (the GPU twins run them where a GPU is present)."""
    a, b = _inputs(100, 77, 1)
    kernels = [
        split_k_atomic.compile(a, b, target=arch),
        split_k_allreduce.compile(a, b, op="max", target=arch),
        split_by_warps.compile(torch.randn(150), target=arch),
        butterfly.compile(torch.randn(3, 64), width=8, target=arch),
        reversed_rows.compile(torch.randn(45, 6), target=arch),
    ]
    assert all(k.cubin for k in kernels)


# ---- a thread's own slice copied into and out of a local array; tuple assignments to memory -----------

@tile_nb.jit
def reversed_rows(A, threads: int = 32):
    """Each thread copies its row into a local array (T.copy with a region that depends on the thread, as
    tilelang's 2:4 compressor does), reverses it with tuple swaps, and copies it out."""
    M, N = T.const("M, N")
    A: T.Tensor[[M, N], T.float32]
    B = T.empty((M, N), T.int32)
    with T.Kernel(T.ceildiv(M, threads), threads=threads) as bx:
        tx = T.get_thread_binding()
        row = T.alloc_local((N,), T.float32)
        T.copy(A[bx * threads + tx, 0:N], row)
        for k in T.serial(N // 2):
            row[k], row[N - 1 - k] = row[N - 1 - k], row[k]
        T.copy(row, B[bx * threads + tx, 0:N])  # converted to int32 element by element
    return B


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("m, n", [(45, 6), (1, 1), (33, 7)])
def test_a_thread_copies_its_row_through_a_local_array(backend, m, n):
    """Rows past the tensor's edge (45 rows over 64 threads) are neither read nor written."""
    a = torch.randn(m, n) * 100
    b = reversed_rows(a.to(backend)).cpu()
    assert torch.equal(b, a.flip(1).to(torch.int32))


def test_a_tuple_assignment_reads_every_value_before_it_stores():
    """`s[0], s[1] = s[1], s[0]` swaps (the values are bound before the first store), at block level too."""
    @tile_nb.jit
    def swap(A):
        A: T.Tensor[[2], T.float32]
        with T.Kernel(1, threads=32) as _:
            s = T.alloc_shared((2,), T.float32)
            T.copy(A, s)
            s[0], s[1] = s[1], s[0]
            T.copy(s, A)

    a = torch.tensor([1.0, 2.0])
    swap(a)
    assert a.tolist() == [2.0, 1.0]

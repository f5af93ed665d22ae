"""A `T.atomic_add` of one element in block-level code (outside T.Parallel) adds once per CTA, as docs/IR.md
says block-level code runs once per CTA and as the interpreter does; the CUDA lowering once let every thread
of the block add (32x the sum with 32 threads). Interpreter against a hand count, the guard in the CUDA
source, and the GPU (marked gpu)."""
import re

import pytest
import torch

import tile_nb
import tile_nb.language as T


@tile_nb.jit
def count(C, X, n: T.int32, blocks: int = 5, threads: int = 64):
    C: T.Tensor[[2], T.int32]
    N = T.const("N")
    X: T.Tensor[[N], T.float32]                     # gives N only
    with T.Kernel(blocks, threads=threads) as bx:
        T.atomic_add(C[0], n)                       # block level: once per CTA
        for i in T.Parallel(N):                     # in T.Parallel: once per element
            T.atomic_add(C[1], 1)


def _check(device, blocks, threads, N):
    c = torch.zeros(2, dtype=torch.int32, device=device)
    x = torch.zeros(N, device=device)
    count(c, x, 3, blocks=blocks, threads=threads)
    assert c.tolist() == [3 * blocks, N * blocks]


@pytest.mark.parametrize("blocks,threads,N", [(5, 64, 7), (1, 32, 1), (3, 128, 200)])
def test_block_level_atomic_adds_once_per_cta(blocks, threads, N):
    _check("cpu", blocks, threads, N)


@pytest.mark.gpu
@pytest.mark.parametrize("blocks,threads,N", [(5, 64, 7), (1, 32, 1), (300, 128, 1000)])
def test_block_level_atomic_on_gpu(blocks, threads, N):
    _check("cuda", blocks, threads, N)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_block_level_atomic_runs_on_one_thread(arch):
    source = count.compile(torch.zeros(2, dtype=torch.int32), torch.zeros(7), 3, target=arch).cuda_source
    kernel = source[source.index("count_kernel("):]
    guarded = re.search(
        r"if \(\(\(int\)threadIdx\.x\) == 0\) \{\s*atomicAdd\(\(&\(C_ptr\[0\]\)\), n\);", kernel
    )
    assert guarded, kernel[:2000]


@tile_nb.jit
def shared_counter(X, block: int = 64):
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
        s = T.alloc_shared((1,), T.float32)
        T.clear(s)
        T.atomic_add(s[0], 2.5)                    # thread 0 adds; the reads below wait at a barrier
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] + s[0]
    return Y


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("N", [100, 1])
def test_block_level_atomic_on_shared_memory(backend, N):
    x = torch.randn(N, device=backend)
    torch.testing.assert_close(shared_counter(x), x + 2.5)


def test_a_read_after_a_block_level_atomic_waits_at_a_barrier():
    source = shared_counter.compile(torch.zeros(100), target="sm_90a").cuda_source
    kernel = source[source.index("shared_counter_kernel(float"):]
    kernel = kernel[kernel.index("{"):]
    add = kernel.index("atomicAdd(")
    assert "tnb_cta_sync();" in kernel[add:kernel.index("Y_ptr[", add)]


def test_a_block_level_read_modify_write_of_memory_runs_in_one_thread_between_barriers():
    """`X[0] = X[0] + 1` outside T.Parallel: were every thread to run it, the threads would update X[0] in
    turns (1 to 4 adds seen for 128 threads) while the interpreter adds once. One thread runs it, between two
    CTA barriers (the stores before it in place, its own seen by the reads after); a kernel variable's
    update and a plain block-level store stay unguarded."""

    @tile_nb.jit
    def rmw(X):
        X: T.Tensor[[4], T.float32]
        with T.Kernel(1, threads=128) as _:
            v = T.alloc_var(T.float32, init=0.0)
            v = v + 2.0
            X[1] = v
            X[0] = X[0] * 3.0 + 1.0
            X[2] = X[0]

    source = rmw.compile(torch.zeros(4), target="sm_90a").cuda_source
    kernel = source[source.rindex("rmw_kernel(float"):]
    update = kernel.index("X_ptr[0] = ")
    before, after = kernel[:update], kernel[update:]
    assert before.rstrip().endswith("if (((int)threadIdx.x) == 0) {"), kernel
    assert before.count("tnb_cta_sync();") == 1 and after.index("tnb_cta_sync();") < after.index("X_ptr[2]")
    assert "if" not in before.split("X_ptr[1] = ")[0].split("{", 1)[1]   # the kernel variable: every thread
    x = torch.tensor([1.0, 0.0, 0.0, 5.0])
    rmw(x)
    assert x.tolist() == [4.0, 2.0, 4.0, 5.0]


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("threads", [32, 256])
def test_block_level_read_modify_write_agrees(backend, threads):
    @tile_nb.jit
    def collatz_like(X, threads: int = 32):
        X: T.Tensor[[2], T.int32]
        with T.Kernel(1, threads=threads) as _:
            X[1] = 7
            for i in T.serial(10):
                X[0] = X[0] * 3 + X[1]
                X[1] = X[1] + 1

    x = torch.tensor([1, 0], dtype=torch.int32, device=backend)
    collatz_like(x, threads=threads)
    a, b = 1, 7
    for _ in range(10):
        a, b = a * 3 + b, b + 1                 # stays below 2**31
    assert x.cpu().tolist() == [a, b]


def test_a_plain_element_copy_is_not_refused():
    """`X[0] = X[3]` has every thread write the value it read (the same one, or the element unchanged): it
    lowers, and the interpreter agrees with the copy."""

    @tile_nb.jit
    def last_to_first(X):
        X: T.Tensor[[4], T.float32]
        with T.Kernel(1, threads=128) as _:
            X[0] = X[3]

    assert "X_ptr" in last_to_first.compile(torch.zeros(4), target="sm_90a").cuda_source
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    last_to_first(x)
    assert x.tolist() == [4.0, 2.0, 3.0, 4.0]

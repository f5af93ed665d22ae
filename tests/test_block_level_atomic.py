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


def test_a_block_level_read_modify_write_of_memory_is_refused_by_the_gpu_lowering():
    """`X[0] = X[0] + 1` outside T.Parallel: every thread runs block-level code, so on the GPU the threads
    update X[0] in turns (1 to 4 adds seen for 128 threads) while the interpreter adds once: refused at the
    line. A plain block-level store and a kernel variable's update still lower."""
    from tile_nb.lower import LoweringError

    @tile_nb.jit
    def rmw(X):
        X: T.Tensor[[4], T.float32]
        with T.Kernel(1, threads=128) as _:
            X[0] = X[0] + 1.0

    @tile_nb.jit
    def fine(X):
        X: T.Tensor[[4], T.float32]
        with T.Kernel(1, threads=128) as _:
            v = T.alloc_var(T.float32, init=0.0)
            v = v + 2.0
            X[1] = v

    with pytest.raises(LoweringError, match="X is read and written by one block-level statement") as info:
        rmw.compile(torch.zeros(4), target="sm_90a")
    assert info.value.lineno is not None and "T.atomic_add" in str(info.value)
    assert "X_ptr" in fine.compile(torch.zeros(4), target="sm_90a").cuda_source
    x = torch.zeros(4)
    fine(x)
    assert x.tolist() == [0.0, 2.0, 0.0, 0.0]

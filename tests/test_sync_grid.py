"""`T.sync_grid()` (tilelang's grid-wide barrier): on the interpreter every block runs as a coroutine that
hands over at the barrier (interp/grid.py), so reads after it see every block's writes before it; a block
that never reaches it is a deadlock, reported at the waiting line; the CUDA lowering refuses it (no
cooperative launch)."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DSLError
from tile_nb.frontend.source import run_source
from tile_nb.interp.errors import DeadlockError, InterpreterError
from tile_nb.jit import NotLowerableWarning
from tile_nb.lower import LoweringError

# every kernel here would be refused on the GPU: the interpreter says so once per kernel (checked below)
pytestmark = pytest.mark.filterwarnings("ignore::tile_nb.jit.NotLowerableWarning")


@tile_nb.jit
def sum_then_share(X, partials, totals, block: int = 32, sync: bool = True):
    """Each block sums its chunk of X into partials[b]; after the grid barrier every block adds up all the
    partials into totals[b] (so each block reads the others' writes)."""
    N, G = T.const('N, G')
    X: T.Tensor[[N], T.float32]
    partials: T.Tensor[[G], T.float32]
    totals: T.Tensor[[G], T.float32]
    with T.Kernel(G, threads=32) as b:
        acc = T.alloc_var(T.float32)
        acc = 0.0
        for i in T.serial(block):
            if b * block + i < N:
                acc += X[b * block + i]
        partials[b] = acc
        if sync:
            T.sync_grid()
        acc = 0.0
        for j in T.serial(G):
            acc += partials[j]
        totals[b] = acc


@tile_nb.jit
def rows_then_columns(X, Y, block: int = 4):
    """A 2-D grid: phase 1 doubles X into Y by tiles; after the barrier each block replaces its tile of Y with
    the transposed tile's values (written by another block in phase 1)."""
    N = T.const('N')
    X: T.Tensor[[N, N], T.float32]
    Y: T.Tensor[[N, N], T.float32]
    Z = T.empty((N, N), T.float32)
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(N, block), threads=32) as (bx, by):
        for i, j in T.Parallel(block, block):
            if bx * block + i < N and by * block + j < N:
                Y[bx * block + i, by * block + j] = X[bx * block + i, by * block + j] * 2
        T.sync_grid()
        for i, j in T.Parallel(block, block):
            if bx * block + i < N and by * block + j < N:
                Z[bx * block + i, by * block + j] = Y[by * block + j, bx * block + i]
    return Z


@pytest.mark.parametrize("N,block", [(100, 32), (1, 32), (64, 16), (33, 1)])
def test_every_block_sees_every_partial_after_the_barrier(N, block):
    G = -(-N // block)
    X = torch.randn(N)
    partials, totals = torch.full((G,), 5.0), torch.full((G,), 5.0)
    sum_then_share(X, partials, totals, block=block)
    chunks = torch.nn.functional.pad(X.double(), (0, G * block - N)).view(G, block).sum(1)
    torch.testing.assert_close(partials, chunks.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(totals, torch.full((G,), float(chunks.sum())), rtol=1e-5, atol=1e-4)


def test_without_the_barrier_early_blocks_read_stale_partials():
    """The same kernel without T.sync_grid runs its blocks in order: block 0 adds up partials the later blocks
    have not written yet (the GPU would race), so the barrier above is what makes it right."""
    X = torch.randn(96)
    partials, totals = torch.zeros(3), torch.zeros(3)
    sum_then_share(X, partials, totals, block=32, sync=False)
    assert not torch.allclose(totals[0], X.sum(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(totals[2], X.sum(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("N", [9, 1, 8])
def test_a_2d_grid_reads_a_tile_another_block_wrote(N):
    X = torch.randn(N, N)
    Y = torch.full((N, N), 7.0)
    Z = rows_then_columns(X, Y)
    torch.testing.assert_close(Y, X * 2)
    torch.testing.assert_close(Z, (X * 2).T)


_BAD = '''
import tile_nb
import tile_nb.language as T

@tile_nb.jit
def bad(A):
    A: T.Tensor[[8], T.float32]
    with T.Kernel(4, threads=32) as b:
        A[b] = 1.0
        {line}
        A[b + 4] = 2.0
'''


def test_a_barrier_some_blocks_skip_is_a_deadlock_at_its_line():
    ns = run_source(_BAD.format(line="if b > 0:\n            T.sync_grid()"), {}, filename="bad_grid.py")
    with pytest.raises(DeadlockError, match=r"block \(0,\) finished without reaching the grid barrier") \
            as info:
        ns["bad"](torch.zeros(8))
    assert "T.sync_grid()" in info.value.source_line()


def test_sync_grid_in_a_parallel_loop_is_refused():
    ns = run_source(_BAD.format(line="for i in T.Parallel(4):\n            T.sync_grid()"), {},
                    filename="bad_grid_par.py")
    with pytest.raises(Exception, match="sync_grid inside a T.Parallel loop is not supported") as info:
        ns["bad"](torch.zeros(8))
    assert isinstance(info.value, (DSLError, InterpreterError)), type(info.value)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_the_cuda_lowering_refuses_it_at_the_users_line(arch):
    X = torch.randn(64)
    refusal = "T.sync_grid is not lowered to CUDA yet: a grid-wide barrier needs a cooperative launch"
    with pytest.raises(LoweringError, match=refusal) as info:
        sum_then_share.compile(X, torch.zeros(2), torch.zeros(2), target=arch)
    assert "T.sync_grid()" in info.value.source_line()


def test_the_interpreter_warns_that_the_gpu_would_refuse_it():
    with pytest.warns(NotLowerableWarning, match="T.sync_grid is not lowered to CUDA yet"):
        rows_then_columns(torch.randn(3, 3), torch.zeros(3, 3), block=2)


@pytest.mark.gpu
def test_on_the_gpu_it_is_refused_not_run():
    X = torch.randn(64, device="cuda")
    with pytest.raises(LoweringError, match="cooperative launch"):
        sum_then_share(X, torch.zeros(2, device="cuda"), torch.zeros(2, device="cuda"))

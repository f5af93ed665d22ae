"""`T.sync_grid()` (tilelang's grid-wide barrier): on the interpreter every block runs as a coroutine that
hands over at the barrier (interp/grid.py), so reads after it see every block's writes before it; a block
that never reaches it is a deadlock, reported at the waiting line. On CUDA it is cooperative groups' grid
barrier, and the kernel is launched cooperatively (backend/pipeline.py)."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend.cuda_compile import CudaCompileError
from tile_nb.backend.pipeline import COOPERATIVE_LAUNCH, PIPELINE
from tile_nb.errors import DSLError
from tile_nb.frontend.source import run_source
from tile_nb.interp.errors import DeadlockError, InterpreterError
from tile_nb.lower import lower


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


@tile_nb.jit
def shift_through_shared(X, Tmp, block: int = 64):
    """Each block stages its chunk in shared memory (so the kernel has dynamic shared memory), writes it out,
    and after the grid barrier reads the next block's chunk: Y[i] = X[i] + X[(i + block) % N]."""
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Tmp: T.Tensor[[N], T.float32]
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=64) as b:
        tile = T.alloc_shared((block,), T.float32)
        T.copy(X[b * block:(b + 1) * block], tile)
        T.copy(tile, Tmp[b * block:(b + 1) * block])
        T.sync_grid()
        for i in T.Parallel(block):
            if b * block + i < N:
                Y[b * block + i] = tile[i] + Tmp[(b * block + i + block) % N]
    return Y


def _shift_reference(X, block):
    return X + torch.roll(X, -block)


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


def _device_launch_tags(func, arch: str) -> dict:
    """Each device function of the lowered kernel -> its launch tags after tile_nb's TIR pipeline."""
    import tvm

    target = tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")
    mod = tvm.tirx.transform.BindTarget(target)(lower(func, target))
    with target:
        lowered = tvm.tirx.get_tir_pipeline(PIPELINE)[0](mod)
    return {gv.name_hint: [str(t) for t in f.attrs["tirx.kernel_launch_params"]]
            for gv, f in lowered.functions.items() if "tirx.kernel_launch_params" in (f.attrs or {})}


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_the_cuda_kernel_calls_the_grid_barrier_and_is_launched_cooperatively(arch):
    X = torch.randn(64)
    kernel = sum_then_share.compile(X, torch.zeros(2), torch.zeros(2), target=arch)
    assert "cooperative_groups::this_grid().sync();" in kernel.cuda_source
    assert kernel.plan["cooperative_launch"] is True
    assert any("launched cooperatively" in n for n in kernel.plan["notes"])
    tags = _device_launch_tags(sum_then_share.specialize(X, torch.zeros(2), torch.zeros(2)), arch)
    assert [COOPERATIVE_LAUNCH in t for t in tags.values()] == [True], tags


@pytest.mark.parametrize("N", [200, 1, 64])
def test_a_block_reads_the_chunk_the_next_block_wrote(N):
    X = torch.randn(N)
    torch.testing.assert_close(shift_through_shared(X, torch.zeros(N)), _shift_reference(X, 64))


def test_the_cooperative_tag_goes_before_the_dynamic_shared_memory_tag():
    """TVM's runtime reads `tirx.use_dyn_shared_memory` only as the last tag (else it refuses the launch)."""
    tags = _device_launch_tags(shift_through_shared.specialize(torch.randn(200), torch.zeros(200)), "sm_90a")
    assert list(tags.values()) == [["blockIdx.x", "threadIdx.x", COOPERATIVE_LAUNCH,
                                    "tirx.use_dyn_shared_memory"]], tags


def test_a_kernel_without_the_barrier_is_launched_as_before():
    X = torch.randn(64)
    func = sum_then_share.specialize(X, torch.zeros(2), torch.zeros(2), sync=False)
    assert [COOPERATIVE_LAUNCH in t for t in _device_launch_tags(func, "sm_90a").values()] == [False]
    kernel = sum_then_share.compile(X, torch.zeros(2), torch.zeros(2), sync=False, target="sm_90a")
    assert kernel.plan["cooperative_launch"] is False and "this_grid" not in kernel.cuda_source


def test_the_cuda_host_launcher_refuses_it_clearly():
    """TVM's opt-in cuda_host launcher fills its launch config without the cooperative attribute."""
    import tvm

    from tile_nb.backend.cuda_host import cuda_host_source

    X = torch.randn(64)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    mod = lower(sum_then_share.specialize(X, torch.zeros(2), torch.zeros(2)), target)
    with pytest.raises(CudaCompileError, match="T.sync_grid needs a cooperative launch"):
        cuda_host_source(mod, "sm_90a")


@pytest.mark.gpu
@pytest.mark.parametrize("N,block", [(100, 32), (1, 32), (333, 4)])
def test_on_the_gpu_every_block_sees_every_partial(N, block):
    G = -(-N // block)
    X = torch.randn(N, device="cuda")
    partials = torch.full((G,), 5.0, device="cuda")
    totals = torch.full((G,), 5.0, device="cuda")
    sum_then_share(X, partials, totals, block=block)
    chunks = torch.nn.functional.pad(X.double(), (0, G * block - N)).view(G, block).sum(1)
    torch.testing.assert_close(partials, chunks.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(totals, torch.full_like(totals, float(chunks.sum())), rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("N", [9, 1, 130])
def test_on_the_gpu_a_2d_grid_reads_a_tile_another_block_wrote(N):
    X = torch.randn(N, N, device="cuda")
    Y = torch.full((N, N), 7.0, device="cuda")
    Z = rows_then_columns(X, Y)
    torch.testing.assert_close(Y, X * 2)
    torch.testing.assert_close(Z, (X * 2).T)


@pytest.mark.gpu
@pytest.mark.parametrize("N", [200, 1, 64 * 132 + 5])
def test_on_the_gpu_with_dynamic_shared_memory(N):
    X = torch.randn(N, device="cuda")
    torch.testing.assert_close(shift_through_shared(X, torch.zeros_like(X)), _shift_reference(X, 64))


@pytest.mark.gpu
def test_on_the_gpu_a_grid_larger_than_the_gpu_holds_is_an_error_not_a_hang():
    """Cooperative launches need every CTA resident: 2**16 CTAs of 32 threads exceed any GPU's 32 per SM."""
    N = 2**16 * 32
    X = torch.randn(N, device="cuda")
    G = N // 32
    with pytest.raises(Exception, match=r"(?i)cooperative|too large") as info:
        sum_then_share(X, torch.zeros(G, device="cuda"), torch.zeros(G, device="cuda"))
        torch.cuda.synchronize()
    print("the error:", type(info.value).__name__, str(info.value)[:300])

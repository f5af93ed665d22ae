"""`tile_nb.interp.access_map`: which elements of each tensor one block reads and writes, as bool masks. The
expected masks are built from the kernels' tiling by slicing, independently of the interpreter."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb import interp

pytestmark = pytest.mark.filterwarnings("ignore::Warning")  # fp32 T.gemm and friends: the GPU lowering warns


def _mask(shape, *index):
    m = torch.zeros(shape, dtype=torch.bool)
    m[index] = True
    return m


@tile_nb.jit
def matmul(A, B, C, bm: int = 16, bn: int = 32, bk: int = 16):
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, bm), T.ceildiv(N, bn)) as (bx, by):
        A_s = T.alloc_shared((bm, bk), T.float16)
        B_s = T.alloc_shared((bk, bn), T.float16)
        acc = T.alloc_fragment((bm, bn), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
            T.copy(A[bx * bm, k * bk], A_s)
            T.copy(B[k * bk, by * bn], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[bx * bm, by * bn])


@pytest.mark.parametrize("block", [(0, 0), (1, 2), (3, 1)])
def test_gemm_block_reads_its_rows_and_columns_and_writes_its_tile(block):
    M, N, K = 50, 70, 40                     # edge tiles in every dim
    A, B = torch.randn(M, K).half(), torch.randn(K, N).half()
    C = torch.zeros(M, N)
    maps = interp.access_map(matmul.specialize(A, B, C), [A, B, C], block=block)
    bx, by = block
    rows, cols = slice(bx * 16, bx * 16 + 16), slice(by * 32, by * 32 + 32)
    assert set(maps) == {"A", "B", "C"}
    assert torch.equal(maps["A"].read, _mask((M, K), rows, slice(None)))
    assert torch.equal(maps["B"].read, _mask((K, N), slice(None), cols))
    assert torch.equal(maps["C"].written, _mask((M, N), rows, cols))
    assert not maps["A"].written.any() and not maps["B"].written.any() and not maps["C"].read.any()
    torch.testing.assert_close(C, A.float() @ B.float(), rtol=1e-3, atol=1e-3)  # the whole kernel ran


@tile_nb.jit
def shifted(X, Y, block: int = 8):
    N = T.dynamic('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            g = bx * block + i
            if g + 1 < N:
                Y[g] = X[g + 1] - X[N - 1 - g]      # a slice, and a reversed (gathered) index
            elif g < N:
                Y[g] = 0.0


@pytest.mark.parametrize("N, block", [(21, 2), (21, 0), (1, 0), (16, 1)])
def test_parallel_accesses_count_only_active_iterations(N, block):
    X, Y = torch.randn(N), torch.full((N,), 7.0)
    maps = interp.access_map(shifted.specialize(X, Y), [X, Y], block=block)
    lo, hi = block * 8, min(block * 8 + 8, N)
    read = torch.zeros(N, dtype=torch.bool)
    for g in range(lo, hi):
        if g + 1 < N:
            read[g + 1] = read[N - 1 - g] = True
    assert torch.equal(maps["X"].read, read)
    assert torch.equal(maps["Y"].written, _mask((N,), slice(lo, hi)))
    assert not maps["Y"].read.any()
    expected = torch.cat([X[1:] - X.flip(0)[:-1], torch.zeros(1)]) if N > 1 else torch.zeros(1)
    torch.testing.assert_close(Y, expected)


@tile_nb.jit
def block_sums(X, Out, n: int = 4):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Out: T.Tensor[[2], T.float32]
    with T.Kernel(T.ceildiv(N, n)) as bx:
        first = X[bx * n]                           # a block-level load
        for i in T.Parallel(n):
            if bx * n + i < N:
                T.atomic_add(Out[bx % 2], X[bx * n + i] - first)


def test_block_level_loads_and_atomics_are_recorded():
    X, Out = torch.randn(10), torch.zeros(2)
    maps = interp.access_map(block_sums.specialize(X, Out), [X, Out], block=2)
    assert torch.equal(maps["X"].read, _mask((10,), slice(8, 10)))
    assert torch.equal(maps["Out"].read, _mask((2,), 0)) and torch.equal(maps["Out"].written, _mask((2,), 0))


def test_a_block_outside_the_grid_records_nothing_and_a_bad_block_is_refused():
    X, Y = torch.randn(5), torch.zeros(5)
    maps = interp.access_map(shifted.specialize(X, Y), [X, Y], block=(3,))
    assert not any(m.read.any() or m.written.any() for m in maps.values())
    with pytest.raises(ValueError, match=r"access_map\(block=...\) must be"):
        interp.access_map(shifted.specialize(X, Y), [X, Y], block=(-1,))


def test_notebook_view_summarizes_the_masks_and_draws_them():
    from tile_nb.notebook.access import show_access

    A, B = torch.randn(50, 40).half(), torch.randn(40, 70).half()
    C = torch.zeros(50, 70)
    view = show_access(matmul, A, B, C, block=(1, 1))
    assert view.text().splitlines() == [
        "matmul: block (1, 1)",
        "  A [50, 40]: read 640 in [16:32, 0:40], written 0",
        "  B [40, 70]: read 1280 in [0:40, 32:64], written 0",
        "  C [50, 70]: read 0, written 512 in [16:32, 32:64]",
    ]
    bundle = view._repr_mimebundle_()
    assert bundle["text/plain"] == view.text() and bundle["image/png"].startswith(b"\x89PNG")
    with pytest.raises(TypeError, match="T.empty outputs included"):
        show_access(matmul, A, B, block=0)


def test_access_explorer_slides_over_the_grid_and_keeps_static_forms_of_the_chosen_block():
    pytest.importorskip("ipywidgets")
    from tile_nb.notebook.access import explore_access

    A, B = torch.randn(50, 40).half(), torch.randn(40, 70).half()
    C = torch.full((50, 70), 7.0)
    explorer = explore_access(matmul, A, B, C)
    # 4 x 3 blocks
    assert {a: (c.min, c.max) for a, c in explorer.controls.items()} == {"x": (0, 3), "y": (0, 2)}
    assert torch.equal(C, torch.full((50, 70), 7.0))     # the call's tensors are not written
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and bundle["image/png"].startswith(b"\x89PNG")
    assert bundle["text/plain"].splitlines()[0] == "matmul: block (0, 0)"
    explorer.controls["x"].value, explorer.controls["y"].value = 3, 2   # the edge block: 2 rows, 6 columns
    assert torch.equal(explorer.view.maps["C"].written, _mask((50, 70), slice(48, 50), slice(64, 70)))
    assert explorer._repr_mimebundle_()["text/plain"].splitlines()[-1] == \
        "  C [50, 70]: read 0, written 12 in [48:50, 64:70]"
    assert explorer.image.value == explorer._repr_mimebundle_()["image/png"]


def test_access_explorer_sizes_a_dynamic_grid_from_the_call():
    pytest.importorskip("ipywidgets")
    from tile_nb.notebook.access import explore_access

    x, y = torch.randn(21), torch.zeros(21)
    explorer = explore_access(shifted, x, y)               # N = 21 with blocks of 8: 3 blocks
    assert explorer.controls["x"].max == 2
    explorer.controls["x"].value = 2
    assert int(explorer.view.maps["Y"].written.sum()) == 5

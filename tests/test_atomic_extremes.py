"""`T.atomic_max` / `T.atomic_min` (tilelang's, element and tile forms) into global memory: CTAs combine
their partial maxima (minima) into one output. Integers run on CUDA's atomicMax / atomicMin, floats on a
compare-and-swap loop (intrin.atomic_extreme) in which a NaN wins, as T.max and the interpreter.

CPU: the interpreter against torch (odd shapes, a size of 1, NaN inputs), the sm_90a and sm_80 builds with
nvcc, the refusals (an 8-bit destination, memory orders tile_nb does not give). GPU (marked gpu): the same
kernels against torch.
"""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import TileNBError

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
_DT = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
       "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64}


@tile_nb.jit
def column_extreme(X, Out, kind: str = "max", dtype: T.dtype = T.float32, tile_form: bool = False,
                   block_M: int = 16, block_N: int = 32):
    """Out[j] = max (min) of Out[j] and every X[i, j]: each CTA reduces its rows in a fragment, then adds
    its partial result with one atomic update per column."""
    M, N = T.const("M, N")
    X: T.Tensor[[M, N], dtype]
    Out: T.Tensor[[N], dtype]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=128) as (bx, by):
        tile = T.alloc_fragment((block_M, block_N), dtype)
        part = T.alloc_fragment((block_N,), dtype)
        T.copy(X[bx * block_M, by * block_N], tile)
        for i, j in T.Parallel(block_M, block_N):  # rows past M leave the column's result unchanged
            if bx * block_M + i >= M:
                tile[i, j] = tile[0, j]
        reduce, update = (T.reduce_max, T.atomic_max) if kind == "max" else (T.reduce_min, T.atomic_min)
        reduce(tile, part, dim=0)
        if tile_form:
            update(Out[by * block_N:(by + 1) * block_N], part)
        else:
            for j in T.Parallel(block_N):
                if by * block_N + j < N:
                    update(Out[by * block_N + j], part[j])


def _inputs(M, N, dtype, seed=0):
    g = torch.Generator().manual_seed(seed * 7919 + M * 31 + N)
    if dtype.startswith("int"):
        X = torch.randint(-1000, 1000, (M, N), generator=g, dtype=_DT[dtype])
        start = torch.randint(-1000, 1000, (N,), generator=g, dtype=_DT[dtype])
    else:
        X = (torch.randn(M, N, generator=g, dtype=torch.float64) * 10).to(_DT[dtype])
        start = (torch.randn(N, generator=g, dtype=torch.float64) * 10).to(_DT[dtype])
    return X, start


def _expected(X, start, kind):
    pick = torch.maximum if kind == "max" else torch.minimum
    reduced = X.amax(0) if kind == "max" else X.amin(0)
    return pick(start, reduced)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "int64"])
@pytest.mark.parametrize("shape", [(70, 45), (1, 1), (33, 64)])
def test_atomic_extreme_against_torch(backend, kind, dtype, shape):
    X, start = _inputs(*shape, dtype, seed=1)
    out = start.clone().to(backend)
    column_extreme(X.to(backend), out, kind=kind, dtype=dtype)
    # each result is one of the inputs, picked by comparisons: exact
    assert torch.equal(out.cpu(), _expected(X, start, kind))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["max", "min"])
def test_tile_form(backend, kind):
    X, start = _inputs(70, 45, "float32", seed=2)
    out = start.clone().to(backend)
    column_extreme(X.to(backend), out, kind=kind, tile_form=True)
    assert torch.equal(out.cpu(), _expected(X, start, kind))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nan_wins(backend):
    """A NaN in X (column 3) or already in the output (column 5) gives NaN there; the other columns are
    unchanged by it."""
    X, start = _inputs(40, 45, "float32", seed=3)
    X[17, 3] = float("nan")
    start[5] = float("nan")
    out = start.clone().to(backend)
    column_extreme(X.to(backend), out)
    out = out.cpu()
    assert out[3].isnan() and out[5].isnan() and not out.isnan().sum() > 2
    keep = [j for j in range(45) if j not in (3, 5)]
    assert torch.equal(out[keep], _expected(X[:, keep], start[keep], "max"))


@needs_nvcc
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
def test_builds_with_nvcc(target, dtype):
    X, start = _inputs(64, 64, dtype)
    k = column_extreme.compile(X, start, dtype=dtype, target=target)
    helper = f"tnb_atomic_max_{dtype}"
    assert helper in k.cuda_source and k.cubin
    assert ("atomicCAS" in k.cuda_source) == dtype.startswith(("float", "bfloat"))


@tile_nb.jit
def bad_atomic(X, dtype: T.dtype = T.int8, memory_order: str = None):
    N = T.const("N")
    X: T.Tensor[[N], dtype]
    with T.Kernel(1, threads=32):
        T.atomic_max(X[0], 1, memory_order=memory_order)


def test_refusals_name_the_problem():
    with pytest.raises(TileNBError, match=r"T.atomic_max: X is int8; an atomic max / min updates elements"):
        bad_atomic(torch.zeros(4, dtype=torch.int8))
    with pytest.raises(TileNBError, match=r"T.atomic_max\(memory_order='acquire'\) is not supported"):
        bad_atomic(torch.zeros(4, dtype=torch.int32), dtype="int32", memory_order="acquire")


@tile_nb.jit
def block_and_shared_extremes(X, Out, block: int = 64):
    """Out[0] = max over X, by two routes: each CTA's block-level T.atomic_max of its largest element into
    global memory (one update per CTA), and T.atomic_min into a shared tile from every element of a
    T.Parallel loop, whose result Out[1 + bx] receives."""
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    Out: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
        tile = T.alloc_fragment((block,), T.float32)
        best = T.alloc_fragment((1,), T.float32)
        low = T.alloc_shared((1,), T.float32)
        for i in T.Parallel(block):
            tile[i] = T.if_then_else(bx * block + i < N, X[bx * block + i], -T.infinity(T.float32))
        T.reduce_max(tile, best, dim=0)
        T.atomic_max(Out[0], best[0])
        T.fill(low, T.infinity(T.float32))
        for i in T.Parallel(block):
            if bx * block + i < N:
                T.atomic_min(low[0], X[bx * block + i])
        Out[1 + bx] = low[0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [300, 65])
def test_block_level_and_shared_memory_updates(backend, n):
    X, _ = _inputs(1, n, "float32", seed=4)
    X = X[0]
    out = torch.full((n,), -1e30).to(backend)
    block_and_shared_extremes(X.to(backend), out)
    out = out.cpu()
    blocks = -(-n // 64)
    assert out[0] == X.max()
    assert torch.equal(out[1:1 + blocks], torch.stack([X[b * 64:(b + 1) * 64].min() for b in range(blocks)]))


@tile_nb.jit
def paired_adds(A, B, lanes: int = 2, region: bool = False, block_M: int = 4, block_N: int = 16):
    """B[i, j:j+lanes] += A[i, j:j+lanes] by T.atomic_addx2 / x4 (tilelang's test's kernel), twice over."""
    M, N = T.const("M, N")
    A: T.Tensor[[M, N], T.float32]
    B: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), 2, threads=32) as (bx, by, bz):
        for i, j in T.Parallel(block_M, block_N // lanes):
            r, c = bx * block_M + i, by * block_N + j * lanes
            if r < M and c < N:
                if lanes == 2:
                    if region:
                        T.atomic_addx2(B[r, c:c + 2], A[r, c:c + 2])
                    else:
                        T.atomic_addx2(B[r, c], A[r, c])
                else:
                    T.atomic_addx4(B[r, c], A[r, c])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lanes, region", [(2, False), (2, True), (4, False)])
def test_paired_atomic_adds(backend, lanes, region):
    """Two CTAs (bz) add into every element: B = B0 + 2 A."""
    g = torch.Generator().manual_seed(lanes)
    A, B0 = torch.randn(9, 48, generator=g), torch.randn(9, 48, generator=g)
    B = B0.clone().to(backend)
    paired_adds(A.to(backend), B, lanes=lanes, region=region)
    torch.testing.assert_close(B.cpu(), B0 + 2 * A)


def test_paired_atomic_add_refuses_a_region_of_another_width():
    @tile_nb.jit
    def three(A, B):
        N = T.const("N")
        A: T.Tensor[[N], T.float32]
        B: T.Tensor[[N], T.float32]
        with T.Kernel(1, threads=32):
            T.atomic_addx2(B[0:3], A[0:3])

    with pytest.raises(TileNBError, match=r"T.atomic_addx2: the region dst B\[3\] is not 2 consecutive"):
        three(torch.zeros(4), torch.zeros(4))


@needs_nvcc
def test_paired_atomic_adds_build_with_nvcc():
    k = paired_adds.compile(torch.zeros(9, 48), torch.zeros(9, 48), lanes=4, target="sm_90a")
    assert k.cuda_source.count("atomicAdd(") >= 4 and k.cubin

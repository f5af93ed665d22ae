"""`T.atomic_add` of a whole tile (tilelang's form): split-K GEMMs adding their partial products into C, a
tile into a region with dims of extent 1 between, the edge of C not written past; element atomics of scalar
values; `memory_order` and `use_tma`. Interpreter against torch, sm_90a CUDA, and the GPU (marked gpu)."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DSLError


@tile_nb.jit
def splitk(A, B, C, block_M: int = 32, block_N: int = 32, block_K: int = 16, split: int = 3):
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), split, threads=128) as (bx, by, bz):
        A_s = T.alloc_shared((block_M, block_K), T.float16)
        B_s = T.alloc_shared((block_K, block_N), T.float16)
        C_l = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_l)
        for k in T.Pipelined(T.ceildiv(K // split, block_K), num_stages=2):
            T.copy(A[by * block_M, bz * (K // split) + k * block_K], A_s)
            T.copy(B[bz * (K // split) + k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, C_l)
        T.atomic_add(C[by * block_M, bx * block_N], C_l)


def _splitk_check(M, N, K, device):
    torch.manual_seed(M + N)
    a = torch.randn(M, K, dtype=torch.float16, device=device)
    b = torch.randn(K, N, dtype=torch.float16, device=device)
    c = torch.full((M, N), 0.5, device=device)          # added to, not overwritten
    splitk(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float() + 0.5, atol=1e-4 * K, rtol=1e-3)


@pytest.mark.parametrize("M,N,K", [(70, 45, 48), (1, 1, 48), (64, 64, 96)])
def test_splitk_adds_every_partial_tile(M, N, K):
    _splitk_check(M, N, K, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(70, 45, 48), (1, 1, 48), (256, 256, 384)])
def test_splitk_on_gpu(M, N, K):
    _splitk_check(M, N, K, "cuda")


def test_splitk_lowers_to_atomic_adds():
    source = splitk.compile(M=70, N=45, K=48, target="sm_90a").cuda_source
    assert "atomicAdd(" in source


@tile_nb.jit
def into_region(X, O, chunk: int = 4):
    B, S, H, D = T.const("B, S, H, D")
    X: T.Tensor[[B, S, H, D], T.float32]
    O: T.Tensor[[B, S, H, D], T.float32]
    with T.Kernel(T.ceildiv(S, chunk), H, B, threads=32) as (i, h, b):
        tile = T.alloc_shared((chunk, D), T.float32)
        T.copy(X[b, i * chunk:(i + 1) * chunk, h, 0:D], tile)
        T.atomic_add(O[b, i * chunk:(i + 1) * chunk, h, 0:D], tile)   # dims of extent 1 between the tile's


@pytest.mark.parametrize("shape", [(2, 7, 3, 5), (1, 1, 1, 1), (1, 8, 2, 4)])
def test_tile_into_a_region_with_unit_dims(shape):
    x = torch.randn(*shape)
    o = torch.ones(*shape)
    into_region(x, o)
    torch.testing.assert_close(o, x + 1)


def test_element_atomic_of_a_scalar_parameter():
    """A scalar Var is not a tile (in TVM 0.27 every Var is an instance of
    tirx.Buffer: the old check refused it)."""
    @tile_nb.jit
    def count(C, n: T.int32):
        C: T.Tensor[[1], T.int32]
        with T.Kernel(5, threads=32) as _:
            T.atomic_add(C[0], n)

    c = torch.zeros(1, dtype=torch.int32)
    count(c, 3)
    assert c.item() == 15


def test_memory_order_and_use_tma():
    @tile_nb.jit
    def add(C, order: str = "relaxed", tma: bool = False):
        C: T.Tensor[[4], T.float32]
        with T.Kernel(2, threads=32) as _:
            tile = T.alloc_fragment((4,), T.float32)
            T.fill(tile, 1.0)
            T.atomic_add(C[0:4], tile, use_tma=tma, memory_order=order)

    c = torch.zeros(4)
    add(c, tma=True)
    assert torch.equal(c, torch.full((4,), 2.0))
    hints = [str(h) for h in add.specialize(tma=True).attrs["tile_nb.hints"]]
    assert hints and hints[0].startswith("atomic_add(use_tma=True)")
    with pytest.raises(DSLError, match=r"T.atomic_add\(memory_order='seq_cst'\) is not supported"):
        add(c, order="seq_cst")


def test_tile_and_destination_of_different_shapes_are_refused():
    @tile_nb.jit
    def bad(C):
        C: T.Tensor[[8, 8], T.float32]
        with T.Kernel(1, threads=32) as _:
            tile = T.alloc_fragment((4, 4), T.float32)
            T.fill(tile, 1.0)
            T.atomic_add(C[0:4, 0:2], tile)

    with pytest.raises(DSLError, match="have different shapes"):
        bad(torch.zeros(8, 8))


def test_tile_atomic_keeps_the_tile_op_lines_in_step():
    """`tile_nb.tile_op_lines` pairs lines with the T.tile.* calls in order: the tile atomic
    (a loop of atomicAdd, no T.tile call) must not add one, or every later tile op's error
    points at the line before it."""
    @tile_nb.jit
    def after_atomic(A, C):
        A: T.Tensor[[16], T.float32]
        C: T.Tensor[[16], T.float32]
        with T.Kernel(1, threads=32) as bx:
            t = T.alloc_fragment((16,), T.float32)
            s = T.alloc_shared((16,), T.float32)
            T.copy(A[0], t)
            T.atomic_add(C[0:16], t)
            T.copy(A[0], s)
            T.fill(s, 1.0)

    func = after_atomic.specialize(torch.zeros(16), torch.zeros(16))
    lines = [int(x) for x in func.attrs["tile_nb.tile_op_lines"]]
    assert len(lines) == func.script().count("T.tile.") == 3
    assert lines[1] - lines[0] == 2 and lines[2] - lines[1] == 1    # the copies and the fill, not the atomic


@tile_nb.jit
def parallel_adds(X, O, OT, R, block: int = 16):
    """Element atomics in a T.Parallel: guarded at the ragged edge (a mask), into a float16 buffer, into a
    transposed view, and one that ignores a loop var (each of its `block` iterations adds)."""
    N, D = T.const("N, D")
    X: T.Tensor[[N, D], T.float32]
    O: T.Tensor[[N, D], T.float16]
    OT: T.Tensor[[D, N], T.float32]
    R: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block), 2, threads=32) as (bx, _):
        for i, j in T.Parallel(block, D):
            if bx * block + i < N:
                T.atomic_add(O[bx * block + i, j], X[bx * block + i, j])
                T.atomic_add(OT[j, bx * block + i], X[bx * block + i, j])
                T.atomic_add(R[bx * block + i], 1.0)


@pytest.mark.parametrize("N,D", [(37, 5), (1, 1), (16, 3)])
def test_parallel_element_atomics_agree_with_torch(N, D):
    torch.manual_seed(N)
    x = torch.randn(N, D)
    o = torch.randn(N, D).half()
    o[0, 0] = -0.0                                       # an element with a sign bit of zero
    ot = torch.randn(D, N)
    r = torch.randn(N)
    want_o = o.clone()
    for _ in range(2):                                   # two CTAs per row block: two adds, each rounded
        want_o = (want_o.float() + x.half().float()).half()
    want_ot, want_r = ot + 2 * x.T, r + 2.0 * D
    parallel_adds(x, o, ot, r)
    torch.testing.assert_close(o, want_o, atol=0, rtol=0)
    torch.testing.assert_close(ot, want_ot)
    torch.testing.assert_close(r, want_r)


@tile_nb.jit
def positive_adds(X, O, block: int = 8):
    N, D = T.const("N, D")
    X: T.Tensor[[N, D], T.float32]
    O: T.Tensor[[N, D], T.float32]
    with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
        for i, j in T.Parallel(block, D):
            if bx * block + i < N:
                if X[bx * block + i, j] > 0:           # masked-off elements inside the buffer
                    T.atomic_add(O[bx * block + i, j], X[bx * block + i, j])


@pytest.mark.parametrize("N,D", [(16, 5), (13, 4), (1, 1)])
def test_masked_parallel_atomics_leave_masked_elements_bit_exact(N, D, monkeypatch):
    import tile_nb.interp.memory as memory

    calls = []
    real = memory.add_into
    monkeypatch.setattr(memory, "add_into", lambda *a: calls.append(1) or real(*a))
    torch.manual_seed(N + D)
    x = torch.randn(N, D)
    x[0, 0] = 1.5                                         # at least one add
    o = torch.full((N, D), -0.0)
    positive_adds(x, o)
    want = torch.where(x > 0, x, torch.full_like(x, -0.0))
    assert torch.equal(o, want) and torch.equal(torch.signbit(o), torch.signbit(want))
    # the strided-view path ran for the blocks inside the buffer (none when N < block)
    assert bool(calls) == (N >= 8)

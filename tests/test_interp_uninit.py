"""The interpreter reports reads of shared / fragment / local memory that the block never wrote (the GPU would
read garbage there; the interpreter's buffers start at 0, so such a kernel could pass on the CPU by chance).

Each error names the buffer, the first element never written, the block and the user's line; correct kernels
(edge tiles, dynamic dims, sizes of 1) run as before and match torch."""
import pickle

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.interp import UninitializedReadError

_SOURCE = open(__file__).read().splitlines()


def _line(marker: str) -> int:
    """The line of this file that ends with `# <marker>`."""
    hits = [n for n, text in enumerate(_SOURCE, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


@tile_nb.jit
def gemm(A, B, clear: bool = True, bm: int = 32, bn: int = 32, bk: int = 16):
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, bm), T.ceildiv(N, bn)) as (bx, by):
        A_s = T.alloc_shared((bm, bk), T.float16)
        B_s = T.alloc_shared((bk, bn), T.float16)
        acc = T.alloc_fragment((bm, bn), T.float32)
        if clear:
            T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
            T.copy(A[bx * bm, k * bk], A_s)
            T.copy(B[k * bk, by * bn], B_s)
            T.gemm(A_s, B_s, acc)  # gemm-accumulates
        T.copy(acc, C[bx * bm, by * bn])
    return C


def test_gemm_into_an_accumulator_never_cleared_is_reported_at_the_gemm():
    A, B = torch.randn(40, 20).half(), torch.randn(20, 50).half()
    with pytest.raises(UninitializedReadError) as info:
        gemm(A, B, clear=False)
    err = info.value
    assert (err.buffer, err.index, err.block, err.op) == ("acc", (0, 0), (0, 0), "T.gemm")
    assert err.count == 32 * 32 and err.region == ("0:32", "0:32") and err.scope == "local.fragment"
    assert err.lineno == _line("gemm-accumulates") and err.filename == __file__
    text = str(err)
    assert "T.gemm reads acc[0:32, 0:32] (fragment buffer of shape (32, 32))" in text
    assert "1024 of those elements were never written in block (0, 0)" in text
    assert "T.gemm(A_s, B_s, acc)" in text and "TILE_NB_CHECK_UNINIT=0" in text


@pytest.mark.parametrize("shape", [(40, 20, 50), (1, 1, 1), (32, 16, 32), (33, 17, 65)])
def test_gemm_with_clear_runs_and_matches_torch(shape):
    M, K, N = shape
    A, B = torch.randn(M, K).half(), torch.randn(K, N).half()
    torch.testing.assert_close(gemm(A, B), A.float() @ B.float(), rtol=1e-4, atol=1e-4)


def test_switch_turns_the_check_off(monkeypatch):
    A, B = torch.randn(40, 20).half(), torch.randn(20, 50).half()
    monkeypatch.setenv("TILE_NB_CHECK_UNINIT", "0")
    C = gemm(A, B, clear=False)  # runs: the interpreter's accumulator starts at 0
    torch.testing.assert_close(C, A.float() @ B.float(), rtol=1e-4, atol=1e-4)
    monkeypatch.setenv("TILE_NB_CHECK_UNINIT", "1")
    with pytest.raises(UninitializedReadError):
        gemm(A, B, clear=False)


@tile_nb.jit
def row_max(X, clear: bool = True, bm: int = 4, bn: int = 8):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float32]
    out = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, bm)) as bx:
        S = T.alloc_fragment((bm, bn), T.float32)
        m = T.alloc_fragment((bm,), T.float32)
        T.copy(X[bx * bm, 0], S)
        T.reduce_max(S, m, dim=1, clear=clear)  # reduce-into
        T.copy(m, out[bx * bm])
    return out


def test_reduction_that_accumulates_into_a_fresh_fragment_is_reported():
    X = torch.randn(10, 8)
    with pytest.raises(UninitializedReadError) as info:
        row_max(X, clear=False)
    err = info.value
    assert (err.buffer, err.index, err.op, err.block) == ("m", (0,), "T.reduce_max", (0,))
    assert err.lineno == _line("reduce-into")
    torch.testing.assert_close(row_max(X), X.amax(dim=1))  # edge block: rows past M read as 0, never stored


@tile_nb.jit
def half_written(X, rows: int = 2, bm: int = 4, bn: int = 8):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float32]
    out = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, bm)) as bx:
        S = T.alloc_shared((bm, bn), T.float32)
        for i, j in T.Parallel(bm, bn):
            if i < rows and bx * bm + i < M:
                S[i, j] = X[bx * bm + i, j] * 2.0
        for i, j in T.Parallel(bm, bn):
            if bx * bm + i < M:
                out[bx * bm + i, j] = S[i, j] + 1.0  # parallel-read
    return out


def test_parallel_read_of_rows_never_written_names_the_element_and_loop_values():
    X = torch.randn(8, 8)
    with pytest.raises(UninitializedReadError) as info:
        half_written(X, rows=2)
    err = info.value
    assert (err.buffer, err.index, err.block, err.region) == ("S", (2, 0), (0,), None)
    assert err.loop == {"i": 2, "j": 0} and err.lineno == _line("parallel-read")
    assert (
        "S[2, 0] (shared buffer of shape (4, 8)) is read before anything wrote it in block (0,), i = 2"
        in str(err)
    )


@pytest.mark.parametrize("M", [1, 3, 4, 10])
def test_guarded_parallel_reads_of_written_rows_run(M):
    X = torch.randn(M, 8)
    torch.testing.assert_close(half_written(X, rows=4), X * 2.0 + 1.0)


@tile_nb.jit
def edge_tile(X, block: int = 16):
    N = T.dynamic('N')
    X: T.Tensor[[N], T.float32]
    out = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        S = T.alloc_shared((block,), T.float32)
        for i in T.Parallel(block):
            if bx * block + i < N:
                S[i] = X[bx * block + i] + 1.0
        T.copy(S, out[bx * block])  # copy-out
    return out


@pytest.mark.parametrize("N", [1, 15, 16, 37])
def test_copy_out_of_a_tile_written_only_inside_the_tensor_is_fine(N):
    # At the last block only the in-range part of S is written; the copy stores only that part (guarded edge),
    # so nothing unwritten is read. One compiled kernel serves every N (a dynamic dim).
    X = torch.randn(N)
    torch.testing.assert_close(edge_tile(X), X + 1.0)


@tile_nb.jit
def edge_tile_short(X, block: int = 16, short: int = 3):
    N = T.dynamic('N')
    X: T.Tensor[[N], T.float32]
    out = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        S = T.alloc_shared((block,), T.float32)
        for i in T.Parallel(block):
            if bx * block + i < N - short:
                S[i] = X[bx * block + i]
        T.copy(S, out[bx * block])  # copy-short
    return out


def test_copy_out_of_a_tile_missing_elements_inside_the_tensor_is_reported():
    with pytest.raises(UninitializedReadError) as info:
        edge_tile_short(torch.randn(37))
    err = info.value
    assert (err.buffer, err.index, err.block, err.op, err.count) == ("S", (2,), (2,), "T.copy", 3)
    assert err.region == ("0:16",) and err.lineno == _line("copy-short")


@tile_nb.jit
def first_block_only(X, n: int = 8):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    out = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, n)) as bx:
        S = T.alloc_shared((n,), T.float32)
        if bx == 0:
            T.copy(X[0], S)
        for i in T.Parallel(n):
            if bx * n + i < N:
                out[bx * n + i] = S[i]  # other-blocks
    return out


def test_writes_of_one_block_do_not_count_for_the_next():
    # Block 0 fills S; block 1 reads its own S, which nothing wrote (on the GPU: another CTA's shared memory).
    with pytest.raises(UninitializedReadError) as info:
        first_block_only(torch.randn(16))
    assert info.value.block == (1,) and info.value.lineno == _line("other-blocks")
    X = torch.randn(5)
    torch.testing.assert_close(first_block_only(X), X)  # one block: fine


@tile_nb.jit
def scalar_reads(X, init: bool = True):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    out = T.empty((1,), T.float32)
    with T.Kernel(1) as bx:
        total = T.alloc_var(T.float32)
        if init:
            total = 0.0
        for k in T.serial(N):
            total = total + X[k]  # var-read
        out[0] = total + T.cast(bx, T.float32)
    return out


def test_block_level_read_of_a_var_never_set_is_reported():
    X = torch.randn(7)
    with pytest.raises(UninitializedReadError) as info:
        scalar_reads(X, init=False)
    err = info.value
    assert (err.buffer, err.index, err.scope) == ("total", (0,), "local.var")
    assert err.lineno == _line("var-read") and "var buffer of shape (1,)" in str(err)
    torch.testing.assert_close(scalar_reads(X), X.sum().reshape(1), rtol=1e-5, atol=1e-5)


@tile_nb.jit
def local_parts(X, fill_all: bool = True):
    N = T.const('N')
    X: T.Tensor[[N, 4], T.float32]
    out = T.empty((N,), T.float32)
    with T.Kernel(N) as bx:
        L = T.alloc_local((4,), T.float32)
        for j in T.serial(3):
            L[j] = X[bx, j]
        if fill_all:
            L[3] = X[bx, 3]
        out[bx] = L[0] + L[1] + L[2] + L[3]  # local-read
    return out


def test_local_buffer_element_never_written_is_reported():
    X = torch.randn(3, 4)
    with pytest.raises(UninitializedReadError) as info:
        local_parts(X, fill_all=False)
    assert (info.value.buffer, info.value.index, info.value.block) == ("L", (3,), (0,))
    assert info.value.lineno == _line("local-read")
    torch.testing.assert_close(local_parts(X), X.sum(dim=1), rtol=1e-5, atol=1e-5)


@tile_nb.jit
def shared_atomic(X, clear: bool = True, n: int = 8):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    out = T.empty((T.ceildiv(N, n),), T.float32)
    with T.Kernel(T.ceildiv(N, n)) as bx:
        acc = T.alloc_shared((1,), T.float32)
        if clear:
            T.clear(acc)
        for i in T.Parallel(n):
            if bx * n + i < N:
                T.atomic_add(acc[0], X[bx * n + i])  # atomic
        out[bx] = acc[0]
    return out


def test_atomic_add_into_shared_memory_never_written_is_reported():
    X = torch.randn(11)
    with pytest.raises(UninitializedReadError) as info:
        shared_atomic(X, clear=False)
    assert (info.value.buffer, info.value.index, info.value.block) == ("acc", (0,), (0,))
    assert info.value.lineno == _line("atomic")
    expected = torch.stack([X[:8].sum(), X[8:].sum()])
    torch.testing.assert_close(shared_atomic(X), expected, rtol=1e-5, atol=1e-5)


@tile_nb.jit
def print_unwritten(X):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    with T.Kernel(1):
        S = T.alloc_shared((4,), T.float32)
        S[0] = X[0]
        T.print(S)  # print-unwritten


def test_print_of_a_tile_with_unwritten_elements_is_reported(capsys):
    with pytest.raises(UninitializedReadError) as info:
        print_unwritten(torch.randn(3))
    err = info.value
    assert (err.buffer, err.index, err.op, err.count) == ("S", (1,), "T.print", 3)
    assert err.lineno == _line("print-unwritten")
    assert capsys.readouterr().out == ""


def test_error_pickles_with_its_fields():
    with pytest.raises(UninitializedReadError) as info:
        half_written(torch.randn(8, 8), rows=2)
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.buffer, again.index, again.block, again.loop, again.lineno) == (
        "S", (2, 0), (0,), {"i": 2, "j": 0}, _line("parallel-read"))
    assert str(again) == str(info.value)


def test_a_buffer_allocated_outside_the_grid_starts_unwritten_in_every_block():
    from tvm.script import tirx as TS

    from tile_nb import interp

    @TS.prim_func
    def outside(a: TS.handle, b: TS.handle):
        A = TS.match_buffer(a, (2,), "float32")
        B = TS.match_buffer(b, (2,), "float32")
        S = TS.alloc_buffer((1,), "float32", scope="shared")
        bx = TS.launch_thread("blockIdx.x", 2)
        if bx == 0:
            S[0] = A[0]
        B[bx] = S[0]

    with pytest.raises(UninitializedReadError) as info:
        interp.run(outside, [torch.randn(2), torch.zeros(2)])
    assert (info.value.buffer, info.value.block) == ("S", (1,))

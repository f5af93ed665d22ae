"""`T.gemm_sp` (language/sparse.py): a GEMM with a 2:4 sparse A given as its kept values and ordered metadata
(4 bits per group, little-endian in each metadata integer: bits 1:0 the first kept position, 3:2 the second),
against torch's dense product on the interpreter and (marked gpu) on CUDA, at shapes that are not multiples of
the tiles, for float16, int8 and float32 values, int16 / int32 metadata, and transposed operands."""
import pytest
import torch
from kernels.cuda import ptxas_report

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DSLError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def semi_sparse(m, k, dtype, seed=0):
    """A dense [m, k] matrix keeping 2 of every 4 values (1 of 2 for float32), nonzero where kept."""
    g = torch.Generator().manual_seed(seed)
    kept, group = (1, 2) if dtype == torch.float32 else (2, 4)
    if dtype.is_floating_point:
        dense = torch.randn(m, k, generator=g) + 3 * torch.sign(torch.randn(m, k, generator=g))
    else:
        dense = torch.randint(1, 60, (m, k), generator=g) * (torch.randint(0, 2, (m, k), generator=g) * 2 - 1)
    keep = torch.rand(m, k // group, group, generator=g).argsort(-1)[..., :kept].sort(-1).values
    mask = torch.zeros(m, k // group, group, dtype=torch.bool).scatter_(-1, keep, True).view(m, k)
    return (dense * mask).to(dtype), keep


def compress(dense, keep, meta_dtype):
    """The kept values in order and their metadata, written here from the format's definition."""
    m, k = dense.shape
    kept = keep.shape[-1]
    group = 4 if kept == 2 else 2
    values = dense.view(m, k // group, group).gather(-1, keep).reshape(m, k * kept // group)
    if kept == 2:
        chunks = keep[..., 0] | (keep[..., 1] << 2)
    else:  # float32: the 4 bits of a group of four halves, 0b0100 (first of the pair) or 0b1110 (second)
        chunks = torch.where(keep[..., 0] == 0, 0b0100, 0b1110)
    per = torch.iinfo(meta_dtype).bits // 4
    chunks = chunks.view(m, -1, per).to(torch.int64)
    meta = sum(chunks[..., q] << (4 * q) for q in range(per))
    bits = torch.iinfo(meta_dtype).bits
    meta = torch.where(meta >= 2 ** (bits - 1), meta - 2 ** bits, meta)  # two's complement
    return values.contiguous(), meta.to(meta_dtype)


@tile_nb.jit
def gemm_sp_kernel(A_sparse, E, B, dtype: T.dtype = T.float16, e_dtype: T.dtype = T.int16,
                   acc: T.dtype = T.float32, block_M: int = 32, block_N: int = 32, block_K: int = 64,
                   transpose_A: bool = False, transpose_E: bool = False, threads: int = 128):
    """C = dense(A_sparse, E) @ B, tilelang's example_gemm_sp kernel in tile_nb's in-body form."""
    M, N, K = T.const("M, N, K")
    e = 32 // 4 * 4 if e_dtype == T.int32 else 16 // 4 * 4  # dense columns per metadata integer
    e = e if dtype.bits < 32 else e // 2
    A_sparse: T.Tensor[[K // 2, M] if transpose_A else [M, K // 2], dtype]
    E: T.Tensor[[K // e, M] if transpose_E else [M, K // e], e_dtype]
    B: T.Tensor[[K, N], dtype]
    C = T.empty((M, N), acc)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_K // 2, block_M) if transpose_A else (block_M, block_K // 2), dtype)
        E_s = T.alloc_shared((block_K // e, block_M) if transpose_E else (block_M, block_K // e), e_dtype)
        B_s = T.alloc_shared((block_K, block_N), dtype)
        C_l = T.alloc_fragment((block_M, block_N), acc)
        T.clear(C_l)
        for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            if transpose_A:
                T.copy(A_sparse[ko * block_K // 2, by * block_M], A_s)
            else:
                T.copy(A_sparse[by * block_M, ko * block_K // 2], A_s)
            if transpose_E:
                T.copy(E[ko * block_K // e, by * block_M], E_s)
            else:
                T.copy(E[by * block_M, ko * block_K // e], E_s)
            T.copy(B[ko * block_K, bx * block_N], B_s)
            T.gemm_sp(A_s, E_s, B_s, C_l, transpose_A=transpose_A, transpose_E=transpose_E)
        T.copy(C_l, C[by * block_M, bx * block_N])
    return C


CASES = {  # values, metadata, accumulator, tolerance
    "float16": (torch.float16, torch.int16, T.float32, 1e-2),
    "int8": (torch.int8, torch.int32, T.int32, 0),
    "float32": (torch.float32, torch.int16, T.float32, 1e-4),
}


def _run(backend, case, m, n, k, transpose_A=False, transpose_E=False, seed=0, **kw):
    dtype, meta_dtype, acc, tol = CASES[case]
    dense, keep = semi_sparse(m, k, dtype, seed)
    values, meta = compress(dense, keep, meta_dtype)
    if transpose_A:
        values = values.T.contiguous()
    if transpose_E:
        meta = meta.T.contiguous()
    g = torch.Generator().manual_seed(seed + 1)
    b = (torch.randn(k, n, generator=g) if dtype.is_floating_point else
         torch.randint(-60, 60, (k, n), generator=g)).to(dtype)
    c = gemm_sp_kernel(values.to(backend), meta.to(backend), b.to(backend), dtype=getattr(T, case),
                       e_dtype=getattr(T, str(meta_dtype).split(".")[1]), acc=acc, transpose_A=transpose_A,
                       transpose_E=transpose_E, **kw).cpu()
    ref = dense.double() @ b.double()
    if tol == 0:
        assert torch.equal(c, ref.to(c.dtype))
    else:
        torch.testing.assert_close(c.double(), ref, rtol=tol, atol=tol * k ** 0.5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("m, n, k", [(40, 50, 96), (1, 1, 32), (64, 64, 128)])
def test_gemm_sp_matches_the_dense_product(backend, case, m, n, k):
    _run(backend, case, m, n, k)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transpose_A, transpose_E", [(True, False), (False, True), (True, True)])
def test_transposed_values_and_metadata(backend, transpose_A, transpose_E):
    _run(backend, "float16", 40, 24, 64, transpose_A, transpose_E)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_core_tile_sizes(backend):
    """tilelang's example's tiles (128 x 128 x 64, 128 threads): on sm_90a a wgmma on the expanded tile."""
    _run(backend, "float16", 200, 130, 192, block_M=128, block_N=128, block_K=64)


def test_the_cuda_source_expands_into_shared_memory_and_builds(tmp_path):
    dense, keep = semi_sparse(256, 256, torch.float16)
    values, meta = compress(dense, keep, torch.int16)
    b = torch.randn(256, 256).half()
    kernel = gemm_sp_kernel.compile(values, meta, b, block_M=128, block_N=128, block_K=64, target="sm_90a")
    assert "wgmma" in kernel.cuda_source
    ptxas_report(kernel.cuda_source, "sm_90a", tmp_path)
    plan = "\n".join(gemm_sp_kernel.specialize(values, meta, b).attrs["tile_nb.hints"])
    assert "expanded to a dense shared tile" in plan


@pytest.mark.parametrize("call, message", [
    ("T.gemm_sp(A_s, E_s, B_s, C_l, k_pack=2)", "T.gemm_sp\\(k_pack=...\\)"),
    ("T.gemm_sp(A_s, B_s, B_s, C_l)", "E holds float16"),
    ("T.gemm_sp(A_s, E_w, B_s, C_l)", "does not describe A_sparse"),
    ("T.gemm_sp(A, E_s, B_s, C_l)", "A_sparse must be a shared or fragment tile"),
])
def test_misuse_is_refused_at_the_line(call, message):
    from tile_nb.frontend.source import run_source

    source = f"""
import tile_nb
import tile_nb.language as T

@tile_nb.jit
def bad(A):
    A: T.Tensor[[32, 32], T.float16]
    with T.Kernel(1, threads=128):
        A_s = T.alloc_shared((32, 32), T.float16)
        E_s = T.alloc_shared((32, 4), T.int16)
        E_w = T.alloc_shared((32, 8), T.int16)
        B_s = T.alloc_shared((64, 32), T.float16)
        C_l = T.alloc_fragment((32, 32), T.float32)
        {call}
"""
    ns = run_source(source, {}, filename="gemm_sp_bad.py")
    with pytest.raises(DSLError, match=message) as info:
        ns["bad"](torch.randn(32, 32).half())
    assert info.value.lineno == 14

"""4-bit integer tensors (language/packed.py): `T.Tensor((M, K), T.int4)` parameters passed as packed bytes
(two values per byte along the last dim, low nibble first), T.int4 / T.uint4 tiles, T.copy that unpacks,
element reads, and T.gemm on int4 tiles, against torch on the interpreter and (marked gpu) on CUDA, at shapes
that are not multiples of the tiles and at sizes of 1. The CPU tier also reads the CUDA the lowering makes."""
import pytest
import torch
from kernels.cuda import ptxas_report

import tile_nb
import tile_nb.language as T
from tile_nb.errors import AnnotationError, DSLError, DtypeMismatchError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
FOUR_BIT = {"int4": (-8, 8), "uint4": (0, 16)}


def pack(values: torch.Tensor, dtype: str = "int4") -> torch.Tensor:
    """Logical 4-bit values (int8, last dim even) as bytes, column 2j in the low nibble of byte j: the
    packing tilelang's int4 GEMM example uses, written here independently of tile_nb. int4 values travel as
    int8 bytes, uint4 ones as uint8."""
    v = values.to(torch.int16) & 15
    packed = (v[..., 0::2] | (v[..., 1::2] << 4)).to(torch.uint8)
    return packed.view(torch.int8) if dtype == "int4" else packed


def four_bit(shape, dtype="int4", seed=0) -> torch.Tensor:
    low, high = FOUR_BIT[dtype]
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int8)


@tile_nb.jit
def gemm_4bit(A, B, dtype: T.dtype = T.int4, block_M: int = 32, block_N: int = 32, block_K: int = 64,
              threads: int = 128):
    """C = A @ B.T of two 4-bit matrices, int32 sums (tilelang's int4 GEMM in tile_nb's in-body form)."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], dtype]
    B: T.Tensor[[N, K], dtype]
    C = T.empty((M, N), T.int32)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), dtype)
        B_s = T.alloc_shared((block_N, block_K), dtype)
        C_l = T.alloc_fragment((block_M, block_N), T.int32)
        T.clear(C_l)
        for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * block_M, ko * block_K], A_s)
            T.copy(B[bx * block_N, ko * block_K], B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=True)
        T.copy(C_l, C[by * block_M, bx * block_N])
    return C


@tile_nb.jit
def dequantize(W, S, block_N: int = 16, block_K: int = 32):
    """Y[n, k] = W[n, k] * S[n]: element reads of an int4 tensor in a T.Parallel loop."""
    N, K = T.const("N, K")
    W: T.Tensor[[N, K], T.int4]
    S: T.Tensor[[N], T.float16]
    Y = T.empty((N, K), T.float16)
    with T.Kernel(T.ceildiv(K, block_K), T.ceildiv(N, block_N)) as (bk, bn):
        for i, j in T.Parallel(block_N, block_K):
            n, k = bn * block_N + i, bk * block_K + j
            if n < N and k < K:
                Y[n, k] = T.Cast(T.float16, W[n, k]) * S[n]
    return Y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["int4", "uint4"])
@pytest.mark.parametrize("M, N, K", [(40, 50, 96), (1, 1, 2), (33, 7, 130)])
def test_gemm_of_4bit_matrices_matches_torch(backend, dtype, M, N, K):
    a, b = four_bit((M, K), dtype, seed=1), four_bit((N, K), dtype, seed=2)
    c = gemm_4bit(pack(a, dtype).to(backend), pack(b, dtype).to(backend), dtype=getattr(T, dtype))
    assert torch.equal(c.cpu(), a.int() @ b.int().T)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_at_tensor_core_tile_sizes_matches_torch(backend):
    """128 x 128 x 64 tiles, tilelang's example's: on sm_90a an int8 wgmma over the unpacked tiles."""
    a, b = four_bit((200, 320), seed=3), four_bit((130, 320), seed=4)
    c = gemm_4bit(pack(a).to(backend), pack(b).to(backend), block_M=128, block_N=128, block_K=64)
    assert torch.equal(c.cpu(), a.int() @ b.int().T)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("N, K", [(20, 70), (1, 2)])
def test_element_reads_unpack_each_value(backend, N, K):
    w = four_bit((N, K), seed=5)
    s = torch.rand(N, generator=torch.Generator().manual_seed(6)).half() + 0.5
    y = dequantize(pack(w).to(backend), s.to(backend))
    assert torch.equal(y.cpu(), w.half() * s[:, None])


def test_const_dim_is_read_from_the_packed_tensor():
    """K is twice the bytes of the last dim: no K= keyword needed."""
    a, b = four_bit((3, 6)), four_bit((2, 6))
    from tvm.tirx.buffer import is_buffer_var

    func = gemm_4bit.specialize(pack(a), pack(b))
    shapes = {p.name: [int(d) for d in p.shape] for p in func.params if is_buffer_var(p)}
    assert shapes["A"] == [3, 3] and shapes["B"] == [2, 3]  # the bytes: K // 2 of them
    assert [3, 2] in shapes.values()  # C


def test_cuda_unpacks_into_shared_and_runs_an_int8_wgmma(tmp_path):
    a, b = pack(four_bit((256, 256))), pack(four_bit((256, 256)))
    src = gemm_4bit.compile(a, b, block_M=128, block_N=128, block_K=64, target="sm_90a").cuda_source
    assert "_s8_s8" in src  # wgmma .s8.s8 on the int8 tiles
    body = src.split('extern "C" __global__')[-1]
    assert "signed char* __restrict__ A_ptr" in body and "& 15)" in body
    ptxas_report(src, "sm_90a", tmp_path)


def test_bytes_of_the_wrong_dtype_are_refused_with_a_view_hint():
    a = pack(four_bit((4, 8)))
    with pytest.raises(DtypeMismatchError, match="passed as its bytes") as err:
        gemm_4bit(a.view(torch.uint8), a)
    assert "A.view(torch.int8)" in err.value.hint


def test_odd_last_dim_is_refused():
    @tile_nb.jit
    def odd(A):
        A: T.Tensor[[4, 5], T.int4]
        with T.Kernel(1):
            pass

    with pytest.raises(AnnotationError, match="per byte along its last dim, which must be even; got 5"):
        odd(torch.zeros(4, 2, dtype=torch.int8))


def test_dynamic_last_dim_is_refused():
    @tile_nb.jit
    def dyn(A):
        K = T.dynamic("K")
        A: T.Tensor[[4, K], T.int4]
        with T.Kernel(1):
            pass

    with pytest.raises(AnnotationError, match="must be an int or a T.const"):
        dyn(torch.zeros(4, 2, dtype=torch.int8))


def test_writing_a_packed_tensor_is_refused_at_the_copy():
    @tile_nb.jit
    def write(A):
        A: T.Tensor[[4, 8], T.int4]
        with T.Kernel(1):
            t = T.alloc_shared((4, 8), T.int4)
            T.clear(t)
            T.copy(t, A[0, 0])

    with pytest.raises(DSLError, match="reads packed 4-bit tensors, it does not write them") as err:
        write(torch.zeros(4, 4, dtype=torch.int8))
    assert err.value.lineno is not None


def test_an_int4_output_is_refused():
    @tile_nb.jit
    def make(N: int):
        Y = T.empty((N,), T.int4)
        with T.Kernel(1):
            pass
        return Y

    with pytest.raises(DSLError, match="int4"):
        make(N=4)


def test_an_int4_out_idx_output_is_refused():
    import tile_nb.tilelang as tilelang

    @tilelang.jit(out_idx=[-1])
    def factory(N):
        @T.prim_func
        def main(A: T.Tensor((N,), T.int8), B: T.Tensor((N,), T.int4)):
            with T.Kernel(1):
                pass
        return main

    with pytest.raises(AnnotationError, match="out_idx names 'B', a T.int4 tensor"):
        factory(8)(torch.zeros(8, dtype=torch.int8))


@tile_nb.jit
def mix(W):
    """Element reads of an int4 tensor in arithmetic, T.max and reflected operators."""
    N, K = T.const("N, K")
    W: T.Tensor[[N, K], T.int4]
    Y = T.empty((N, K), T.int32)
    with T.Kernel(1, threads=128):
        for i, j in T.Parallel(N, K):
            Y[i, j] = T.max(W[i, j], 0) + W[i, j] * 2 - (3 - W[i, j])
    return Y


@pytest.mark.parametrize("backend", BACKENDS)
def test_element_reads_in_expressions(backend):
    w = four_bit((3, 10), seed=7)
    y = mix(pack(w).to(backend)).cpu()
    assert torch.equal(y, w.int().clamp(min=0) + w.int() * 2 - (3 - w.int()))

"""`tilelang.tools.Analyzer` on tile_nb: FLOPs and global bytes of elaborated kernels, against counts worked
out by hand here (a GEMM at sizes that are not multiples of its tiles, an exact one, a convolution through
T.im2col, an `if`, a T.Parallel loop of element loads), the roofline time from the carver device's peaks,
what it accepts, and its refusals (a dynamic dim, a bad device)."""
import os

import pytest
import torch

import tile_nb
import tile_nb.language as T
import tile_nb.tilelang as tl
from tile_nb.tilelang.carver.arch import CUDA
from tile_nb.tilelang.tools import AnalysisResult, Analyzer


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@tl.jit
def gemm(A, B, block_M: int = 64, block_N: int = 64, block_K: int = 32, out_dtype: T.dtype = T.float32):
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[N, K], T.float16]
    C = T.empty([M, N], out_dtype)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        a_s = T.alloc_shared((block_M, block_K), T.float16)
        b_s = T.alloc_shared((block_N, block_K), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * block_M, k * block_K], a_s)
            T.copy(B[bx * block_N, k * block_K], b_s)
            T.gemm(a_s, b_s, acc, transpose_B=True)
        T.copy(acc, C[by * block_M, bx * block_N])
    return C


def test_gemm_at_sizes_that_are_not_multiples_of_the_tiles():
    M, N, K, bm, bn, bk = 300, 200, 100, 64, 64, 32
    result = Analyzer.analysis(gemm.get_tir(T.Tensor((M, K), T.float16), T.Tensor((N, K), T.float16),
                                            block_M=bm, block_N=bn, block_K=bk), None)
    blocks, k_steps = 4 * 5, 4                 # ceil(200/64) x ceil(300/64) blocks, ceil(100/32) K steps
    assert result.blocks == blocks and result.gemm_calls == blocks * k_steps
    assert result.total_flops == blocks * k_steps * 2 * 64 * 64 * 32 == 20_971_520   # whole tiles
    reads = blocks * k_steps * (64 * 32 + 64 * 32) * 2                            # A and B tiles, fp16
    writes = blocks * 64 * 64 * 4                                                 # C tiles, fp32
    assert (result.global_read_bytes, result.global_write_bytes) == (reads, writes)
    assert result.total_global_bytes == reads + writes
    assert result.estimated_time is None and result.expected_tflops is None    # no device given


def test_exact_gemm_counts_two_mnk_and_the_roofline_time():
    M = N = K = 256
    arch = CUDA("sm_90a")    # no GPU: a reference H100 SXM, 989 TFLOP/s and 3350 GB/s
    func = gemm.get_tir(T.Tensor((M, K), T.float16), T.Tensor((N, K), T.float16), block_M=128, block_N=128,
                        block_K=64, out_dtype=T.float16)
    result = Analyzer.analysis(func, arch)
    assert isinstance(result, AnalysisResult) and result.total_flops == 2 * M * N * K
    reads = 4 * 4 * (128 * 64 * 2) * 2         # 4 blocks x 4 K steps x (A + B tile) x 2 bytes
    assert result.total_global_bytes == reads + M * N * 2
    assert (result.expected_tflops, result.expected_bandwidth_GBps) == (989.0, 3350.0)
    want = max(2 * M * N * K / 989e12, (reads + M * N * 2) / 3350e9)
    assert result.estimated_time == pytest.approx(want)
    assert Analyzer.analysis(tile_nb.jit(gemm.__wrapped__).specialize(
        torch.empty(M, K, dtype=torch.float16, device="meta"),
        torch.empty(N, K, dtype=torch.float16, device="meta"),
        block_M=128, block_N=128, block_K=64, out_dtype=T.float16), arch) == result


@tl.jit
def conv(data, weight, S: int = 1, D: int = 1, P: int = 1, block_M: int = 64, block_N: int = 32,
         block_K: int = 48):
    N, H, W, C, F, K = T.const("N, H, W, C, F, K")
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1
    data: T.Tensor[[N, H, W, C], T.float16]
    weight: T.Tensor[[K, K, C, F], T.float16]
    out = T.empty((N, OH, OW, F), T.float16)
    with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(N * OH * OW, block_M), threads=128) as (bx, by):
        d_s = T.alloc_shared((block_M, block_K), T.float16)
        w_s = T.alloc_shared((block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        w_flat = T.Tensor((K * K * C, F), T.float16, weight.data)
        out_flat = T.Tensor((N * OH * OW, F), T.float16, out.data)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K * K * C, block_K), num_stages=2):
            T.im2col(data, d_s, by, k, K, S, D, P)
            T.copy(w_flat[k * block_K, bx * block_N], w_s)
            T.gemm(d_s, w_s, acc)
        T.copy(acc, out_flat[by * block_M, bx * block_N])
    return out


def test_convolution_through_im2col():
    N, H, W, C, F, K = 2, 9, 7, 16, 40, 3            # stride 2: 5 x 4 outputs per image
    func = conv.get_tir(T.Tensor((N, H, W, C), T.float16), T.Tensor((K, K, C, F), T.float16), S=2)
    result = Analyzer.analysis(func, CUDA("sm_80"))
    rows, cols, depth = N * 5 * 4, F, K * K * C        # the GEMM: 40 x 40 x 144
    blocks = -(-cols // 32) * -(-rows // 64)         # 2 x 1
    k_steps = -(-depth // 48)                        # 3
    assert result.total_flops == blocks * k_steps * 2 * 64 * 32 * 48
    # per block and K step: the im2col gather reads 64 x 48 elements (padding included), the weights a
    # 48 x 32 tile; each block writes one 64 x 32 output tile
    assert result.global_read_bytes == blocks * k_steps * (64 * 48 + 48 * 32) * 2
    assert result.global_write_bytes == blocks * 64 * 32 * 2


@tl.jit
def gather_rows(X, idx, rows: int = 16, cols: int = 32):
    M, N, R = T.const("M, N, R")
    X: T.Tensor[[M, N], T.float32]
    idx: T.Tensor[[R], T.int32]
    Y = T.empty([R, N], T.float32)
    with T.Kernel(T.ceildiv(R, rows), threads=128) as bx:
        t = T.alloc_shared((rows, cols), T.float32)
        for j in T.serial(T.ceildiv(N, cols)):
            for r, c in T.Parallel(rows, cols):
                t[r, c] = X[idx[bx * rows + r], j * cols + c]     # two global loads per element
            if bx == 0:
                T.copy(t, Y[bx * rows, j * cols])                 # the larger branch: a whole tile
            else:
                for r, c in T.Parallel(rows, 4):
                    Y[bx * rows + r, j * cols + c] = t[r, c]
    return Y


def test_element_loads_and_the_larger_branch():
    func = gather_rows.get_tir(T.Tensor((50, 64), T.float32), T.Tensor((40,), T.int32))
    result = Analyzer.analysis(func, None)
    blocks, steps = 3, 2
    assert result.total_flops == 0 and result.gemm_calls == 0
    assert result.global_read_bytes == blocks * steps * 16 * 32 * (4 + 4)
    assert result.global_write_bytes == blocks * steps * 16 * 32 * 4


@tl.jit
def dynamic_rows(X, block: int = 64):
    M = T.dynamic("M")
    X: T.Tensor[[M, 64], T.float32]
    Y = T.empty([M, 64], T.float32)
    with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
        t = T.alloc_shared((block, 64), T.float32)
        T.copy(X[bx * block, 0], t)
        T.copy(t, Y[bx * block, 0])
    return Y


def test_refusals_name_the_problem():
    func = dynamic_rows.get_tir(T.Tensor((100, 64), T.float32))
    with pytest.raises(ValueError, match=r"Analyzer: the grid extent blockIdx.x is .*M.*not a constant"):
        Analyzer.analysis(func, None)
    exact = gemm.get_tir(T.Tensor((64, 64), T.float16), T.Tensor((64, 64), T.float16))
    with pytest.raises(TypeError, match=r"analysis\(fn, device\): expected a tilelang.carver.arch.CUDA or "
                                        r"None, got str"):
        Analyzer.analysis(exact, "cuda")
    with pytest.raises(TypeError, match="expected a PrimFunc .* got int"):
        Analyzer.analysis(3, None)


def test_an_irmodule_and_a_prim_func_definition():
    import tvm

    exact = gemm.get_tir(T.Tensor((64, 64), T.float16), T.Tensor((64, 64), T.float16))
    assert Analyzer.analysis(tvm.IRModule({"main": exact}), None).total_flops == 2 * 64 ** 3

    @T.prim_func
    def scaled(A: T.Tensor((64, 32), T.float16), B: T.Tensor((32, 48), T.float16),
               C: T.Tensor((64, 48), T.float32)):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 32), T.float16)
            b = T.alloc_shared((32, 48), T.float16)
            c = T.alloc_fragment((64, 48), T.float32)
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, c, clear_accum=True)
            T.copy(c, C)

    result = Analyzer.analysis(scaled, None)
    assert result.total_flops == 2 * 64 * 48 * 32
    assert result.total_global_bytes == (64 * 32 + 32 * 48) * 2 + 64 * 48 * 4


@pytest.mark.gpu
def test_on_the_gpu_the_device_peaks_are_the_gpus(monkeypatch):
    monkeypatch.undo()      # the autouse no_gpu fixture: see the real device
    if os.environ.get("TILE_NB_ARCH"):  # e.g. compute_80 on an H100: the target, not this device
        pytest.skip(f"TILE_NB_ARCH={os.environ['TILE_NB_ARCH']} picks the arch: CUDA('cuda') describes that "
                    "target's reference GPU, not the device this test asserts")
    arch = CUDA("cuda")
    result = Analyzer.analysis(gemm.get_tir(T.Tensor((512, 256), T.float16), T.Tensor((384, 256), T.float16)),
                               arch)
    assert result.total_flops == 2 * 512 * 384 * 256
    assert arch.has_device and (result.expected_bandwidth_GBps is None) == (arch.bandwidth_GBps is None)

"""The seed GEMM compiled through tile_nb.lower + TVM and run on a CUDA device, checked against float64 torch."""
import pytest

torch = pytest.importorskip("torch")

import tile_nb
import tile_nb.language as T

pytestmark = pytest.mark.gpu


@tile_nb.jit
def gemm(A, B, C, in_dtype: T.dtype = T.float16, out_dtype: T.dtype = T.float32, block_M: int = 128,
         block_N: int = 128, block_K: int = 32, threads: int = 128, stages: int = 3, trans_A: bool = False,
         trans_B: bool = False):
    M, N, K = T.const('M, N, K')
    if trans_A:
        A: T.Tensor[[K, M], in_dtype]
    else:
        A: T.Tensor[[M, K], in_dtype]
    if trans_B:
        B: T.Tensor[[N, K], in_dtype]
    else:
        B: T.Tensor[[K, N], in_dtype]
    C: T.Tensor[[M, N], out_dtype]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_K, block_M) if trans_A else (block_M, block_K), in_dtype)
        B_shared = T.alloc_shared((block_N, block_K) if trans_B else (block_K, block_N), in_dtype)
        C_local = T.alloc_fragment((block_M, block_N), out_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
            if trans_A:
                T.copy(A[k * block_K, bx * block_M], A_shared)
            else:
                T.copy(A[bx * block_M, k * block_K], A_shared)
            if trans_B:
                T.copy(B[by * block_N, k * block_K], B_shared)
            else:
                T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local, transpose_A=trans_A, transpose_B=trans_B)
        T.copy(C_local, C[bx * block_M, by * block_N])


_DT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def run_case(M, N, K, in_dtype="float16", out_dtype="float32", trans_A=False, trans_B=False, path="auto",
             **cfg):
    """path: "auto" (wgmma where eligible on sm_90a), "mma" (mma.sync forced) -- via a lowering attribute."""
    from tile_nb.runtime import compile as rt_compile

    dev = "cuda"
    a = torch.randn((K, M) if trans_A else (M, K), device=dev).to(_DT[in_dtype])
    b = torch.randn((N, K) if trans_B else (K, N), device=dev).to(_DT[in_dtype])
    c = torch.full((M, N), float("nan"), device=dev, dtype=_DT[out_dtype])  # poison: every element written
    func = gemm.specialize(a, b, c, in_dtype=getattr(T, in_dtype), out_dtype=getattr(T, out_dtype),
                           trans_A=trans_A, trans_B=trans_B, **cfg)
    if path == "mma":
        func = func.with_attr("tile_nb.wgmma", 0)
    rt_compile(func, None)(a, b, c)
    torch.cuda.synchronize()
    a64 = a.double().T if trans_A else a.double()
    b64 = b.double().T if trans_B else b.double()
    ref = a64 @ b64
    assert not torch.isnan(c).any(), "unwritten (NaN) output elements"
    return ((c.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("path", ["auto", "mma"])
@pytest.mark.parametrize("trans_A", [False, True])
@pytest.mark.parametrize("trans_B", [False, True])
def test_transposes(trans_A, trans_B, path):
    assert run_case(512, 384, 256, trans_A=trans_A, trans_B=trans_B, path=path) < 1e-3


@pytest.mark.parametrize("in_dtype,out_dtype,tol", [("float16", "float32", 1e-3), ("float16", "float16", 2e-3),
                                                    ("bfloat16", "float32", 1e-3)])
def test_dtypes(in_dtype, out_dtype, tol):
    assert run_case(512, 512, 512, in_dtype=in_dtype, out_dtype=out_dtype) < tol


@pytest.mark.parametrize("path", ["auto", "mma"])
@pytest.mark.parametrize("trans_A,trans_B", [(False, False), (True, True), (False, True)])
def test_edges(trans_A, trans_B, path):
    assert run_case(1000, 1030, 999, trans_A=trans_A, trans_B=trans_B, path=path) < 1e-3


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_stages(stages):
    assert run_case(640, 768, 1024, stages=stages) < 1e-3


def test_rasterized_grid():
    """16 x 5 CTAs: the grouped CTA order (groups of 8 along x) is active."""
    assert run_case(2048, 640, 256) < 1e-3


@pytest.mark.parametrize("path", ["auto", "mma"])
@pytest.mark.parametrize("trans_B", [False, True])
def test_big_tile_256_threads(path, trans_B):
    cfg = dict(block_N=256, block_K=64, threads=256, trans_B=trans_B, path=path)
    assert run_case(1024, 1280, 512, **cfg) < 1e-3
    assert run_case(1000, 1030, 999, **cfg) < 1e-3

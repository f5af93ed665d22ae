"""`T.cumsum(src, dst=None, dim=0, reverse=False)` (tilelang's scan, issue 31): shared and fragment
tiles, both dims of a 2-d tile, reverse, float32 / float16 / int32, odd shapes, sizes of 1, a dynamic
dim, a separate dst and a region of a larger tile; against torch.cumsum (flipped for reverse) on the
interpreter and (marked gpu) on CUDA. The sm_90a and sm_80 CUDA builds through nvcc; what cannot be
lowered is refused at the user's line."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DSLError
from tile_nb.lower import LoweringError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def chunked_cumsum(a: torch.Tensor, bm: int, bn: int, dim: int, reverse: bool) -> torch.Tensor:
    """torch's cumsum of every [bm, bn] tile of `a` (edge tiles cut short), in float64."""
    a = a.double().cpu()
    out = torch.empty_like(a)
    for i in range(0, a.shape[0], bm):
        for j in range(0, a.shape[1], bn):
            c = a[i:i + bm, j:j + bn]
            out[i:i + bm, j:j + bn] = c.flip(dim).cumsum(dim).flip(dim) if reverse else c.cumsum(dim)
    return out


@tile_nb.jit
def tile_cumsum(
    A,
    B,
    dim: int = 0,
    reverse: bool = False,
    scope: str = "shared",
    tile_dtype: T.dtype = T.float32,
    block_M: int = 16,
    block_N: int = 8,
    dynamic: bool = False,
):
    if dynamic:
        M = T.dynamic("M")
        N = T.const("N")
    else:
        M, N = T.const("M, N")
    A: T.Tensor[[M, N], T.float16]
    B: T.Tensor[[M, N], tile_dtype]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=64) as (bx, by):
        s = T.alloc_shared((block_M, block_N), tile_dtype)
        T.copy(A[by * block_M, bx * block_N], s)
        if scope == "fragment":
            f = T.alloc_fragment((block_M, block_N), tile_dtype)
            T.copy(s, f)
            T.cumsum(f, dim=dim, reverse=reverse)
            T.copy(f, B[by * block_M, bx * block_N])
        else:
            T.cumsum(src=s, dim=dim, reverse=reverse)
            T.copy(s, B[by * block_M, bx * block_N])


def _check_tiles(backend, M, N, dim, reverse, scope, tile_dtype, dynamic=False, block_M=16, block_N=8):
    torch.manual_seed(M * 31 + N)
    a = torch.randn(M, N).half().to(backend)
    dt = torch.float16 if tile_dtype == "float16" else torch.float32
    b = torch.full((M, N), float("nan"), dtype=dt, device=backend)
    tile_cumsum(a, b, dim=dim, reverse=reverse, scope=scope, tile_dtype=tile_dtype, dynamic=dynamic,
                block_M=block_M, block_N=block_N)
    ref = chunked_cumsum(a, block_M, block_N, dim, reverse)
    assert not torch.isnan(b).any(), "unwritten output elements"
    # float32 sums differ from float64 only in rounding; a float16 tile rounds each prefix once (half an ulp)
    tol = dict(atol=1e-5, rtol=1e-5) if dt == torch.float32 else dict(atol=2e-3, rtol=1e-3)
    torch.testing.assert_close(b.double().cpu(), ref.to(dt).double(), **tol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scope", ["shared", "fragment"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_of_tiles_at_odd_shapes(backend, scope, dim, reverse):
    _check_tiles(backend, 37, 21, dim, reverse, scope, "float32")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(1, 1), (1, 21), (37, 1), (32, 16)])
@pytest.mark.parametrize("tile_dtype", ["float32", "float16"])
def test_cumsum_sizes_of_one_and_float16_tiles(backend, shape, tile_dtype):
    for dim in (0, 1):
        _check_tiles(backend, *shape, dim, dim == 1, "shared", tile_dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("block_M,block_N,dim", [(3, 100, 1), (100, 3, 0), (2, 32, 1)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("scope", ["shared", "fragment"])
def test_long_lines_scanned_by_warps(backend, block_M, block_N, dim, reverse, scope):
    """Few long lines: each of the 2 warps scans lines 32 elements at a time (a line of 100: 4 rounds, the
    last one partial; 3 lines: a second pass with one warp idle). [2, 32]: one round per line."""
    _check_tiles(backend, 7, 150, dim, reverse, scope, "float32", block_M=block_M, block_N=block_N)
    _check_tiles(backend, 150, 7, dim, reverse, scope, "float16", block_M=block_M, block_N=block_N)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M", [1, 45])
def test_cumsum_with_a_dynamic_dim(backend, M):
    _check_tiles(backend, M, 19, 0, True, "fragment", "float32", dynamic=True)
    _check_tiles(backend, M, 19, 1, False, "shared", "float32", dynamic=True)


@tile_nb.jit
def chunk_cumsum_1d(A, B, block: int = 64, reverse: bool = False, scope: str = "shared"):
    """tilelang's chunk-local cumsum (examples/gdn/example_cumsum.py): float16 in, float32 out, a (1, block)
    tile scanned along dim 1, or a 1-d float16 tile into a separate float32 dst."""
    N = T.const("N")
    A: T.Tensor[[N], T.float16]
    B: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
        if scope == "row":
            g = T.alloc_shared((1, block), T.float32)
            T.copy(A[bx * block:(bx + 1) * block], g)
            T.cumsum(g, dim=1, reverse=reverse)
            T.copy(g, B[bx * block:(bx + 1) * block])
        else:
            s = T.alloc_shared((block,), T.float16)  # float16 in, float32 out: sums in float32
            d = (
                T.alloc_fragment((block,), T.float32)
                if scope == "fragment"
                else T.alloc_shared((block,), T.float32)
            )
            T.copy(A[bx * block], s)
            T.cumsum(s, d, 0, reverse)
            T.copy(d, B[bx * block])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scope", ["shared", "fragment", "row"])
@pytest.mark.parametrize("N,block", [(200, 64), (1, 64), (7, 1), (50, 16)])
@pytest.mark.parametrize("reverse", [False, True])
def test_chunk_cumsum_1d(backend, scope, N, block, reverse):
    torch.manual_seed(N)
    a = torch.randn(N).half().to(backend)
    b = torch.full((N,), float("nan"), device=backend)
    chunk_cumsum_1d(a, b, block=block, reverse=reverse, scope=scope)
    ref = chunked_cumsum(a[None], 1, block, 1, reverse)[0]
    torch.testing.assert_close(b.double().cpu(), ref, atol=1e-5, rtol=1e-5)


@tile_nb.jit
def region_cumsum(A, B, dim: int = 0, reverse: bool = False, wide: int = 12):
    """A region of a wider shared tile scanned in place (tilelang's strided-region test); the columns past N
    hold a marker that must stay as it is."""
    M, N = T.const("M, N")
    A: T.Tensor[[M, N], T.int32]
    B: T.Tensor[[M, wide], T.int32]
    with T.Kernel(1, threads=32) as _:
        big = T.alloc_shared((M, wide), T.int32)
        for i, j in T.Parallel(M, wide):
            big[i, j] = 7
        T.copy(A, big[0:M, 0:N])
        T.cumsum(src=big[0:M, 0:N], dst=big[0:M, 0:N], dim=dim, reverse=reverse)
        T.copy(big, B)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_of_a_region_in_int32(backend, dim, reverse):
    torch.manual_seed(5)
    M, N = 9, 5
    a = torch.randint(-1000, 1000, (M, N), dtype=torch.int32)
    b = torch.zeros(M, 12, dtype=torch.int32, device=backend)
    region_cumsum(a.to(backend), b, dim=dim, reverse=reverse)
    want = a.flip(dim).cumsum(dim).flip(dim) if reverse else a.cumsum(dim)
    assert torch.equal(b[:, :N].cpu(), want.to(torch.int32))
    assert torch.equal(b[:, N:].cpu(), torch.full((M, 12 - N), 7, dtype=torch.int32))


@tile_nb.jit
def local_cumsum(A, B):
    """A per-thread (T.alloc_local) array: every thread scans its own copy."""
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    B: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=32) as _:
        loc = T.alloc_local((N,), T.float32)
        T.copy(A, loc)
        T.cumsum(loc, dim=0, reverse=True)
        T.copy(loc, B)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("N", [1, 9])
def test_cumsum_of_a_local_array(backend, N):
    a = torch.randn(N).to(backend)
    b = torch.zeros(N).to(backend)
    local_cumsum(a, b)
    torch.testing.assert_close(
        b.double().cpu(), a.double().cpu().flip(0).cumsum(0).flip(0), atol=1e-5, rtol=1e-5
    )


# ---- CUDA builds -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cumsum_builds_for_sm90a_and_sm80(arch, tmp_path):
    from kernels.cuda import ptxas_report

    for kernel, kwargs in (
        (tile_cumsum, dict(M=37, N=21, dim=1, reverse=True, scope="fragment")),
        (tile_cumsum, dict(M=7, N=150, dim=1, block_M=3, block_N=100, tile_dtype="float16")),
        (tile_cumsum, dict(M=37, N=21, dim=0, tile_dtype="float16")),
        (chunk_cumsum_1d, dict(N=200, reverse=True, scope="row")),
        (region_cumsum, dict(M=9, N=5, dim=1)),
        (local_cumsum, dict(N=9)),
    ):
        source = kernel.compile(target=arch, **kwargs).cuda_source
        report = ptxas_report(source, arch, tmp_path, fast_math=False)
        assert "spill" not in report or " 0 bytes spill stores" in report


def test_which_form_scans():
    """scan.py's choice by its step count: one line of 64 by a warp
    (shuffles), 16 lines of 8 by 16 threads."""
    one_line = chunk_cumsum_1d.compile(N=200, scope="row", target="sm_90a").cuda_source
    assert "__shfl_up_sync" in one_line and "tnb_shfl_idx_float32(" in one_line
    short_lines = tile_cumsum.compile(M=16, N=8, dim=1, target="sm_90a").cuda_source
    assert "shfl" not in short_lines


def test_the_scan_is_a_serial_loop_between_barriers():
    """What scan.py builds for a [16, 8] tile along dim 1 with 64 threads: 16 threads each add 8 elements in
    order, the running sum in float32 even for a float16 tile; a barrier before and one after."""
    src = tile_cumsum.compile(M=16, N=8, dim=1, tile_dtype="float16", target="sm_90a").cuda_source
    body = src[src.index("__global__ void"):]
    scan = body[body.index("s_prefix"):]
    assert "float s_prefix" in body and "if (((int)threadIdx.x) < 16)" in scan
    assert "< 8; ++" in scan
    before, after = body[:body.index("s_prefix")], scan
    assert "tnb_cta_sync()" in before[-400:] and "tnb_cta_sync()" in after


# ---- what is refused ---------------------------------------------------------------------------------------

def test_cumsum_of_a_global_tensor_is_refused_at_the_users_line():
    @tile_nb.jit
    def on_global(A):
        A: T.Tensor[[8], T.float32]
        with T.Kernel(1, threads=32) as _:
            T.cumsum(A, dim=0)   # error: in global memory

    with pytest.raises(DSLError, match=r"T.cumsum: src A is in global memory; expected a shared, fragment or "
                                       r"local tile") as info:
        on_global(torch.zeros(8))
    assert "T.cumsum(A, dim=0)" in info.value.source_line()


@pytest.mark.parametrize("dim,dst_shape,message", [
    (2, (4, 8), r"dim must be an int in \[-2, 2\) for a 2-d tile; got 2"),
    (0, (8, 4), r"dst d\[8, 4\] must have the shape of src s\[4, 8\]"),
])
def test_bad_dim_and_dst_shape_are_refused(dim, dst_shape, message):
    @tile_nb.jit
    def bad(A, dim_: int = dim, shape=dst_shape):
        A: T.Tensor[[4, 8], T.float32]
        with T.Kernel(1, threads=32) as _:
            s = T.alloc_shared((4, 8), T.float32)
            d = T.alloc_shared(shape, T.float32)
            T.copy(A, s)
            T.cumsum(s, d, dim=dim_)

    with pytest.raises(DSLError, match=message) as info:
        bad(torch.zeros(4, 8))
    assert "T.cumsum(s, d, dim=dim_)" in info.value.source_line()


def test_cumsum_inside_a_parallel_loop_is_refused_at_the_users_line():
    @tile_nb.jit
    def rows(A):
        A: T.Tensor[[8, 8], T.float32]
        with T.Kernel(1, threads=32) as _:
            s = T.alloc_shared((8, 8), T.float32)
            T.copy(A, s)
            for i in T.Parallel(8):
                T.cumsum(s[i, 0:8], dim=1)
            T.copy(s, A)

    with pytest.raises(LoweringError, match="T.cumsum inside a T.Parallel loop is not supported") as info:
        rows.compile(target="sm_90a")
    assert "T.cumsum(s[i, 0:8], dim=1)" in info.value.source_line()


def test_cumsum_of_a_gemm_accumulator_is_refused_on_the_gpu_at_the_users_line():
    @tile_nb.jit
    def acc_scan(A, B, C):
        A: T.Tensor[[64, 32], T.float16]
        B: T.Tensor[[32, 64], T.float16]
        C: T.Tensor[[64, 64], T.float32]
        with T.Kernel(1, threads=128) as _:
            a = T.alloc_shared((64, 32), T.float16)
            b = T.alloc_shared((32, 64), T.float16)
            c = T.alloc_fragment((64, 64), T.float32)
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, c, clear_accum=True)
            T.cumsum(c, dim=1)
            T.copy(c, C)

    A, B = torch.randn(64, 32).half(), torch.randn(32, 64).half()
    C = torch.zeros(64, 64)
    with pytest.warns(UserWarning, match="T.cumsum of fragment c, which is held in registers"):
        acc_scan(A, B, C)   # the interpreter runs it, and warns that the GPU would refuse it
    torch.testing.assert_close(C, (A.float() @ B.float()).cumsum(1), atol=1e-4, rtol=1e-4)
    with pytest.raises(LoweringError, match="T.cumsum of fragment c, which is held in registers") as info:
        acc_scan.compile(A, B, C, target="sm_90a")
    assert "T.cumsum(c, dim=1)" in info.value.source_line()


def test_every_tile_op_has_both_rules():
    from tile_nb.interp.compiler import TILE_RULES
    from tile_nb.lower import TILE_OPS

    assert "cumsum" in TILE_RULES and "tirx.tile.cumsum" in TILE_OPS


def test_the_op_is_registered_once_even_from_several_threads(tmp_path):
    """A fresh process elaborating four kernels at once in threads: tirx.tile.cumsum is registered once (TVM
    refuses a second registration), and every kernel gets it."""
    import subprocess
    import sys

    code = """
import threading, torch, tile_nb, tile_nb.language as T
def make(k):
    @tile_nb.jit
    def f(A, B, k_: int = k):
        A: T.Tensor[[8], T.float32]
        B: T.Tensor[[8], T.float32]
        with T.Kernel(1, threads=32) as _:
            s = T.alloc_shared((8,), T.float32)
            T.copy(A, s)
            T.cumsum(s, dim=0)
            T.copy(s, B)
    return f
errors = []
def run(k):
    try:
        a, b = torch.arange(8.0), torch.zeros(8)
        make(k)(a, b)
        assert torch.equal(b, a.cumsum(0)), b
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
assert not errors, errors
print("ok")
"""
    import os

    script = tmp_path / "threads.py"   # a file: tile_nb reads kernel bodies from their source
    script.write_text(code)
    root = os.path.dirname(os.path.dirname(tile_nb.__file__))  # this checkout's tile_nb
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]

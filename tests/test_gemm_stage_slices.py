"""T.gemm and T.copy on one stage of a 3-d shared buffer (`A_s[ko % 2, :, :]`, as tilelang's examples write
their hand-rolled stages).

The H100 run of 2026-12-05 found the wgmma path reading stage 0 whatever the slice (its descriptors
started at the tile, not at the slice): 99.9% of the elements wrong once K took two k-tiles. So besides the
interpreter against torch (odd shapes, sizes of 1, a dynamic M) and the nvcc builds, the CPU tests here read
the CUDA source: the start address of every wgmma descriptor, evaluated for each k-tile, must be the start of
a stage (the tile's pool offset in the plan plus the stage's place in the layout), every stage must be read,
and the copies must write those same stages. The GPU twins (marked gpu) compare with torch."""
import math
import re

import pytest
import torch
from kernels.compare import assert_within_fp8_wgmma_bound

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def staged(A, B, block_M: int = 64, block_N: int = 64, block_K: int = 32, threads: int = 128, stages: int = 2,
           trans_B: bool = False, num_stages: int = 0, dynamic: bool = False, dtype: T.dtype = T.float16):
    """T.gemm of stage `ko % stages` of 3-d shared buffers; `num_stages` > 0: in a T.Pipelined loop (the
    pipeline's copies of each 3-d buffer on top of its own stages)."""
    M = T.dynamic("M") if dynamic else T.const("M")
    N, K = T.const("N, K")
    A: T.Tensor[[M, K], dtype]
    if trans_B:
        B: T.Tensor[[N, K], dtype]
    else:
        B: T.Tensor[[K, N], dtype]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((stages, block_M, block_K), dtype)
        B_s = T.alloc_shared((stages, block_N, block_K) if trans_B else (stages, block_K, block_N), dtype)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(acc)
        n = T.ceildiv(K, block_K)
        for ko in T.Pipelined(n, num_stages=num_stages) if num_stages else range(n):
            T.copy(A[by * block_M, ko * block_K], A_s[ko % stages, :, :])
            if trans_B:
                T.copy(B[bx * block_N, ko * block_K], B_s[ko % stages, :, :])
            else:
                T.copy(B[ko * block_K, bx * block_N], B_s[ko % stages, :, :])
            T.gemm(A_s[ko % stages, :, :], B_s[ko % stages, :, :], acc, transpose_B=trans_B)
        T.copy(acc, C[by * block_M, bx * block_N])
    return C


# the wgmma shapes of each path: K rows of 64 and 128 bytes, 64-column panels (block_K 128), B stored [N, K],
# two warpgroups, three stages, a T.Pipelined loop over the stages, 8-bit floats (k32 steps; B stored [N, K])
VARIANTS = {
    "k32": {},
    "k64": dict(block_K=64),
    "k128_panels": dict(block_K=128, block_N=128),
    "trans_B": dict(trans_B=True),
    "two_warpgroups": dict(block_M=128, threads=256),
    "three_stages": dict(stages=3, block_N=128),
    "pipelined": dict(num_stages=2),
    "e4m3": dict(dtype="float8_e4m3fn", trans_B=True, block_K=64),
}


def _inputs(M, N, K, trans_B=False, seed=0, dtype="float16"):
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    a = torch.randn(M, K, generator=g).to(dt)
    b = torch.randn(N, K, generator=g).to(dt) if trans_B else torch.randn(K, N, generator=g).to(dt)
    return a, b


def _ref(a, b, trans_B=False):
    return a.float() @ (b.float().T if trans_B else b.float())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N, K", [(70, 45, 50), (1, 1, 1), (130, 200, 97)])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_gemm_of_stages_agrees_with_torch(name, M, N, K, backend):
    kw = VARIANTS[name]
    a, b = _inputs(M, N, K, kw.get("trans_B", False), seed=K, dtype=kw.get("dtype", "float16"))
    c = staged(a.to(backend), b.to(backend), **kw)
    if name == "e4m3" and backend == "cuda":  # wgmma's 8-bit sums keep fewer bits than float32
        assert_within_fp8_wgmma_bound(c, a, b.T)
    else:
        torch.testing.assert_close(c.cpu(), _ref(a, b, kw.get("trans_B", False)), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_of_stages_with_a_dynamic_m(backend):
    for M in (1, 77, 200):  # one compiled kernel serves every M
        a, b = _inputs(M, 45, 100, seed=M)
        c = staged(a.to(backend), b.to(backend), dynamic=True)
        torch.testing.assert_close(c.cpu(), _ref(a, b), atol=1e-3, rtol=1e-3)


# ---- the CUDA source: which shared-memory addresses the descriptors and the copies use ---------------------

def _calls(src: str, name: str):
    """The argument text of every call of `name` in `src` (parentheses balanced)."""
    out = []
    for m in re.finditer(re.escape(name) + r"\(", src):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        out.append(src[m.end():i - 1])
    return out


_POOL = r"\(\([\w ]+\*\)smem_pool_ptr\)\["  # `((half*)smem_pool_ptr)[`, any element type


def _pool_indices(text: str):
    """The index expressions of `((half*)smem_pool_ptr)[...]` (any element type) in `text`."""
    out = []
    for m in re.finditer(_POOL, text):
        depth, i = 1, m.end()
        while depth:
            depth += {"[": 1, "]": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i - 1])
    return out


class _Zero(dict):
    def __missing__(self, key):  # unrolled-loop variables (v, v_1, ...) and the like: their first iteration
        return 0


def _values(expr: str, k_tiles: int) -> set:
    """`expr` (C integer arithmetic over ko, threadIdx, ...) evaluated at thread 0 for every k-tile."""
    py = expr.replace("((int)threadIdx.x)", "tx").replace("((int)blockIdx.x)", "bx")
    py = py.replace("((int)blockIdx.y)", "by")
    assert re.fullmatch(r"[\w\s()+*^&|<>-]*", py), f"unexpected C in {expr!r}"
    return {eval(py, {}, _Zero(ko=ko)) for ko in range(k_tiles)}  # noqa: S307 - integer arithmetic only


def _body(src: str) -> str:
    """The kernel's definition, without the helpers' source above it."""
    return src[src.rindex('extern "C" __global__'):]


def _stage_starts(kernel, name, rows, cols, stages, elem_bytes=2):
    """Element offsets in the pool of the stages of the shared tile `name` ([stages, rows, cols]), from the
    plan's byte offset of the tile. 16-bit rows longer than 64 elements are stored in 64-column panels that
    hold every stage's rows (layout.py: leading dims fold into rows), so stage s starts s * rows * 64 elements
    into the first panel."""
    tile = next(t for t in kernel.plan["shared"] if t["name"] == name)
    panel = 64 if elem_bytes == 2 else cols
    return {tile["offset"] // elem_bytes + s * rows * min(cols, panel) for s in range(stages)}


def _descriptor_starts(src: str, k_tiles: int) -> tuple[set, set]:
    """(A's, B's) wgmma descriptor start addresses (elements of the pool) over every k-tile, warpgroup 0."""
    starts = {"0": set(), "1": set()}
    for m in re.finditer(r"desc_ptr(?:_\d+)?\[([01])\] = tnb_smem_desc_lo", src):
        args = _calls(src[m.start():], "tnb_smem_desc_lo")[0]
        (index,) = _pool_indices(args)
        starts[m.group(1)] |= _values(index, k_tiles)
    return starts["0"], starts["1"]


def _copy_starts(src: str, k_tiles: int) -> set:
    """Where thread 0's first element of each global -> shared copy lands (cp.async or a plain store): the
    start of the stage it writes (row 0, chunk 0, unswizzled)."""
    body = _body(src)
    dsts = [_pool_indices(args)[0] for n in (4, 8, 16) for args in _calls(body, f"tnb_cp_async_{n}")]
    dsts += [m.group(1) for m in re.finditer(_POOL + r"(.*?)\] = ", body)]
    return set().union(*(_values(d, k_tiles) for d in dsts))


CODE_SHAPES = dict(M=130, N=200, K=300)  # 10 k-tiles of 32, 5 of 64, 3 of 128: every stage is used


@pytest.mark.parametrize("name", list(VARIANTS))
def test_wgmma_descriptors_start_at_the_stage_the_copy_wrote(name):
    kw = VARIANTS[name]
    trans_B = kw.get("trans_B", False)
    bm, bn, bk = kw.get("block_M", 64), kw.get("block_N", 64), kw.get("block_K", 32)
    stages, pipeline = kw.get("stages", 2), max(kw.get("num_stages", 0), 1)
    dtype = kw.get("dtype", "float16")
    elem = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    a, b = _inputs(CODE_SHAPES["M"], CODE_SHAPES["N"], CODE_SHAPES["K"], trans_B, dtype=dtype)
    kernel = staged.compile(a, b, target="sm_90a", **kw)
    assert [m["kind"] for m in kernel.plan["mma"]] == ["wgmma"]
    src = kernel.cuda_source
    k_tiles = math.ceil(CODE_SHAPES["K"] / bk)
    # a pipelined loop keeps `pipeline` copies of each 3-d buffer: stage s of copy p is stage p * stages + s;
    # k-tile ko uses stage ko % stages of copy ko % pipeline
    used = sorted({ko % pipeline * stages + ko % stages for ko in range(k_tiles)})
    a_starts = sorted(_stage_starts(kernel, "A_s", bm, bk, stages * pipeline, elem))
    b_shape = (bn, bk) if trans_B else (bk, bn)
    b_starts = sorted(_stage_starts(kernel, "B_s", *b_shape, stages * pipeline, elem))
    want_a, want_b = {a_starts[s] for s in used}, {b_starts[s] for s in used}
    assert len(used) == (stages if pipeline == 1 else 2)
    got_a, got_b = _descriptor_starts(src, k_tiles)
    assert (got_a, got_b) == (want_a, want_b), "the wgmma operands are not read from each stage"
    assert _copy_starts(src, k_tiles) == want_a | want_b, "the copies do not write the stages the gemm reads"


def test_stage_offsets_in_the_descriptor_of_the_failing_kernel():
    """The kernel the H100 run found wrong (64x64x32 tiles, two stages, K = 50: two k-tiles): A's stage is
    2048 elements, B's tile starts at element 4096 of the pool; both descriptors add `ko * 2048`."""
    a, b = _inputs(70, 45, 50)
    src = staged.compile(a, b, target="sm_90a").cuda_source
    assert _descriptor_starts(src, 2) == ({0, 2048}, {4096, 6144})


@tile_nb.jit
def stage_copies(X, block: int = 64):
    """T.copy global -> stage 1, stage 1 -> fragment, fragment -> stage 2, stage 2 -> global."""
    M, N = T.const("M, N")
    X: T.Tensor[[M, N], T.float16]
    Y = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
        S = T.alloc_shared((3, block, block), T.float16)
        f = T.alloc_fragment((block, block), T.float16)
        T.copy(X[by * block, bx * block], S[1, :, :])
        T.copy(S[1, :, :], f)
        for i, j in T.Parallel(block, block):
            f[i, j] = f[i, j] * 2.0 + 1.0
        T.copy(f, S[2, :, :])
        T.copy(S[2, :, :], Y[by * block, bx * block])
    return Y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N", [(100, 70), (1, 1), (64, 128)])
def test_copies_into_and_out_of_stages(M, N, backend):
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(M)).half()
    y = stage_copies(x.to(backend))
    torch.testing.assert_close(y.cpu(), x * 2 + 1)


def test_copies_address_the_stage_they_name():
    """Stage 1 of the (3, 64, 64) tile starts at element 4096, stage 2 at 8192: the copy into stage 1 and the
    read of it start at 4096, the write of stage 2 and its copy out at 8192; nothing touches stage 0."""
    x = torch.randn(100, 70).half()
    src = stage_copies.compile(x, target="sm_90a").cuda_source
    # the stage of thread 0's first element of each access, in source order: stage 1 (copied in, read into the
    # fragment), then stage 2 (written from the fragment, copied out)
    stages = [min(_values(i, 1)) // 4096 for i in _pool_indices(_body(src))]
    assert stages == sorted(stages) and set(stages) == {1, 2}, stages


@needs_nvcc
@pytest.mark.parametrize(
    "name, arch",
    [(n, a) for n in VARIANTS for a in ("sm_90a", "sm_80") if a == "sm_90a" or "dtype" not in VARIANTS[n]],
)  # 8-bit floats need sm_89 or newer
def test_gemm_of_stages_builds(name, arch):
    kw = VARIANTS[name]
    a, b = _inputs(256, 256, 384, kw.get("trans_B", False), dtype=kw.get("dtype", "float16"))
    assert staged.compile(a, b, target=arch, **kw).cubin

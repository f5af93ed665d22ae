"""`T.Persistent(domain, wave_size, index, group_size=8)` (tilelang.language.Persistent,
language/persistent.py): a fixed number of CTAs walk the tiles of a grid in waves. Kernels in tilelang's
spelling: a persistent GEMM as tilelang's example_gemm_persistent writes it (2-d domain, grouped columns), and
1-d, 2-d and 3-d domains that record which CTA took each tile (checked against tilelang's numbering,
written out in Python here), on the interpreter against torch at odd shapes and sizes of 1, built for sm_90a
and sm_80, and on the GPU (marked gpu); misuse refused at the user's line."""
import collections
import itertools
import linecache
import math

import pytest
import torch

import tile_nb.tilelang as tilelang
import tile_nb.tilelang.language as T
from tile_nb.errors import DSLError


@tilelang.jit
def persistent_gemm(A, B, ctas: int = 5, block_M: int = 32, block_N: int = 32, block_K: int = 16,
                    group_size: int = 8):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float32)
    with T.Kernel(ctas, threads=128) as block_id:
        A_shared = T.alloc_shared((block_M, block_K), T.float16)
        B_shared = T.alloc_shared((block_K, block_N), T.float16)
        C_local = T.alloc_fragment((block_M, block_N), T.float32)
        for bx, by in T.Persistent([T.ceildiv(M, block_M), T.ceildiv(N, block_N)], ctas, block_id,
                                   group_size=group_size):
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[bx * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, by * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[bx * block_M, by * block_N])
    return C


def _check_gemm(M, N, K, ctas, group_size, device):
    torch.manual_seed(M + 3 * N + 7 * K)
    a = torch.randn(M, K, dtype=torch.float16, device=device)
    b = torch.randn(K, N, dtype=torch.float16, device=device)
    c = persistent_gemm(a, b, ctas=ctas, group_size=group_size)
    torch.testing.assert_close(c, a.float() @ b.float(), atol=2e-3 * K ** 0.5, rtol=1e-3)


@pytest.mark.parametrize("M,N,K,ctas,group_size", [
    (70, 100, 40, 5, 8),      # 3 x 4 tiles over 5 CTAs: 3 waves, the last one partly empty
    (1, 1, 1, 3, 8),          # one tile, CTAs with nothing to do
    (130, 33, 16, 4, 2),      # 5 x 2 tiles in column groups of 2
    (64, 160, 17, 1, 3),      # one CTA walks all 2 x 5 tiles; the last column group is padded
    (33, 64, 16, 7, 0),       # group_size below 1 counts as 1
])
def test_persistent_gemm_against_torch(M, N, K, ctas, group_size):
    _check_gemm(M, N, K, ctas, group_size, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,ctas,group_size", [(70, 100, 40, 5, 8), (1, 1, 1, 3, 8),
                                                   (1000, 1030, 256, 132, 8)])
def test_persistent_gemm_on_gpu(M, N, K, ctas, group_size):
    _check_gemm(M, N, K, ctas, group_size, "cuda")


@tilelang.jit
def who_takes(X, ctas: int = 3, group_size: int = 8, dims: int = 2):
    """Y[tile] = 1000 * (1 + CTA) + wave for every tile of X's shape (each element one tile): which CTA took
    each tile, in which wave. A dynamic first dim."""
    D0 = T.dynamic("D0")
    D1, D2 = T.const("D1, D2")
    X: T.Tensor((D0, D1, D2), T.int32)
    with T.Kernel(ctas, threads=32) as block_id:
        seen = T.alloc_var(T.int32)
        seen = 0
        if dims == 1:
            for t in T.Persistent([D0 * D1 * D2], ctas, block_id, group_size):
                X[t // (D1 * D2), t // D2 % D1, t % D2] = 1000 * (1 + block_id) + seen
                seen += 1
        elif dims == 2:
            for i, j in T.Persistent([D0 * D1, D2], ctas, block_id, group_size):
                X[i // D1, i % D1, j] = 1000 * (1 + block_id) + seen
                seen += 1
        else:
            for i, j, k in T.Persistent([D0, D1, D2], ctas, block_id, group_size=group_size):
                X[i, j, k] = 1000 * (1 + block_id) + seen
                seen += 1


def _tilelang_order(domain, wave_size, group_size):
    """{tile: (cta, wave)} by tilelang's numbering, written out here from its definition: tile number
    t = wave * wave_size + cta is the mixed-radix number [ceildiv(dL, g), d0, ..., g] (last digit fastest);
    the last coordinate is group * g + column, tiles past dL run nothing."""
    last = domain[-1]
    g = max(1, min(group_size, last))
    radix = [-(-last // g), *domain[:-1], g]
    taken = {}
    waves = -(-math.prod(radix) // wave_size)
    for wave, cta in itertools.product(range(waves), range(wave_size)):
        t, digits = wave * wave_size + cta, []
        for r in reversed(radix[1:]):
            digits.append(t % r)
            t //= r
        digits.reverse()
        tile = (*digits[:-1], t * g + digits[-1])
        if tile[-1] < last:
            assert tile not in taken
            taken[tile] = (cta, wave)
    return taken


def _expected_owners(shape, ctas, group_size, dims):
    """Y as who_takes writes it: the tile's CTA, and how many tiles that CTA took before it."""
    d0, d1, d2 = shape
    domain, to_index = {
        1: ([d0 * d1 * d2], lambda t: (t[0] // (d1 * d2), t[0] // d2 % d1, t[0] % d2)),
        2: ([d0 * d1, d2], lambda t: (t[0] // d1, t[0] % d1, t[1])),
        3: (list(shape), lambda t: t),
    }[dims]
    y = torch.full(shape, -1, dtype=torch.int32)
    taken = collections.Counter()
    for tile, (cta, _) in sorted(_tilelang_order(domain, ctas, group_size).items(), key=lambda kv: kv[1][1]):
        y[to_index(tile)] = 1000 * (1 + cta) + taken[cta]
        taken[cta] += 1
    assert (y >= 0).all()           # every tile taken exactly once
    return y


@pytest.mark.parametrize("shape,ctas,group_size,dims", [
    ((2, 3, 5), 4, 2, 3),     # 3-d, last dim 5 in groups of 2 (one padded column)
    ((3, 1, 7), 3, 8, 2),     # group wider than the dim: clamped to 7
    ((1, 1, 1), 5, 8, 3),     # one tile, five CTAs
    ((4, 2, 3), 7, 1, 2),     # no grouping
    ((5, 2, 3), 4, 8, 1),     # 1-d: tile t in wave t // 4 on CTA t % 4
])
def test_tiles_go_where_tilelang_sends_them(shape, ctas, group_size, dims):
    x = torch.full(shape, -1, dtype=torch.int32)
    who_takes(x, ctas=ctas, group_size=group_size, dims=dims)
    assert torch.equal(x, _expected_owners(shape, ctas, group_size, dims))


@pytest.mark.gpu
@pytest.mark.parametrize("shape,ctas,group_size,dims", [((2, 3, 5), 4, 2, 3), ((3, 1, 7), 3, 8, 2),
                                                        ((5, 2, 3), 4, 8, 1)])
def test_tiles_go_where_tilelang_sends_them_on_gpu(shape, ctas, group_size, dims):
    x = torch.full(shape, -1, dtype=torch.int32, device="cuda")
    who_takes(x, ctas=ctas, group_size=group_size, dims=dims)
    assert torch.equal(x.cpu(), _expected_owners(shape, ctas, group_size, dims))


def test_the_ir_is_a_guarded_loop_over_waves():
    script = persistent_gemm.specialize(M=70, N=100, K=40).script()
    assert "for wave in range(3)" in script or "for wave in T.serial(3)" in script, script
    assert "< 4:" in script   # the guard on the last coordinate (4 column tiles)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_persistent_builds_for_cuda(arch):
    for kernel in (persistent_gemm.compile(M=1000, N=1030, K=256, ctas=132, target=arch).compiled(),
                   who_takes.compile(D1=2, D2=3, ctas=4, dims=3, target=arch).compiled()):
        assert "wave" in kernel.cuda_source
        assert kernel.cubin is not None, "nvcc or NVRTC refused the generated CUDA"


@tilelang.jit
def misuse(X, case: str = "names"):
    N = T.const("N")
    X: T.Tensor((N,), T.float32)
    with T.Kernel(4, threads=32) as block_id:
        if case == "names":
            for i, j in T.Persistent([N, 2, 3], 4, block_id):  # error: three dims, two names
                X[i] = 0.0
        elif case == "domain":
            for i in T.Persistent(N, 4, block_id):  # error: not a list
                X[i] = 0.0
        elif case == "wave":
            for i in T.Persistent([N], 0, block_id):  # error: wave_size 0
                X[i] = 0.0
        elif case == "float":
            for i in T.Persistent([N, 2.5], 4, block_id):  # error: a float extent
                X[i] = 0.0
        elif case == "group":
            for i in T.Persistent([N], 4, block_id, group_size=None):  # error: group_size None
                X[i] = 0.0


@pytest.mark.parametrize("case,message", [
    ("names", "domain of 3 dims gives 3 coordinates; the loop names 2"),
    ("domain", "domain must be a non-empty list of tile counts"),
    ("wave", "wave_size (the CTAs that walk the tiles) must be an integer expression >= 1"),
    ("float", "domain[1] must be an integer expression"),
    ("group", "group_size=...) must be an integer expression"),
])
def test_misuse_is_refused_at_the_line(case, message):
    with pytest.raises(DSLError) as info:
        misuse(torch.zeros(8), case=case)
    err = info.value
    assert message in err.message
    assert "# error:" in linecache.getline(err.filename, err.lineno)

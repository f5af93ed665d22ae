"""tilelang's reducers (language/reducers.py): `r = T.alloc_reducer(n, dtype)`, updates `r[i] += v` inside
T.Parallel that add every iteration's value, and `T.finalize_reducer(r)`, after which r holds the sums. The
interpreter adds each update into the one value; the CUDA lowering adds into each thread's copy and combines
the copies at the finalize (lane shuffles, and shared memory where warps share an element). The GEMV of
tilelang's examples/gemv at shapes that are not multiples of the blocks and sizes of 1, with layouts whose
copies span lanes only or lanes and warps; against torch; GPU twins marked gpu."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DSLError
from tile_nb.frontend.source import run_source

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def gemv_reducer(a, x, block_M: int = 128, block_N: int = 128, threads: int = 256):
    M, N = T.const("M, N")
    a: T.Tensor((M, N), T.float16)
    x: T.Tensor((N,), T.float16)
    o = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bm:
        r = T.alloc_reducer(block_M, T.float32, replication="all")
        T.clear(r)
        for bn in T.Pipelined(T.ceildiv(N, block_N), num_stages=2):
            a_s = T.alloc_shared((block_M, block_N), T.float16)
            T.copy(a[bm * block_M, bn * block_N], a_s)
            a_f = T.alloc_fragment((block_M, block_N), T.float16)
            T.copy(a_s, a_f)
            x_f = T.alloc_fragment(block_N, T.float16)
            T.copy(x[bn * block_N], x_f)
            for i, j in T.Parallel(block_M, block_N):
                r[i] += a_f[i, j].astype(T.float32) * x_f[j].astype(T.float32)
        T.finalize_reducer(r)
        T.copy(r, o[bm * block_M])
    return o


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("m, n", [(1, 1), (128, 128), (300, 520), (77, 1000)])
@pytest.mark.parametrize("block_M, block_N, threads", [(128, 128, 256), (4, 256, 256), (16, 64, 128)])
def test_a_reducer_sums_every_iteration(backend, m, n, block_M, block_N, threads):
    g = torch.Generator().manual_seed(m * n + block_M)
    a, x = torch.randn(m, n, generator=g).half(), torch.randn(n, generator=g).half()
    o = gemv_reducer(a.to(backend), x.to(backend), block_M=block_M, block_N=block_N, threads=threads).cpu()
    torch.testing.assert_close(o, a.float() @ x.float(), atol=2e-3, rtol=2e-3)


def test_copies_held_by_several_warps_meet_in_shared_memory():
    a, x = torch.empty(64, 512).half(), torch.empty(512).half()
    src = gemv_reducer.compile(a, x, block_M=4, block_N=256, threads=256, target="sm_90a").cuda_source
    body = src.split('extern "C" __global__')[-1]
    assert "tnb_shfl_xor_float32" in body and "r_partial_ptr" in body
    assert body.count("tnb_cta_sync()") >= 3  # the pipeline's, and the finalize's cross-warp step


@pytest.mark.parametrize("body, message", [
    ("r = T.alloc_reducer(8, T.float32)\n        for i in T.Parallel(8):\n            r[i] = A[i]",
     r"r is a reducer \(T.alloc_reducer, op='sum'\): update it as `r\[i\] \+= v`"),
    ("r = T.alloc_reducer(8, T.float32, op='max')\n        T.fill(r, 0)\n        for i in T.Parallel(8):\n"
     "            r[i] += A[i]",
     r"r is a reducer \(T.alloc_reducer, op='max'\): update it as `r\[i\] = T.max\(r\[i\], v\)`"),
    ("r = T.alloc_reducer(8, T.float32, op='prod')", r"T.alloc_reducer\(op='prod'\): op must be one of"),
    ("T.finalize_reducer(A)", r"T.finalize_reducer takes a buffer made by T.alloc_reducer"),
    # the order of a reducer's uses (frontend/reducer_check.py): where the GPU's per-thread copies differ
    ("r = T.alloc_reducer(8, T.float32)\n        for i in T.Parallel(8):\n            r[i] += A[i]",
     r"r is updated here while it may be not cleared: clear it first"),
    ("r = T.alloc_reducer(8, T.float32)\n        T.fill(r, 1.0)",
     r"r is a reducer: fill it with 0 .*got 1"),
    ("r = T.alloc_reducer(8, T.float32)\n        T.clear(r)\n        for i in T.Parallel(8):\n"
     "            r[i] += A[i]\n        T.copy(r, A)",
     r"r is used by this tile operation while it holds partial sums"),
    ("r = T.alloc_reducer(8, T.float32)\n        T.clear(r)\n        for i in T.Parallel(8):\n"
     "            r[i] += A[i]\n        for i in T.Parallel(8):\n            A[i] = r[i] * 2",
     r"r is read here while it holds partial sums"),
    ("r = T.alloc_reducer(8, T.float32)\n        T.clear(r)\n        for k in T.serial(2):\n"
     "            for i in T.Parallel(8):\n                r[i] += A[i]\n            T.finalize_reducer(r)",
     r"r is updated here while it may be finalized: clear it again after T.finalize_reducer"),
    ("r = T.alloc_reducer(8, T.float32)\n        T.clear(r)\n        for i in T.Parallel(8):\n"
     "            r[i] += A[i]\n        T.finalize_reducer(r)\n        T.finalize_reducer(r)",
     r"T.finalize_reducer\(r\) here, while r may be finalized"),
])
def test_reducer_misuse_is_refused_at_the_line(body, message):
    src = f'''
import tile_nb
import tile_nb.language as T

@tile_nb.jit
def bad(A):
    A: T.Tensor[[8], T.float32]
    with T.Kernel(1, threads=128) as bx:
        {body}
'''
    ns = run_source(src, {}, filename="reducer_bad.py")
    with pytest.raises(DSLError, match=message) as info:
        ns["bad"](torch.randn(8))
    assert info.value.lineno is not None and info.value.lineno >= 9


def test_the_reducer_kernels_build_to_cubins():
    from tile_nb.backend import toolchain

    if toolchain.find_tool("nvcc") is None:
        pytest.skip("needs nvcc to build cubins")
    a, x = torch.empty(300, 520).half(), torch.empty(520).half()
    for block_M, block_N, threads in [(128, 128, 256), (4, 256, 256)]:
        for arch in ("sm_90a", "sm_80"):
            assert gemv_reducer.compile(a, x, block_M=block_M, block_N=block_N, threads=threads,
                                        target=arch).cubin
    for arch in ("sm_90a", "sm_80"):
        assert row_sums_per_step.compile(torch.empty(3, 8, 33), target=arch).cubin


@tile_nb.jit
def row_sums_per_step(a):
    S, M, N = T.const("S, M, N")
    a: T.Tensor((S, M, N), T.float32)
    o = T.empty((S, M), T.float32)
    with T.Kernel(1, threads=128) as _:
        r = T.alloc_reducer(M, T.float32)
        for s in T.serial(S):
            T.clear(r)  # each step sums from 0 again: the order reducer_check asks for
            for i, j in T.Parallel(M, N):
                r[i] += a[s, i, j]
            T.finalize_reducer(r)
            T.copy(r, o[s, 0])
    return o


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("s, m, n", [(1, 1, 1), (3, 8, 33), (2, 16, 64)])
def test_a_reducer_cleared_in_a_loop_sums_each_step(backend, s, m, n):
    a = torch.randn(s, m, n, generator=torch.Generator().manual_seed(s * m * n))
    o = row_sums_per_step(a.to(backend)).cpu()
    torch.testing.assert_close(o, a.sum(-1), atol=1e-4, rtol=1e-4)


@tile_nb.jit
def row_extremes(a, op: str = "max", dt: T.dtype = T.float16, block_M: int = 64, block_N: int = 128,
                 threads: int = 256):
    """o[i] = max (min) of row i, with a reducer filled with the op's identity for `dt`."""
    M, N = T.const("M, N")
    a: T.Tensor((M, N), dt)
    o = T.empty((M,), dt)
    pick = T.max if op == "max" else T.min
    identity = {"float16": (-T.infinity(T.float16), T.infinity(T.float16)), "uint32": (0, 2 ** 32 - 1),
                "int32": (-2 ** 31, 2 ** 31 - 1)}[str(dt)][0 if op == "max" else 1]
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bm:
        r = T.alloc_reducer(block_M, dt, op=op, replication="all")
        T.fill(r, identity)
        for bn in T.serial(T.ceildiv(N, block_N)):
            a_f = T.alloc_fragment((block_M, block_N), dt)
            T.copy(a[bm * block_M, bn * block_N], a_f)
            for i, j in T.Parallel(block_M, block_N):
                if bn * block_N + j < N:  # the copy's edge fill (0) is not a value of the row
                    r[i] = pick(r[i], a_f[i, j])
        T.finalize_reducer(r)
        T.copy(r, o[bm * block_M])
    return o


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("m, n, block_M, block_N, threads", [
    (1, 1, 64, 128, 256), (77, 300, 64, 128, 256), (130, 128, 16, 64, 128), (5, 1000, 4, 256, 256)])
def test_max_and_min_reducers(backend, op, m, n, block_M, block_N, threads):
    a = torch.randn(m, n, generator=torch.Generator().manual_seed(m + n)).half()
    if m > 1:
        a[1, n // 2] = float("nan")  # NaN wins, as in torch.amax / amin (docs/IR.md)
    o = row_extremes(a.to(backend), op=op, block_M=block_M, block_N=block_N, threads=threads).cpu()
    ref = a.float().amax(1) if op == "max" else a.float().amin(1)
    torch.testing.assert_close(o.float(), ref, atol=0, rtol=0, equal_nan=True)


def test_max_reducers_build_to_cubins():
    from tile_nb.backend import toolchain

    if toolchain.find_tool("nvcc") is None:
        pytest.skip("needs nvcc to build cubins")
    for op, block_M, block_N, threads in [("max", 64, 128, 256), ("min", 4, 256, 256)]:
        src = row_extremes.compile(torch.empty(300, 520).half(), op=op, block_M=block_M, block_N=block_N,
                                   threads=threads, target="sm_90a")
        assert src.cubin and f"tnb_{op}_nan_float32" in src.cuda_source


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", ["uint32", "int32"])
def test_integer_max_and_min_reducers_over_the_whole_range(backend, op, dtype):
    """uint32 values at and above 2^31 order as unsigned (torch has no uint32 max scatter: the interpreter
    reduces them in int64), int32 ones as signed."""
    low, high = (0, 2 ** 32) if dtype == "uint32" else (-2 ** 31, 2 ** 31)
    x = torch.randint(low, high, (6, 200), generator=torch.Generator().manual_seed(3), dtype=torch.int64)
    o = row_extremes(x.to(getattr(torch, dtype)).to(backend), op=op, dt=getattr(T, dtype), block_M=4,
                      block_N=64, threads=128).cpu()
    assert torch.equal(o.to(torch.int64), x.amax(1) if op == "max" else x.amin(1))

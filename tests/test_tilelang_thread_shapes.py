"""tilelang's thread-block forms on tile_nb's block-level kernels (issue 30): `T.Kernel(threads=(x, y[, z]))`
(one block of x * y * z threads), `T.get_thread_binding(dim)` / `T.thread_binding(0, n, thread="threadIdx.y")`
choosing warp groups, and `T.set_max_nreg(count, is_inc)` (a recorded register hint).

A block-level GEMV with 2-d threads (and the register hint) against torch on the interpreter at odd shapes,
sizes of 1 and a dynamic dim, built for sm_90a / sm_80 and (marked gpu) on CUDA; a producer / consumer
kernel whose warp groups are chosen by the y thread index, on the interpreter (the CUDA lowering refuses warp
specialization: tests/test_warp_specialize.py); per-thread uses and bad arguments refused at the user's
line."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import DSLError
from tile_nb.frontend.source import run_source

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def gemv(A, x, block_N: int = 16, tx: int = 32, ty: int = 4, nreg: bool = False):
    """y = A @ x, a block of `tx * ty` threads per `block_N` rows."""
    N = T.dynamic("N")
    K = T.const("K")
    A: T.Tensor[[N, K], T.float32]
    x: T.Tensor[[K], T.float32]
    y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block_N), threads=(tx, ty)) as bn:
        if nreg:
            T.set_max_nreg(232, 1)
        a = T.alloc_fragment((block_N, K), T.float32)
        xs = T.alloc_shared((K,), T.float32)
        acc = T.alloc_fragment((block_N,), T.float32)
        T.copy(A[bn * block_N, 0], a)
        T.copy(x[0], xs)
        for i, k in T.Parallel(block_N, K):
            a[i, k] = a[i, k] * xs[k]
        T.reduce_sum(a, acc, dim=1)
        T.copy(acc, y[bn * block_N])
    return y


def _inputs(N, K, seed):
    torch.manual_seed(seed)
    return torch.randn(N, K), torch.randn(K)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("N, K", [(37, 5), (1, 1), (100, 33)])
@pytest.mark.parametrize("tx, ty, nreg", [(32, 4, False), (64, 2, True), (8, 4, True)])
def test_a_2d_thread_block_is_one_block_of_x_times_y_threads(backend, N, K, tx, ty, nreg):
    if backend == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    a, x = _inputs(N, K, seed=N * K + tx)
    y = gemv(a.to(backend), x.to(backend), tx=tx, ty=ty, nreg=nreg)
    torch.testing.assert_close(y.cpu(), a @ x, atol=1e-5, rtol=1e-5)


def test_the_thread_shape_and_the_register_hint_are_recorded():
    a, x = _inputs(37, 5, seed=0)
    hints = list(gemv.specialize(a, x, nreg=True).attrs["tile_nb.hints"])
    assert hints[0].startswith("threads=(32, 4): one block of 128 threads")
    assert hints[1].startswith("set_max_nreg(232, 1) (not applied")
    assert int(gemv.specialize(a, x, tx=64, ty=2).attrs["tile_nb.threads"]) == 128
    assert int(gemv.specialize(a, x, tx=8, ty=4).attrs["tile_nb.threads"]) == 32


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_a_2d_thread_block_builds(arch):
    a, x = _inputs(256, 64, seed=1)
    compiled = gemv.compile(a, x, target=arch, tx=32, ty=4, nreg=True)
    assert compiled.cubin
    assert "setmaxnreg" not in compiled.cuda_source  # the hint is not applied


@tile_nb.jit
def by_y(A, form: str = "get"):
    """A producer (y == 1: threads 128..255) and a consumer (y == 0) chosen by the y thread index."""
    N = T.dynamic("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=(128, 2)) as bx:
        s = T.alloc_shared((64,), T.float32)
        bar = T.alloc_barrier(128)
        if form == "get":
            ty = T.get_thread_binding(1)
        else:
            ty = T.thread_binding(0, 2, thread="threadIdx.y")
        if ty == 1:
            T.set_max_nreg(80, 0)
            T.copy(A[bx * 64], s)
            T.mbarrier_arrive(bar)
        else:
            T.set_max_nreg(240, 1)
            T.mbarrier_wait_parity(bar, 0)
            for i in T.Parallel(64):
                if bx * 64 + i < N:
                    B[bx * 64 + i] = s[i] * 3.0 - 1.0
    return B


@pytest.mark.filterwarnings("ignore::UserWarning")  # the GPU lowering refuses warp specialization
@pytest.mark.parametrize("form", ["get", "thread_binding"])
@pytest.mark.parametrize("n", [1, 100, 333])
def test_the_y_thread_index_chooses_warp_groups(form, n):
    torch.manual_seed(n)
    a = torch.randn(n)
    torch.testing.assert_close(by_y(a, form=form), a * 3.0 - 1.0)
    hints = [h.split(" (")[0] for h in by_y.specialize(a, form=form).attrs["tile_nb.hints"]]
    assert hints[1:] == ["set_max_nreg(80, 0) in warp group(s) 1", "set_max_nreg(240, 1) in warp group(s) 0"]


_TILE_OP_PER_THREAD = r"the tile operation T.fill is given a region or value that depends on the thread index"


@pytest.mark.parametrize(
    "threads, body, message",
    [
        ("(32, 4)", "tk = T.get_thread_binding(1)\n        while tk == 0: T.clear(s)",
         r"a tile operation under control flow that differs between threads"),
        ("(32, 4)", "tn = T.get_thread_binding(0)\n        T.fill(s, s[tn])", _TILE_OP_PER_THREAD),
        ("(32, 4)", "tn = T.get_thread_binding(0)\n        T.fill(s, tn)", _TILE_OP_PER_THREAD),
        ("128", "tx = T.get_thread_binding()\n        T.fill(s, tx - 256)", _TILE_OP_PER_THREAD),
        ("(32, 4)", "tk = T.get_thread_binding(1)\n        T.fill(s, 2 * tk)", _TILE_OP_PER_THREAD),
        ("(32, 4)", "T.get_thread_binding(2)",
         r"T.get_thread_binding\(dim=...\): expected an int from 0 to 1 \(the kernel's threads=\(32, 4\) "
         r"has 2 dims\); got 2"),
        ("128", "T.get_thread_binding(1)",
         r"expected an int from 0 to 0 \(the kernel's threads=128 has 1 dim\)"),
        ("(32, 4)", "T.thread_binding(0, 4, thread='threadIdx.z')",
         r"T.thread_binding\(thread=...\): expected one of 'threadIdx.x', 'threadIdx.y' .*got 'threadIdx.z'"),
        ("(32, 4)", "T.thread_binding(0, 2, thread='threadIdx.y')",
         r"the range must be the whole threadIdx.y of the kernel, 0 to 4"),
        ("(5, 5)", "pass",
         r"a multiple of 32 between 32 and 1024; got \(5, 5\) \(25 threads in all\)"),
        ("(64, 32)", "pass", r"got \(64, 32\) \(2048 threads in all\)"),
        ("(32, 0)", "pass", r"expected a positive int or a tuple of 1 to 3 positive ints; got \(32, 0\)"),
        ("(8, 4, 2, 2)", "pass", r"tuple of 1 to 3 positive ints; got \(8, 4, 2, 2\)"),
        ("128", "T.set_max_nreg(100, 1)", r"T.set_max_nreg\(reg_count=...\): expected an int from 24 to 256, "
                                          r"a multiple of 8 \(setmaxnreg's rule\); got 100"),
        ("128", "T.set_max_nreg(264, 0)", r"reg_count=...\).*got 264"),
        ("128", "T.set_max_nreg(240, 2)", r"T.set_max_nreg\(is_inc=...\): expected 1 \(increase\) or 0 "
                                          r"\(decrease\); got 2"),
    ],
)
def test_per_thread_uses_and_bad_arguments_are_refused_at_the_users_line(threads, body, message):
    src = f'''
import tile_nb
import tile_nb.language as T

@tile_nb.jit
def bad(A):
    A: T.Tensor[[8], T.float32]
    with T.Kernel(1, threads={threads}) as _:
        s = T.alloc_shared((8,), T.float32)
        {body}
'''
    ns = run_source(src, {}, filename="bad_threads.py")
    with pytest.raises(DSLError, match=message) as info:
        ns["bad"](torch.randn(8))
    import linecache

    # the line refused: the T.Kernel for a bad threads=, else the last line of the body
    want = "with T.Kernel" if body == "pass" else body.splitlines()[-1].strip()
    assert want in linecache.getline(info.value.filename, info.value.lineno)


def test_set_max_nreg_outside_a_kernel_is_refused():
    @tile_nb.jit
    def outside(X):
        X: T.Tensor[[4], T.float32]
        T.set_max_nreg(240, 1)
        with T.Kernel(1, threads=32):
            X[0] = 1.0

    with pytest.raises(DSLError, match=r"T.set_max_nreg\(\) must be called inside `with T\.Kernel"):
        outside(torch.zeros(4))


@tile_nb.jit
def doubled(X, producer_regs: int = 24, consumer_regs: int = 240):
    """Y = 2 X with tilelang's register requests in a producer's and a consumer's warp group."""
    N = T.dynamic("N")
    X: T.Tensor[[N], T.float32]
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 128), threads=256) as bx:
        with T.ws(1):
            T.annotate_producer_reg_dealloc(producer_regs)
        with T.ws(0):
            T.annotate_consumer_reg_alloc(consumer_regs)
        for i in T.Parallel(128):
            if bx * 128 + i < N:
                Y[bx * 128 + i] = X[bx * 128 + i] * 2
    return Y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 300])
def test_register_annotations_are_recorded_per_warp_group_and_change_nothing(backend, n):
    if backend == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    x = torch.randn(n)
    torch.testing.assert_close(doubled(x.to(backend)).cpu(), 2 * x)
    hints = [str(h).rsplit(" at line ", 1)[0] for h in doubled.specialize(x).attrs["tile_nb.hints"]]
    assert hints == ["annotate_producer_reg_dealloc(24) in warp group(s) 1 (not applied: tile_nb decides "
                     "setmaxnreg itself)",
                     "annotate_consumer_reg_alloc(240) in warp group(s) 0 (not applied: tile_nb decides "
                     "setmaxnreg itself)"]


@pytest.mark.parametrize("regs", [20, 250, 36])
def test_a_register_count_setmaxnreg_cannot_take_is_refused_by_name(regs):
    refusal = (r"T\.annotate_producer_reg_dealloc\(reg_count=\.\.\.\): expected an int from 24 to 256, "
               r"a multiple of 8")
    with pytest.raises(DSLError, match=refusal):
        doubled.specialize(torch.randn(8), producer_regs=regs)

"""One kernel called from many threads at once: elaboration state is per thread, and the
template, specialization and compiled-kernel caches build each entry once and hand every
thread the right one (issue 29)."""
import importlib
import re
import sys
import threading

import pytest
import torch
from tvm.tirx.buffer import is_buffer_var

import tile_nb
import tile_nb.language as T
import tile_nb.runtime as rt
from tile_nb._locks import KeyedLocks, build_once
from tile_nb.errors import DSLError

THREADS = 8
MS = (1, 3, 17)  # odd sizes and 1: edge tiles in both dims
NS = (1, 5, 40)
BLOCKS = (8, 4)  # block_M: two compile-time keys, so two templates are built concurrently too


def make_kernel():
    """A fresh kernel object (empty caches): out = alpha * X + Y, and the row sums of X."""

    @tile_nb.jit
    def axpy_rowsum(X, Y, alpha: float = 2.0, block_M: int = 8, block_N: int = 16):
        M, N = T.const('M, N')
        X: T.Tensor[[M, N], T.float32]
        Y: T.Tensor[[M, N], T.float32]
        out = T.empty((M, N), T.float32)
        sums = T.empty((M,), T.float32)
        with T.Kernel(T.ceildiv(M, block_M)) as bx:
            tile = T.alloc_fragment((block_M, block_N), T.float32)
            part = T.alloc_fragment((block_M,), T.float32)
            acc = T.alloc_fragment((block_M,), T.float32)
            T.clear(acc)
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx * block_M, k * block_N], tile)
                T.reduce_sum(tile, part, dim=1)
                for i in T.Parallel(block_M):
                    acc[i] = acc[i] + part[i]
                for i, j in T.Parallel(block_M, block_N):
                    r = bx * block_M + i
                    c = k * block_N + j
                    if r < M and c < N:
                        out[r, c] = X[r, c] * alpha + Y[r, c]
            T.copy(acc, sums[bx * block_M])
        return out, sums

    return axpy_rowsum


def combos():
    return [(b, m, n) for b in BLOCKS for m in MS for n in NS]


def rotated(items, t):
    """Thread t's order: every thread does every item, starting at a different one, so calls overlap."""
    shift = (t * 5) % len(items)
    return items[shift:] + items[:shift]


def run_threads(work, n=THREADS):
    """Run `work(t)` in n threads started together; re-raise the first failure with its thread."""
    barrier = threading.Barrier(n)
    failures = []

    def body(t):
        try:
            barrier.wait(timeout=30)
            work(t)
        except BaseException as err:  # noqa: BLE001 - reported below, with the thread that hit it
            failures.append((t, err))

    threads = [threading.Thread(target=body, args=(t,), name=f"tile_nb-test-{t}") for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "a thread hung (deadlock?)"
    if failures:
        t, err = failures[0]
        raise AssertionError(f"thread {t} failed ({len(failures)} failures in all): {err!r}") from err


def buffer_shapes(func):
    return [tuple(int(d) for d in p.shape) for p in func.params if is_buffer_var(p)]


def inputs(m, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, n, generator=g), torch.randn(m, n, generator=g)


def check_result(result, X, Y):
    out, sums = result
    torch.testing.assert_close(out, 2.0 * X + Y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sums.double(), X.double().sum(dim=1), rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def frequent_switches():
    """Switch threads every 20 us instead of 5 ms, so the threads' calls interleave inside elaboration."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(2e-5)
    yield
    sys.setswitchinterval(saved)


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    rt.clear_memory_cache()
    yield
    rt.clear_memory_cache()


def test_interleaved_elaborations_keep_their_own_state():
    """Two phase-2 elaborations paused in the middle and finished in the other order (A starts, B starts, A
    ends, B ends): with one shared state, A would build with B's state and B would find none."""
    gates = {m: (threading.Event(), threading.Event()) for m in (3, 5)}  # const value -> (arrived, go)

    def gate(m):
        if isinstance(m, int) and m in gates:  # phase 2 of the two gated calls only
            arrived, go = gates[m]
            arrived.set()
            assert go.wait(timeout=30)

    @tile_nb.jit
    def double(X):
        M = T.const('M')
        X: T.Tensor[[M], T.float32]
        out = T.empty((M,), T.float32)
        gate(M)
        with T.Kernel(T.ceildiv(M, 32)) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < M:
                    out[bx * 32 + i] = X[bx * 32 + i] * 2.0
        return out

    double.template()  # phase 1 before the threads, so each thread runs one phase 2 only
    results, errors = {}, []

    def specialize(m):
        try:
            results[m] = double.specialize(M=m)
        except BaseException as err:  # noqa: BLE001 - asserted below
            errors.append(err)

    a = threading.Thread(target=specialize, args=(3,))
    b = threading.Thread(target=specialize, args=(5,))
    a.start()
    assert gates[3][0].wait(timeout=30)
    b.start()
    assert gates[5][0].wait(timeout=30)
    gates[3][1].set()
    a.join(timeout=30)
    gates[5][1].set()
    b.join(timeout=30)
    assert not errors, errors
    assert buffer_shapes(results[3]) == [(3,), (3,)] and buffer_shapes(results[5]) == [(5,), (5,)]
    X = torch.randn(7)
    torch.testing.assert_close(double(X), X * 2.0)


def test_specialize_and_interpret_from_threads():
    """8 threads x every (block_M, M, N): each specialization's IR has the call's shapes, each interpreted
    result matches torch, each template and specialization is built once, and the kernel works afterwards."""
    kernel = make_kernel()
    items = combos()

    def work(t):
        for i, (block, m, n) in enumerate(rotated(items, t)):
            func = kernel.specialize(M=m, N=n, block_M=block)
            assert buffer_shapes(func) == [(m, n), (m, n), (m, n), (m,)], (block, m, n)
            X, Y = inputs(m, n, seed=t * 1000 + i)
            check_result(kernel(X, Y, block_M=block), X, Y)

    run_threads(work)
    assert kernel.stats["templates"] == len(BLOCKS)
    assert kernel.stats["specializations"] == len(items)
    assert len(kernel._building) == 0  # no lock left behind
    X, Y = inputs(2, 33, seed=7)  # a new shape, single-threaded
    check_result(kernel(X, Y), X, Y)
    assert buffer_shapes(kernel.specialize(X, Y)) == [(2, 33), (2, 33), (2, 33), (2,)]


def test_elaboration_errors_stay_in_their_thread():
    """Calls whose elaboration fails (an assert on a const) interleave with calls that succeed: each gets its
    own outcome, and a failure leaves nothing behind for the next call."""

    @tile_nb.jit
    def even_only(X, block: int = 16):
        N = T.const('N')
        X: T.Tensor[[N], T.float32]
        assert N % 2 == 0, "N must be even"
        out = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block)) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    out[bx * block + i] = X[bx * block + i] + 1.0
        return out

    sizes = [1, 2, 3, 4, 9, 10, 31, 32]
    items = [(block, n) for block in (16, 8, 4) for n in sizes]

    def work(t):
        for i, (block, n) in enumerate(rotated(items, t)):
            X = torch.randn(n, generator=torch.Generator().manual_seed(t * 100 + i))
            if n % 2:
                with pytest.raises(DSLError, match=r"kernel assertion failed: `N % 2 == 0`: N must be even"):
                    even_only(X, block=block)
            else:
                torch.testing.assert_close(even_only(X, block=block), X + 1.0)

    run_threads(work)
    assert even_only.stats["specializations"] == sum(1 for _, n in items if n % 2 == 0)
    with pytest.raises(DSLError, match="N must be even"):
        even_only(torch.randn(5))
    X = torch.randn(6)
    torch.testing.assert_close(even_only(X), X + 1.0)


def test_compile_from_threads_builds_each_kernel_once(own_cache):
    """8 threads compile (no GPU needed) three shapes each: one compilation per shape, every thread gets the
    same kernel object, and its lowered IR and CUDA have that shape."""
    kernel = make_kernel()
    shapes = [(1, 5), (3, 40), (17, 1)]
    got = [dict() for _ in range(THREADS)]

    def work(t):
        for m, n in rotated(shapes, t):
            got[t][m, n] = kernel.compile(M=m, N=n, target="sm_90a")

    run_threads(work)
    assert kernel.stats["compilations"] == len(shapes)
    for m, n in shapes:
        compiled = got[0][m, n]
        assert all(g[m, n] is compiled for g in got)
        assert compiled.params == ("X", "Y", "out", "sums")
        assert f'X: T.Buffer(({m}, {n}), "float32")' in compiled.lowered_ir
        assert f'sums: T.Buffer(({m},), "float32")' in compiled.lowered_ir
        assert "axpy_rowsum_kernel" in compiled.cuda_source
    again = kernel.compile(M=2, N=7, target="sm_90a")  # single-threaded afterwards
    assert 'X: T.Buffer((2, 7), "float32")' in again.lowered_ir


def test_runtime_compile_builds_once_under_threads(own_cache, monkeypatch):
    """rt.compile of one PrimFunc from 8 threads at once (disk cache off): one
    lowering and build, one object."""
    # the package's `compile` is the function
    compile_module = importlib.import_module("tile_nb.runtime.compile")
    func = make_kernel().specialize(M=5, N=9)
    builds = []
    real_build = compile_module.build

    def counting_build(*args, **kwargs):
        builds.append(threading.current_thread().name)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(compile_module, "build", counting_build)
    kernels = [None] * THREADS

    def work(t):
        kernels[t] = rt.compile(func, "sm_90a", options={"cache": False})

    run_threads(work)
    assert len(builds) == 1, builds
    assert all(k is kernels[0] for k in kernels)
    assert re.search(r"X: T\.Buffer\(\(5, 9\)", kernels[0].lowered_ir)


def test_build_once_shares_one_build_and_stores_no_failure():
    locks, table = KeyedLocks(), {}
    calls, started = [], threading.Event()

    def slow_build():
        calls.append(1)
        started.set()
        threading.Event().wait(0.2)  # the other threads arrive while this build runs
        return object()

    results = [None] * THREADS

    def work(t):
        results[t] = build_once(table, "k", slow_build, locks)

    run_threads(work)
    assert len(calls) == 1 and all(r is results[0] for r in results) and table["k"] is results[0]

    def failing():
        raise ValueError("no")

    for _ in range(2):  # a failed build stores nothing: the next caller builds (and fails) again
        with pytest.raises(ValueError, match="no"):
            build_once(table, "bad", failing, locks)
    assert "bad" not in table and len(locks) == 0


@pytest.mark.gpu
def test_launch_from_threads_on_gpu():
    """The GPU twin: 8 threads launch one kernel on CUDA tensors with mixed
    shapes; every result matches torch."""
    kernel = make_kernel()
    items = combos()

    def work(t):
        for i, (block, m, n) in enumerate(rotated(items, t)):
            X, Y = (a.cuda() for a in inputs(m, n, seed=t * 1000 + i))
            for _ in range(2):  # the second call takes the cached fast path
                check_result([r.cpu() for r in kernel(X, Y, block_M=block)], X.cpu(), Y.cpu())

    run_threads(work)
    assert kernel.stats["specializations"] == len(items)
    assert kernel.stats["compilations"] == len(items)
    X, Y = (a.cuda() for a in inputs(2, 33, seed=7))
    check_result([r.cpu() for r in kernel(X, Y)], X.cpu(), Y.cpu())


def test_autotuner_searches_each_key_once_under_threads(monkeypatch):
    """Threads calling an autotuned kernel with new shapes at once: one searches,
    the others wait for its choice."""
    import time
    import types

    from tile_nb.bench import tuning

    searches = []

    def fake_search(self, args, kwargs, configs, **overrides):
        searches.append(tuple(args[0].shape))
        time.sleep(0.05)  # long enough for the other threads to arrive while the search runs
        return types.SimpleNamespace(best_config=dict(configs[-1]), from_cache=False)

    monkeypatch.setattr(tuning, "gpu_available", lambda args: (True, None))
    monkeypatch.setattr(tile_nb.Autotuner, "_search", fake_search)
    tuned = tile_nb.autotune(configs={"block_M": [4, 8]})(make_kernel().fn)
    shapes = [(m, 5) for m in MS]
    chosen, errors = [], []

    def work(t):
        try:
            for m, n in rotated(shapes, t):
                chosen.append(tuned.config_for(torch.randn(m, n), torch.randn(m, n)))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert sorted(searches) == sorted((m, n) for m, n in shapes)  # one search per tuning key
    assert all(c == {"block_M": 8} for c in chosen) and len(chosen) == THREADS * len(shapes)
    assert tuned.stats["searched"] == len(shapes)

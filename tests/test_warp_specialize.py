"""Warp specialization on the interpreter (issue 31): `T.ws(k)` regions, `T.alloc_barrier`,
`T.mbarrier_arrive` / `T.mbarrier_wait_parity` (and tilelang's `T.barrier_arrive` /
`T.barrier_wait`), `T.tma_copy(..., barrier=)`.

Producer / consumer GEMMs in each barrier form against torch at odd shapes (M, N, K not multiples of the
tiles, sizes of 1, a dynamic M); the deadlock error (a wait that can never complete); the ordering errors of
wrong pipelines (a missing wait: a read before the TMA copy landed; a release before the read: a write to a
tile still being read); bad arguments refused at the user's line. On the GPU (marked gpu) the same kernels run
as one program in their written order (lower/written_order.py), against torch; the lowering refuses, at the
user's line, a kernel whose barriers allow no such order (a producer and a consumer each in its own loop). A
T.gemm of a stage of a 3-d shared
buffer, which the examples use, on the interpreter, through nvcc and (marked gpu) on CUDA."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import DSLError
from tile_nb.frontend.source import run_source
from tile_nb.interp import DeadlockError, InterpreterError, OrderingError
from tile_nb.lower import LoweringError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # NotLowerableWarning: the GPU refuses these
needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def pipe(A, B, block_M: int = 32, block_N: int = 16, block_K: int = 16, stages: int = 2, producer: int = 1,
         dynamic: bool = False, mistake: str = ""):
    """barrierpipe: `stages` full barriers (the producer's TMA copies land on them) then `stages` empty ones
    (the consumer releases a stage after its T.gemm)."""
    M = T.dynamic("M") if dynamic else T.const("M")
    N, K = T.const("N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float32)
    consumer = 1 - producer
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
        A_s = T.alloc_shared((stages, block_M, block_K), T.float16)
        B_s = T.alloc_shared((stages, block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        bars = T.alloc_barrier([256 if mistake == "count" else 128] * (2 * stages))
        with T.ws(consumer):
            T.clear(acc)
        for ko in range(T.ceildiv(K, block_K)):
            s = ko % stages
            with T.ws(producer):
                if mistake != "no_empty_wait":
                    T.mbarrier_wait_parity(bars[s + stages], (ko // stages) % 2 ^ 1)
                T.tma_copy(A[by * block_M, ko * block_K], A_s[s, :, :], barrier=bars[s])
                T.tma_copy(B[ko * block_K, bx * block_N], B_s[s, :, :], barrier=bars[s])
                if mistake != "no_full_arrive":
                    T.mbarrier_arrive(bars[s])
            with T.ws(consumer):
                if mistake != "no_full_wait":
                    T.mbarrier_wait_parity(
                        mbarrier=bars[s], parity=(ko // stages) % 2 ^ (mistake == "parity")
                    )
                if mistake == "early_release":
                    T.mbarrier_arrive(mbarrier=bars[s + stages])
                T.gemm(A_s[s, :, :], B_s[s, :, :], acc)
                if mistake != "early_release":
                    T.mbarrier_arrive(mbarrier=bars[s + stages])
        with T.ws(consumer):
            T.copy(acc, C[by * block_M, bx * block_N])
    return C


@tile_nb.jit
def handshake(A, B, block_M: int = 32, block_N: int = 32, block_K: int = 16, producer: int = 0):
    """copy_0_gemm_1: one stage, two single barriers (`alloc_barrier(arrive_count=128)`), T.barrier_wait /
    T.barrier_arrive, start corners as tma_copy operands."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float16)
    consumer = 1 - producer
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.float16)
        B_s = T.alloc_shared((block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        ready = T.alloc_barrier(arrive_count=128)
        done = T.alloc_barrier(arrive_count=128)
        with T.ws(consumer):
            T.clear(acc)
        for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=0):
            with T.ws(producer):
                T.barrier_wait(done, (ko + 1) % 2)
                T.tma_copy(A[by * block_M, ko * block_K], A_s, barrier=ready)
                T.tma_copy(B[ko * block_K, bx * block_N], B_s, barrier=ready)
                T.barrier_arrive(ready)
            with T.ws(consumer):
                T.barrier_wait(ready, ko % 2)
                T.gemm(A_s, B_s, acc)
                T.barrier_arrive(done)
        with T.ws(consumer):
            T.copy(acc, C[by * block_M, bx * block_N])
    return C


@tile_nb.jit
def split_n(A, B, block_M: int = 32, block_N: int = 32, block_K: int = 16, together: bool = False):
    """copy_gemm_0_1: a copy every group runs, then each group its half of the N tile (no barriers);
    `together` also runs the epilogue as `T.ws(0, 1)`."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float32)
    half = block_N // 2
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.float16)
        B0 = T.alloc_shared((block_K, half), T.float16)
        B1 = T.alloc_shared((block_K, half), T.float16)
        C_s = T.alloc_shared((block_M, block_N), T.float32)
        c0 = T.alloc_fragment((block_M, half), T.float32)
        c1 = T.alloc_fragment((block_M, half), T.float32)
        with T.ws(1):
            T.clear(c1)
        with T.ws(0):
            T.clear(c0)
        for ko in range(T.ceildiv(K, block_K)):
            T.copy(A[by * block_M, ko * block_K], A_s)
            with T.ws(1):
                T.copy(B[ko * block_K, bx * block_N + half], B1)
                T.gemm(A_s, B1, c1)
            with T.ws(0):
                T.copy(B[ko * block_K, bx * block_N], B0)
                T.gemm(A_s, B0, c0)
        if together:
            with T.ws(0):
                T.copy(c0, C_s[:, 0:half])
            with T.ws(1):
                T.copy(c1, C_s[:, half:block_N])
            with T.ws(0, 1):
                T.copy(C_s, C[by * block_M, bx * block_N])
        else:
            with T.ws(1):
                T.copy(c1, C[by * block_M, bx * block_N + half])
            with T.ws(0):
                T.copy(c0, C[by * block_M, bx * block_N])
    return C


def _inputs(M, N, K, seed=0):
    torch.manual_seed(seed)
    return torch.randn(M, K).half(), torch.randn(K, N).half()


def _ref(a, b):
    return a.float() @ b.float()


SHAPES = [(70, 45, 50), (1, 1, 1), (33, 17, 1), (1, 40, 37), (64, 32, 64)]


def _tiles(backend, block_N=32):
    """Small tiles on the interpreter (fast); on the GPU tiles that split over the block's 8 warps in 16x16
    warp tiles (a T.gemm inside a region runs over every thread of the block there: written_order.py)."""
    return {} if backend == "cpu" else dict(block_M=64, block_N=block_N)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N, K", SHAPES)
@pytest.mark.parametrize("stages, producer", [(2, 1), (3, 0), (1, 1)])
def test_barrier_pipeline_matches_torch(backend, M, N, K, stages, producer):
    a, b = _inputs(M, N, K, seed=M + N + K)
    c = pipe(a.to(backend), b.to(backend), stages=stages, producer=producer, **_tiles(backend))
    torch.testing.assert_close(c.cpu(), _ref(a, b), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_barrier_pipeline_with_a_dynamic_dim(backend):
    for M in (19, 1, 64):
        a, b = _inputs(M, 24, 40, seed=M)
        c = pipe(a.to(backend), b.to(backend), dynamic=True, **_tiles(backend))
        torch.testing.assert_close(c.cpu(), _ref(a, b), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N, K", SHAPES)
@pytest.mark.parametrize("producer", [0, 1])
def test_barrier_wait_arrive_handshake_matches_torch(backend, M, N, K, producer):
    a, b = _inputs(M, N, K, seed=2 * M + K)
    c = handshake(a.to(backend), b.to(backend), producer=producer, **_tiles(backend))
    torch.testing.assert_close(c.cpu().float(), _ref(a, b), atol=2e-2, rtol=2e-3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N, K", SHAPES)
@pytest.mark.parametrize("together", [False, True])
def test_regions_without_barriers_match_torch(backend, M, N, K, together):
    a, b = _inputs(M, N, K, seed=3 * M + N)
    c = split_n(a.to(backend), b.to(backend), together=together, **_tiles(backend, block_N=64))
    torch.testing.assert_close(c.cpu(), _ref(a, b), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_element_stores_print_and_an_allocation_inside_ws(backend):
    """T.Parallel loops, a T.print and an allocation inside T.ws regions; a barrier orders the groups."""
    @tile_nb.jit
    def mixed(A):
        N = T.const("N")
        A: T.Tensor[[N], T.float32]
        B = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, 64), threads=256) as bx:
            s = T.alloc_shared((64,), T.float32)
            bar = T.alloc_barrier(128)
            with T.ws(1):
                t = T.alloc_shared((64,), T.float32)
                for i in T.Parallel(64):
                    t[i] = T.if_then_else(bx * 64 + i < N, A[bx * 64 + i], 0.0)
                for i in T.Parallel(64):
                    s[i] = t[i] * 2.0
                T.print(s[0], msg="s0", block=0)
                T.mbarrier_arrive(bar)
            with T.ws(0):
                T.mbarrier_wait_parity(bar, 0)
                for i in T.Parallel(64):
                    if bx * 64 + i < N:
                        B[bx * 64 + i] = s[i] + 1.0
        return B

    for n in (1, 100, 128):
        a = torch.randn(n)
        torch.testing.assert_close(mixed(a.to(backend)).cpu(), a * 2 + 1)


@tile_nb.jit
def staged(A, B, block_M: int = 64, block_N: int = 64, block_K: int = 32, threads: int = 128):
    """Not warp-specialized: a T.gemm of stages of 3-d shared buffers
    (`A_s[ko % 2, :, :]`, as the examples)."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((2, block_M, block_K), T.float16)
        B_s = T.alloc_shared((2, block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(acc)
        for ko in range(T.ceildiv(K, block_K)):
            T.copy(A[by * block_M, ko * block_K], A_s[ko % 2, :, :])
            T.copy(B[ko * block_K, bx * block_N], B_s[ko % 2, :, :])
            T.gemm(A_s[ko % 2, :, :], B_s[ko % 2, :, :], acc)
        T.copy(acc, C[by * block_M, bx * block_N])
    return C


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N, K", [(70, 45, 50), (1, 1, 1), (130, 200, 97)])
def test_gemm_of_a_stage_of_a_3d_shared_buffer(backend, M, N, K):
    # failed on the H100 (2026-12-05) while wgmma read stage 0 whatever the slice; the CUDA-source checks
    # and more shapes of this kernel are in test_gemm_stage_slices.py
    a, b = _inputs(M, N, K, seed=K)
    c = staged(a.to(backend), b.to(backend))
    torch.testing.assert_close(c.cpu(), _ref(a, b), atol=1e-3, rtol=1e-3)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_gemm_of_a_stage_of_a_3d_shared_buffer_builds(arch):
    a, b = _inputs(256, 256, 96)
    assert staged.compile(a, b, target=arch, block_M=128, block_N=128).cubin


@tile_nb.jit
def dispatch(A, form: str = "elif"):
    """flashmla / MLA decode style: `tx = T.get_thread_binding()` and `if tx < 128: ... elif ...: ... else:`
    choose warp groups (a loader, a scaler, a writer chained by barriers)."""
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=384) as bx:
        s = T.alloc_shared((64,), T.float32)
        t = T.alloc_shared((64,), T.float32)
        bar = T.alloc_barrier([128, 128])
        tx = T.get_thread_binding()
        if form == "elif":
            if tx < 128:
                T.mbarrier_wait_parity(bar[1], 0)
                for i in T.Parallel(64):
                    if bx * 64 + i < N:
                        B[bx * 64 + i] = t[i] + 1.0
            elif tx >= 128 and tx < 256:
                T.mbarrier_wait_parity(bar[0], 0)
                for i in T.Parallel(64):
                    t[i] = s[i] * 2.0
                T.mbarrier_arrive(bar[1])
            else:
                T.copy(A[bx * 64], s)
                T.mbarrier_arrive(bar[0])
        else:  # the same with `not`, `or`, a reversed comparison and separate ifs
            if 256 <= tx:
                T.copy(A[bx * 64], s)
                T.mbarrier_arrive(bar[0])
            if not (tx < 128 or tx >= 256):
                T.mbarrier_wait_parity(bar[0], 0)
                for i in T.Parallel(64):
                    t[i] = s[i] * 2.0
                T.mbarrier_arrive(bar[1])
            if tx < 128:
                T.mbarrier_wait_parity(bar[1], 0)
                for i in T.Parallel(64):
                    if bx * 64 + i < N:
                        B[bx * 64 + i] = t[i] + 1.0
    return B


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", ["elif", "separate"])
@pytest.mark.parametrize("n", [1, 100, 128, 333])
def test_thread_binding_conditions_choose_warp_groups(backend, form, n):
    torch.manual_seed(n)
    a = torch.randn(n)
    torch.testing.assert_close(dispatch(a.to(backend), form=form).cpu(), a * 2 + 1)


@pytest.mark.parametrize("body, message", [
    ("T.fill(s, tx + 1)", r"the tile operation T.fill is given a region or value that depends on"),
    ("if tx < 0:\n                T.clear(s)", r"has an empty `then` branch: it holds for no warp group"),
    ("while tx < 128:\n                T.clear(s)", r"a tile operation under control flow that"),
])
def test_other_uses_of_the_thread_index_are_refused(body, message):
    src = f'''
import tile_nb
import tile_nb.language as T

@tile_nb.jit
def bad(A):
    A: T.Tensor[[8], T.float32]
    with T.Kernel(2, threads=256) as bx:
        s = T.alloc_shared((8,), T.float32)
        tx = T.get_thread_binding()
        if True:
            {body}
'''
    ns = run_source(src, {}, filename="bad_tx.py")
    with pytest.raises(DSLError, match=message) as info:
        ns["bad"](torch.randn(8))
    assert info.value.lineno is not None and info.value.lineno >= 12
    assert "block-level code" in (info.value.hint or "")


@tile_nb.jit
def unrolled_clear(A, B, wgmma: bool = False):
    """`clear_accum=(j == 0)` in an unrolled loop (flashmla's QK): a run-time
    choice, one T.gemm per branch."""
    M, N = T.const("M, N")
    A: T.Tensor[[M, 64], T.float16]
    B: T.Tensor[[64, N], T.float16]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
        A_s = T.alloc_shared((64, 64), T.float16)
        B_s = T.alloc_shared((64, 64), T.float16)
        acc = T.alloc_fragment((64, 64), T.float32)
        T.copy(A[by * 64, 0], A_s)
        T.copy(B[0, bx * 64], B_s)
        T.fill(acc, 7.0)  # must be cleared by the first product
        for j in T.unroll(4):
            if wgmma:
                T.wgmma_gemm(
                    A_s[:, j * 16 : (j + 1) * 16], B_s[j * 16 : (j + 1) * 16, :], acc, clear_accum=(j == 0)
                )
                T.wait_wgmma(0)
            else:
                T.gemm(A_s[:, j * 16:(j + 1) * 16], B_s[j * 16:(j + 1) * 16, :], acc, clear_accum=(j == 0))
        T.fence_proxy_async()
        T.copy(acc, C[by * 64, bx * 64])
    return C


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("wgmma", [False, True])
@pytest.mark.parametrize("M, N", [(70, 45), (1, 1), (128, 130)])
def test_a_run_time_clear_accum_clears_once(backend, wgmma, M, N):
    a, b = _inputs(M, N, 64, seed=M + N)
    c = unrolled_clear(a.to(backend), b.to(backend), wgmma=wgmma)
    torch.testing.assert_close(c.cpu(), _ref(a, b), atol=1e-3, rtol=1e-3)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_a_run_time_clear_accum_builds(arch):
    a, b = _inputs(128, 128, 64)
    assert unrolled_clear.compile(a, b, target=arch).cubin


# ---- wrong pipelines ---------------------------------------------------------------------------------------

def test_a_missing_wait_is_a_read_before_the_copy_landed():
    a, b = _inputs(70, 45, 50)
    with pytest.raises(
        OrderingError,
        match=r"warp group 0 reads A_s\[0:1, 0:32, 0:16\] before the T.tma_copy "
        r"at line \d+ into it has landed: that copy completes with phase 0 of bars\[0\]",
    ) as info:
        pipe(a, b, mistake="no_full_wait")
    assert "T.gemm(A_s[s, :, :], B_s[s, :, :], acc)" in info.value.source_line()
    assert "T.mbarrier_wait_parity(bars[0], 0)" in info.value.hint


def test_a_release_before_the_read_is_a_write_to_a_tile_still_being_read():
    a, b = _inputs(70, 45, 50)
    with pytest.raises(
        OrderingError,
        match=r"warp group 1 writes A_s\[0:1, 0:32, 0:16\], still being read by "
        r"warp group 0 \(line \d+\), with no barrier between them",
    ) as info:
        pipe(a, b, mistake="early_release")
    assert "T.tma_copy(A[by * block_M, ko * block_K], A_s[s, :, :]" in info.value.source_line()


def test_a_producer_that_does_not_wait_for_the_empty_barrier_overwrites_a_copy_in_flight():
    a, b = _inputs(70, 45, 50)
    with pytest.raises(OrderingError, match=r"warp group 1 overwrites A_s\[0:1, 0:32, 0:16\] before the "
                       r"T.tma_copy at line \d+ into it has landed"):
        pipe(a, b, mistake="no_empty_wait")


def test_a_wait_that_never_completes_is_a_deadlock_naming_barrier_phase_and_arrivals():
    a, b = _inputs(70, 45, 50)
    with pytest.raises(DeadlockError, match="deadlock: no warp group can go on") as info:
        pipe(a, b, mistake="parity")
    text = str(info.value)
    assert (
        "warp group 0 waits at line" in text
        and "on bars[0] for parity 1: it is in phase 1 with 0 of 128 arrivals" in text
    )
    assert (
        "warp group 1 waits at line" in text
        and "on bars[2] for parity 0: it is in phase 0 with 0 of 128 arrivals" in text
    )
    assert "T.mbarrier_wait_parity(" in info.value.source_line()


@pytest.mark.parametrize(
    "mistake, waiting",
    [
        (
            "no_full_arrive",
            "warp group 0 waits at line \\d+ on bars\\[0\\] for parity 0: it is in phase 0 with 0 of 128",
        ),
        (
            "count",
            "warp group 0 waits at line \\d+ on bars\\[0\\] for parity 0: it is in phase 0 with 128 of 256",
        ),
    ],
)
def test_missing_arrivals_are_a_deadlock(mistake, waiting):
    a, b = _inputs(40, 20, 30)
    with pytest.raises(DeadlockError, match=waiting):
        pipe(a, b, mistake=mistake)


def test_a_statement_every_group_runs_deadlocks_when_one_group_waits_forever():
    @tile_nb.jit
    def stuck(A):
        A: T.Tensor[[8], T.float32]
        with T.Kernel(1, threads=256) as _:
            bar = T.alloc_barrier(128)
            s = T.alloc_shared((8,), T.float32)
            with T.ws(0):
                T.mbarrier_wait_parity(bar, 0)
            T.copy(A, s)

    with pytest.raises(
        DeadlockError,
        match=r"(?s)deadlock.*warp group 0 waits at line \d+ on bar\[0\] for "
        r"parity 0.*warp group 1 waits at line \d+ for warp groups \[0\] to reach the statement",
    ):
        stuck(torch.randn(8))


def test_a_group_that_ends_while_another_waits_is_a_deadlock_at_the_wait():
    @tile_nb.jit
    def orphan(A):
        A: T.Tensor[[8], T.float32]
        with T.Kernel(1, threads=256) as _:
            bar = T.alloc_barrier([128, 128])
            with T.ws(1):
                T.mbarrier_arrive(bar[0])
            with T.ws(0):
                T.mbarrier_wait_parity(bar[0], 0)
                T.mbarrier_wait_parity(bar[1], 0)

    with pytest.raises(
        DeadlockError,
        match=r"(?s)warp group 0 waits at line \d+ on bar\[1\] for parity 0: it is in "
        r"phase 0 with 0 of 128 arrivals.*warp group 1 ended",
    ) as info:
        orphan(torch.randn(8))
    assert "T.mbarrier_wait_parity(bar[1], 0)" in info.value.source_line()

    @tile_nb.jit
    def orphan_later(A):  # group 0 blocks first, then group 1 runs to the end
        A: T.Tensor[[8], T.float32]
        with T.Kernel(1, threads=256) as _:
            bar = T.alloc_barrier([128, 128])
            with T.ws(1):
                T.mbarrier_wait_parity(bar[0], 0)
            with T.ws(0):
                T.mbarrier_arrive(bar[0])
                T.mbarrier_wait_parity(bar[1], 0)

    with pytest.raises(
        DeadlockError, match=r"(?s)warp group 0 waits at line \d+ on bar\[1\].*warp group 1 ended"
    ) as info:
        orphan_later(torch.randn(8))
    assert "T.mbarrier_wait_parity(bar[1], 0)" in info.value.source_line()


@tile_nb.jit
def shared_frag(A, use: str = "tile"):
    """A fragment written by warp group 0 and read by group 1 (`use`: by a T.copy or element by element)."""
    A: T.Tensor[[16], T.float32]
    B = T.empty((16,), T.float32)
    with T.Kernel(1, threads=256) as _:
        frag = T.alloc_fragment((16,), T.float32)
        bar = T.alloc_barrier(128)
        T.clear(frag)
        with T.ws(0):
            T.copy(A, frag)
            T.mbarrier_arrive(bar)
        with T.ws(1):
            T.mbarrier_wait_parity(bar, 0)
            if use == "tile":
                T.copy(frag, B)
            else:
                for i in T.Parallel(16):
                    B[i] = frag[i]
    return B


@pytest.mark.parametrize("use", ["tile", "element"])
def test_a_register_buffer_used_by_two_groups_is_refused(use):
    """A fragment lives in registers: each group would have its own copy on the GPU, the interpreter one."""
    with pytest.raises(
        OrderingError,
        match=r"frag \(local.fragment\) is used by warp group 1 here and by warp "
        r"group 0 at line \d+: it lives in registers",
    ) as info:
        shared_frag(torch.randn(16), use=use)
    assert ("T.copy(frag, B)" if use == "tile" else "B[i] = frag[i]") in info.value.source_line()


def test_more_arrivals_than_a_phase_expects_are_refused():
    @tile_nb.jit
    def spill(A):
        A: T.Tensor[[8], T.float32]
        with T.Kernel(1, threads=256) as _:
            bar = T.alloc_barrier(64)
            with T.ws(1):
                T.mbarrier_arrive(bar)

    with pytest.raises(
        InterpreterError,
        match=r"128 threads \(warp groups \[1\]\) arrive at bar\[0\], whose phase 0 "
        r"expects 64 arrivals and has 0",
    ) as info:
        spill(torch.randn(8))
    assert "T.mbarrier_arrive(bar)" in info.value.source_line()


def test_arrivals_outside_ws_count_every_thread_of_the_block():
    """flashmla's Q load: a tma_copy, an arrive and a wait outside any T.ws (384 threads arrive at once)."""
    @tile_nb.jit
    def q_load(A):
        A: T.Tensor[[5, 3], T.float32]
        B = T.empty((5, 3), T.float32)
        with T.Kernel(1, threads=384) as _:
            bar = T.alloc_barrier(arrive_count=384)
            s = T.alloc_shared((5, 3), T.float32)
            T.tma_copy(A[0:5, 0:3], s, barrier=bar)
            T.barrier_arrive(bar)
            T.barrier_wait(bar, 0)
            with T.ws(2):
                T.copy(s, B)
        return B

    a = torch.randn(5, 3)
    torch.testing.assert_close(q_load(a), a)


# ---- the language ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "body, message",
    [
        (
            "with T.ws(2):\n                T.clear(s)",
            r"T.ws\(...\) takes warp group ids, compile-time ints in \[0, 2\)",
        ),
        ("with T.ws(0):\n                with T.ws(1):\n                    T.clear(s)",
     r"T.ws\(1\) is inside T.ws\(0\): a region inside another runs in some of its warp groups only"),
        (
            "T.alloc_barrier(0)",
            r"T.alloc_barrier\(arrive_count=...\) takes an int or a list of ints in \[1, 1024\]",
        ),
        ("T.mbarrier_wait_parity(T.alloc_barrier(1), 2)", r"parity=...\) must be 0 or 1; got 2"),
        ("T.mbarrier_arrive(s)", "mbarrier must be a barrier from T.alloc_barrier"),
        ("T.tma_copy(A[0:8], s)", r"T.tma_copy\(src, dst, barrier=...\): a load needs the mbarrier"),
    ],
)
def test_bad_arguments_are_refused_at_the_users_line(body, message):
    src = f'''
import tile_nb
import tile_nb.language as T

@tile_nb.jit
def bad(A):
    A: T.Tensor[[8], T.float32]
    with T.Kernel(1, threads=256) as _:
        s = T.alloc_shared((8,), T.float32)
        if True:
            {body}
'''
    ns = run_source(src, {}, filename="bad_ws.py")
    with pytest.raises(DSLError, match=message) as info:
        ns["bad"](torch.randn(8))
    assert info.value.lineno is not None and info.value.lineno >= 11


# ---- the GPU -----------------------------------------------------------------------------------------------

WRITTEN_ORDER = "T.ws regions and mbarriers run as one program in their written order"


def _notes(kernel, *args, arch="sm_90a", **kwargs):
    return kernel.compile(*args, target=arch, **kwargs).plan["notes"]


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("kernel, kwargs", [
    (pipe, dict(stages=2, producer=1)), (pipe, dict(stages=3, producer=0)), (handshake, {}),
    (handshake, dict(producer=1)), (split_n, dict(together=True)),
], ids=["pipe-2", "pipe-3", "handshake-0", "handshake-1", "split-n"])
def test_the_cuda_lowering_runs_ws_kernels_in_their_written_order(kernel, kwargs, arch):
    """Built for the GPU with the plan saying how: no T.ws region, no mbarrier of the user's in the code."""
    a, b = _inputs(256, 256, 64)
    compiled = kernel.compile(a, b, target=arch, block_M=128, block_N=128, block_K=32, **kwargs)
    assert any(n.startswith(WRITTEN_ORDER) for n in compiled.plan["notes"]), compiled.plan["notes"]
    assert compiled.cubin


def test_concurrent_regions_written_consumer_first_run_producer_first():
    """`if tx < 128: <waits for the others> elif ...: <waits for the last> else: <loads>` (the dispatch
    kernel's elif form): the regions run concurrently; the written order would wait first, so the GPU runs
    them last to first, and the plan says so."""
    (note,) = [n for n in _notes(dispatch, torch.randn(100), form="elif") if n.startswith(WRITTEN_ORDER)]
    # the `elif` / `else` pair is one region of groups 1 and 2 around two regions
    assert "the regions of warp groups [1, 2] and [0] run in that order" in note, note
    assert "the regions of warp groups [2] and [1] run in that order" in note, note
    (plain,) = [n for n in _notes(dispatch, torch.randn(100), form="separate") if n.startswith(WRITTEN_ORDER)]
    assert "run in that order" not in plain


@tile_nb.jit
def own_loops(A, n_tiles: int = 4):
    """A producer and a consumer each with its own loop over one shared stage (FlashMLA's form): the groups
    must alternate, which no order of the two regions does."""
    A: T.Tensor[[n_tiles * 64], T.float32]
    B = T.empty((n_tiles * 64,), T.float32)
    with T.Kernel(1, threads=256) as _:
        s = T.alloc_shared((64,), T.float32)
        full = T.alloc_barrier(128)
        empty = T.alloc_barrier(128)
        with T.ws(0):
            for i in range(n_tiles):
                T.mbarrier_wait_parity(empty, i % 2 ^ 1)
                T.copy(A[i * 64], s)
                T.mbarrier_arrive(full)
        with T.ws(1):
            for i in range(n_tiles):
                T.mbarrier_wait_parity(full, i % 2)
                for j in T.Parallel(64):
                    B[i * 64 + j] = s[j] * 3.0
                T.mbarrier_arrive(empty)
    return B


def test_regions_that_must_alternate_run_on_the_interpreter_and_are_refused_for_the_gpu():
    a = torch.randn(4 * 64)
    torch.testing.assert_close(own_loops(a), a * 3)
    with pytest.raises(LoweringError, match=r"comes, in the written order, before the phase it waits for "
                                            r"completes \(empty\[0\] is in phase 0") as info:
        own_loops.compile(a, target="sm_90a")
    assert "T.mbarrier_wait_parity(empty, i % 2 ^ 1)" in info.value.source_line()
    assert "producing region before the consuming one" in info.value.hint


def test_a_barrier_index_the_compiler_cannot_know_is_refused_for_the_gpu():
    @tile_nb.jit
    def by_block(A):
        A: T.Tensor[[2, 64], T.float32]
        B = T.empty((2, 64), T.float32)
        with T.Kernel(2, threads=256) as bx:
            s = T.alloc_shared((64,), T.float32)
            bars = T.alloc_barrier([128, 128])
            with T.ws(0):
                T.copy(A[bx, 0], s)
                T.mbarrier_arrive(bars[bx])
            with T.ws(1):
                T.mbarrier_wait_parity(bars[bx], 0)
                T.copy(s, B[bx, 0])
        return B

    a = torch.randn(2, 64)
    torch.testing.assert_close(by_block(a), a)
    with pytest.raises(LoweringError, match=r"the index into bars is not known at compile time") as info:
        by_block.compile(a, target="sm_90a")
    assert "T.mbarrier_arrive(bars[bx])" in info.value.source_line()


@pytest.mark.parametrize("use", ["tile", "element"])
def test_a_register_buffer_two_groups_use_is_refused_for_the_gpu_too(use):
    with pytest.raises(LoweringError, match=r"frag \(local.fragment\) is used by warp groups \[1\] here and "
                                            r"by warp groups \[0\] at line \d+") as info:
        shared_frag.compile(torch.randn(16), target="sm_90a", use=use)
    assert ("T.copy(frag, B)" if use == "tile" else "B[i] = frag[i]") in info.value.source_line()

"""`T.Pipelined(start, stop, num_stages=...)`, tilelang's start/stop form: k runs start..stop-1 on the
interpreter and on the GPU (cp.async and TMA pipelines), as a loop from 0 whose variable is offset by start;
the keywords tilelang has and tile_nb does not implement yet are refused by name."""
import re

import pytest
import torch
from kernels.hopper import why_no_hopper_plan

import tile_nb
import tile_nb.language as T
from tile_nb import errors

SM80, SM90 = "cuda -arch=sm_80", "cuda -arch=sm_90a"


@tile_nb.jit
def row_sums_from(A, out, start: int = 1, block_K: int = 16, stages: int = 2, by_keyword: bool = False):
    """out[m] = sum of A[m, start * block_K:] (tiles of block_K columns from tile `start` on); `by_keyword`
    gives the bounds as tilelang's `start=` / `stop=` keywords."""
    M, K = T.const('M, K')
    A: T.Tensor[[M, K], T.float32]
    out: T.Tensor[[M], T.float32]
    with T.Kernel(M, threads=32) as bx:
        acc = T.alloc_fragment((1,), T.float32)
        tile = T.alloc_shared((1, block_K), T.float32)
        T.clear(acc)
        loop = T.Pipelined(start=start, stop=T.ceildiv(K, block_K), num_stages=stages) if by_keyword else \
            T.Pipelined(start, T.ceildiv(K, block_K), num_stages=stages)
        for k in loop:
            T.copy(A[bx, k * block_K], tile)
            for i in T.serial(block_K):
                acc[0] += tile[0, i]
        out[bx] = acc[0]


@tile_nb.jit
def gemm_k_range(A, B, C, k_first: int = 1, k_last: int = 3, explicit: bool = False, block_M: int = 64,
                 block_N: int = 64, block_K: int = 32, stages: int = 3):
    """C = A[:, k_first*block_K : k_last*block_K] @ B[k_first*block_K : k_last*block_K, :]; `explicit` writes
    the same loop as a zero-based one with the offset added by hand."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), T.float16)
        B_shared = T.alloc_shared((block_K, block_N), T.float16)
        C_local = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_local)
        loop = T.Pipelined(k_last - k_first, num_stages=stages) if explicit else \
            T.Pipelined(k_first, k_last, num_stages=stages)
        for k in loop:
            kk = k_first + k if explicit else k
            T.copy(A[bx * block_M, kk * block_K], A_shared)
            T.copy(B[kk * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[bx * block_M, by * block_N])


def _row_sums_reference(A, start, block_K):
    return A.double()[:, start * block_K:].sum(1).float()


def _gemm_reference(A, B, lo, hi):
    return (A.double()[:, lo:hi] @ B.double()[lo:hi]).float()


# ---- the interpreter ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("M,K,start", [(3, 70, 1), (1, 1, 0), (1, 1, 1), (5, 33, 2), (2, 64, 4), (4, 100, 9)])
@pytest.mark.parametrize("by_keyword", [False, True])
def test_a_sum_from_a_start_tile_matches_torch(M, K, start, by_keyword):
    """Starts past the last tile (stop <= start) run no iteration, as range() does."""
    A = torch.randn(M, K)
    out = torch.full((M,), 7.0)
    row_sums_from(A, out, start=start, by_keyword=by_keyword)
    torch.testing.assert_close(out, _row_sums_reference(A, start, 16), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loop,message", [
    ("T.Pipelined(0, start=0, stop=4)", r"both by position \(1\) and by keyword \(start, stop\)"),
    ("T.Pipelined(start=1)", r"T.Pipelined\(start=...\) needs stop= as well"),
])
def test_keyword_bounds_are_checked(loop, message):
    source = f"""
import tile_nb.language as T

def keyword_bounds(out):
    out: T.Tensor[[4], T.float32]
    with T.Kernel(1, threads=32) as bx:
        for k in {loop}:
            out[k] = 1.0
"""
    kernel = tile_nb.jit(tile_nb.run_source(source, filename="keyword_bounds.py")["keyword_bounds"])
    with pytest.raises(errors.DSLError, match=message) as info:
        kernel(torch.zeros(4))
    assert "keyword_bounds.py" in str(info.value)


@pytest.mark.parametrize("M,N,K,k_first,k_last", [(70, 90, 160, 1, 4), (1, 1, 96, 2, 3), (33, 65, 128, 0, 4),
                                                  (64, 64, 64, 1, 1)])
def test_a_gemm_over_a_k_range_matches_torch(M, N, K, k_first, k_last):
    A, B = torch.randn(M, K).half(), torch.randn(K, N).half()
    C = torch.full((M, N), 3.0)
    gemm_k_range(A, B, C, k_first=k_first, k_last=k_last)
    torch.testing.assert_close(C, _gemm_reference(A, B, 32 * k_first, 32 * k_last), rtol=1e-3, atol=1e-3)


def test_one_bound_is_the_trip_count_and_a_zero_start_builds_the_same_loop():
    A, out = torch.randn(2, 48), torch.zeros(2)
    zero_start = row_sums_from.specialize(A, out, start=0)
    assert "T.serial(3, annotations={\"num_stages\": 2})" in zero_start.script()
    assert "(0 + k)" not in zero_start.script()


def test_the_start_stop_loop_is_the_zero_based_loop_with_the_offset_added():
    """What the lowering receives: the same phase-2 IR as the loop written from
    0 with `k_first + k` by hand."""
    by_bounds = gemm_k_range.specialize(M=256, N=256, K=256)
    by_hand = gemm_k_range.specialize(M=256, N=256, K=256, explicit=True)
    assert by_bounds.script() == by_hand.script()
    assert "T.serial(2, annotations={\"num_stages\": 3})" in by_bounds.script()
    assert "(1 + k) * 32" in by_bounds.script()


def test_the_template_keeps_symbolic_bounds_and_never_a_negative_trip_count():
    text = row_sums_from.template().script()
    assert re.search(r"T\.serial\(T\.max\(.*K.* - 1, 0\)", text), text


# ---- compile-only: the generated CUDA loops over the right range -------------------------------------------

def test_cp_async_pipeline_cuda_runs_the_k_range():
    kernel = gemm_k_range.compile(M=256, N=256, K=256, block_M=128, block_N=128, target=SM80)
    src = kernel.cuda_source
    assert "cp_async" in src and "for (int k = 0; k < 2; ++k)" in src  # tiles 1 and 2: two iterations
    # the prologue loads tiles 1 and 2 of A (columns 32 and 64) and of B (rows 32 and 64 of 256 columns)
    a_offsets = re.findall(r"A_ptr\[.*\+ (\d+)\)\]\)\), 16\)", src)
    b_offsets = re.findall(r"B_ptr\[.*\+ (\d+)\)\]\)\), 16\)", src)
    assert a_offsets[:2] == ["32", "64"] and b_offsets[:2] == ["8192", "16384"], (a_offsets, b_offsets)


def test_tma_pipeline_cuda_runs_the_k_range():
    kernel = gemm_k_range.compile(M=256, N=256, K=256, block_M=128, block_N=128, target=SM90)
    src = kernel.cuda_source
    assert "cp.async.bulk.tensor" in src
    assert re.search(r"for \(int k\w* = 0; k\w* < 2; \+\+k\w*\)", src)
    loads = [line for line in src.splitlines() if "tnb_tma_load_2d((" in line]
    assert loads and all(re.search(r"\(\(k\w* \* 32\) \+ 32\)", line) for line in loads), loads


def test_a_zero_start_compiles_to_the_kernel_of_the_one_bound_form():
    a = gemm_k_range.compile(M=256, N=256, K=256, k_first=0, k_last=8, target=SM80)
    b = gemm_k_range.compile(M=256, N=256, K=256, k_first=0, k_last=8, explicit=True, target=SM80)
    assert a.cuda_source == b.cuda_source and "for (int k = 0; k < 8; ++k)" in a.cuda_source


# ---- what is refused ---------------------------------------------------------------------------------------

def _loop_kernel(make_loop):
    @tile_nb.jit
    def loop(X):
        X: T.Tensor[[8], T.float32]
        with T.Kernel(1, threads=32) as bx:
            for k in make_loop():  # error: the T.Pipelined call
                X[k] = 1.0
    return loop


@pytest.mark.parametrize(
    "make_loop,message",
    [
        (
            lambda: T.Pipelined(0, 4, 3),
            "T.Pipelined takes a trip count, or a start and a stop; got 3 positional",
        ),
        (lambda: T.Pipelined(), "got 0 positional arguments"),
        (lambda: T.Pipelined(4, num_stages=-1), "T.Pipelined(num_stages=...) must be an int >= 0; got -1"),
        (lambda: T.Pipelined(4, num_stages=2.0), "must be an int >= 0; got 2.0"),
        (lambda: T.Pipelined(4, num_stages=True), "must be an int >= 0; got True"),
        (
            lambda: T.Pipelined(4, order=[0, 1]),
            "T.Pipelined(order=...) (tilelang's hand-written pipeline schedule) is "
            "not supported yet; got order=[0, 1]",
        ),
        (lambda: T.Pipelined(4, stage=[0, 0]), "T.Pipelined(stage=...)"),
        (lambda: T.Pipelined(4, sync=[[0, 1]]), "T.Pipelined(sync=...)"),
        (lambda: T.Pipelined(4, group=[[0], [1]]), "T.Pipelined(group=...)"),
        (lambda: T.Pipelined(4, stages=2), "T.Pipelined got an unexpected keyword argument 'stages'"),
        (lambda: T.Pipelined(0.5, 4), "T.Pipelined bounds must be integer expressions; got 0.5"),
    ],
)
def test_malformed_pipelined_calls_are_refused_at_their_line(make_loop, message):
    kernel = _loop_kernel(make_loop)
    with pytest.raises(errors.DSLError) as info:
        kernel(torch.zeros(8))
    assert message in info.value.message
    assert "# error: the T.Pipelined call" in info.value.source_line()
    if "positional" in message:
        assert "num_stages is a keyword" in info.value.hint


@pytest.mark.parametrize(
    "make_loop",
    [
        lambda: T.Pipelined(8, num_stages=0),
        lambda: T.Pipelined(0, 8, num_stages=1, order=None, stage=None, sync=None, group=None),
    ],
)
def test_no_stages_and_tilelangs_unset_keywords_are_accepted(make_loop):
    X = torch.zeros(8)
    _loop_kernel(make_loop)(X)
    assert torch.equal(X, torch.ones(8))


# ---- on the GPU --------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("tma", ["1", "0"])
@pytest.mark.parametrize(
    "M,N,K,k_first,k_last",
    [(200, 136, 256, 2, 7), (64, 64, 96, 1, 3), (1, 64, 64, 1, 2), (33, 70, 128, 1, 4)],
)
def test_gpu_a_gemm_over_a_k_range_matches_torch(M, N, K, k_first, k_last, tma, monkeypatch):
    """TMA (the H200's default for this GEMM where B's rows are 16-byte multiples)
    and cp.async (TILE_NB_TMA=0)."""
    monkeypatch.setenv("TILE_NB_TMA", tma)
    A, B = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    C = torch.full((M, N), 3.0, device="cuda")
    plan = gemm_k_range.compile(A, B, C, k_first=k_first, k_last=k_last).plan
    hopper = why_no_hopper_plan() is None  # TILE_NB_ARCH=compute_80 builds no TMA pipeline
    assert (plan["pipeline_kind"] == "tma") == (hopper and tma == "1" and N % 8 == 0), plan["pipeline"]
    gemm_k_range(A, B, C, k_first=k_first, k_last=k_last)
    torch.testing.assert_close(C, _gemm_reference(A, B, 32 * k_first, 32 * k_last), rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("M,K,start", [(3, 70, 1), (1, 1, 1), (5, 33, 2)])
def test_gpu_a_sum_from_a_start_tile_matches_torch(M, K, start):
    A = torch.randn(M, K, device="cuda")
    out = torch.full((M,), 7.0, device="cuda")
    row_sums_from(A, out, start=start)
    torch.testing.assert_close(out, _row_sums_reference(A, start, 16), rtol=1e-5, atol=1e-5)

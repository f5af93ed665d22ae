"""Two lowering steps that tilelang's MLA decode examples need on the GPU (64 query heads per CTA, 256
threads, head dim 512):

- the scores and the output accumulators share one warp grid (lower/analysis/plan.py `_share_row_warps`): each
  chose its own (2 x 4 and 1 x 8 warps), so the row statistics that join them (`scores_max_prev`) needed two
  register layouts and the kernel was refused;
- shared tiles whose uses do not overlap share bytes when the pool would not fit otherwise (`_reusable_lives`,
  budget.layout_pool_reusing): the K/V stages are done with when the output is staged, 290 -> 226 KiB.

The interpreter is unaffected by either (it has no register layouts or pool); the CPU tests here read the plan
and the generated CUDA, the gpu tests compare the GPU with torch."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.backend.target import resolve_target
from tile_nb.lower.analysis.layout import MmaAccLayout, WgmmaAccLayout
from tile_nb.lower.analysis.plan import make_plan
from tile_nb.lower.options import LoweringOptions

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def decode(Q, KV, block_H: int = 64, block_N: int = 64, threads: int = 256, stages: int = 2,
           stage_output: bool = True):
    """Softmax(Q K^T) V over one K = V tensor, MLA decode's shape of loop: 64 rows of Q per CTA, the scores'
    running max kept in `scores_max_prev`, the output staged through shared memory (`stage_output`)."""
    H, S, D = T.const("H, S, D")
    Q: T.Tensor[[H, D], T.float16]
    KV: T.Tensor[[S, D], T.float16]
    O = T.empty((H, D), T.float16)
    with T.Kernel(T.ceildiv(H, block_H), threads=threads) as hid:
        Q_shared = T.alloc_shared([block_H, D], T.float16)
        KV_shared = T.alloc_shared([block_N, D], T.float16)
        S_shared = T.alloc_shared([block_H, block_N], T.float16)
        O_shared = T.alloc_shared([block_H, D], T.float16)
        acc_s = T.alloc_fragment([block_H, block_N], T.float32)
        acc_o = T.alloc_fragment([block_H, D], T.float32)
        scores_max = T.alloc_fragment([block_H], T.float32)
        scores_max_prev = T.alloc_fragment([block_H], T.float32)
        scores_scale = T.alloc_fragment([block_H], T.float32)
        scores_sum = T.alloc_fragment([block_H], T.float32)
        logsum = T.alloc_fragment([block_H], T.float32)
        T.copy(Q[hid * block_H, 0], Q_shared)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, -T.infinity(T.float32))
        for k in T.Pipelined(T.ceildiv(S, block_N), num_stages=stages):
            T.copy(KV[k * block_N, 0], KV_shared)
            T.gemm(Q_shared, KV_shared, acc_s, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(block_H, block_N):
                acc_s[i, j] = T.if_then_else(k * block_N + j < S, acc_s[i, j], -T.infinity(T.float32))
            T.copy(scores_max, scores_max_prev)
            T.fill(scores_max, -T.infinity(T.float32))
            T.reduce_max(acc_s, scores_max, dim=1, clear=False)
            for i in T.Parallel(block_H):
                scores_max[i] = T.max(scores_max[i], scores_max_prev[i])
            for i in T.Parallel(block_H):
                scores_scale[i] = T.exp2(scores_max_prev[i] - scores_max[i])
            for i, j in T.Parallel(block_H, block_N):
                acc_s[i, j] = T.exp2(acc_s[i, j] - scores_max[i])
            T.reduce_sum(acc_s, scores_sum, dim=1)
            T.copy(acc_s, S_shared)
            for i in T.Parallel(block_H):
                logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
            for i, j in T.Parallel(block_H, D):
                acc_o[i, j] *= scores_scale[i]
            T.gemm(S_shared, KV_shared, acc_o)
        for i, j in T.Parallel(block_H, D):
            acc_o[i, j] /= logsum[i]
        if stage_output:
            T.copy(acc_o, O_shared)
            T.copy(O_shared, O[hid * block_H, 0])
        else:
            T.copy(acc_o, O[hid * block_H, 0])
    return O


def _inputs(H, S, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(H, D, generator=g).half(), (torch.randn(S, D, generator=g) / 4).half()


def _reference(q, kv):
    scores = q.double() @ kv.double().T * 0.6931471805599453  # exp2 of the raw scores: e^(s ln 2)
    return torch.softmax(scores, dim=-1) @ kv.double()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("H, S, D", [(64, 200, 512), (64, 64, 256), (100, 1, 128)])
def test_the_decode_agrees_with_torch(H, S, D, backend):
    q, kv = _inputs(H, S, D, seed=S)
    out = decode(q.to(backend), kv.to(backend))
    torch.testing.assert_close(out.cpu().double(), _reference(q, kv), atol=2e-2, rtol=2e-2)


def _plan(D, options=None, **kw):
    q, kv = _inputs(64, 200, D)
    return make_plan(decode.specialize(q, kv, **kw), resolve_target("sm_90a"), options)


@pytest.mark.parametrize("D", [256, 512])
def test_the_scores_and_the_output_share_one_warp_grid(D):
    # on mma.sync (at D=256 the warpgroups would split the columns on wgmma: test_wgmma_column_split.py)
    plan = _plan(D, options=LoweringOptions(wgmma_column_split=False))
    accumulators = {b.name: a for b, a in plan.accumulators.items()}
    acc_s, acc_o = accumulators["acc_s"], accumulators["acc_o"]
    assert isinstance(acc_s, MmaAccLayout) and isinstance(acc_o, MmaAccLayout)
    # 64 rows cannot put all 8 warps along M; each alone would choose 2 x 4 (64 x 64) and 1 x 8 (64 x D)
    assert (acc_s.wm, acc_s.wn) == (acc_o.wm, acc_o.wn) == (2, 4)


def test_tiles_used_one_after_the_other_share_bytes_only_when_the_pool_would_not_fit():
    plan = _plan(512)  # Q 64 KiB, K/V 2 x 64 KiB, S 8 KiB, O 64 KiB: 264 KiB laid one after another
    tiles = {b.name: t for b, t in plan.shared.items()}
    assert plan.pool_bytes <= 227 * 1024
    assert ("O_shared", "KV_shared") in plan.shared_reuse
    o, kv = tiles["O_shared"], tiles["KV_shared"]
    assert o.byte_offset < kv.byte_offset + kv.nbytes and kv.byte_offset < o.byte_offset + o.nbytes
    q = tiles["Q_shared"]  # live with K/V: never on their bytes
    assert q.byte_offset >= kv.byte_offset + kv.nbytes or kv.byte_offset >= q.byte_offset + q.nbytes
    small = _plan(128)  # fits as laid out: nothing shares
    assert small.shared_reuse == ()
    ends = sorted((t.byte_offset, t.byte_offset + t.nbytes) for t in small.shared.values())
    assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:], strict=False))


def test_on_wgmma_the_output_still_shares_the_kv_bytes():
    # head dim 512 with the output staged: 64 rows on two warpgroups split the columns (wgmma), whose
    # operands' groups are waited for before the barrier that precedes O's first write
    plan = _plan(512)
    assert all(isinstance(a, WgmmaAccLayout) and a.col_groups == 2 for a in plan.accumulators.values())
    assert plan.pool_bytes <= 227 * 1024
    assert ("O_shared", "KV_shared") in plan.shared_reuse
    tiles = {b.name: t for b, t in plan.shared.items()}
    q, kv = tiles["Q_shared"], tiles["KV_shared"]
    assert q.byte_offset >= kv.byte_offset + kv.nbytes or kv.byte_offset >= q.byte_offset + q.nbytes


def test_a_wgmma_column_split_that_does_not_build_gives_way_to_mma_sync_and_says_so(monkeypatch):
    from tile_nb.lower.analysis import plan as plan_module

    real = plan_module._make_plan

    def column_split_refused(func, target, options, column_split, gathers=True):
        if column_split:
            raise tile_nb.lower.LoweringError("the kernel needs 300.0 KiB of shared memory per block")
        return real(func, target, options, column_split, gathers)

    monkeypatch.setattr(plan_module, "_make_plan", column_split_refused)
    plan = _plan(256)
    assert all(isinstance(a, MmaAccLayout) for a in plan.accumulators.values())
    assert any("splitting a T.gemm's columns would not build (the kernel needs 300.0 KiB" in n
               for n in plan.notes), plan.notes
    with pytest.raises(tile_nb.lower.LoweringError, match="300.0 KiB"):
        _plan(256, options=LoweringOptions(wgmma_column_split=True))


def test_a_barrier_and_the_copies_wait_come_before_the_reused_bytes_are_written():
    q, kv = _inputs(64, 200, 512)
    source = decode.compile(q, kv, target="sm_90a").cuda_source
    body = source[source.index("__global__ void __launch_bounds__(256) decode_kernel("):]
    after_loop = body[body.rindex("acc_o_ptr[0] = (acc_o_ptr[0] / logsum_ptr[0]);") - 200:]
    first_store = after_loop.index("tnb_vst_float32x2_float16")
    assert "tnb_cp_async_wait_0();" in after_loop[:first_store]
    last_barrier = after_loop.rfind("tnb_cta_sync();", 0, first_store)
    assert last_barrier > after_loop.index("acc_o_ptr[0] = (acc_o_ptr[0]")


def test_wgmma_operands_never_share_bytes():
    # 128 threads: one warpgroup, so both T.gemm run on wgmma and read Q, K/V and S asynchronously
    with pytest.raises(tile_nb.lower.LoweringError, match="shared memory per block"):
        _plan(512, threads=128, stages=3)


@needs_nvcc
def test_the_mla_shaped_decode_builds_for_sm90a_without_spills():
    q, kv = _inputs(64, 200, 512)
    kernel = decode.compile(q, kv, target="sm_90a")
    resources = kernel.resources
    assert resources.spill_stores == 0 and resources.spill_loads == 0, resources


@tile_nb.jit
def two_kernels(X, rows: int = 512):
    """Y = 2 X through a [rows, 128] float32 tile (256 KiB at 512 rows), then Z = Y + 1 through another: two
    T.Kernel launched one after the other, whose tiles may take the same bytes."""
    M = T.const("M")
    X: T.Tensor[[M, 128], T.float32]
    Y = T.empty((M, 128), T.float32)
    Z = T.empty((M, 128), T.float32)
    with T.Kernel(T.ceildiv(M, rows), threads=128) as bx:
        A_s = T.alloc_shared([rows, 128], T.float32)
        T.copy(X[bx * rows, 0], A_s)
        for i, j in T.Parallel(rows, 128):
            if bx * rows + i < M:
                Y[bx * rows + i, j] = A_s[i, j] * 2
    with T.Kernel(T.ceildiv(M, rows), threads=128) as bx:
        B_s = T.alloc_shared([rows, 128], T.float32)
        T.copy(Y[bx * rows, 0], B_s)
        for i, j in T.Parallel(rows, 128):
            if bx * rows + i < M:
                Z[bx * rows + i, j] = B_s[i, j] + 1
    return Y, Z


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M", [1, 300])
def test_two_kernels_agree_with_torch(M, backend):
    x = torch.randn(M, 128, generator=torch.Generator().manual_seed(M))
    y, z = two_kernels(x.to(backend), rows=192)
    torch.testing.assert_close(y.cpu(), x * 2)
    torch.testing.assert_close(z.cpu(), x * 2 + 1)


def test_the_tiles_of_separate_kernels_share_bytes():
    x = torch.randn(300, 128)
    plan = make_plan(two_kernels.specialize(x, rows=192), resolve_target("sm_90a"))  # 2 x 96 KiB: fits
    assert plan.shared_reuse == ()
    plan = make_plan(two_kernels.specialize(x, rows=256), resolve_target("sm_90a"))  # 2 x 128 KiB: shares
    assert plan.shared_reuse == (("B_s", "A_s"),) and plan.pool_bytes == 128 * 1024


@tile_nb.jit
def gemm_with_side_tile(A, B, X, side_first: bool = False):
    """C = A B over a 4-stage pipeline (TMA on sm_90a: 128 KiB of stages), and Y = X + 1 through a 128 KiB
    shared tile, before the loop or after it: 256 KiB laid out one after the other."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    X: T.Tensor[[128, 256], T.float32]
    C = T.empty((M, N), T.float32)
    Y = T.empty((128, 256), T.float32)
    with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
        A_s = T.alloc_shared((128, 64), T.float16)
        B_s = T.alloc_shared((64, 128), T.float16)
        X_s = T.alloc_shared((128, 256), T.float32)
        acc = T.alloc_fragment((128, 128), T.float32)
        if side_first:
            T.copy(X[0, 0], X_s)
            for i, j in T.Parallel(128, 256):
                Y[i, j] = X_s[i, j] + 1
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, 64), num_stages=4):
            T.copy(A[by * 128, k * 64], A_s)
            T.copy(B[k * 64, bx * 128], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * 128, bx * 128])
        if not side_first:
            T.copy(X[0, 0], X_s)
            for i, j in T.Parallel(128, 256):
                Y[i, j] = X_s[i, j] + 1
    return C, Y


def _side_plan(side_first, options=None):
    a, b, x = torch.randn(256, 256).half(), torch.randn(256, 256).half(), torch.randn(128, 256)
    func = gemm_with_side_tile.specialize(a, b, x, side_first=side_first)
    return make_plan(func, resolve_target("sm_90a"), options)


def test_tiles_that_tma_loads_fill_share_bytes_only_with_tiles_after_their_loop():
    after = _side_plan(side_first=False)
    assert after.tma is not None and after.tma.producer_warp
    assert {pair[0] for pair in after.shared_reuse} == {"X_s"} and after.pool_bytes <= 227 * 1024
    # before the loop, the producer warp's first loads would land while the consumers still use X_s
    with pytest.raises(tile_nb.lower.LoweringError, match="shared memory per block"):
        _side_plan(side_first=True)
    # cp.async loads start at the loop: there X_s may go first on the stages' bytes
    assert _side_plan(side_first=True, options=LoweringOptions(tma=False)).shared_reuse


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("side_first", [False, True])
def test_gemm_with_side_tile_agrees_with_torch(side_first, backend):
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(200, 300, generator=g).half(), torch.randn(300, 130, generator=g).half()
    x = torch.randn(128, 256, generator=g)
    options = {"tma": False} if side_first else None
    kernel = tile_nb.jit(gemm_with_side_tile.fn, options=options) if options else gemm_with_side_tile
    c, y = kernel(a.to(backend), b.to(backend), x.to(backend), side_first=side_first)
    torch.testing.assert_close(c.cpu(), a.float() @ b.float(), atol=1e-2, rtol=1e-3)
    torch.testing.assert_close(y.cpu(), x + 1)


@tile_nb.jit
def gemm_with_unused_tile(A, B, with_bias: bool = False):
    """C = A B over 4 stages (128 KiB) with a 128 KiB float32 tile that only `with_bias` uses (tilelang's
    dequantize GEMMs allocate their bias tile either way): 256 KiB laid out one after the other."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
        A_s = T.alloc_shared((128, 64), T.float16)
        B_s = T.alloc_shared((64, 128), T.float16)
        Bias_s = T.alloc_shared((128, 256), T.float32)
        acc = T.alloc_fragment((128, 128), T.float32)
        T.clear(acc)
        if with_bias:
            T.fill(Bias_s, 1.0)
            for i, j in T.Parallel(128, 128):
                acc[i, j] = Bias_s[i, j]
        for k in T.Pipelined(T.ceildiv(K, 64), num_stages=4):
            T.copy(A[by * 128, k * 64], A_s)
            T.copy(B[k * 64, bx * 128], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * 128, bx * 128])
    return C


def test_a_tile_no_statement_uses_takes_no_bytes_when_the_pool_would_not_fit():
    a, b = torch.randn(256, 256).half(), torch.randn(256, 256).half()
    plan = make_plan(gemm_with_unused_tile.specialize(a, b), resolve_target("sm_90a"))
    assert plan.pool_bytes <= 227 * 1024 and plan.shared_reuse == ()
    assert any(n.startswith("Bias_s is allocated and no statement uses it") for n in plan.all_notes)
    # used (before the loop, whose TMA loads start at the kernel's start), it is refused as before
    with pytest.raises(tile_nb.lower.LoweringError, match="shared memory per block"):
        make_plan(gemm_with_unused_tile.specialize(a, b, with_bias=True), resolve_target("sm_90a"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N, K", [(200, 130, 300), (1, 1, 64)])
def test_gemm_with_unused_tile_agrees_with_torch(M, N, K, backend):
    g = torch.Generator().manual_seed(M)
    a, b = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
    c = gemm_with_unused_tile(a.to(backend), b.to(backend))
    torch.testing.assert_close(c.cpu(), a.float() @ b.float(), atol=1e-2, rtol=1e-3)

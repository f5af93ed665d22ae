"""Several `T.gemm` into one accumulator where wgmma can take one and not another (a transposed A with the
lowering option wgmma_transpose_a off, as gdn's `example_wy_fast_bwd_split` was before it): one register
layout serves every T.gemm into an accumulator, so both run on mma.sync, and the plan says which T.gemm kept
them off wgmma (plan._mixed_accumulators).

CPU: the interpreter against torch at odd shapes and sizes of 1; the sm_90a build (nvcc) holds mma.sync and no
wgmma, with the plan's note naming the transposed T.gemm's line, while the same kernel without it stays on
wgmma. GPU (marked gpu): the same kernels against torch.

With wgmma_transpose_a (the default), a 16-bit A stored [K, M] runs on wgmma itself (an MN-major A in
64-column panels, the instruction's transpose immediate: lower/emit/wgmma.py), and so do the accumulators it
shares: the sm_90a build holds wgmma only, and on the GPU the kernels agree with torch at odd shapes, sizes
of 1, two m-blocks of one warpgroup (block 128) and k16 steps of a 32-row K block. Every wgmma T.gemm into an
accumulator, not only the first, reads its MN-major operands from 64-column panels (gemm_plus_gemm).
"""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def gemm_plus_transposed(A, B, X, Y, dtype: T.dtype = T.float16, with_transposed: bool = True,
                         block: int = 64, block_K: int = 64):
    """C = A B^T + X^T Y in one float32 accumulator: A [M, K], B [N, K], X [K2, M], Y [K2, N]; the second
    T.gemm reads its A operand transposed (stored [K, M]), which wgmma does not take here."""
    M, N, K, K2 = T.const("M, N, K, K2")
    A: T.Tensor[[M, K], dtype]
    B: T.Tensor[[N, K], dtype]
    X: T.Tensor[[K2, M], dtype]
    Y: T.Tensor[[K2, N], dtype]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, block), T.ceildiv(N, block), threads=128) as (bx, by):
        a_s = T.alloc_shared((block, block_K), dtype)
        b_s = T.alloc_shared((block, block_K), dtype)
        x_s = T.alloc_shared((block_K, block), dtype)
        y_s = T.alloc_shared((block_K, block), dtype)
        acc = T.alloc_fragment((block, block), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[bx * block, k * block_K], a_s)
            T.copy(B[by * block, k * block_K], b_s)
            T.gemm(a_s, b_s, acc, transpose_B=True)
        if with_transposed:
            for k in T.serial(T.ceildiv(K2, block_K)):
                T.copy(X[k * block_K, bx * block], x_s)
                T.copy(Y[k * block_K, by * block], y_s)
                T.gemm(x_s, y_s, acc, transpose_A=True)
        T.copy(acc, C[bx * block, by * block])
    return C


@tile_nb.jit
def product_of_two_accumulators(A, B, X, Y, dtype: T.dtype = T.float16, block: int = 64):
    """C = (A B^T) * (X^T Y) elementwise: the first accumulator could run on wgmma, the second cannot
    (transposed A); a T.Parallel loop indexes both, so they share one register layout: mma.sync's."""
    M, N, K, K2 = T.const("M, N, K, K2")
    A: T.Tensor[[M, K], dtype]
    B: T.Tensor[[N, K], dtype]
    X: T.Tensor[[K2, M], dtype]
    Y: T.Tensor[[K2, N], dtype]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, block), T.ceildiv(N, block), threads=128) as (bx, by):
        a_s = T.alloc_shared((block, K), dtype)
        b_s = T.alloc_shared((block, K), dtype)
        x_s = T.alloc_shared((K2, block), dtype)
        y_s = T.alloc_shared((K2, block), dtype)
        first = T.alloc_fragment((block, block), T.float32)
        second = T.alloc_fragment((block, block), T.float32)
        T.copy(A[bx * block, 0], a_s)
        T.copy(B[by * block, 0], b_s)
        T.copy(X[0, bx * block], x_s)
        T.copy(Y[0, by * block], y_s)
        T.gemm(a_s, b_s, first, transpose_B=True, clear_accum=True)
        T.gemm(x_s, y_s, second, transpose_A=True, clear_accum=True)
        for i, j in T.Parallel(block, block):
            first[i, j] = first[i, j] * second[i, j]
        T.copy(first, C[bx * block, by * block])
    return C


@tile_nb.jit
def gemm_plus_gemm(A, B, X, Y, dtype: T.dtype = T.float16, block: int = 64, block_K: int = 64):
    """C = A B^T + X Y in one float32 accumulator: A [M, K], B [N, K], X [M, K2], Y [K2, N]; both T.gemm run
    on wgmma by default, the second reading a [K, N] B (MN-major, in 64-column panels)."""
    M, N, K, K2 = T.const("M, N, K, K2")
    A: T.Tensor[[M, K], dtype]
    B: T.Tensor[[N, K], dtype]
    X: T.Tensor[[M, K2], dtype]
    Y: T.Tensor[[K2, N], dtype]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, block), T.ceildiv(N, block), threads=128) as (bx, by):
        a_s = T.alloc_shared((block, block_K), dtype)
        b_s = T.alloc_shared((block, block_K), dtype)
        x_s = T.alloc_shared((block, block_K), dtype)
        y_s = T.alloc_shared((block_K, block), dtype)
        acc = T.alloc_fragment((block, block), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[bx * block, k * block_K], a_s)
            T.copy(B[by * block, k * block_K], b_s)
            T.gemm(a_s, b_s, acc, transpose_B=True)
        for k in T.serial(T.ceildiv(K2, block_K)):
            T.copy(X[bx * block, k * block_K], x_s)
            T.copy(Y[k * block_K, by * block], y_s)
            T.gemm(x_s, y_s, acc)
        T.copy(acc, C[bx * block, by * block])
    return C


def _on_mma_sync():
    """The transposed T.gemm on mma.sync (ldmatrix.trans): the lowering option wgmma_transpose_a off."""
    return tile_nb.options(wgmma_transpose_a=False)


_DT = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _inputs(M, N, K, K2, dtype, seed=0):
    g = torch.Generator().manual_seed(seed * 7919 + M * 131 + N * 17 + K * 3 + K2)
    return [torch.randn(*shape, generator=g).to(_DT[dtype]) for shape in ((M, K), (N, K), (K2, M), (K2, N))]


def _check(C, A, B, X, Y):
    """Each 16-bit product is exact in float32; the sums round: twice the round-to-nearest bound of a
    (K + K2)-term float32 sum."""
    a, b, x, y = (t.double() for t in (A, B, X, Y))
    exact = a @ b.T + x.T @ y
    bound = 2 * (A.shape[1] + X.shape[0] + 1) * 2.0 ** -24 * (a.abs() @ b.abs().T + x.abs().T @ y.abs())
    assert not torch.isnan(C).any()
    err = (C.double().cpu() - exact).abs()
    assert bool((err <= bound).all()), f"worst error {float((err - bound).max()):.3g} over the bound"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(70, 45, 33, 50), (1, 1, 1, 1), (128, 64, 64, 64)])
def test_transposed_gemm_into_a_wgmma_eligible_accumulator(backend, dtype, shape):
    A, B, X, Y = _inputs(*shape, dtype, seed=1)
    with _on_mma_sync():
        C = gemm_plus_transposed(*(t.to(backend) for t in (A, B, X, Y)), dtype=dtype)
    _check(C, A, B, X, Y)


@needs_nvcc
def test_both_gemms_run_on_mma_sync_and_the_plan_names_the_transposed_one():
    inputs = _inputs(128, 128, 64, 64, "float16")
    with _on_mma_sync():
        k = gemm_plus_transposed.compile(*inputs, target="sm_90a")
    assert "wgmma" not in k.ptx and "mma.sync.aligned.m16n8k16" in k.ptx and k.cubin
    with open(__file__) as source:
        line = next(n for n, text in enumerate(source, 1) if "T.gemm(x_s, y_s, acc, transpose_A" in text)
    notes = [n for n in k.plan["notes"] if n.startswith("T.gemm into acc on mma.sync")]
    assert len(notes) == 1 and f"line {line}" in notes[0] and "transpose_A=True" in notes[0], k.plan["notes"]


@needs_nvcc
def test_without_the_transposed_gemm_the_accumulator_stays_on_wgmma():
    inputs = _inputs(128, 128, 64, 64, "float16")
    k = gemm_plus_transposed.compile(*inputs, with_transposed=False, target="sm_90a")
    assert "wgmma.mma_async" in k.ptx and not any("on mma.sync, not wgmma" in n for n in k.plan["notes"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(70, 45, 64, 64), (1, 1, 64, 64)])
def test_accumulators_joined_by_a_loop_share_mma_sync(backend, shape):
    A, B, X, Y = _inputs(*shape, "float16", seed=3)
    with _on_mma_sync():
        C = product_of_two_accumulators(*(t.to(backend) for t in (A, B, X, Y)))
    first, second = A.double() @ B.double().T, X.double().T @ Y.double()
    sizes = (A.double().abs() @ B.double().abs().T) * (X.double().abs().T @ Y.double().abs())
    bound = 4 * 65 * 2.0 ** -24 * sizes   # each product's rounding bound, twice, and the multiply's
    assert bool(((C.double().cpu() - first * second).abs() <= bound).all())


@needs_nvcc
def test_a_joined_accumulator_follows_onto_mma_sync_with_a_note():
    with _on_mma_sync():
        k = product_of_two_accumulators.compile(*_inputs(128, 128, 64, 64, "float16"), target="sm_90a")
    assert "wgmma" not in k.ptx and k.cubin
    note = "T.gemm into first on mma.sync, not wgmma: it shares its register layout with second"
    assert any(n.startswith(note) for n in k.plan["notes"]), k.plan["notes"]


def _on_wgmma():  # the default since 2026-12-07 (lower/options.py), named here for the tests that need it
    return tile_nb.options(wgmma_transpose_a=True)


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("block, block_K", [(64, 64), (128, 32)])
def test_with_the_option_the_transposed_gemm_runs_on_wgmma(dtype, block, block_K):
    with _on_wgmma():
        k = gemm_plus_transposed.compile(*_inputs(128, 128, 64, 64, dtype), dtype=dtype, block=block,
                                         block_K=block_K, target="sm_90a")
    assert "mma.sync" not in k.ptx and k.cubin, k.compile_log
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    assert f"m64n{block}k16.f32.{t}.{t}" in k.ptx and f"_{t}_{t}_ta1_tb1(" in k.cuda_source
    assert not any("on mma.sync" in n for n in k.plan["notes"]), k.plan["notes"]
    assert all(r.spill_stores == 0 for r in k.resources_by_kernel.values())
    with _on_wgmma():
        k = product_of_two_accumulators.compile(*_inputs(128, 128, 64, 64, dtype), dtype=dtype,
                                                target="sm_90a")
    assert "mma.sync" not in k.ptx and "wgmma.mma_async" in k.ptx and k.cubin


def _panel_tiles(kernel, *args, **consts) -> set:
    """Names of the shared tiles the sm_90a plan stores in 64-column panels."""
    from kernels.cuda import target

    from tile_nb.lower import lower_with_plan

    _, plan = lower_with_plan(kernel.specialize(*args, **consts), target("sm_90a"))
    return {b.name for b, t in plan.shared.items() if t.panel}


def test_a_second_gemm_into_an_accumulator_reads_its_own_operands_from_panels():
    """Every wgmma T.gemm's MN-major operands are stored in 64-column panels, the second into an accumulator
    too: it stored them row-major (swizzled), which is the same layout at 64 columns and another at 128, so
    the [K, N] / [K, M] operands of the second T.gemm were read wrongly on the H100 (block 128)."""
    args = _inputs(200, 130, 96, 70, "float16")
    assert _panel_tiles(gemm_plus_gemm, *[args[0], args[1], args[2].T.contiguous(), args[3]], block=128,
                        block_K=32) == {"y_s"}
    with _on_wgmma():
        assert _panel_tiles(gemm_plus_transposed, *args, block=128, block_K=32) == {"x_s", "y_s"}


def test_an_operand_read_as_panels_but_not_stored_so_is_refused(monkeypatch):
    """The emitter checks what the descriptors assume: had the plan still left a second T.gemm's operands out
    of the panels, the build would stop with an internal error instead of computing wrong numbers."""
    from kernels.cuda import target

    from tile_nb.lower import LoweringError, lower_with_plan
    from tile_nb.lower.analysis import plan

    monkeypatch.setattr(plan, "_add_panels", lambda gemm, panels: None)
    args = _inputs(200, 130, 96, 70, "float16")
    func = gemm_plus_gemm.specialize(args[0], args[1], args[2].T.contiguous(), args[3], block=128, block_K=32)
    with pytest.raises(LoweringError, match="read as 64-column panels"):
        lower_with_plan(func, target("sm_90a"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, block", [((200, 130, 96, 70), 128), ((70, 45, 33, 50), 64),
                                          ((1, 1, 1, 1), 64)])
def test_gemm_plus_gemm_agrees_with_torch(backend, shape, block):
    A, B, Xt, Y = _inputs(*shape, "float16", seed=8)
    X = Xt.T.contiguous()
    C = gemm_plus_gemm(*(t.to(backend) for t in (A, B, X, Y)), block=block, block_K=32)
    _check(C, A, B, Xt, Y)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape, block, block_K", [
    ((70, 45, 33, 50), 64, 64), ((1, 1, 1, 1), 64, 64), ((128, 64, 64, 64), 64, 64),
    ((200, 130, 96, 70), 128, 32),
])
def test_transposed_gemm_on_wgmma_agrees_with_torch(dtype, shape, block, block_K):
    A, B, X, Y = _inputs(*shape, dtype, seed=5)
    with _on_wgmma():
        C = gemm_plus_transposed(*(t.cuda() for t in (A, B, X, Y)), dtype=dtype, block=block, block_K=block_K)
    _check(C, A, B, X, Y)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(70, 45, 64, 64), (1, 1, 64, 64), (128, 130, 64, 64)])
def test_joined_accumulators_on_wgmma_agree_with_torch(shape):
    A, B, X, Y = _inputs(*shape, "float16", seed=6)
    with _on_wgmma():
        C = product_of_two_accumulators(*(t.cuda() for t in (A, B, X, Y)))
    first, second = A.double() @ B.double().T, X.double().T @ Y.double()
    sizes = (A.double().abs() @ B.double().abs().T) * (X.double().abs().T @ Y.double().abs())
    assert bool(((C.double().cpu() - first * second).abs() <= 4 * 65 * 2.0 ** -24 * sizes).all())

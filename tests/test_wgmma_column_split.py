"""wgmma with the warpgroups splitting a T.gemm's columns (analysis/mma.py `wgmma_split`, layout.py
`WgmmaAccLayout.col_groups`): 64 rows on 256 threads, FlashMLA's decode shape, where each of the two
warpgroups multiplies all 64 rows by half of B (tilelang's FullCol policy). Before, such a T.gemm ran on
mma.sync. A register A operand of such a T.gemm is held whole by both warpgroups (`replicas`); row statistics
of the scores are reduced across the two warpgroups.

CPU tests read the plan and the generated CUDA (and build it with nvcc where present); the `gpu` tests compare
the GPU with torch and with the interpreter at odd sizes."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.backend.target import resolve_target
from tile_nb.lower.analysis.fragments import wgmma_accumulator
from tile_nb.lower.analysis.layout import MmaAccLayout, WgmmaAccLayout
from tile_nb.lower.analysis.mma import wgmma_split
from tile_nb.lower.analysis.plan import make_plan

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def mla_decode(Q, Q_pe, KV, K_pe, block_N: int = 64, threads: int = 256, register_p: bool = True):
    """FlashMLA's decode for one KV head: softmax((Q KV^T + Q_pe K_pe^T) * scale) KV for 64 query heads per
    CTA. The probabilities go to shared memory (each warpgroup computed half of their columns) and, with
    `register_p`, back into a fragment that the second T.gemm reads as its A operand from registers."""
    H, S, D, P = T.const("H, S, D, P")
    Q: T.Tensor[[H, D], T.float16]
    Q_pe: T.Tensor[[H, P], T.float16]
    KV: T.Tensor[[S, D], T.float16]
    K_pe: T.Tensor[[S, P], T.float16]
    O = T.empty((H, D), T.float16)
    scale = 0.125 * 1.44269504
    with T.Kernel(T.ceildiv(H, 64), threads=threads) as hid:
        Q_shared = T.alloc_shared([64, D], T.float16)
        Q_pe_shared = T.alloc_shared([64, P], T.float16)
        KV_shared = T.alloc_shared([block_N, D], T.float16)
        K_pe_shared = T.alloc_shared([block_N, P], T.float16)
        S_shared = T.alloc_shared([64, block_N], T.float16)
        acc_s = T.alloc_fragment([64, block_N], T.float32)
        acc_s_cast = T.alloc_fragment([64, block_N], T.float16)
        acc_o = T.alloc_fragment([64, D], T.float32)
        scores_max = T.alloc_fragment([64], T.float32)
        scores_max_prev = T.alloc_fragment([64], T.float32)
        scores_scale = T.alloc_fragment([64], T.float32)
        scores_sum = T.alloc_fragment([64], T.float32)
        logsum = T.alloc_fragment([64], T.float32)
        T.copy(Q[hid * 64, 0], Q_shared)
        T.copy(Q_pe[hid * 64, 0], Q_pe_shared)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, -T.infinity(T.float32))
        for k in T.Pipelined(T.ceildiv(S, block_N), num_stages=2):
            T.copy(KV[k * block_N, 0], KV_shared)
            T.copy(K_pe[k * block_N, 0], K_pe_shared)
            T.clear(acc_s)
            T.gemm(Q_shared, KV_shared, acc_s, transpose_B=True)
            T.gemm(Q_pe_shared, K_pe_shared, acc_s, transpose_B=True)
            for i, j in T.Parallel(64, block_N):
                acc_s[i, j] = T.if_then_else(k * block_N + j < S, acc_s[i, j], -T.infinity(T.float32))
            T.copy(scores_max, scores_max_prev)
            T.reduce_max(acc_s, scores_max, dim=1, clear=False)
            for i in T.Parallel(64):
                scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
            for i, j in T.Parallel(64, block_N):
                acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
            T.reduce_sum(acc_s, scores_sum, dim=1)
            T.copy(acc_s, S_shared)
            for i in T.Parallel(64):
                logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
            for i, j in T.Parallel(64, D):
                acc_o[i, j] *= scores_scale[i]
            if register_p:
                T.copy(S_shared, acc_s_cast)
                T.gemm(acc_s_cast, KV_shared, acc_o)
            else:
                T.gemm(S_shared, KV_shared, acc_o)
        for i, j in T.Parallel(64, D):
            acc_o[i, j] /= logsum[i]
        T.copy(acc_o, O[hid * 64, 0])
    return O


def _inputs(H, S, D, P, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, q_pe = torch.randn(H, D, generator=g).half(), torch.randn(H, P, generator=g).half()
    kv, k_pe = (torch.randn(S, D, generator=g) / 4).half(), (torch.randn(S, P, generator=g) / 4).half()
    return q, q_pe, kv, k_pe


def _reference(q, q_pe, kv, k_pe):
    scores = (q.double() @ kv.double().T + q_pe.double() @ k_pe.double().T) * 0.125
    return torch.softmax(scores, dim=-1) @ kv.double()


def _plan(H=64, S=200, D=256, P=64, options=None, **kw):
    func = mla_decode.specialize(*_inputs(H, S, D, P), **kw)
    return make_plan(func, resolve_target("sm_90a"), options)


@pytest.mark.parametrize("layout", [
    WgmmaAccLayout(64, 64, 1, 2), WgmmaAccLayout(64, 512, 1, 2), WgmmaAccLayout(128, 256, 2, 2),
    WgmmaAccLayout(64, 128, 1, 4), WgmmaAccLayout(64, 64, 1, 1, replicas=2),
])
def test_the_column_split_layout_matches_the_gemm_lowering(layout):
    linear = wgmma_accumulator(layout.bm, layout.bn, layout.row_groups, layout.col_groups, layout.replicas)
    assert linear == layout.linear() and linear.regs == layout.regs
    seen = set()
    for tx in range(0, layout.warpgroups * 128):
        for r in range(layout.regs):
            element = tuple(int(x) for x in layout.element(tx, r))
            assert list(element) == linear.element(tx, r)
            seen.add(element)
    # every element is held: by one thread, or by one per replica
    assert len(seen) == layout.bm * layout.bn


def test_split_rows_first_then_columns():
    assert wgmma_split(128, 64, 2, trans_b=False) == (2, 1)
    assert wgmma_split(64, 64, 2, trans_b=True) == (1, 2)  # 32-row slices of a [N, K] B
    assert wgmma_split(64, 512, 2, trans_b=False) == (1, 2)  # four whole 64-column panels each
    assert wgmma_split(128, 256, 4, trans_b=False) == (2, 2)
    assert "slices of 32 columns" in wgmma_split(64, 64, 2, trans_b=False)  # half a [K, N] panel
    assert "multiples of 16" in wgmma_split(64, 48, 2, trans_b=True)
    assert "multiple of 64 rows" in wgmma_split(32, 64, 1, trans_b=True)
    assert "block_N=96" in wgmma_split(64, 96, 1, trans_b=True)


def test_mla_decode_runs_on_wgmma_with_the_probabilities_in_registers():
    plan = _plan()
    accumulators = {b.name: a for b, a in plan.accumulators.items()}
    assert accumulators["acc_s"] == WgmmaAccLayout(64, 64, 1, 2)
    assert accumulators["acc_o"] == WgmmaAccLayout(64, 256, 1, 2)
    assert {k.value for k in plan.gemms.values()} == {"wgmma"}
    # acc_s_cast is wgmma's A operand in registers, whole in each warpgroup: not in shared memory
    assert "acc_s_cast" not in {b.name for b in plan.shared}
    assert "acc_s_cast" in {b.name for b in plan.fragments.layouts}


def test_the_column_split_can_be_turned_off():
    plan = _plan(options=tile_nb.lower.options.LoweringOptions(wgmma_column_split=False))
    assert all(isinstance(a, MmaAccLayout) for a in plan.accumulators.values())


def test_mla_decode_at_head_dim_512_fits_on_wgmma():
    # FlashMLA's shape: Q 64 + Q_pe 8 + K/V 2 x 64 + K_pe 2 x 8 + P 8 KiB = 224 KiB with TMA's barriers
    plan = _plan(D=512, P=64)
    assert plan.accumulators and all(isinstance(a, WgmmaAccLayout) for a in plan.accumulators.values())
    assert plan.pool_bytes <= 227 * 1024


@needs_nvcc
@pytest.mark.parametrize("register_p", [True, False])
def test_mla_decode_builds_for_sm90a_without_spills(register_p):
    kernel = mla_decode.compile(*_inputs(64, 200, 256, 64), register_p=register_p, target="sm_90a")
    source = kernel.cuda_source
    assert "m64n32k16" in source and "m64n128k16" in source  # each warpgroup's half of N (64 and 256)
    resources = kernel.resources
    assert resources.spill_stores == 0 and resources.spill_loads == 0, resources


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("register_p", [True, False])
@pytest.mark.parametrize("H, S, D, P", [(64, 200, 256, 64), (100, 1, 128, 64), (1, 64, 256, 32)])
def test_mla_decode_agrees_with_torch(H, S, D, P, register_p, backend):
    inputs = _inputs(H, S, D, P, seed=S + D)
    out = mla_decode(*(t.to(backend) for t in inputs), register_p=register_p)
    torch.testing.assert_close(out.cpu().double(), _reference(*inputs), atol=2e-2, rtol=2e-2)

"""wgmma with the warpgroups splitting a T.gemm's columns (analysis/mma.py `wgmma_split`, layout.py
`WgmmaAccLayout.col_groups`): 64 rows on 256 threads, FlashMLA's decode shape, where each of the two
warpgroups multiplies all 64 rows by half of B (tilelang's FullCol policy). Before, such a T.gemm ran on
mma.sync. A register A operand of such a T.gemm is held whole by both warpgroups (`replicas`); row statistics
of the scores are reduced across the two warpgroups.

CPU tests read the plan and the generated CUDA (and build it with nvcc where present); the `gpu` tests compare
the GPU with torch at odd sizes (the same tests run the interpreter on the CPU)."""
import sys

import pytest
import torch

import tile_nb
from tile_nb.backend import toolchain
from tile_nb.backend.target import resolve_target
from tile_nb.lower.analysis.fragments import wgmma_accumulator
from tile_nb.lower.analysis.layout import MmaAccLayout, WgmmaAccLayout
from tile_nb.lower.analysis.mma import wgmma_split
from tile_nb.lower.analysis.plan import make_plan

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from kernels.mla import mla_decode  # noqa: E402

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


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
    assert "64 rows per warpgroup" in wgmma_split(32, 64, 1, trans_b=True)
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

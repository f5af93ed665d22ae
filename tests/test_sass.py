"""The SASS of the sm_90a hot loops (benchmarks/sass_report.py): wgmma (HGMMA), TMA loads (UTMALDG) and
mbarriers where the plan says so, and no local memory. Needs a disassembler (cuobjdump or nvdisasm, e.g. from
Triton's wheel) and nvcc; skipped otherwise."""
import re
import sys
from pathlib import Path

import pytest

from tile_nb.backend import toolchain
from tile_nb.runtime import compile as rt_compile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from sass_report import KERNELS, between_mmas, instruction_mix  # noqa: E402

pytestmark = pytest.mark.skipif(not (toolchain.find_tool("cuobjdump") or toolchain.find_tool("nvdisasm")),
                                reason="no cuobjdump or nvdisasm on PATH (pip install triton carries both)")


@pytest.mark.parametrize("name", [n for n in KERNELS if "256 threads" in n])
def test_warp_specialized_kernels_run_wgmma_on_tma_tiles_without_spills(name):
    kernel = rt_compile(KERNELS[name](), "sm_90a", options={"cache": False})
    if kernel.sass is None:
        pytest.skip("nvcc built no cubin here")
    mix = instruction_mix(kernel.sass)
    assert mix["HGMMA"] + mix["QGMMA"] > 0 and mix["UTMALDG"] > 0 and mix["SYNCS"] > 0, mix
    assert mix["STL"] == 0 and mix["LDL"] == 0 and mix["HMMA"] == 0, mix
    if kernel.plan["tma_store"]:  # the epilogue of epilogue.py: one TMA store per 64-column panel
        assert mix["UTMASTG"] > 0, mix


@pytest.mark.parametrize("name", list(KERNELS))
def test_wgmma_descriptors_stay_in_uniform_registers(name):
    """wgmma reads descriptors from uniform registers. Each is a base word computed once per T.gemm plus a
    constant, added on the uniform datapath: among a k-tile's MMAs at most one R2UR (a move from the vector
    registers) per operand for its base word, where descriptors built per MMA on the vector registers needed
    two per MMA and operand (54 in the FlashAttention hd128 loop)."""
    kernel = rt_compile(KERNELS[name](), "sm_90a", options={"cache": False})
    if kernel.sass is None:
        pytest.skip("nvcc built no cubin here")
    gaps = between_mmas(kernel.sass)
    groups = len(re.findall(r"[HQI]GMMA[^;]*gsb0", kernel.sass))
    assert gaps and groups, "no wgmma group of more than one MMA"
    assert sum(gap.count("R2UR") for gap in gaps) <= 2 * groups, gaps

"""The seed GEMM through the whole CPU path (front end -> tile_nb.lower -> backend -> runtime):
CUDA for sm_80 and sm_90a with no spills, tensor-core instructions in the PTX, and the dynamic
shared memory of the pipeline."""
import pytest
from kernels.seed import fresh_gemm

from tile_nb.backend import available_compiler

pytestmark = pytest.mark.skipif(available_compiler() is None, reason="neither NVRTC nor nvcc is installed")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_seed_gemm_compiles_without_spills(arch):
    kernel = fresh_gemm().compile(M=1024, N=1024, K=1024, target={"kind": "cuda", "arch": arch})
    res = kernel.resources
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
    assert res.registers <= 255
    stages_bytes = 3 * (128 * 32 + 32 * 128) * 2  # 3 stages of fp16 A and B tiles
    if arch == "sm_80":
        assert res.dynamic_shared_bytes == stages_bytes and "cp.async.cg" in kernel.ptx
    else:  # TMA loads (tests/test_lower_tma.py), with a full and an empty mbarrier per stage after the tiles
        assert res.dynamic_shared_bytes == stages_bytes + 3 * 2 * 8
        assert "cp.async.bulk.tensor.2d" in kernel.ptx and "cp.async.cg" not in kernel.ptx
    if arch == "sm_80":  # mma.sync takes its operands from registers, loaded by ldmatrix
        assert "mma.sync.aligned.m16n8k16" in kernel.ptx and "ldmatrix" in kernel.ptx
    else:  # wgmma reads shared memory through descriptors
        assert "wgmma.mma_async" in kernel.ptx
    assert {"lower", "codegen", "cubin"} <= set(kernel.timings)

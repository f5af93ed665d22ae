"""The Ray path of tuning on the CPU: a local Ray started by the test, compile jobs as Ray tasks (the built
cache entries shipped back and published here), timing on Ray actors. Without a GPU the actors are CPU actors
that time the CPU interpreter (`ray_actor_device="cpu"`): scheduling, shipping, inputs from specs and the
re-timing rounds are the GPU path's; the CUDA launch inside an actor is not exercised here (Ray is not
installed on the GPU machine)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip(
    "ray", reason="Ray is not installed: pip install 'tile_nb[ray]' (scripts/test.sh does)"
)
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels.seed import gemm_variant

from tile_nb.bench import TuneStore, tune


def _has_cuda_compiler() -> bool:
    from tile_nb.backend.cuda_compile import available_compiler

    return available_compiler() is not None


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.skipif(not _has_cuda_compiler(), reason="needs nvcc or NVRTC to build cubins")
def test_ray_compiles_on_workers_and_times_on_actors(local_ray, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(cache))
    configs = [{"block_M": 64, "block_N": 64, "block_K": 32}, {"block_M": 128, "block_N": 64, "block_K": 32},
               # fails in the lowering
               {"block_M": 128, "block_N": 256, "block_K": 64, "threads": 384}]
    A = torch.randn(128, 64).half()
    B = torch.randn(64, 128).half()
    C = torch.zeros(128, 128)
    result = tune(gemm_variant, configs, A, B, C, pool="ray", ray_actor_device="cpu", progress=None,
                  warmup_ms=1.0, rep_ms=5.0, confirm=2, rounds=2)
    assert result.pool == "ray" and result.workers == 2 and result.mode == "interpreter"
    ok1, ok2, bad = result.points
    # compiled by Ray worker processes, not here
    assert ok1.compiled_by and ok1.compiled_by != f"pid {os.getpid()}" and ok1.resources["registers"] > 0
    assert bad.stage == "compile" and "cannot be split over 12 warps" in bad.error
    # the shipped entries were published to this machine's cache
    assert len(list((cache / "v1").glob("*/*/meta.json"))) == 2
    # timed on the actors (the interpreter), the best two re-timed over two rounds on one actor
    assert ok1.ok and ok2.ok and ok1.timing.device == "cpu"
    assert len(ok1.rounds_ms) == 2 and len(ok2.rounds_ms) == 2
    assert result.best() in (ok1, ok2) and result.best_config == result.best().config
    assert "CPU interpreter on Ray actors" in repr(result) and "timed on 2 Ray actor(s) (cpu)" in repr(result)
    assert TuneStore().entries() == []    # interpreter timings are not a GPU choice: not stored

"""Autotuning on the GPU (marked gpu): a real search times candidates with CUDA events, stores the choice, and
a new process picks it up; the autotuned kernel's output matches torch. The CPU tiers are tests/test_tune.py
and tests/test_tune_ray.py; the 8192^3 search against the hand-picked GEMM is benchmarks/tune.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from kernels.seed import gemm_variant

import tile_nb
import tile_nb.language as T
from tile_nb.bench import TuneStore, tune

GRID = [{"block_M": 128, "block_N": 128, "block_K": 32, "threads": 128},
        {"block_M": 128, "block_N": 256, "block_K": 64, "threads": 256},
        {"block_M": 64, "block_N": 128, "block_K": 32, "threads": 128},
        {"block_M": 256, "block_N": 256, "block_K": 64, "threads": 256, "num_stages": 4}]   # 256 KiB: pruned


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.gpu
def test_gpu_search_times_prunes_stores_and_a_new_process_picks_it_up(cache):
    n = 2048
    A = torch.randn(n, n, device="cuda", dtype=torch.float16)
    B = torch.randn(n, n, device="cuda", dtype=torch.float16)
    C = torch.empty(n, n, device="cuda", dtype=torch.float16)
    result = tune(
        gemm_variant, GRID, A, B, C, out_dtype=T.float16, flops=2 * n**3, progress="print", workers=4
    )
    assert result.mode == "gpu" and result.gpu and result.pool == "process"
    timed = [p for p in result.points if p.ok]
    assert len(timed) == 3 and all(p.timing.device == "cuda" and p.tflops > 10 for p in timed)
    assert result.points[3].pruned and "shared memory" in result.points[3].pruned
    best = result.best()
    assert best.rounds_ms and len(best.rounds_ms) == 3 and result.best_config == best.config
    assert not any("built again" in n for n in result.notes), result.notes   # workers' modules were loaded
    assert {"compile_wall", "bench", "confirm"} <= set(result.timings)
    (entry,) = TuneStore().entries()
    assert entry.best == best.config and entry.device == torch.cuda.get_device_name()

    C.fill_(float("nan"))
    gemm_variant(A, B, C, out_dtype=T.float16, **best.config)
    ref = A.float() @ B.float()
    assert ((C.float() - ref).norm() / ref.norm()).item() < 1e-2

    code = textwrap.dedent(f"""
        import sys, time, json
        sys.path.insert(0, {str(TESTS)!r})
        import torch, tvm, tile_nb
        import tile_nb.language as T
        from kernels.seed import gemm_variant
        gemm = tile_nb.autotune(configs={GRID!r})(gemm_variant)
        A = torch.randn({n}, {n}, device="cuda", dtype=torch.float16)
        B = torch.randn({n}, {n}, device="cuda", dtype=torch.float16)
        C = torch.empty({n}, {n}, device="cuda", dtype=torch.float16)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        gemm(A, B, C, out_dtype=T.float16)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        ref = A.float() @ B.float()
        err = ((C.float() - ref).norm() / ref.norm()).item()
        print(json.dumps({{"first_ms": first * 1e3, "stats": gemm.stats, "err": err,
                          "config": list(gemm._chosen.values())[0]}}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ, TILE_NB_CACHE_DIR=str(cache)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["stats"]["searched"] == 0 and report["stats"]["from_store"] == 1
    assert report["config"] == best.config and report["err"] < 1e-2
    assert report["first_ms"] < 250, report   # benchmarks/tune.py measures it against 100 ms at 8192^3


@pytest.mark.gpu
def test_gpu_autotuned_kernel_searches_once_per_shape(cache):
    gemm = tile_nb.autotune(configs=GRID[:2], progress=None, workers=2)(gemm_variant)
    for n in (256, 512):
        A = torch.randn(n, n, device="cuda", dtype=torch.float16)
        B = torch.randn(n, n, device="cuda", dtype=torch.float16)
        C = torch.zeros(n, n, device="cuda")
        gemm(A, B, C)
        gemm(A, B, C)
        torch.testing.assert_close(C, A.float() @ B.float(), rtol=1e-2, atol=1e-1)
    assert gemm.stats == {"searched": 2, "from_store": 0, "from_memory": 0}
    assert len(gemm.stored()) == 2

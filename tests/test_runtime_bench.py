"""tile_nb.bench on the CPU: statistics, counts, sweeps (the CUDA-event path runs in tests/test_gpu_runtime.py)."""
import math

import pytest

from tile_nb.bench import (
    Timing,
    do_bench,
    dtype_bytes,
    gbps,
    gemm_bytes,
    gemm_flops,
    quantile,
    roofline_ms,
    sweep,
    tflops,
)


def test_quantile_matches_linear_interpolation():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert quantile(values, 0.5) == 3.0
    assert quantile(values, 0.2) == pytest.approx(1.8)
    assert quantile(values, 0.8) == pytest.approx(4.2)
    assert math.isnan(quantile([], 0.5))


def test_counts_and_throughput():
    assert gemm_flops(4096, 4096, 4096) == 2 * 4096**3
    assert gemm_bytes(128, 256, 64, "float16", "float32") == (128 * 64 + 64 * 256) * 2 + 128 * 256 * 4
    assert dtype_bytes("bfloat16") == 2
    import torch

    assert dtype_bytes(torch.float32) == 4
    t = Timing(median_ms=2.0, p20=1.9, p80=2.1, n=10)
    assert tflops(4e12, t) == pytest.approx(2000.0)
    assert gbps(8e9, 1.0) == pytest.approx(8000.0)
    assert t.spread == pytest.approx(0.1)
    with pytest.raises(ValueError, match="unknown dtype"):
        dtype_bytes("float7")


def test_roofline_picks_the_larger_bound():
    ms, bound = roofline_ms(flops=2 * 8192**3, nbytes=3 * 8192**2 * 2, peak_tflops=700, peak_gbps=4000)
    assert bound == "compute" and ms == pytest.approx(2 * 8192**3 / 700e12 * 1e3)
    assert roofline_ms(flops=1e6, nbytes=1e9, peak_tflops=700, peak_gbps=4000)[1] == "memory"


def test_do_bench_on_the_host_clock():
    calls = []
    t = do_bench(lambda: calls.append(1), device="cpu", warmup_ms=1, rep_ms=5, max_runs=50)
    assert t.device == "cpu" and 10 <= t.n <= 50 and len(calls) >= t.n
    assert t.min_ms <= t.p20 <= t.median_ms <= t.p80 <= t.max_ms


def test_sweep_records_failures_and_keeps_going():
    def make(cfg):
        if cfg["block"] == 3:
            raise ValueError("block must be a power of two")
        return lambda: sum(range(cfg["block"] * 100))

    seen = []
    result = sweep(make, [{"block": 1}, {"block": 3}, {"block": 4}], flops=lambda c: 1e6, device="cpu",
                   warmup_ms=1, rep_ms=2, on_row=seen.append)
    assert [r.ok for r in result.rows] == [True, False, True] and len(seen) == 3
    assert "ValueError: block must be a power of two" in result.rows[1].error
    assert result.best().config["block"] in (1, 4)
    text = result.table()
    assert "block" in text.splitlines()[0] and "median ms" in text and "ValueError" in text

"""tile_nb.bench on the CPU: statistics, counts, the result model (the CUDA-event path runs in
tests/test_gpu_runtime.py)."""
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
    tflops,
)
from tile_nb.bench.results import SweepPoint, SweepResult, TuneResult


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


def test_sweep_result_model_text_table_and_json(tmp_path):
    t = lambda ms: Timing(median_ms=ms, p20=ms * 0.9, p80=ms * 1.1, n=10, min_ms=ms * 0.8, max_ms=ms * 1.2)
    result = SweepResult("k", {"block": [1, 3, 4]}, [
        SweepPoint({"block": 1}, timing=t(2.0), tflops=1.5),
        SweepPoint({"block": 3}, stage="compile", error="ValueError: block must be a power of two (x.py:3)"),
        SweepPoint({"block": 4}, timing=t(1.0), tflops=3.0)])
    assert result.best().config == {"block": 4} and [p.ok for p in result.points] == [True, False, True]
    text = repr(result)  # deterministic: no timings, no internal file:line
    assert text.splitlines() == [
        "SweepResult k: 3 configs over block (CPU interpreter, host clock), 1 failed",
        "  block=1: ok",
        "  block=3: failed at compile: ValueError: block must be a power of two",
        "  block=4: ok",
    ]
    table = str(result)
    assert table.splitlines()[0].split() == ["block", "median", "p20", "p80", "TFLOP/s", "status"]
    assert table.splitlines()[2].split()[:4] == ["1", "2", "ms", "1.8"]     # block=1: median 2 ms, p20 1.8 ms
    assert table.splitlines()[4].split()[-1] == "best" and "900.0 us" in table
    result.save(tmp_path / "s.json")
    again = SweepResult.load(tmp_path / "s.json")
    assert repr(again).splitlines() == text.splitlines() + [f"  results: {tmp_path / 's.json'}"]
    assert again.points[2].timing == result.points[2].timing


def test_tune_result_ranks_by_the_re_timed_rounds():
    t = lambda ms: Timing(median_ms=ms, p20=ms, p80=ms, n=10)
    a = SweepPoint({"b": 1}, timing=t(1.00), resources={"registers": 90}, rounds_ms=[1.10, 1.12, 1.08])
    b = SweepPoint({"b": 2}, timing=t(1.05), resources={"registers": 90}, rounds_ms=[1.01, 1.02, 1.00])
    c = SweepPoint({"b": 3}, pruned="shared memory 262,144 B > 232,448 B per block", stage="resources",
                   resources={"registers": 255, "dynamic_shared_bytes": 262144})
    result = TuneResult("k", {"b": [1, 2, 3]}, [a, b, c], gpu=True, mode="gpu")
    assert result.best() is b and b.ranking_ms == pytest.approx(1.01)   # the median of its rounds
    text = repr(result)
    assert (
        "2 timed, 1 pruned, 0 failed" in text and "b=3: pruned: shared memory" in text and "best: b=2" in text
    )
    assert TuneResult.from_dict(result.to_dict()).best().config == {"b": 2}

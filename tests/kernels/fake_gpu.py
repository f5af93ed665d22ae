"""A stand-in for the GPU in CPU tests of tuning: the search believes a GPU is there, and the timing step
gives each surviving configuration a fixed median (1 ms + 0.1 ms per position in `FAKE_ORDER`, or by index).

Only the timing is fake: elaboration, compiling in workers, pruning, the tuning store and the autotuned call
path run for real. The real timing is tests/test_gpu_tune.py (marked gpu).
"""
from __future__ import annotations

from tile_nb.bench import tuning
from tile_nb.bench.timing import Timing

DEVICE = "Fake GPU (tests/kernels/fake_gpu.py)"
CALLS = {"timed": 0}


def fake_time(kernel, args, kwargs, points, survivors, outcomes, result, reporter, pool_kind, **options):
    """Stands in for tile_nb.bench.tuning._time_here: the configuration with
    the largest block_M is fastest."""
    for i in survivors:
        p = points[i]
        ms = 1.0 + 0.1 * i - 0.5 * (p.config.get("block_M", 0) >= 128)
        p.timing = Timing(median_ms=ms, p20=ms, p80=ms, n=10, device="cuda")
        CALLS["timed"] += 1
        reporter.update(result, p, "time")
    result.timings["bench"] = 0.0


def install(setattr_=setattr) -> None:
    """Patch tile_nb.bench.tuning (`setattr_` may be pytest's
    monkeypatch.setattr, which undoes it afterwards)."""
    setattr_(tuning, "gpu_available", lambda args: (True, None))
    setattr_(tuning, "gpu_name", lambda: DEVICE)
    setattr_(tuning, "_time_here", fake_time)

"""Honest kernel timing: warm-up, an L2 flush before every timed run, CUDA events, medians and spread.

Each timed run is: write a buffer larger than the L2 cache (so the kernel reads its inputs from device memory,
as it would inside a real model), record a start event, run `fn`, record an end event. Events are read after
one synchronize at the end, so the host never stalls the queue between runs. The flush itself sits outside the
events. Reported: median, 20th and 80th percentiles, min, max and the number of runs.

CUDA events resolve about 0.5 us and launches cost a few us, so figures under ~10 us say more about the launch
than the kernel; `Timing.short` flags them.
"""
from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Timing", "do_bench", "l2_flush_bytes", "quantile"]


@dataclass(frozen=True)
class Timing:
    """Times in milliseconds over `n` timed runs."""

    median_ms: float
    p20: float
    p80: float
    n: int
    min_ms: float = math.nan
    max_ms: float = math.nan
    device: str = "cuda"

    @property
    def ms(self) -> float:
        return self.median_ms

    @property
    def spread(self) -> float:
        """(p80 - p20) / median: the relative spread of the middle 60% of runs."""
        return (self.p80 - self.p20) / self.median_ms if self.median_ms else math.nan

    @property
    def short(self) -> bool:
        """True when the kernel is too short for events to time it well (under 10 us)."""
        return self.median_ms < 0.010

    def __str__(self) -> str:
        return (f"{self.median_ms:.4f} ms (p20 {self.p20:.4f}, p80 {self.p80:.4f}, n={self.n}"
                f"{', under 10 us: launch-bound' if self.short else ''})")


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list (numpy's default method)."""
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _summary(times_ms: list[float], device: str) -> Timing:
    s = sorted(times_ms)
    return Timing(median_ms=quantile(s, 0.5), p20=quantile(s, 0.2), p80=quantile(s, 0.8), n=len(s),
                  min_ms=s[0], max_ms=s[-1], device=device)


@functools.cache
def l2_flush_bytes(device_index: int = 0) -> int:
    """Twice the device's L2 size (at least 64 MiB): big enough that nothing of the inputs survives in L2."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(device_index), "L2_cache_size", 0) or 50 * 2**20
    return max(2 * int(l2), 64 * 2**20)


_flush_buffers: dict[int, object] = {}


def _flush_buffer(device_index: int):
    import torch

    buf = _flush_buffers.get(device_index)
    if buf is None:
        buf = torch.empty(l2_flush_bytes(device_index) // 4, dtype=torch.int32, device=f"cuda:{device_index}")
        _flush_buffers[device_index] = buf
    return buf


def do_bench(fn: Callable[[], object], *, warmup_ms: float = 25.0, rep_ms: float = 100.0, min_runs: int = 10,
             max_runs: int = 1000, flush_l2: bool = True, device: str | None = None) -> Timing:
    """Time `fn()` (a closure that launches the work; inputs allocated beforehand).

    Runs it for about `warmup_ms` untimed, then enough timed runs to fill about `rep_ms` (between `min_runs`
    and `max_runs`). On a machine without CUDA, or with `device="cpu"`, it times with the host clock instead
    (for the CPU interpreter), with the same statistics.

    Example::

        t = do_bench(lambda: kernel(a, b, c))
        print(t.median_ms, tflops(gemm_flops(M, N, K), t))
    """
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return _bench_host(fn, warmup_ms, rep_ms, min_runs, max_runs)

    index = torch.cuda.current_device()
    flush = _flush_buffer(index) if flush_l2 else None
    stream = torch.cuda.current_stream()

    # Estimate one run's time (with flushes, as in the timed loop) to size warm-up and repetitions.
    fn()
    torch.cuda.synchronize()
    probe_start, probe_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe_start.record(stream)
    for _ in range(5):
        if flush is not None:
            flush.zero_()
        fn()
    probe_end.record(stream)
    torch.cuda.synchronize()
    per_run = max(probe_start.elapsed_time(probe_end) / 5, 1e-4)
    n_warmup = max(1, int(warmup_ms / per_run))
    n_runs = min(max(min_runs, int(rep_ms / per_run)), max_runs)

    for _ in range(n_warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_runs)]
    for i in range(n_runs):
        if flush is not None:
            flush.zero_()
        starts[i].record(stream)
        fn()
        ends[i].record(stream)
    torch.cuda.synchronize()
    return _summary([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)], "cuda")


def _bench_host(fn, warmup_ms, rep_ms, min_runs, max_runs) -> Timing:
    t0 = time.perf_counter()
    fn()
    per_run = max((time.perf_counter() - t0) * 1e3, 1e-4)
    deadline = time.perf_counter() + warmup_ms / 1e3
    while time.perf_counter() < deadline:
        fn()
    n_runs = min(max(min_runs, int(rep_ms / per_run)), max_runs)
    times = []
    for _ in range(n_runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return _summary(times, "cpu")

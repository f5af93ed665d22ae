"""Front-end costs of the seed GEMM: phase 1 + phase 2 elaboration, and the Python cost of a
cached call up to the launch (argument binding, const reading, cache lookup, argument checks),
with the launch itself stubbed out.

    python benchmarks/dispatch.py
"""
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from kernels.seed import gemm  # noqa: E402

import tile_nb  # noqa: E402


def elaboration_ms(repeats: int = 30) -> tuple[float, float]:
    from tile_nb.frontend.elaborate import elaborate

    ct = dict(out_dtype=tile_nb.language.float32, block_M=128, block_N=128, block_K=32)
    d = gemm.definition
    p1, p2 = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        elaborate(d, d.signature, ct, None)
        t1 = time.perf_counter()
        elaborate(d, d.signature, ct, {"M": 1024, "N": 1024, "K": 1024})
        t2 = time.perf_counter()
        p1.append((t1 - t0) * 1e3)
        p2.append((t2 - t1) * 1e3)
    return statistics.median(p1), statistics.median(p2)


def cached_call_us(n: int = 20000) -> float:
    A = torch.randn(128, 128, dtype=torch.float16)
    B = torch.randn(128, 128, dtype=torch.float16)
    C = torch.empty(128, 128)
    gemm(A, B, C)  # warm: template, specialization, fast-path plan
    launched = []
    gemm._launch = lambda spec, ordered, device, backend: launched.append(1)  # stub: measure up to the launch
    try:
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                gemm(A, B, C)
            runs.append((time.perf_counter() - t0) / n * 1e6)
    finally:
        del gemm._launch
    assert len(launched) == 5 * n
    return statistics.median(runs)


if __name__ == "__main__":
    e1, e2 = elaboration_ms()
    call = cached_call_us()
    print(f"date {time.strftime('%Y-%m-%d')}, machine: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}")
    print(f"phase 1 (template) elaboration: {e1:.2f} ms (median of 30)")
    print(f"phase 2 (specialize) elaboration: {e2:.2f} ms (median of 30)")
    print(f"phase 1 + phase 2: {e1 + e2:.2f} ms   (target <= 5 ms)")
    print(f"cached call up to the launch: {call:.2f} us   (target <= 2 us; tilelang measured 9 us)")

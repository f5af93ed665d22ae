"""Host cost of one launch of a compiled GEMM (GPU): a host-bound loop of calls on tiny matrices.

    python benchmarks/launch.py

The TMA kernels (sm_90a, >= 2 consumer warpgroups) encode two tensor maps on the host per call
(`runtime.cuTensorMapEncodeTiled`); this measures what that adds next to the same kernel with cp.async and to
torch.matmul. Per-call time = wall time of N back-to-back calls / N, synchronised once at the end.
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from kernels.seed import gemm_ir  # noqa: E402

from tile_nb.runtime import compile as rt_compile  # noqa: E402

BIG = {"block_N": 256, "block_K": 64, "threads": 256}


def per_call_us(fn, n=3000):
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    size = 256
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float32)
    print(f"device: {torch.cuda.get_device_name()}  date: {time.strftime('%Y-%m-%d')}  size {size}^3")
    for name, tma in (("128x256x64, TMA", 1), ("128x256x64, cp.async", 0)):
        kernel = rt_compile(gemm_ir(size, size, size, **BIG).with_attr("tile_nb.tma", tma), None)
        print(f"{name:24s} {per_call_us(lambda k=kernel: k(a, b, c)):6.2f} us per call")
    c16 = torch.empty(size, size, device="cuda", dtype=torch.float16)
    print(f"{'torch.matmul':24s} {per_call_us(lambda: torch.matmul(a, b, out=c16)):6.2f} us per call")


if __name__ == "__main__":
    main()

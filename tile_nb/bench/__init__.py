"""tile_nb.bench: honest timing (warm-up, L2 flush sized to the device, CUDA events, medians and spread),
FLOP/byte counts, throughput and roofline, and sweeps over configurations.

    from tile_nb.bench import do_bench, gemm_flops, tflops
    t = do_bench(lambda: kernel(A, B, C))
    print(t, tflops(gemm_flops(M, N, K), t), "TFLOP/s")

Plots live in tile_nb.notebook; nothing here imports matplotlib.
"""
from .counts import dtype_bytes, elementwise_bytes, gbps, gemm_bytes, gemm_flops, roofline_ms, tflops
from .sweep import SweepResult, SweepRow, sweep
from .timing import Timing, do_bench, l2_flush_bytes, quantile

__all__ = [
           "SweepResult",
           "SweepRow",
           "Timing",
           "do_bench",
           "dtype_bytes",
           "elementwise_bytes",
           "gbps",
           "gemm_bytes",
           "gemm_flops",
           "l2_flush_bytes",
           "quantile",
           "roofline_ms",
           "sweep",
           "tflops",
]

"""tile_nb.bench: honest timing, benchmarks, sweeps and autotuning of tile kernels; results as plain data.

    from tile_nb.bench import do_bench, gemm_flops, tflops
    t = do_bench(lambda: kernel(A, B, C))                 # warm-up, L2 flush, CUDA events, medians
    r = bench(gemm, A, B, C, flops=gemm_flops(M, N, K))   # a BenchResult (gemm.bench(...) is the same)
    s = sweep(gemm, {"block_M": [64, 128]}, args=(A, B, C))          # a SweepResult
    t = tune(gemm, {"block_M": [64, 128], "num_stages": [2, 3]}, A, B, C)   # a TuneResult, stored on disk
    t = tune(gemm, configs, A, B, C, options=TuneOptions(pool="inline", rounds=5))   # how it searches

Modules: `timing` (do_bench), `counts` (FLOPs, bytes, roofline), `results` (BenchResult, SweepPoint,
SweepResult, TuneResult), `inputs` (make_inputs), `run` (bench, sweep), `progress` (reporters), `tuning` (the
search), `limits` (resource pruning), `compile_worker` and `pool` (parallel compiles), `ray_pool` (Ray),
`tune_store` (persisted tuning results). Views (HTML, plots, widgets) live in tile_nb.notebook; nothing here
imports matplotlib, IPython or ipywidgets, and tqdm and Ray only when asked for.
"""
from .counts import dtype_bytes, elementwise_bytes, gbps, gemm_bytes, gemm_flops, roofline_ms, tflops
from .inputs import make_inputs
from .results import BenchResult, SweepPoint, SweepResult, TuneResult
from .run import bench, sweep
from .timing import Timing, do_bench, l2_flush_bytes, quantile
from .tune_store import TuneStore
from .tuning import ConfigError, TuneOptions, expand_configs, tune

__all__ = [
           "BenchResult",
           "ConfigError",
           "SweepPoint",
           "SweepResult",
           "Timing",
           "TuneOptions",
           "TuneResult",
           "TuneStore",
           "bench",
           "do_bench",
           "dtype_bytes",
           "elementwise_bytes",
           "expand_configs",
           "gbps",
           "gemm_bytes",
           "gemm_flops",
           "l2_flush_bytes",
           "make_inputs",
           "quantile",
           "roofline_ms",
           "sweep",
           "tflops",
           "tune",
]

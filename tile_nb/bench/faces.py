"""The benchmarking faces of a kernel: `gemm.bench(...)`, `gemm.sweep(...)`, `gemm.tune(...)`.

Methods of `tile_nb.JITFunction` that this layer provides (jit.py sits below bench and imports none of it):
`tile_nb/__init__.py` attaches them to the class, importing this module on their first use, so they work in a
script or notebook that never imported `tile_nb.bench` itself. Each is the module-level function of the same
name with the kernel first.
"""
from __future__ import annotations

from .run import bench as _bench
from .run import sweep as _sweep
from .tuning import tune as _tune

__all__ = ["FACES", "bench", "sweep", "tune"]


def bench(self, *args, **kwargs):
    """Time a call: `gemm.bench(A, B, C, flops=..., baseline=lambda: torch.matmul(A, B))` (see
    `tile_nb.bench.bench`); returns a `BenchResult` with median/p20/p80, throughput and the ratio."""
    return _bench(self, *args, **kwargs)


def sweep(self, params: dict, make_args=None, **kwargs):
    """Time every combination of `params` (`{"block_M": [64, 128]}`), recording failures; shows progress,
    can persist to JSON (`results=`); returns a `SweepResult` (see `tile_nb.bench.sweep`)."""
    return _sweep(self, params, make_args, **kwargs)


def tune(self, *args, configs, **kwargs):
    """Search `configs` (a list of dicts of compile-time values, or a grid `{"block_M": [64, 128], ...}`) for
    the fastest on these arguments (tensors, or consts as keywords: `gemm.tune(M=8192, N=8192, K=8192,
    configs=...)`): compiled in parallel worker processes, pruned by resources, timed one at a time on the
    GPU (compile-only without one); the result is stored. How it searches: `options=TuneOptions(...)`
    (`tile_nb.bench.TuneOptions`), or its field names as keywords (`pool="inline"`)."""
    return _tune(self, configs, *args, **kwargs)


FACES = {"bench": bench, "sweep": sweep, "tune": tune}

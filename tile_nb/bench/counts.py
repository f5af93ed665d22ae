"""Operation and byte counts, throughput, and the roofline floor.

Bytes are the fewest a kernel must move through device memory: each input read once, each output written once.
"""
from __future__ import annotations

from typing import Any

__all__ = ["dtype_bytes", "elementwise_bytes", "gbps", "gemm_bytes", "gemm_flops", "roofline_ms", "tflops"]

_SIZES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
          "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


def dtype_bytes(dtype: Any) -> int:
    """Bytes per element of a dtype given as a string ("float16"), a torch
    dtype or anything with `itemsize`."""
    itemsize = getattr(dtype, "itemsize", None)
    if isinstance(itemsize, int):
        return itemsize
    name = str(dtype).replace("torch.", "")
    if name not in _SIZES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(_SIZES)}")
    return _SIZES[name]


def gemm_flops(M: int, N: int, K: int, batch: int = 1) -> int:
    """A multiply-add counts two operations: 2*M*N*K per product."""
    return 2 * M * N * K * batch


def gemm_bytes(M: int, N: int, K: int, in_dtype: Any = "float16", out_dtype: Any = "float32",
               batch: int = 1) -> int:
    """A (M x K) and B (K x N) read once, C (M x N) written once."""
    return batch * ((M * K + K * N) * dtype_bytes(in_dtype) + M * N * dtype_bytes(out_dtype))


def elementwise_bytes(numel: int, n_inputs: int = 1, n_outputs: int = 1, dtype: Any = "float32") -> int:
    return numel * (n_inputs + n_outputs) * dtype_bytes(dtype)


def _ms(timing_or_ms: Any) -> float:
    return float(getattr(timing_or_ms, "median_ms", timing_or_ms))


def tflops(flops: float, timing_or_ms: Any) -> float:
    """TFLOP/s of `flops` done in a Timing's median (or a time in ms)."""
    return flops / (_ms(timing_or_ms) * 1e-3) / 1e12


def gbps(nbytes: float, timing_or_ms: Any) -> float:
    """GB/s (10^9 bytes per second) of `nbytes` moved in a Timing's median (or a time in ms)."""
    return nbytes / (_ms(timing_or_ms) * 1e-3) / 1e9


def roofline_ms(flops: float, nbytes: float, peak_tflops: float, peak_gbps: float) -> tuple[float, str]:
    """The floor no version can beat much: (ms, "compute" or "memory"), whichever bound is larger."""
    compute = flops / (peak_tflops * 1e12) * 1e3
    memory = nbytes / (peak_gbps * 1e9) * 1e3
    return (compute, "compute") if compute >= memory else (memory, "memory")

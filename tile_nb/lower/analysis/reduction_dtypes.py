"""The dtypes reductions compute in (docs/IR.md's rule, written once for the plan and the emitters): sums
accumulate in `accumulation_dtype`, maxima and minima compare in `compare_dtype`."""
from __future__ import annotations

__all__ = ["accumulation_dtype", "compare_dtype", "reduction_dtype"]


def accumulation_dtype(dtype: str) -> str:
    """The dtype a sum into `dtype` accumulates in (integers wrap around in it; the cast to `dtype` keeps the
    low bits, so the result is the exact sum modulo 2^bits of `dtype`)."""
    dtype = str(dtype)
    if dtype == "float64":
        return "float64"
    if dtype.startswith(("float", "bfloat")):
        return "float32"
    return "int64" if dtype in ("int64", "uint64") else "int32"


def compare_dtype(dtype: str) -> str:
    """The dtype a max or min over `dtype` values is taken in: every value of `dtype` exactly (uint32 above
    2^31 would turn negative in int32)."""
    dtype = str(dtype)
    if dtype.startswith(("float", "bfloat")):
        return "float64" if dtype == "float64" else "float32"
    return dtype if dtype in ("uint32", "int64", "uint64") else "int32"


def reduction_dtype(kind: str, src_dtype: str, dst_dtype: str) -> str:
    return accumulation_dtype(dst_dtype) if kind == "sum" else compare_dtype(src_dtype)

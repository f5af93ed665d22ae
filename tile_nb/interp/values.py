"""Values of the interpreter: TVM dtypes as torch dtypes, and arithmetic that works on both kinds of value.

At block level a value is a Python number (indices, loop counters, scalar parameters) or a 0-d tensor (a float
read from a buffer, so that it keeps its dtype). Inside `T.parallel` loops a value may be a tensor broadcast over
the parallel iteration space. The helpers here accept either, so each expression rule is written once.
"""
from __future__ import annotations

import math

import torch

__all__ = [
    "accum_dtype",
    "cast",
    "floordiv",
    "floormod",
    "is_tensor",
    "logical_not",
    "torch_dtype",
    "truncdiv",
    "truncmod",
    "vmax",
    "vmin",
    "where",
]

_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "bool": torch.bool,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}


def torch_dtype(dtype) -> torch.dtype:
    """The torch dtype of a TVM dtype (string or dtype object)."""
    name = str(dtype)
    try:
        return _DTYPES[name]
    except KeyError:
        raise NotImplementedError(f"the CPU interpreter does not support dtype {name!r}") from None


def is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def accum_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype to compute a matmul or reduction in before casting to `dtype` (tensor cores accumulate fp16 in
    fp32; integers go through float64, exact for the sums of int8/int32 products that kernels produce)."""
    if dtype == torch.float64 or not dtype.is_floating_point:
        return torch.float64
    return torch.float32


def cast(x, dtype: str):
    """`T.Cast(dtype, x)`: Python numbers stay Python numbers where exact; narrow floats become 0-d tensors."""
    tdtype = torch_dtype(dtype)
    if is_tensor(x):
        return x.to(tdtype)
    if tdtype == torch.bool:
        return bool(x)
    if not tdtype.is_floating_point:
        if isinstance(x, float):
            if math.isnan(x) or math.isinf(x):
                return torch.tensor(x).to(tdtype).item()
            x = int(x)  # C casts truncate toward zero, as int() does
        bits = torch.iinfo(tdtype).bits
        if tdtype.is_signed:
            x = (int(x) + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
        else:
            x = int(x) % (1 << bits)
        return x
    if tdtype == torch.float64:
        return float(x)
    return torch.tensor(float(x), dtype=tdtype)


def vmin(a, b):
    if is_tensor(a) or is_tensor(b):
        a, b = _as_tensors(a, b)
        return torch.minimum(a, b)
    return min(a, b)


def vmax(a, b):
    if is_tensor(a) or is_tensor(b):
        a, b = _as_tensors(a, b)
        return torch.maximum(a, b)
    return max(a, b)


def where(cond, a, b):
    if is_tensor(cond):
        if cond.dim() == 0 and not is_tensor(a) and not is_tensor(b):
            return a if bool(cond) else b
        if not is_tensor(a) and not is_tensor(b):  # two scalars under a tensor mask (T.if_then_else(m, -inf, 0))
            return torch.where(cond, torch.tensor(a), torch.tensor(b))
        a, b = _as_tensors(a, b)
        return torch.where(cond, a, b)
    return a if cond else b


def truncdiv(a, b):
    """C division: truncates toward zero for integers (TIR `Div`); true division for floats."""
    if is_tensor(a) or is_tensor(b):
        if _is_float(a) or _is_float(b):
            return a / b
        return torch.div(a, b, rounding_mode="trunc")
    if isinstance(a, float) or isinstance(b, float):
        return a / b
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def truncmod(a, b):
    if is_tensor(a) or is_tensor(b):
        a, b = _as_tensors(a, b)
        return torch.fmod(a, b)
    if isinstance(a, float) or isinstance(b, float):
        return math.fmod(a, b)
    return a - b * truncdiv(a, b)


def floordiv(a, b):
    if is_tensor(a) or is_tensor(b):
        if _is_float(a) or _is_float(b):
            return torch.floor(a / b)
        return torch.div(a, b, rounding_mode="floor")
    if isinstance(a, float) or isinstance(b, float):
        return math.floor(a / b)
    return a // b


def floormod(a, b):
    if is_tensor(a) or is_tensor(b):
        a, b = _as_tensors(a, b)
        return torch.remainder(a, b)
    return a % b


def logical_not(a):
    if is_tensor(a):
        return ~a.to(torch.bool)
    return not a


def _is_float(x) -> bool:
    if is_tensor(x):
        return x.dtype.is_floating_point
    return isinstance(x, float)


def _as_tensors(a, b):
    """Make both operands tensors; a Python scalar takes the other operand's dtype (as TIR would have cast it)."""
    if not is_tensor(a):
        a = torch.tensor(a, dtype=b.dtype)
    elif not is_tensor(b):
        b = torch.tensor(b, dtype=a.dtype)
    elif a.dtype != b.dtype:
        common = torch.promote_types(a.dtype, b.dtype)
        a, b = a.to(common), b.to(common)
    return a, b

"""Values of the interpreter: TVM dtypes as torch dtypes, and arithmetic that works on both kinds of value.

At block level a value is a Python number (indices, loop counters, scalar parameters) or a 0-d tensor (a float
read from a buffer, so that it keeps its dtype). Inside `T.parallel` loops a value may be a tensor broadcast
over the parallel iteration space. The helpers here accept either, so each expression rule is written once.
"""
from __future__ import annotations

import math

import torch

__all__ = [
    "accum_dtype",
    "cast",
    "compare_dtype",
    "floordiv",
    "floormod",
    "is_tensor",
    "logical_not",
    "torch_dtype",
    "truncdiv",
    "truncmod",
    "vmax",
    "vmin",
    "signed_target",
    "where",
    "wrap_int",
    "wrap_scalar",
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


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 values rounded to TF32 as the GPU's `cvt.rna.tf32.f32` does before a TF32 MMA: 10 explicit
    mantissa bits kept, the 13 dropped ones rounded to nearest, ties away from zero (adding half of the
    dropped range to the magnitude's bit pattern, then clearing it; a carry into the exponent is the correct
    rounding up, to infinity past the largest value). NaN and infinity stay as they are."""
    x = x.to(torch.float32).contiguous()
    bits = (x.view(torch.int32) + 0x1000) & ~0x1FFF
    return torch.where(torch.isfinite(x), bits.view(torch.float32), x)


def accum_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a matmul or a sum into `dtype` is computed in before it is converted to `dtype` (docs/IR.md's
    numeric contract): float32 for 16- and 8-bit floats, float64 for float64, and int64 for integers, whose
    result then wraps around to `dtype`'s width (`wrap_int`) as the GPU's int32 arithmetic does."""
    if dtype == torch.float64:
        return torch.float64
    return torch.float32 if dtype.is_floating_point else torch.int64


def compare_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a max or min of `dtype` values is taken in: one that holds every value exactly, as on the GPU
    (16- and 8-bit floats compare in float32, integers in int64 here; values
    of uint64 above 2^63 excepted)."""
    if dtype.is_floating_point:
        return torch.float64 if dtype == torch.float64 else torch.float32
    return torch.int64


# The largest finite value of an 8-bit float dtype whose torch conversion overflows to infinity: CUDA converts
# with `satfinite` (cvt.rn.satfinite, the __nv_fp8 constructors), which gives the largest finite value instead
# (infinity too); NaN stays NaN. torch's e4m3fn conversion already saturates (it has no infinity).
_SATURATE = {torch.float8_e5m2: 57344.0}
SATURATING = frozenset(_SATURATE)


def saturate(value, dtype: torch.dtype):
    """`value` (a tensor or a Python number about to be stored as `dtype`) clamped as the GPU's conversion to
    `dtype` clamps: only for float8_e5m2, whose torch conversion would give infinity (docs/IR.md, "8-bit
    floats"); anything else unchanged."""
    limit = _SATURATE.get(dtype)
    if limit is None:
        return value
    if is_tensor(value):
        return value.clamp(-limit, limit) if value.dtype.is_floating_point and value.dtype != dtype else value
    if isinstance(value, float) and value == value:
        return max(-limit, min(limit, value))
    return value


def convert(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`t.to(dtype)` as the GPU converts (`saturate`)."""
    return saturate(t, dtype).to(dtype)


def wrap_int(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An int64 tensor converted to `dtype`; an integer dtype keeps the low bits (two's complement
    wrap-around, as CUDA's and torch's integer arithmetic); a float or bool dtype converts as the GPU does
    (`convert`)."""
    if dtype.is_floating_point or dtype == torch.bool or t.dtype.is_floating_point:
        return convert(t, dtype)
    bits = torch.iinfo(dtype).bits
    if bits < 64:
        t = t & ((1 << bits) - 1)
        if dtype.is_signed:
            t = t - ((t >> (bits - 1)) << bits)  # the top bit set: the value minus 2^bits
    return t.to(dtype)


def wrap_scalar(x: int, dtype: torch.dtype) -> int:
    """A Python int wrapped around to an integer `dtype`'s range (what a store into such a buffer keeps)."""
    bits = torch.iinfo(dtype).bits
    x &= (1 << bits) - 1
    return x - (1 << bits) if dtype.is_signed and x >> (bits - 1) else x


_SIGNED_TWIN = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


def signed_target(t: torch.Tensor, value):
    """(t, value) for a store into `t`: a uint16/32/64 tensor becomes a signed view of the same bits, and the
    value is wrapped to it (torch's CPU kernels lack index_put, where and copy between those and int64)."""
    signed = _SIGNED_TWIN.get(t.dtype)
    if signed is None:
        return t, value
    if is_tensor(value):
        return t.view(signed), wrap_int(value.to(torch.int64), signed)
    return t.view(signed), wrap_scalar(int(value), signed)


def cast(x, dtype: str):
    """`T.Cast(dtype, x)`: Python numbers stay Python numbers where exact;
    narrow floats become 0-d tensors."""
    tdtype = torch_dtype(dtype)
    if is_tensor(x):
        return convert(x, tdtype)
    if tdtype == torch.bool:
        return bool(x)
    if not tdtype.is_floating_point:
        if isinstance(x, float):
            if math.isnan(x) or math.isinf(x):
                return torch.tensor(x).to(tdtype).item()
            x = int(x)  # C casts truncate toward zero, as int() does
        return wrap_scalar(int(x), tdtype)
    if tdtype == torch.float64:
        return float(x)
    return torch.tensor(saturate(float(x), tdtype), dtype=tdtype)


def vmin(a, b):
    """`T.min`: a NaN operand makes the result NaN (torch.minimum; the GPU's `min.NaN`)."""
    if is_tensor(a) or is_tensor(b):
        a, b = _as_tensors(a, b)
        return torch.minimum(a, b)
    if a != a or b != b:  # noqa: PLR0124 - the NaN test for Python floats
        return math.nan
    return min(a, b)


def vmax(a, b):
    """`T.max`: a NaN operand makes the result NaN (torch.maximum; the GPU's `max.NaN`)."""
    if is_tensor(a) or is_tensor(b):
        a, b = _as_tensors(a, b)
        return torch.maximum(a, b)
    if a != a or b != b:  # noqa: PLR0124 - the NaN test for Python floats
        return math.nan
    return max(a, b)


def where(cond, a, b):
    if is_tensor(cond):
        if cond.dim() == 0 and not is_tensor(a) and not is_tensor(b):
            return a if bool(cond) else b
        # two scalars under a tensor mask (T.if_then_else(m, -inf, 0))
        if not is_tensor(a) and not is_tensor(b):
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
    """Make both operands tensors; a Python scalar takes the other operand's
    dtype (as TIR would have cast it)."""
    if not is_tensor(a):
        a = torch.tensor(a, dtype=b.dtype)
    elif not is_tensor(b):
        b = torch.tensor(b, dtype=a.dtype)
    elif a.dtype != b.dtype:
        common = torch.promote_types(a.dtype, b.dtype)
        a, b = a.to(common), b.to(common)
    return a, b

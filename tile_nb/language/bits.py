"""Bit manipulation on scalar expressions (tilelang's names): `T.reinterpret`, shifts and bitwise operations.

The operators `<<`, `>>`, `&`, `|`, `^`, `~` work on expressions too; these functions are the named forms that
tilelang's dequantization kernels use. Integer results wrap around to their dtype's width, as on
the GPU (docs/IR.md). A right shift of a signed value is arithmetic (it copies the sign bit), of
an unsigned one logical, as in C.
"""
from __future__ import annotations

from . import state as _state
from .dtypes import as_dtype
from .irutil import dtype_of

__all__ = [
    "reinterpret",
    "shift_left",
    "shift_right",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
]

_BITS = {"float64": 64, "int64": 64, "uint64": 64, "float32": 32, "int32": 32, "uint32": 32,
         "float16": 16, "bfloat16": 16, "int16": 16, "uint16": 16,
         "int8": 8, "uint8": 8, "float8_e4m3fn": 8, "float8_e5m2": 8}


class OpaqueHandle:
    """`T.reinterpret(T.uint64(0), dtype="handle")`: TVM's null scope handle, which only T.attr's reduce scope
    takes (language/reducers.py)."""


def reinterpret(*args, **kwargs):
    """`T.reinterpret(dtype, x)`: the bits of `x` read as `dtype` (no conversion: `T.reinterpret(T.float16,
    T.uint16(0x3C00))` is 1.0). Both dtypes must have the same width. tilelang's other order,
    `T.reinterpret(x, dtype=...)`, is taken too."""
    from tvm import tirx

    st = _state.active("T.reinterpret")
    if len(args) == 2 and not kwargs:
        dtype, value = args
    elif len(args) == 1 and set(kwargs) == {"dtype"}:  # tilelang's T.reinterpret(x, dtype=...)
        value, dtype = args[0], kwargs["dtype"]
        if str(dtype) == "handle":
            return OpaqueHandle()
    elif not args and set(kwargs) == {"dtype", "value"}:
        dtype, value = kwargs["dtype"], kwargs["value"]
    else:
        raise st.error("T.reinterpret: expected (dtype, value) or (value, dtype=...); got "
                       f"{len(args)} positional argument(s) and {sorted(kwargs)}")
    target = str(as_dtype(dtype))
    if isinstance(value, (bool, int, float)):
        raise st.error(
            f"T.reinterpret(dtype, value): value must be an expression with a dtype (a buffer element, "
            f"or tirx.const(v, dtype)); got the Python {type(value).__name__} {value!r}",
            hint="write T.reinterpret(T.float16, T.cast(v, T.uint16)) to say which bits you mean",
        )
    source = dtype_of(value)
    if _BITS.get(source) != _BITS.get(target) or target not in _BITS:
        raise st.error(
            f"T.reinterpret(dtype, value): dtype and value must have the same width; got {target} "
            f"({_BITS.get(target, '?')} bits) and a {source} value ({_BITS.get(source, '?')} bits)"
        )
    return tirx.reinterpret(target, value)


def _integer_op(name: str, fn, *operands):
    """`fn` of the operands after checking they are integers (folded in Python when all are Python
    ints). A Python int beside an expression takes the expression's dtype, as with the operators
    (`1 << x` of a uint8 `x` is uint8)."""
    if all(isinstance(v, int) for v in operands):
        return fn(*operands)
    from tvm import tirx

    st = _state.active(f"T.{name}")
    for side, v in zip("ab", operands, strict=True):
        if not isinstance(v, int) and not dtype_of(v).startswith(("int", "uint")):
            raise st.error(f"T.{name}: {side} must be an integer; got a {dtype_of(v)} value")
    return getattr(tirx, name)(*operands)


def shift_left(a, b):
    """`T.shift_left(a, b)`: `a << b`."""
    return _integer_op("shift_left", lambda x, y: x << y, a, b)


def shift_right(a, b):
    """`T.shift_right(a, b)`: `a >> b`, arithmetic for a signed `a`, logical for an unsigned one."""
    return _integer_op("shift_right", lambda x, y: x >> y, a, b)


def bitwise_and(a, b):
    return _integer_op("bitwise_and", lambda x, y: x & y, a, b)


def bitwise_or(a, b):
    return _integer_op("bitwise_or", lambda x, y: x | y, a, b)


def bitwise_xor(a, b):
    return _integer_op("bitwise_xor", lambda x, y: x ^ y, a, b)


def bitwise_not(a):
    return _integer_op("bitwise_not", lambda x: ~x, a)

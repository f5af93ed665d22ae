"""Pieces every family uses: shape pools, dtype groups, annotations, index expressions, kernel names."""
from __future__ import annotations

import hashlib

from ..case import Source, TensorArg

# Sizes: ones, small primes, odd numbers, powers of two and their neighbours.
SIZES = (1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 32, 33, 61, 64, 97, 100, 128, 130)
SMALL_SIZES = (1, 2, 3, 4, 5)
FLOATS = ("float32", "float16", "bfloat16")
INTS = ("int8", "int16", "int32", "uint8")
STRIDED_VIEWS = ("transposed", "every_other", "padded")

TORCH = {d: f"torch.{d}" for d in FLOATS + INTS + ("float64", "int64")}


def kernel_name(prefix: str, spec) -> str:
    return f"{prefix}_{hashlib.sha1(repr(spec).encode()).hexdigest()[:8]}"


def dim_names(rank: int) -> list[str]:
    return {1: ["N"], 2: ["M", "N"], 3: ["B", "M", "N"]}[rank]


def declare_dims(src: Source, names, dynamic=()) -> None:
    """`M, N = T.const('M, N')`, with the dims in `dynamic` declared by T.dynamic instead."""
    consts = [n for n in names if n not in dynamic]
    if consts:
        src(f"{', '.join(consts)} = T.const('{', '.join(consts)}')")
    for n in names:
        if n in dynamic:
            src(f"{n} = T.dynamic('{n}')")


def annotate(src: Source, arg: TensorArg, dims) -> None:
    """The in-body annotation of a tensor argument: T.Tensor, or T.StridedTensor with const strides for views
    that are not contiguous."""
    shape = f"[{', '.join(dims)}]"
    if arg.view in ("contiguous", "guarded"):
        src(f"{arg.name}: T.Tensor[{shape}, T.{arg.dtype}]")
        return
    strides = [f"s{arg.name}{i}" for i in range(len(dims))]
    src(f"{', '.join(strides)} = T.const('{', '.join(strides)}')")
    src(f"{arg.name}: T.StridedTensor[{shape}, [{', '.join(strides)}], T.{arg.dtype}]")


def plus(expr: str, offset: int) -> str:
    """`expr + offset` written the way a person would (`b0 * 32 - 1`, `b0 * 32`)."""
    if offset == 0:
        return expr
    return f"{expr} {'+' if offset > 0 else '-'} {abs(offset)}"


def times(var: str, factor: int) -> str:
    return var if factor == 1 else f"{var} * {factor}"


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def int_values(dtype: str) -> dict:
    """TensorArg value settings for an integer dtype: non-zero, and never the poison sentinel."""
    return {"values": "natural", "hi": 200} if dtype == "uint8" else {"values": "int", "hi": 100}


def kernel_header(src: Source, name: str, params) -> None:
    src("@tile_nb.jit")
    src(f"def {name}({', '.join(params)}):")

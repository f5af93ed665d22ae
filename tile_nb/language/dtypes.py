"""Data types of the tile language: `T.float16`, `T.int32`, ... and the `T.dtype` parameter annotation.

A `DType` is a `str` subclass holding TVM's name ("float16"), so it is hashable, compares equal to the plain
name, and can be passed wherever TVM wants a dtype string. Calling it builds a typed constant
(`T.float32(0)`); used as a parameter annotation (`x: T.float32`) it declares a runtime scalar.
"""
from __future__ import annotations

__all__ = [
    "DType",
    "TF32",
    "NamedOnlyDType",
    "NAMED_ONLY",
    "dtype",
    "as_dtype",
    "as_tensor_dtype",
    "PACKED_4BIT",
    "torch_dtype",
    "ALL_DTYPES",
    "tfloat32",
]


class DType(str):
    """A tile-language dtype; `DType("float16") == "float16"`. `plain` is the name as a plain
    str: torch.compile (Dynamo before torch 2.13) does not take a str subclass as a constant,
    but reads an attribute of one."""

    def __new__(cls, name):
        self = super().__new__(cls, name)
        self.plain = str.__str__(self)
        return self

    def __call__(self, value):
        from tvm import tirx

        return tirx.const(value, str(self))

    def __repr__(self) -> str:
        return f"T.{str(self)}"

    @property
    def bits(self) -> int:
        import tvm

        return tvm.DataType(str(self)).bits

    @property
    def is_float(self) -> bool:
        return self.startswith(("float", "bfloat"))

    def as_torch(self):
        """The torch dtype (`T.float16.as_torch()` is `torch.float16`; tilelang's spelling)."""
        return torch_dtype(str(self))


class TF32(DType):
    """`T.tfloat32`: float32 storage (its name, for TVM, torch and every check, is "float32") whose
    `T.gemm` runs on the tensor cores in TF32: both operands rounded to 10 mantissa bits (docs/IR.md,
    "TF32"). The allocation that uses it records the buffer (state.tf32); its type keeps it apart
    from T.float32 in cache keys."""

    __slots__ = ()

    def __new__(cls, _storage="float32"):  # (the argument: what pickling passes back)
        return super().__new__(cls, "float32")

    def __repr__(self) -> str:
        return "T.tfloat32"


tfloat32 = TF32()


class NamedOnlyDType(DType):
    """A sub-byte dtype tilelang names (`T.int4`, `T.float4_e2m1fn`): it can be compared, printed and used as
    a dict key (tilelang's dequantization helpers pick their intrinsics by it), but tile_nb has no buffers or
    values of it yet: `as_dtype` (every allocation, annotation and cast) refuses it, naming it."""

    __slots__ = ()


NAMED_ONLY = {name: NamedOnlyDType(name) for name in
              ("int4", "uint4", "int2", "uint2", "int1", "uint1", "float4_e2m1fn")}


class _DTypeAnnotation:
    """`out_dtype: T.dtype = T.float32` marks a compile-time dtype parameter."""

    def __repr__(self) -> str:
        return "T.dtype"

    def __call__(self, name: str) -> DType:
        return as_dtype(name)


dtype = _DTypeAnnotation()

_NAMES = [
    "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool",
]
ALL_DTYPES: dict[str, DType] = {name: DType(name) for name in _NAMES}

# Aliases users write, mapped to TVM's names.
_ALIASES = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "uint": "uint32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
}


def as_dtype(value) -> DType:
    """A DType from a DType, a name, or a torch dtype; ValueError naming the value otherwise."""
    if isinstance(value, DType) and not isinstance(value, NamedOnlyDType):
        return value
    name = value if isinstance(value, str) else str(value)
    if name in NAMED_ONLY:
        raise ValueError(
            f"tile_nb has no {name} values (a sub-byte dtype: it can be named and compared, not computed "
            f"with); T.int4 / T.uint4 tensor parameters and tiles hold packed values and read as int8 / "
            f"uint8, other sub-byte values stay packed in uint8 / int8 (unpack them with T.shift_right / "
            f"T.bitwise_and)"
        )
    if name.startswith("torch."):  # a torch dtype or its name
        name = name[len("torch."):]
    elif not isinstance(value, str):
        raise ValueError(f"expected a dtype (such as T.float16), got {value!r}")
    name = _ALIASES.get(name, name)
    if name == "tfloat32":
        return tfloat32
    if name in ALL_DTYPES:
        return ALL_DTYPES[name]
    raise ValueError(f"unknown dtype {value!r}; expected one of {', '.join(ALL_DTYPES)}")


# the 4-bit dtypes a tensor parameter or tile may hold (language/packed.py) -> the 8-bit dtype storing them
PACKED_4BIT = {"int4": "int8", "uint4": "uint8"}


def as_tensor_dtype(value) -> DType:
    """`as_dtype`, and also T.int4 / T.uint4: the dtypes a tensor parameter, a tile or a compile-time
    `T.dtype` argument may be (packed 4-bit values are stored and unpacked by language/packed.py)."""
    name = str(value)
    return NAMED_ONLY[name] if name in PACKED_4BIT else as_dtype(value)


_TORCH_CACHE: dict[str, object] = {}


def torch_dtype(dt: str):
    """The torch dtype of a tile-language dtype (imports torch on first use)."""
    found = _TORCH_CACHE.get(dt)
    if found is None:
        import torch

        found = getattr(torch, "bool" if dt == "bool" else str(dt))
        _TORCH_CACHE[dt] = found
    return found

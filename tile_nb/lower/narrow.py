"""8- and 16-bit integer arithmetic that wraps to its dtype after each op, as the interpreter computes it.

C++ promotes uint8 / uint16 / int8 / int16 operands to int, so the CUDA of `u * (ushort)40000` is an int
product (signed overflow, no wrap at 16 bits), `(ushort)65535 + (ushort)1` is 65536 and `~(ushort)0` is -1:
a store into a narrow buffer truncates, but a max, a compare, a shift right, a division or a cast to a wider
dtype sees the unwrapped value. TVM prints a cast to the node's own dtype as nothing, so the op is rebuilt in
32 bits and cast back: `(ushort)((uint)u * (uint)40000)`. Unsigned dtypes compute in uint32 (defined
wrap-around), signed ones in int32 (their + - * / cannot overflow it), and left shifts in uint32 for both (a
negative or overflowing signed left shift is undefined in C++). Ops whose result stays in range (& | ^ >> %
min max of in-range operands) are left as they are. docs/IR.md, "Integers wrap around".
"""
from __future__ import annotations

from tvm import tirx
from tvm.ir import prim

from .errors import LoweringError

__all__ = ["wrap_narrow", "wrap_narrow_not"]

_NARROW = {"int8", "int16", "uint8", "uint16"}
# the ops whose C++ result (in int) can leave the narrow dtype's range
_LEAVE_RANGE = tuple(
    getattr(prim.expr, name) for name in ("Add", "Sub", "Mul", "Div", "FloorDiv", "LShift")
)


def wrap_narrow(node_type, a, b):
    """The binary op `node_type(a, b)`, computed in 32 bits and cast back where its dtype is a narrow integer
    and its C++ result could leave that dtype's range; otherwise the plain op."""
    e = node_type(a, b)
    dtype = str(e.ty)
    if not issubclass(node_type, _LEAVE_RANGE):
        return e
    _refuse_vectors(e)
    if dtype not in _NARROW:
        return e
    if node_type is prim.expr.LShift and isinstance(b, prim.expr.IntImm) and int(b.value) >= 32:
        # every bit leaves the dtype (the interpreter's 0), where C++'s 32-bit shift would be undefined
        return tirx.const(0, dtype)
    wide = "uint32" if dtype.startswith("u") or node_type is prim.expr.LShift else "int32"
    return tirx.Cast(dtype, node_type(tirx.Cast(wide, a), tirx.Cast(wide, b)))


def wrap_narrow_not(a):
    """`~a`: for uint8 / uint16 computed on the uint32 and cast back (C++'s `~` of the promoted int sets the
    high bits: `~(ushort)0` is -1, not 65535)."""
    dtype = str(a.ty)
    _refuse_vectors(a)
    if dtype not in ("uint8", "uint16"):
        return prim.expr.BitwiseNot(a)
    return tirx.Cast(dtype, prim.expr.BitwiseNot(tirx.Cast("uint32", a)))


def _refuse_vectors(e) -> None:
    """Narrow integer vectors (lanes > 1) would need the same wrap per lane: not lowered, refused."""
    dt = e.ty.dtype
    if dt.lanes > 1 and dt.type_code in (0, 1) and dt.bits in (8, 16):
        raise LoweringError(
            f"{e} computes on {e.ty} vectors: the CUDA lowering wraps 8- and 16-bit integer arithmetic to "
            "its dtype only on scalars (C++ would compute it unwrapped in int)",
            hint="write the arithmetic on scalars (a T.Parallel loop over the elements)",
        )

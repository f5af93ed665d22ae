"""Small adapters over TVM 0.27's expression classes (their names moved between releases)."""
from __future__ import annotations

__all__ = ["is_expr", "dtype_of", "is_load", "is_region", "is_buffer", "as_expr", "unwrap_comparison",
           "is_one", "align_extents"]


def unwrap_comparison(x):
    """`a == b` / `a != b` on TVM expressions give EqualOp / NotEqualOp wrappers whose `bool()` is a
    structural comparison; the condition a user meant is the wrapped expression."""
    if hasattr(x, "asobject") and type(x).__name__ in ("EqualOp", "NotEqualOp"):
        return x.asobject()
    return x


def is_expr(x) -> bool:
    from tvm.ir.expr import ExprWithOp

    return isinstance(x, ExprWithOp) and not is_load(x) or is_load(x)


def dtype_of(x) -> str:
    """The dtype name of an expression (`Var`, `IntImm`, `Add`, ...)."""
    return str(x.ty.dtype)


def is_load(x) -> bool:
    from tvm import ir

    return isinstance(x, ir.TensorLoad)


def is_handle(x) -> bool:
    """Whether an expression or var is an address (a handle: TVM's PointerType), not a number."""
    from tvm import ir

    return isinstance(getattr(x, "ty", None), ir.PointerType)


def is_region(x) -> bool:
    from tvm import ir

    return isinstance(x, ir.TensorRegion)


def is_buffer(x) -> bool:
    """A buffer. (In TVM 0.27 `tirx.Buffer` is `ir.Var`, so `isinstance(x, Buffer)` holds for every Var, loop
    variables included: the Var's type says whether it is a buffer.)"""
    from tvm.tirx.buffer import is_buffer_var

    return is_buffer_var(x)


def as_expr(value, dtype: str):
    """A Python number as a constant of `dtype`; an expression cast to `dtype` when it differs."""
    from tvm import tirx

    if isinstance(value, (bool, int, float)):
        return tirx.const(value, dtype)
    if not is_expr(value) and hasattr(value, "asobject"):  # an element read of a packed tensor (packed.py)
        value = value.asobject()
    return value if dtype_of(value) == dtype else tirx.Cast(dtype, value)


def static_int(x) -> int | None:
    """The int value of a static dim or extent (an int or an IntImm), or None when it is symbolic."""
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def is_one(e) -> bool:
    """An extent that is the constant 1 (an int or an IntImm)."""
    from tvm import tirx

    return isinstance(e, (int, tirx.IntImm)) and int(e) == 1


def align_extents(extents: list, rank: int) -> list | None:
    """A tile's extents placed on a `rank`-d start corner (`T.copy(A[i, j], tile)`): the same dims when the
    ranks agree (a `(block_M, 1)` tile is a column, never a row); a lower-rank tile covers the trailing dims
    (leading dims of extent 1); a higher-rank tile first drops unit dims, leading ones first. None when the
    tile cannot fit."""
    extents = list(extents)
    while len(extents) > rank:
        unit = next((k for k, e in enumerate(extents) if is_one(e)), None)
        if unit is None:
            return None
        del extents[unit]
    return [1] * (rank - len(extents)) + extents

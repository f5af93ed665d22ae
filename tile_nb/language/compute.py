"""Compute in the tile language: `T.gemm`, reductions, atomics and scalar math.

Scalar math works on both Python numbers (compile-time values fold in Python) and TVM expressions.
"""
from __future__ import annotations

import threading

from . import state as _state
from .dtypes import as_dtype
from .irutil import as_expr, is_buffer, is_expr, is_load, is_region, static_int, unwrap_comparison
from .memory import region_of

__all__ = [
    "gemm",
    "reduce_absmax",
    "reduce_max",
    "reduce_sum",
    "reduce_min",
    "cumsum",
    "atomic_add",
    "if_then_else",
    "ceildiv",
    "max",
    "min",
    "exp",
    "exp2",
    "log",
    "log2",
    "rsqrt",
    "sqrt",
    "sigmoid",
    "tanh",
    "abs",
    "cast",
    "infinity",
    "sin",
    "cos",
    "erf",
    "log10",
    "floor",
    "ceil",
    "trunc",
    "round",
]

_builtin_max, _builtin_min, _builtin_abs = max, min, abs


def gemm(
    A, B, C, transpose_A: bool = False, transpose_B: bool = False, clear_accum: bool = False, policy=None
):
    """`T.gemm(A, B, C)`: `C += A @ B` on tiles (`C = A @ B` with `clear_accum=True`). `A` is `[M, K]`
    (`[K, M]` with `transpose_A`), `B` is `[K, N]` (`[N, K]` with `transpose_B`), `C` is `[M, N]` and
    accumulates in its dtype. `policy` (a `T.GemmWarpPolicy`) is tilelang's warp-partition hint: recorded,
    tile_nb picks its own layout."""
    from tvm.tirx.script import tile as Tx

    from .hints import gemm_policy

    st = _state.active("T.gemm")
    clear_accum = unwrap_comparison(clear_accum)
    if hasattr(clear_accum, "value") and is_expr(clear_accum) and not is_load(clear_accum):
        clear_accum = bool(clear_accum.value)  # a folded constant (`j == 0` with j a Python int)
    if is_expr(clear_accum) and not isinstance(clear_accum, (bool, int)):
        # a run-time choice (`clear_accum=(j == 0)` in an unrolled loop): one T.gemm per branch
        from tvm.script.ir_builder import tirx as T

        with _state.frame(T.If(clear_accum)):
            with _state.frame(T.Then()):
                gemm(A, B, C, transpose_A, transpose_B, True, policy)
            with _state.frame(T.Else()):
                gemm(A, B, C, transpose_A, transpose_B, False, policy)
        return
    gemm_policy(st, policy)
    ra, rb, rc = (region_of(x, what="T.gemm") for x in (A, B, C))
    shapes = [[static_int(r.extent) for r in reg.region] for reg in (ra, rb, rc)]
    # a stage of a 3-d shared buffer (`A_s[k % 2, :, :]`): leading unit dims dropped (as the interpreter does)
    shapes = [s[-2:] if len(s) > 2 and all(e == 1 for e in s[:-2]) else s for s in shapes]
    if any(len(s) != 2 for s in shapes):
        raise st.error("T.gemm operands must be 2-d tiles; got shapes "
                       f"A{tuple(shapes[0])}, B{tuple(shapes[1])}, C{tuple(shapes[2])}")
    (a0, a1), (b0, b1), (c0, c1) = shapes
    m, ka = (a1, a0) if transpose_A else (a0, a1)
    kb, n = (b1, b0) if transpose_B else (b0, b1)
    for name, want, got in (("K of A and B", ka, kb), ("M of A and C", m, c0), ("N of B and C", n, c1)):
        if None not in (want, got) and want != got:
            raise st.error(f"T.gemm: {name} differ ({want} vs {got}); shapes A{tuple(shapes[0])} "
                           f"B{tuple(shapes[1])} C{tuple(shapes[2])}",
                           hint="use transpose_A= / transpose_B= when a tile is stored transposed")
    # A T.tfloat32 operand makes it a TF32 product (`T.tile.gemm(..., tf32=1)`,
    # docs/IR.md): both operands rounded.
    tf32 = any(r.source.same_as(b) for r in (ra, rb) for b in st.tf32)
    config = {"tf32": 1} if tf32 else {}
    Tx.gemm(rc, ra, rb, rc, bool(transpose_A), bool(transpose_B), 1.0, 0.0 if clear_accum else 1.0, **config)
    st.record_tile_op()


def _reduce(op_name: str, src, dst, dim: int, clear: bool, absolute: bool = False):
    from tvm.tirx.script import tile as Tx

    st = _state.active(f"T.reduce_{op_name}")
    rs, rd = region_of(src, what=f"T.reduce_{op_name}"), region_of(dst, what=f"T.reduce_{op_name}")
    rank = len(rs.region)
    axis = dim + rank if dim < 0 else dim
    if not 0 <= axis < rank:
        raise st.error(f"T.reduce_{op_name}: dim={dim} is out of range for a {rank}-d source")
    want = [static_int(r.extent) for i, r in enumerate(rs.region) if i != axis]
    got = [static_int(r.extent) for r in rd.region]
    if not want and all(g == 1 for g in got):
        # a 1-d source reduces to one value: a [1] (or [1, 1]) destination holds it (tilelang's form)
        want = got
    if len(want) != len(got) or any(None not in (w, g) and w != g for w, g in zip(want, got, strict=True)):
        raise st.error(
            f"T.reduce_{op_name}: reducing dim {axis} of a {[static_int(r.extent) for r in rs.region]} tile "
            f"gives {want}, but the destination is {got}"
        )
    config = {"absolute": 1} if absolute else {}  # abs-max: `T.tile.max(..., absolute=1)` (docs/IR.md)
    {"sum": Tx.sum, "max": Tx.max, "min": Tx.min}[op_name](rd, rs, (axis,), not clear, **config)
    st.record_tile_op()


def reduce_absmax(src, dst, dim: int = -1, clear: bool = True):
    """`T.reduce_absmax(src, dst, dim=1)`: max of `|src|` over `dim` into `dst` (combined with `dst` if
    `clear=False`), e.g. the scale of a quantization."""
    _reduce("max", src, dst, dim, clear, absolute=True)


def reduce_max(src, dst, dim: int = -1, clear: bool = True):
    """`T.reduce_max(src, dst, dim=1)`: max of `src` over `dim` into `dst` (combined
    with `dst` if `clear=False`)."""
    _reduce("max", src, dst, dim, clear)


def reduce_sum(src, dst, dim: int = -1, clear: bool = True):
    """`T.reduce_sum(src, dst, dim=1)`: sum of `src` over `dim` into `dst`
    (added to `dst` if `clear=False`)."""
    _reduce("sum", src, dst, dim, clear)


def reduce_min(src, dst, dim: int = -1, clear: bool = True):
    """`T.reduce_min(src, dst, dim=1)`: min of `src` over `dim` into `dst`."""
    _reduce("min", src, dst, dim, clear)


_SCAN_SCOPES = ("shared", "shared.dyn", "local.fragment", "local")
_REGISTER_LOCK = threading.Lock()


def _cumsum_op():
    """The tile primitive `T.tile.cumsum(dst, src, dim, reverse)`. TVM 0.27 has no scan primitive: tile_nb
    registers one in TVM's op registry (once per process) as a tile primitive, so it is a
    `TilePrimitiveCall` like `T.tile.sum`, printed `T.tile.cumsum`; the interpreter and the lowering
    register their rules for it by name."""
    import tvm
    from tvm.ir import _ffi_api

    name = "tirx.tile.cumsum"
    with _REGISTER_LOCK:  # kernels may be elaborated in several threads at once (autotuning)
        if name not in tvm.ir.Op.list_op_names():
            _ffi_api.RegisterOp(name, "inclusive prefix sum of a tile along one dim (tile_nb)")
            tvm.ir.register_op_attr(name, "TIRxOpCategory", "tile_primitive")
            tvm.ir.register_op_attr(name, "TScriptPrinterName", "cumsum")
    return tvm.ir.Op.get(name)


def cumsum(src, dst=None, dim: int = 0, reverse: bool = False, annotations: dict | None = None):
    """`T.cumsum(src, dst=None, dim=0, reverse=False)`: the inclusive prefix sum of `src` along `dim` into
    `dst` (`src` itself when `dst` is None); `reverse=True` sums from the end
    (`dst[i] = src[i] + ... + src[n-1]`). `src` and `dst` are shared, fragment or local tiles (or regions
    of them) of the same shape. Sums accumulate in float32 (float64, or the integer width of `dst`, as
    `T.reduce_sum`) and each element is rounded to `dst`'s dtype once. tilelang's `annotations` are
    accepted and not used. On the GPU a fragment operand is held in shared memory, and each thread scans
    whole lines serially (docs/IR.md)."""
    from tvm.script.ir_builder import tirx as T
    from tvm.tirx.tile_primitive import TilePrimitiveCall

    del annotations  # tilelang's per-call hints for its own lowering; the sums do not depend on them
    st = _state.active("T.cumsum")
    rs = region_of(src, what="T.cumsum")
    rd = rs if dst is None else region_of(dst, [r.extent for r in rs.region], what="T.cumsum")
    for name, reg in (("src", rs), ("dst", rd)):
        scope = reg.source.scope()
        if scope not in _SCAN_SCOPES:
            raise st.error(
                f"T.cumsum: {name} {reg.source.name} is in {scope} memory; expected a shared, fragment or "
                "local tile",
                hint="T.copy the region into a T.alloc_shared tile, scan that, and copy back",
            )
    shape = [static_int(r.extent) for r in rs.region]
    rank = len(shape)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise st.error(f"T.cumsum: dim must be an int in [{-rank}, {rank}) for a {rank}-d tile; got {dim!r}")
    axis = dim + rank if dim < 0 else dim
    dshape = [static_int(r.extent) for r in rd.region]
    if len(dshape) != rank or any(None not in (a, b) and a != b for a, b in zip(shape, dshape, strict=True)):
        raise st.error(
            f"T.cumsum: dst {rd.source.name}{dshape} must have the shape of src {rs.source.name}{shape}"
        )
    if not isinstance(reverse, (bool, int)):
        raise st.error(f"T.cumsum: reverse must be a Python bool; got {reverse!r}")
    T.add_to_parent(TilePrimitiveCall(rd, rs, axis, bool(reverse), op=_cumsum_op()))
    st.record_tile_op()


# the extern call of each atomic update (a reducer's updates are these too: reducers.REDUCER_OPS), so that one
# interpreter rule and one lowering rule serve every atomic
ATOMIC_CALLS = {"add": "atomicAdd", "max": "atomicMax", "min": "atomicMin"}
# dtypes an atomic max / min can update: CUDA's integer atomics, and a compare-and-swap loop for floats
ATOMIC_EXTREME_DTYPES = ("int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64")


def atomic_add(dst, value, use_tma: bool = False, memory_order: str | None = None, return_prev: bool = False):
    """`T.atomic_add(C[i, j], v)`: add `v` to one element atomically (safe across CTAs). tilelang's tile form,
    `T.atomic_add(C[i, j], C_local)` or `T.atomic_add(C[r0:r1, c0:c1], C_local)` (a tile as the value), adds
    the whole tile element by element: a `T.Parallel` loop of atomic adds, each guarded against the edge of
    `C` (on sm_90 a float32 fragment's neighbouring registers go 2 or 4 per atomic: emit/vector_atomics.py).
    `use_tma=True` (tilelang's TMA reduction) is a recorded hint: the sums are the same; `memory_order`
    may be "relaxed" (what CUDA's atomicAdd is), others are refused."""
    st = _state.active("T.atomic_add")
    if use_tma:
        from .hints import record_hint

        record_hint(st, "atomic_add(use_tma=True) (tile_nb adds with atomicAdd; the sums are the same)")
    _atomic(st, "add", dst, value, memory_order, return_prev)


def atomic_max(dst, value, memory_order: str | None = None, return_prev: bool = False):
    """`T.atomic_max(C[i, j], v)`: `C[i, j] = max(C[i, j], v)` atomically (safe across CTAs; a NaN on either
    side wins, as `T.max`); the tile form `T.atomic_max(C[r0:r1, c0:c1], tile)` as T.atomic_add's. Integer
    elements use CUDA's atomicMax, floats a compare-and-swap loop."""
    _atomic(_state.active("T.atomic_max"), "max", dst, value, memory_order, return_prev)


def atomic_min(dst, value, memory_order: str | None = None, return_prev: bool = False):
    """`T.atomic_min(C[i, j], v)`: `C[i, j] = min(C[i, j], v)` atomically; as `T.atomic_max`."""
    _atomic(_state.active("T.atomic_min"), "min", dst, value, memory_order, return_prev)


def atomic_addx2(dst, value, return_prev: bool = False):
    """`T.atomic_addx2(C[i, j], V[i, j])` (tilelang's): `C[i, j + k] += V[i, j + k]` for k in 0, 1, each add
    atomic (CUDA's paired atomics add each half atomically too); a region `C[i, j:j + 2]` names the same
    elements."""
    _atomic_lanes(_state.active("T.atomic_addx2"), 2, dst, value, return_prev)


def atomic_addx4(dst, value, return_prev: bool = False):
    """`T.atomic_addx4(C[i, j], V[i, j])`: as `T.atomic_addx2` over four consecutive elements."""
    _atomic_lanes(_state.active("T.atomic_addx4"), 4, dst, value, return_prev)


def _atomic_lanes(st, lanes: int, dst, value, return_prev) -> None:
    from tvm.script.ir_builder import tirx as T

    what = f"T.atomic_addx{lanes}"
    if return_prev:
        raise st.error(f"{what}(return_prev=True) is not supported yet")

    def first_element(x, name):
        """(buffer, indices of the first of `lanes` consecutive elements) of an element or a region."""
        if is_load(x):
            return x.source, list(x.indices)
        if is_region(x):
            extents = [static_int(r.extent) for r in x.region]
            if extents[-1] != lanes or any(e != 1 for e in extents[:-1]):
                raise st.error(f"{what}: the region {name} {x.source.name}{extents} is not {lanes} "
                               "consecutive elements of its last dim")
            return x.source, [r.min for r in x.region]
        raise st.error(f"{what} takes elements (`C[i, j]`, the first of {lanes}) or regions of {lanes} "
                       f"elements; got {name} {x!r}")

    dst_buf, dst_at = first_element(dst, "dst")
    src_buf, src_at = first_element(value, "value")
    for k in range(lanes):
        target = dst_buf[tuple(dst_at[:-1] + [dst_at[-1] + k])]
        T.add_to_parent(_atomic_update(st, "add", target, src_buf[tuple(src_at[:-1] + [src_at[-1] + k])]))


def _atomic_update(st, kind: str, element, value):
    """The statement of one atomic update of `element` (a load, `C[i, j]`) by `value`, at the user's line."""
    from tvm import tirx

    dtype = element.source.dtype
    call = tirx.call_extern(dtype, ATOMIC_CALLS[kind], tirx.address_of(element), as_expr(value, dtype))
    return tirx.Evaluate(call, st.span())


def _atomic(st, kind: str, dst, value, memory_order, return_prev) -> None:
    from tvm.script.ir_builder import tirx as T

    what = f"T.atomic_{kind}"
    if memory_order not in (None, "relaxed"):
        raise st.error(
            f"{what}(memory_order={memory_order!r}) is not supported: tile_nb's atomics are relaxed (CUDA's "
            f"{ATOMIC_CALLS[kind]})",
            hint="order the accesses with a barrier, or drop memory_order",
        )
    if return_prev:
        raise st.error(f"{what}(return_prev=True) is not supported yet")
    if is_buffer(value) or is_region(value):
        return _atomic_tile(st, kind, dst, value)
    if not is_load(dst):
        raise st.error(f"{what} takes an element `C[i, j]` as its destination; got {dst!r}")
    _check_atomic_dtype(st, kind, dst.source)
    T.add_to_parent(_atomic_update(st, kind, dst, value))


def _check_atomic_dtype(st, kind: str, buf) -> None:
    if kind != "add" and str(buf.dtype) not in ATOMIC_EXTREME_DTYPES:
        raise st.error(
            f"T.atomic_{kind}: {buf.name} is {buf.dtype}; an atomic max / min updates elements of "
            f"{', '.join(ATOMIC_EXTREME_DTYPES)}",
            hint="keep the destination in one of those dtypes (a 32-bit int for small integers)",
        )


def _atomic_tile(st, kind: str, dst, value) -> None:
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    from .loops import Parallel

    what = f"T.atomic_{kind}"
    src = region_of(value, what=what)
    extents = [r.extent for r in src.region]
    target = region_of(dst, extents, what=what)
    src_dims = [static_int(e) for e in extents if static_int(e) != 1]
    dst_dims = [static_int(r.extent) for r in target.region if static_int(r.extent) != 1]
    if src_dims != dst_dims:
        raise st.error(
            f"{what}: the tile {src.source.name}{[static_int(e) for e in extents]} and the destination "
            f"{target.source.name}{[static_int(r.extent) for r in target.region]} have different shapes"
        )
    src_buf, dst_buf = src.source, target.source
    _check_atomic_dtype(st, kind, dst_buf)
    src_min = [r.min for r in src.region]
    dst_min = [r.min for r in target.region]
    # the tile's dims of extent > 1 walk the destination's dims of extent > 1, in order
    spanned = iter([d for d, r in enumerate(target.region) if static_int(r.extent) != 1])
    walks = [next(spanned) if static_int(e) != 1 else None for e in extents]
    with Parallel(*extents).open(None) as loop_vars:
        loop_vars = loop_vars if isinstance(loop_vars, tuple) else (loop_vars,)
        dst_index = list(dst_min)
        guards = []
        for d, v, e in zip(walks, loop_vars, extents, strict=True):
            if d is None:
                continue
            dst_index[d] = dst_min[d] + v
            start, size, bound = static_int(dst_min[d]), static_int(e), static_int(dst_buf.shape[d])
            if None in (start, size, bound) or start + size > bound:  # a tile past the edge of C: not written
                guards.append(dst_index[d] < dst_buf.shape[d])
        src_index = [m + v for m, v in zip(src_min, loop_vars, strict=True)]
        stmt = _atomic_update(st, kind, dst_buf[tuple(dst_index)], src_buf[tuple(src_index)])
        if guards:
            cond = guards[0]
            for g in guards[1:]:
                cond = tirx.And(cond, g)
            stmt = tirx.IfThenElse(cond, stmt, None)
        T.add_to_parent(stmt)
    # (no record_tile_op: that list pairs lines with T.tile.* calls in order;
    # this is a loop of calls with spans)


def if_then_else(cond, then_value, else_value):
    """`T.if_then_else(c, a, b)`: `a` where `c` holds, else `b` (an expression, both sides evaluated)."""
    from tvm import tirx

    if isinstance(cond, bool):
        return then_value if cond else else_value
    return tirx.if_then_else(cond, then_value, else_value)


def ceildiv(a, b):
    """`T.ceildiv(a, b)`: `(a + b - 1) // b`, folded in Python when both are ints."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return (a + b - 1) // b


def max(a, b):  # noqa: A001 - the DSL's name
    from tvm import tirx

    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return _builtin_max(a, b)
    return tirx.max(a, b)


def min(a, b):  # noqa: A001 - the DSL's name
    from tvm import tirx

    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return _builtin_min(a, b)
    return tirx.min(a, b)


def clamp(x, low, high):
    """`T.clamp(x, low, high)`: `T.min(T.max(x, low), high)`."""
    return min(max(x, low), high)


def floordiv(a, b):
    """`T.floordiv(a, b)`: division rounding toward minus infinity (Python's
    `//`), folded when both are ints."""
    from tvm import tirx

    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return tirx.floordiv(a, b)


def floormod(a, b):
    """`T.floormod(a, b)`: the remainder of `T.floordiv` (Python's `%`), folded when both are ints."""
    from tvm import tirx

    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return tirx.floormod(a, b)


def _unary(name: str):
    def op(x):
        from tvm import tirx

        return getattr(tirx, name)(x)

    op.__name__ = name
    op.__doc__ = f"`T.{name}(x)` on a floating-point expression."
    return op


exp, exp2, log, log2 = _unary("exp"), _unary("exp2"), _unary("log"), _unary("log2")
rsqrt, sqrt, sigmoid, tanh = _unary("rsqrt"), _unary("sqrt"), _unary("sigmoid"), _unary("tanh")
sin, cos, erf, log10 = _unary("sin"), _unary("cos"), _unary("erf"), _unary("log10")
floor, ceil, trunc, round = _unary("floor"), _unary("ceil"), _unary("trunc"), _unary("round")  # noqa: A001


def abs(x):  # noqa: A001 - the DSL's name
    from tvm import tirx

    return _builtin_abs(x) if isinstance(x, (int, float)) else tirx.abs(x)


def cast(x, dtype):
    """`T.cast(x, T.float16)`: convert an expression's dtype."""

    return as_expr(x, str(as_dtype(dtype)))


def Cast(dtype, x):  # noqa: N802 - tilelang's name (TVM's argument order)
    """`T.Cast(T.float16, x)`: `T.cast(x, T.float16)`."""
    return cast(x, dtype)


def infinity(dtype):
    """`T.infinity(T.float32)`: +inf of a float dtype (use `-T.infinity(...)` for the identity of max)."""
    from tvm import tirx

    st = _state.active("T.infinity")
    dt = as_dtype(dtype)
    if not dt.is_float:
        raise st.error(f"T.infinity needs a floating-point dtype; got {dt!r}")
    # tirx.infinity has no rule for bfloat16 (TVM 0.27); a float constant of the dtype is the same value.
    return tirx.const(float("inf"), str(dt))

"""Layout annotations in tilelang's spellings: `T.annotate_layout({buf: layout})`, `T.Layout`,
`T.Fragment` and the swizzled layout of a shared tile
(`tilelang.layout.make_swizzled_layout(buf)`, `T.swizzled_layout(buf)` here).

tile_nb chooses every on-chip layout itself (shared-memory swizzles from the copy and MMA that use a tile,
fragment layouts from layout inference). A swizzle of a shared tile only changes where its elements sit in
shared memory, never a result, so that annotation is accepted and recorded as a hint
(`func.attrs["tile_nb.hints"]`).

`T.Layout(shape, fn)` on a kernel parameter (a global tensor the call passes) is honored: `fn` maps a logical
index of the tensor to a position in its memory, the row-major order of `fn`'s outputs over their ranges
(tilelang's meaning; FlashAttention's backward stores dQ permuted for its atomic adds, and a second kernel
reads it back with the same layout). `fn` runs here on the buffer's index variables; the outputs are kept as
a TIR `IndexMap` in `func.attrs["tile_nb.global_layouts"]` (the annotation's line in `tile_nb.layout_lines`).
Every call, on the GPU and on the interpreter alike, gathers the tensor into logical order before the kernel
and scatters it back after (tile_nb/runtime/layouts.py, which also checks that the layout permutes the
tensor's elements at the call's shape). A hand layout anywhere else (a shared tile, a fragment, a view) and
every `T.Fragment` are refused at the user's line: tile_nb would ignore a shared tile's placement, which is
harmless only while every read goes through logical indices; code that reads by address (ldmatrix, PTX
intrinsics) or a layout that is no bijection would then compute something else than tilelang does.
"""
from __future__ import annotations

import inspect

from . import state as _state
from .hints import record_hint
from .irutil import is_buffer, is_expr

__all__ = ["annotate_layout", "Layout", "Fragment", "SwizzledLayout", "swizzled_layout"]

_SHARED = ("shared", "shared.dyn")


class SwizzledLayout:
    """The swizzled shared-memory layout of `buffer` (tilelang's `make_swizzled_layout(buf)`)."""

    def __init__(self, buffer, *args, **kwargs):
        self.buffer = buffer

    def __repr__(self) -> str:
        return f"swizzled_layout({getattr(self.buffer, 'name', self.buffer)})"


def swizzled_layout(buffer, *args, **kwargs) -> SwizzledLayout:
    return SwizzledLayout(buffer, *args, **kwargs)


class Layout:
    """`T.Layout(shape, fn)`: a layout written by hand, `fn(*index) -> position indices` (honored by
    `T.annotate_layout` on a kernel parameter: see the module's docstring)."""

    def __init__(self, shape, forward_fn=None, *args, **kwargs):
        self.shape = shape
        self.forward_fn = forward_fn

    def __repr__(self) -> str:
        return f"T.Layout({list(self.shape) if isinstance(self.shape, (list, tuple)) else self.shape}, ...)"


class Fragment(Layout):
    """`T.Fragment(shape, forward_thread_fn=..., ...)`: a register layout
    written by hand (refused)."""

    def __repr__(self) -> str:
        return "T.Fragment(...)"


def annotate_layout(layouts: dict) -> None:
    """`T.annotate_layout({A_shared: make_swizzled_layout(A_shared)})`: see the module's docstring."""
    st = _state.active("T.annotate_layout")
    if not isinstance(layouts, dict):
        raise st.error(f"T.annotate_layout takes a dict {{buffer: layout}}; got {type(layouts).__name__}")
    for buf, layout in layouts.items():
        name = getattr(buf, "name", repr(buf))
        if not is_buffer(buf):
            raise st.error(f"T.annotate_layout: the keys must be buffers; got {buf!r}")
        scope = buf.scope()
        if isinstance(layout, SwizzledLayout) and scope in _SHARED:
            record_hint(
                st, f"annotate_layout({name}: swizzled) (tile_nb picks the shared-memory swizzle itself)"
            )
            continue
        if type(layout) is Layout and scope == "global":
            _record_global(st, buf, layout)
            continue
        what = "a swizzle" if isinstance(layout, SwizzledLayout) else repr(layout)
        raise st.error(
            f"T.annotate_layout of '{name}' ({scope}) with {what} is not supported: tile_nb chooses "
            "on-chip layouts itself, and a layout given by hand there can change what the kernel reads",
            hint="drop the annotation (tile_nb's layout inference places shared tiles and fragments); a "
                 "swizzle is accepted on a shared tile, and a T.Layout on a kernel parameter",
        )


# what an index expression of a hand layout may be made of: the runtime evaluates exactly these
_OPS = ("Add", "Sub", "Mul", "FloorDiv", "FloorMod", "Div", "Mod", "Min", "Max", "Cast", "IntImm")


def _record_global(st, buf, layout: Layout) -> None:
    """Run the layout's function on `buf`'s index variables and keep the outputs (an IndexMap) for the
    front end, which checks that `buf` is a kernel parameter and stores them in the PrimFunc's attributes."""
    from tvm import tirx

    name, shape = buf.name, list(buf.shape)
    fn = layout.forward_fn
    where = f"T.annotate_layout of '{name}' with T.Layout"
    if not callable(fn):
        raise st.error(f"{where}: expected T.Layout(shape, fn) with a function of the indices; got {fn!r}")
    given = list(layout.shape) if hasattr(layout.shape, "__len__") else [layout.shape]
    if len(given) != len(shape) or any(str(a) != str(b) for a, b in zip(given, shape, strict=True)):
        raise st.error(f"{where}: the layout's shape {_text(given)} is not the buffer's shape {_text(shape)}",
                       hint=f"write T.Layout({name}.shape, fn)")
    names = _index_names(fn, len(shape))
    if names is None:
        raise st.error(f"{where}: its function must take {len(shape)} indices ('{name}' has rank "
                       f"{len(shape)})")
    # int64, as TVMScript parses a T.index_map back (the IR text must round-trip: tuning workers parse it)
    index = [tirx.Var(n, "int64") for n in names]
    try:
        out = fn(*index)
    except Exception as err:  # noqa: BLE001 - the user's function: say what it raised
        raise st.error(f"{where}: its function raised {type(err).__name__}: {err}") from None
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    outputs = []
    for k, e in enumerate(out):
        if isinstance(e, int) and not isinstance(e, bool):
            e = tirx.IntImm("int64", e)
        if not is_expr(e) or "int" not in _dtype(e):
            raise st.error(f"{where}: output {k} of its function is {e!r}; expected an integer expression "
                           "of the indices")
        _check_expr(st, where, e, index, shape)
        outputs.append(e)
    if not outputs:
        raise st.error(f"{where}: its function returned no index")
    imap = tirx.IndexMap(index, outputs, None)
    known = st.global_layouts.get(name)
    if known is not None and not _same(known[1], imap):
        raise st.error(f"'{name}' already has another T.Layout (line {known[2]}); a tensor has one layout",
                       hint="annotate it once, with the layout every kernel that reads it uses")
    if known is None:
        st.global_layouts[name] = (buf, imap, st.lineno)


def _check_expr(st, where: str, expr, index: list, shape: list) -> None:
    """Only + - * // % min max of the indices, integers and the buffer's own dims (a T.dynamic dim is read
    from the tensor at the call)."""
    from tvm import ir

    dims = [d for d in shape if isinstance(d, ir.Var)]
    bad: list = []

    def visit(node):
        kind = type(node).__name__
        if isinstance(node, ir.Var):
            if not any(node.same_as(v) for v in index + dims):
                bad.append(f"the variable '{node.name}' (only the indices and the buffer's dims may appear)")
        elif kind not in _OPS:
            bad.append(f"{kind} ({node})")
        elif kind == "Cast":
            visit(node.value)
        elif kind != "IntImm":
            visit(node.a)
            visit(node.b)

    visit(expr)
    if bad:
        raise st.error(f"{where}: its index expression {expr} uses {bad[0]}; tile_nb honors layouts made of "
                       "+ - * // % min max of the indices")


def _index_names(fn, rank: int) -> list[str] | None:
    """The names of the function's index parameters (for the IR text), or None when it cannot take `rank`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [f"i{k}" for k in range(rank)]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return [f"i{k}" for k in range(rank)]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if not len(required) <= rank <= len(positional):
        return None
    return [p.name for p in positional[:rank]]


def _dtype(dim) -> str:
    return str(dim.ty.dtype) if hasattr(dim, "ty") and hasattr(dim.ty, "dtype") else "int32"


def _same(a, b) -> bool:
    import tvm_ffi

    return tvm_ffi.structural_equal(a, b, map_free_vars=True)


def _text(dims) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"

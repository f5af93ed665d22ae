"""CUDA C inside a kernel: `T.import_source(code)` adds device functions to the kernel's CUDA module, and
`T.call_extern(dtype, name, *args)` calls one (tilelang's `T.call_extern(name, *args, dtype=...)` too);
`T.access_ptr(buf[i], "r")` passes the address of an element (or of a buffer's first element).

This is GPU-only code: the CUDA lowering pastes each imported source once, ahead of the kernels
(`func.attrs["tile_nb.extern_sources"]`, backend/build.py), while the CPU interpreter, which runs the tile IR
and not CUDA, refuses a call of a function it has no rule for with an error naming it (interp/memory.py).

A call written as a statement is evaluated for its effect (frontend/elaborate.py `Hooks.expr_stmt`).
"""
from __future__ import annotations

from . import state as _state
from .irutil import is_buffer, is_load, is_region

__all__ = ["access_ptr", "call_extern", "call_pure_extern", "import_source", "is_extern_call",
           "EXTERN_SOURCES_ATTR"]

EXTERN_SOURCES_ATTR = "tile_nb.extern_sources"
_ACCESS_MASKS = {"r": 1, "w": 2, "rw": 3}


def import_source(source: str | None = None) -> None:
    """`T.import_source(code)` (inside a kernel): CUDA C / C++ device code for `T.call_extern` to call. The
    same text imported twice is kept once; `None` imports nothing (tilelang's behaviour)."""
    st = _state.active("T.import_source")
    if source is None:
        return
    if not isinstance(source, str):
        raise st.error(f"T.import_source(source=...): expected CUDA source text (a str), got "
                       f"{type(source).__name__}")
    if not st.kernel_open:
        raise st.error("T.import_source must be called inside `with T.Kernel(...)`")
    if source not in st.extern_sources:
        st.extern_sources.append(source)


def call_extern(*args, dtype=None, span=None):
    """`T.call_extern(dtype, name, *args)` or `T.call_extern(name, *args, dtype=dtype)`: a call of the extern
    function `name` returning `dtype` ("handle" or "void" for none). As a statement it is evaluated."""
    return _extern_call("T.call_extern", "call_extern", args, dtype)


def call_pure_extern(*args, dtype=None, span=None):
    """`T.call_pure_extern(...)`: as `T.call_extern`, for a function without side effects."""
    return _extern_call("T.call_pure_extern", "call_pure_extern", args, dtype)


def _extern_call(what: str, maker: str, args: tuple, dtype):
    from tvm import tirx

    st = _state.active(what)
    if dtype is not None:
        args = (dtype, *args)
    if len(args) < 2:
        raise st.error(f"{what}(dtype, name, *args): expected a result dtype and a function name, got "
                       f"{len(args)} argument(s)")
    dtype, name, *rest = args
    if not isinstance(name, str) or not name.isidentifier():
        raise st.error(f"{what}: the function name must be a C identifier (a str), got {name!r}")
    dtype = "handle" if str(dtype) == "void" else str(getattr(dtype, "name", dtype))
    return getattr(tirx, maker)(dtype, name, *rest)


def is_extern_call(value) -> bool:
    """Whether `value` is a `T.call_extern` / `T.call_pure_extern` expression."""
    return getattr(getattr(value, "op", None), "name", "") in ("tirx.call_extern", "tirx.call_pure_extern")


def access_ptr(base, access_type: str | int = "r", *extents, offset=0, extent=None,
               ignore_last_ndim: int = 0):
    """`T.access_ptr(A[i, j], "r")`: the address of `A[i, j]` (of `A[0, ...]` for a buffer, of a region's
    first element for `A[a:b, c:d]`), moved on by `offset` elements, for an extern function to read ("r"),
    write ("w") or both ("rw"). The extents say how far the callee reaches (not needed here)."""
    from tvm import tirx

    st = _state.active("T.access_ptr")
    if isinstance(access_type, str) and access_type not in _ACCESS_MASKS or \
            not isinstance(access_type, str) and access_type not in _ACCESS_MASKS.values():
        raise st.error(f"T.access_ptr(access_type=...): expected one of 'r', 'w', 'rw' (or 1, 2, 3), got "
                       f"{access_type!r}")
    if ignore_last_ndim:
        raise st.error("T.access_ptr(ignore_last_ndim=...) is not supported: pass the element to point at")
    del extents, extent  # how far the callee reaches: not needed to form the address
    if is_buffer(base):
        indices = [0] * len(base.shape)
        buffer = base
    elif is_region(base):
        buffer, indices = base.source, [r.min for r in base.region]
    elif is_load(base):
        buffer, indices = base.source, list(base.indices)
    else:
        raise st.error(f"T.access_ptr(base=...): expected a buffer, an element `A[i, j]` or a region "
                       f"`A[a:b, c:d]`, got {base!r}")
    if buffer.scope() == "local.fragment":
        raise st.error(f"T.access_ptr({buffer.name}): a fragment's elements are spread over the threads' "
                       "registers, so it has no address; use a T.alloc_local or shared buffer")
    if not (isinstance(offset, int) and offset == 0):
        indices[-1] = indices[-1] + offset
    return tirx.address_of(tirx.BufferLoad(buffer, indices))

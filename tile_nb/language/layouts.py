"""Layout annotations in tilelang's spellings: `T.annotate_layout({buf: layout})`, `T.Layout`,
`T.Fragment` and the swizzled layout of a shared tile
(`tilelang.layout.make_swizzled_layout(buf)`, `T.swizzled_layout(buf)` here).

tile_nb chooses every layout itself (shared-memory swizzles from the copy and MMA that use a tile, fragment
layouts from layout inference). A swizzle of a shared tile only changes where its elements sit in shared
memory, never a result, so that annotation is accepted and recorded as a hint
(`func.attrs["tile_nb.hints"]`). A layout written by hand (`T.Layout(shape, fn)`, `T.Fragment(...)`) can
change what a buffer's memory holds (a global buffer stored permuted, read by another kernel) and is refused
at the user's line until tile_nb can honor it.
"""
from __future__ import annotations

from . import state as _state
from .hints import record_hint
from .irutil import is_buffer

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
    """`T.Layout(shape, index_fn)`: a layout written by hand (refused by `T.annotate_layout` for now)."""

    def __init__(self, shape, forward_fn=None, *args, **kwargs):
        self.shape = shape

    def __repr__(self) -> str:
        return f"T.Layout({list(self.shape) if isinstance(self.shape, (list, tuple)) else self.shape}, ...)"


class Fragment(Layout):
    """`T.Fragment(shape, forward_thread_fn=..., ...)`: a register layout
    written by hand (refused for now)."""

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
        what = "a swizzle" if isinstance(layout, SwizzledLayout) else repr(layout)
        raise st.error(
            f"T.annotate_layout of '{name}' ({scope}) with {what} is not supported: tile_nb chooses "
            "layouts itself, "
            "and a layout given by hand can change what the buffer's memory holds",
            hint="drop the annotation (tile_nb's layout inference places shared tiles and "
                 "fragments); a swizzle "
            "is accepted only on a shared tile",
        )

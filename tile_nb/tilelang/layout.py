"""`tilelang.layout` on tile_nb: `make_swizzled_layout(buf)`, the swizzle of a shared tile that
`T.annotate_layout` accepts as a hint (tile_nb picks shared-memory swizzles itself), and `Layout` / `Fragment`
(`T.annotate_layout` honors a `Layout` on a kernel parameter, tile_nb/language/layouts.py, and refuses the
rest).
Other names raise UnsupportedTilelangAPI."""
from __future__ import annotations

from ..language.layouts import Fragment, Layout, swizzled_layout
from ._support import forwarding_getattr

__all__ = ["make_swizzled_layout", "Layout", "Fragment"]

make_swizzled_layout = swizzled_layout

__getattr__ = forwarding_getattr(__name__, "tilelang.layout", {})

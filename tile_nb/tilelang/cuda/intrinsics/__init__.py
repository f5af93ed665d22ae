"""`tilelang.cuda.intrinsics` on tile_nb: `make_mma_swizzle_layout(buf)`, the swizzle tilelang gives a shared
tile that MMA instructions read, which `T.annotate_layout` accepts as a hint as it does
`tilelang.layout.make_swizzled_layout` (tile_nb picks shared-memory swizzles itself; the values a tile holds
are the same). tilelang's MMA emitters and their register layouts (`get_swizzle_layout`, the sparse layouts)
raise UnsupportedTilelangAPI."""
from __future__ import annotations

from ....language.layouts import swizzled_layout
from ..._support import forwarding_getattr

__all__ = ["make_mma_swizzle_layout"]


def make_mma_swizzle_layout(buffer, is_smooth: bool = False):
    """tilelang's MMA swizzle of a shared tile (`is_smooth`: no swizzle): a hint, as make_swizzled_layout."""
    del is_smooth
    return swizzled_layout(buffer)


__getattr__ = forwarding_getattr(__name__, "tilelang.cuda.intrinsics", {}, package=True)

"""`tilelang.cuda` on tile_nb: only `tilelang.cuda.intrinsics.make_mma_swizzle_layout`."""
from __future__ import annotations

from .._support import forwarding_getattr

__getattr__ = forwarding_getattr(__name__, "tilelang.cuda", {}, package=True)

"""`tilelang.contrib` on tile_nb: only `tilelang.contrib.nvcc`'s compute-capability helpers."""
from __future__ import annotations

from .._support import forwarding_getattr

__getattr__ = forwarding_getattr(__name__, "tilelang.contrib", {}, package=True)

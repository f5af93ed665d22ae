"""`tilelang.carver.roller` on tile_nb: `Hint` and the rasterization plans. tilelang's roller search
itself is not offered; `MatmulTemplate.recommend_hints` uses tile_nb's own GEMM heuristic
(tile_nb/tilelang/carver/gemm_hints.py)."""
from __future__ import annotations

from ..._support import forwarding_getattr
from .hint import Hint
from .rasterization import NoRasterization, Rasterization, Rasterization2DColumn, Rasterization2DRow

__all__ = ["Hint", "NoRasterization", "Rasterization", "Rasterization2DRow", "Rasterization2DColumn"]

__getattr__ = forwarding_getattr(__name__, "tilelang.carver.roller", {}, package=True)

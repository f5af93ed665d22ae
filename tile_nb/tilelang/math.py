"""`tilelang.math` on tile_nb."""
from __future__ import annotations

from . import cdiv, next_power_of_2
from ._support import forwarding_getattr

__getattr__ = forwarding_getattr(__name__, "tilelang.math", {})
__all__ = ["cdiv", "next_power_of_2"]

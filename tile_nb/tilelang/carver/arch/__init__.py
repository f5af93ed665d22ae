"""`tilelang.carver.arch` on tile_nb: `driver` only (see `driver`)."""
from __future__ import annotations

from ..._support import forwarding_getattr

__getattr__ = forwarding_getattr(__name__, "tilelang.carver.arch", {}, package=True)

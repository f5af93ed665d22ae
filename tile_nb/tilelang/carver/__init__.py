"""`tilelang.carver` on tile_nb: only `tilelang.carver.arch.driver` (device facts read from torch). The
carver's templates, roller and architecture classes (`MatmulTemplate`, `CUDA`, ...) are not offered: each
raises UnsupportedTilelangAPI naming it."""
from __future__ import annotations

from .._support import forwarding_getattr

__getattr__ = forwarding_getattr(__name__, "tilelang.carver", {}, package=True)

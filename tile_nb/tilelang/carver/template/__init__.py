"""`tilelang.carver.template` on tile_nb: `MatmulTemplate` only (its hints come from tile_nb's own GEMM
heuristic); the other templates (elementwise, conv, flash attention, ...) are refused by name."""
from __future__ import annotations

from ..._support import forwarding_getattr
from .matmul import MatmulTemplate

__all__ = ["MatmulTemplate"]

__getattr__ = forwarding_getattr(__name__, "tilelang.carver.template", {}, package=True)

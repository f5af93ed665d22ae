"""The lowering's error class (a leaf module: every other lowering module may raise it)."""
from __future__ import annotations

from ..errors import TileNBError

__all__ = ["LoweringError"]


class LoweringError(TileNBError, NotImplementedError):
    """A kernel the CUDA lowering cannot build: names the op and operands, and points at the user's line."""

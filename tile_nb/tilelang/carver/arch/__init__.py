"""`tilelang.carver.arch` on tile_nb: `CUDA` (the GPU or the target tile_nb builds for, see `cuda`),
`auto_infer_current_arch`, `get_arch`, the `is_*_arch` tests, and `driver` (device facts from torch).
`CDNA`, `RDNA`, `METAL` and `CPU` can be imported and are refused when made: tile_nb builds CUDA only."""
from __future__ import annotations

from ..._support import forwarding_getattr
from . import driver
from .cuda import *  # noqa: F403 - the names tilelang.carver.arch offers
from .cuda import __all__ as _names

__all__ = [*_names, "driver"]

__getattr__ = forwarding_getattr(__name__, "tilelang.carver.arch", {}, package=True)

"""`tilelang.engine` on tile_nb: the source post-processing callbacks (callback.py). tilelang's `lower`,
`KernelParam` and the rest of its engine have no counterpart: they raise UnsupportedTilelangAPI."""
from __future__ import annotations

from .._support import forwarding_getattr
from .callback import register_c_postproc, register_cuda_postproc, register_hip_postproc

__all__ = ["register_c_postproc", "register_cuda_postproc", "register_hip_postproc"]

__getattr__ = forwarding_getattr(__name__, "tilelang.engine", {}, package=True)

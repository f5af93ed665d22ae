"""`tilelang.tools` on tile_nb: `Analyzer` (FLOPs, global bytes and roofline time of an elaborated kernel,
tile_nb's own count: analyzer.py) and its `AnalysisResult`. The other tools (layout plots, pass timing, ...)
raise UnsupportedTilelangAPI naming them."""
from __future__ import annotations

from .._support import forwarding_getattr
from .analyzer import AnalysisResult, Analyzer

__all__ = ["Analyzer", "AnalysisResult"]

__getattr__ = forwarding_getattr(__name__, "tilelang.tools", {}, package=True)

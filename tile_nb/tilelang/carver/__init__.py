"""`tilelang.carver` on tile_nb: `arch` (`CUDA`, `auto_infer_current_arch`, `driver`), `template`
(`MatmulTemplate`, whose `recommend_hints` is tile_nb's own GEMM heuristic, gemm_hints.py) and `roller`
(`Hint`, rasterization plans). tilelang's roller search and its other templates are not offered: each raises
UnsupportedTilelangAPI naming it."""
from __future__ import annotations

from .._support import forwarding_getattr


def _template():
    from .template import MatmulTemplate

    return MatmulTemplate


__getattr__ = forwarding_getattr(__name__, "tilelang.carver", {"MatmulTemplate": _template}, package=True)

"""tile_nb.lower: phase-2 tile IR -> thread-level TIRx for `tvm.compile(mod, target=..., tir_pipeline="tirx")`.

    mod = tile_nb.lower.lower(func, tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))
    with target:
        exe = tvm.compile(mod, target=target, tir_pipeline="tirx")

The passes are listed in order in `lowering.py`; op lowerings register themselves in `TILE_OPS`.
"""
from __future__ import annotations

import tvm

from . import copy as _copy  # noqa: F401  (registers T.tile.copy)
from . import elementwise as _elementwise  # noqa: F401  (fill, reductions)
from . import gemm as _gemm  # noqa: F401  (registers T.tile.gemm)
from .lowering import TILE_OPS, Lowerer, LoweringError

__all__ = ["lower", "LoweringError", "TILE_OPS"]


def lower(func: tvm.tirx.PrimFunc, target: tvm.target.Target | None = None) -> tvm.IRModule:
    """Lower a phase-2 tile-IR PrimFunc (docs/IR.md) to an IRModule of thread-level TIRx.

    Raises `LoweringError` (a NotImplementedError) naming the op and operands it cannot lower.
    """
    name = str((func.attrs or {}).get("global_symbol", "main"))
    lowered = Lowerer(func, target).run()
    lowered = lowered.with_attr("global_symbol", name)
    return tvm.IRModule({name: lowered})

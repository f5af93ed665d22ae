"""The lowering driver: phase-2 tile IR (docs/IR.md) -> thread-level TIRx for `tvm.compile(..., "tirx")`.

Two steps, in order:
1. `make_plan` (plan.py): the analyses (launch, MMA choice, pipeline schedules, layout inference, shared tiles,
   TMA, budgets) decide everything and return one frozen `KernelPlan`;
2. `Emitter(func, plan).run()` (emitter.py): re-emits the body through TVM's IR builder, each tile op by the rule
   its module registers (copy.py, elementwise.py, reduce.py, scan.py, gemm.py / wgmma.py), loops by loops.py,
   pipeline.py and tma.py.
"""
from __future__ import annotations

from tvm import tirx

# The emitter's rules, registered on import (emitter.py imports none of them):
from .emit import copy as _copy  # noqa: F401  (T.tile.copy)
from .emit import debug as _debug  # noqa: F401  (T.print / T.device_assert)
from .emit import elementwise as _elementwise  # noqa: F401  (T.tile.fill)
from .emit import epilogue as _epilogue  # noqa: F401  (the TMA-store epilogue of TMA kernels)
from .emit import gemm as _gemm  # noqa: F401  (T.tile.gemm)
from .emit import loops as _loops  # noqa: F401  (T.serial / T.unroll / T.Parallel)
from .emit import persistent as _persistent  # noqa: F401  (the kernel body of persistent CTAs)
from .emit import pipeline as _pipeline  # noqa: F401  (T.Pipelined: the cp.async pipeline)
from .emit import reduce as _reduce  # noqa: F401  (T.tile.sum / max / min)
from .emit import scan as _scan  # noqa: F401  (T.tile.cumsum)
from .emit import tma as _tma  # noqa: F401  (T.Pipelined: the warp-specialized TMA pipeline)
from .emit.emitter import Emitter
from .options import LoweringOptions, resolve
from .analysis.plan import KernelPlan, make_plan

__all__ = ["lower_with_plan"]


def lower_with_plan(func: tirx.PrimFunc, target, *, source_marks: bool = True,
                    options: LoweringOptions | None = None) -> tuple[tirx.PrimFunc, KernelPlan]:
    """The lowered PrimFunc of `func` and the plan it follows. With `source_marks`, the code of each statement
    is bracketed by marks (sourcemap.py) that `split_marks` takes out of the printed IR and the CUDA source.
    `options`: resolved lowering options (options.resolve); None resolves them here from `func` and the process."""
    plan = make_plan(func, target, resolve(func) if options is None else options)
    lowered = Emitter(func, plan, target, source_marks=source_marks).run()
    if plan.pipeline_note:
        lowered = lowered.with_attr("tile_nb.pipeline", plan.pipeline_note)
    return lowered, plan

"""The lowering driver: phase-2 tile IR (docs/IR.md) -> thread-level TIRx for `tvm.compile(..., "tirx")`.

Two steps, in order:
1. `make_plan` (analysis/plan.py): the analyses (launch, MMA choice, pipeline schedules, layout inference,
   shared tiles, TMA, budgets) decide everything and return one frozen `KernelPlan`;
2. `Emitter(func, plan).run()` (emit/emitter.py): re-emits the body through TVM's IR builder, each tile op,
   scheduled statement and kernel hook by the rule emit/rules.py lists (in the order they run).
"""
from __future__ import annotations

from tvm import tirx

from .analysis.plan import KernelPlan, make_plan
from .emit.emitter import Emitter
from .options import LoweringOptions, resolve

__all__ = ["lower_with_plan"]


def lower_with_plan(func: tirx.PrimFunc, target, *, source_marks: bool = True,
                    options: LoweringOptions | None = None) -> tuple[tirx.PrimFunc, KernelPlan]:
    """The lowered PrimFunc of `func` and the plan it follows. With `source_marks`, the code of each statement
    is bracketed by marks (sourcemap.py) that `split_marks` takes out of the printed IR and the CUDA source.
    `options`: resolved lowering options (options.resolve); None resolves them
    here from `func` and the process."""
    plan = make_plan(func, target, resolve(func) if options is None else options)
    lowered = Emitter(func, plan, target, source_marks=source_marks).run()
    if plan.pipeline_note:
        lowered = lowered.with_attr("tile_nb.pipeline", plan.pipeline_note)
    return lowered, plan

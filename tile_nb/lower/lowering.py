"""The lowering driver: phase-2 tile IR (docs/IR.md) -> thread-level TIRx for `tvm.compile(..., "tirx")`.

Two steps, in order:
1. `make_plan` (analysis/plan.py): the analyses (launch, MMA choice, pipeline schedules, layout inference,
   shared tiles, TMA, budgets) decide everything and return one frozen `KernelPlan`;
2. `Emitter(func, plan).run()` (emit/emitter.py): re-emits the body through TVM's IR builder, each tile op,
   scheduled statement and kernel hook by the rule emit/rules.py lists (in the order they run).
A `T.ws` kernel is first made one program in its written order (written_order.py). A kernel parameter with a
hand layout is addressed through it in the kernel when every use is one element at a
time (emit/hand_layouts.py checks the emitted body); else the body is emitted again without, and the call
permutes the tensor around the launch.
"""
from __future__ import annotations

import dataclasses

from tvm import tirx

from .analysis.plan import KernelPlan, make_plan
from .emit.emitter import Emitter
from .emit.hand_layouts import unsupported_use
from .options import LoweringOptions, resolve
from .written_order import in_written_order

__all__ = ["lower_with_plan"]


def lower_with_plan(func: tirx.PrimFunc, target, *, source_marks: bool = True,
                    options: LoweringOptions | None = None) -> tuple[tirx.PrimFunc, KernelPlan]:
    """The lowered PrimFunc of `func` and the plan it follows. With `source_marks`, the code of each statement
    is bracketed by marks (sourcemap.py) that `split_marks` takes out of the printed IR and the CUDA source.
    `options`: resolved lowering options (options.resolve); None resolves them
    here from `func` and the process."""
    options = resolve(func) if options is None else options
    func, written_order = in_written_order(func)  # T.ws kernels: one program in their written order
    plan = make_plan(func, target, options)
    if written_order is not None:
        plan = dataclasses.replace(plan, notes=plan.notes + (written_order,))
    emitter = Emitter(func, plan, target, source_marks=source_marks)
    lowered = emitter.run()
    if emitter.laid_out:  # hand layouts of parameters addressed in the kernel: exact for every use?
        problem = unsupported_use(lowered.body, list(emitter.laid_out.values()))
        if problem is None:
            plan = _in_kernel(plan, {p.name for p in emitter.laid_out})
        else:  # the call permutes them around the launch instead
            lowered = Emitter(func, plan, target, source_marks=source_marks,
                              hand_layouts_in_kernel=False).run()
            plan = dataclasses.replace(plan, notes=plan.notes + (
                f"hand layouts not addressed in the kernel, which has {problem}",))
    if plan.pipeline_note:
        lowered = lowered.with_attr("tile_nb.pipeline", plan.pipeline_note)
    return lowered, plan


def _in_kernel(plan: KernelPlan, names: set) -> KernelPlan:
    """`plan` with the hand layouts of `names` marked as addressed in the kernel."""
    layouts = tuple(dataclasses.replace(g, in_kernel=True) if g.name in names else g
                    for g in plan.global_layouts)
    return dataclasses.replace(plan, global_layouts=layouts)

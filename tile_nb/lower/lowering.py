"""The lowering driver: phase-2 tile IR (docs/IR.md) -> thread-level TIRx for `tvm.compile(..., "tirx")`.

Two steps, in order:
1. `make_plan` (analysis/plan.py): the analyses (launch, MMA choice, pipeline schedules, layout inference,
   shared tiles, TMA, budgets) decide everything and return one frozen `KernelPlan`;
2. `Emitter(func, plan).run()` (emit/emitter.py): re-emits the body through TVM's IR builder, each tile op,
   scheduled statement and kernel hook by the rule emit/rules.py lists (in the order they run).
A `T.ws` kernel is first made one program in its written order (written_order.py). A function with several
T.Kernels is planned and emitted one kernel at a time (each its own threads, registers, shared memory and
pipelines; a `FunctionPlan` holds their plans). A kernel parameter with a hand layout is addressed through it
in the kernel when every use is one element at a time (emit/hand_layouts.py checks the emitted body); else the
body is emitted again without, and the call permutes the tensor around the launch.
"""
from __future__ import annotations

import dataclasses

from tvm import tirx

from .analysis.plan import FunctionPlan, KernelPlan, make_plan
from .diagnostics import SourceLines
from .emit.emitter import Emitter
from .emit.hand_layouts import unsupported_use
from .irwalk import iter_stmts, seq_items, tile_calls
from .options import LoweringOptions, resolve
from .sourcemap import source_regions
from .written_order import in_written_order

__all__ = ["lower_with_plan"]


def lower_with_plan(
    func: tirx.PrimFunc, target, *, source_marks: bool = True, options: LoweringOptions | None = None
) -> tuple[tirx.PrimFunc, KernelPlan | FunctionPlan]:
    """The lowered PrimFunc of `func` and the plan it follows (a `FunctionPlan` of one plan per T.Kernel where
    the function has several). With `source_marks`, the code of each statement is bracketed by marks
    (sourcemap.py) that `split_marks` takes out of the printed IR and the CUDA source. `options`: resolved
    lowering options (options.resolve); None resolves them here from `func` and the process."""
    options = resolve(func) if options is None else options
    func, written_order = in_written_order(func)  # T.ws kernels: one program in their written order
    kernels = _separate_kernels(func)
    if kernels is None:
        lowered, plan = _lower_kernel(func, target, options, source_marks)
    else:
        lowered, plan = _lower_kernels(func, kernels, target, options, source_marks)
    if written_order is not None:
        plan = dataclasses.replace(plan, notes=plan.notes + (written_order,))
    if plan.pipeline_note:
        lowered = lowered.with_attr("tile_nb.pipeline", plan.pipeline_note)
    return lowered, plan


def _lower_kernel(func, target, options, source_marks, regions=None, hand_layouts_in_kernel=True):
    plan = make_plan(func, target, options)
    emitter = Emitter(func, plan, target, source_marks=source_marks, regions=regions,
                      hand_layouts_in_kernel=hand_layouts_in_kernel)
    lowered = emitter.run()
    if emitter.laid_out:  # hand layouts of parameters addressed in the kernel: exact for every use?
        problem = unsupported_use(lowered.body, list(emitter.laid_out.values()))
        if problem is None:
            plan = _in_kernel(plan, {p.name for p in emitter.laid_out})
        else:  # the call permutes them around the launch instead
            lowered = Emitter(func, plan, target, source_marks=source_marks, regions=regions,
                              hand_layouts_in_kernel=False).run()
            plan = dataclasses.replace(plan, notes=plan.notes + (
                f"hand layouts not addressed in the kernel, which has {problem}",))
    return lowered, plan


def _separate_kernels(func) -> list | None:
    """The function's T.Kernels, each to be planned and emitted on its own: its top-level statements where
    there are two or more and each launches one kernel; None otherwise (one plan for the function)."""
    items = seq_items(func.body)
    if len(items) < 2 or not all(_launches_threads(s) for s in items):
        return None
    return items


def _launches_threads(stmt) -> bool:
    return sum(isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent"
               and s.node.thread_tag == "threadIdx.x" for s in iter_stmts(stmt)) == 1


def _lower_kernels(func, kernels, target, options, source_marks):
    """Each T.Kernel planned and emitted as a function of its own (its threads, pipelines, registers and
    shared memory its own), the lowered kernels then one function again, in order. Region ids and source
    lines stay the whole function's. Where the kernels disagree on addressing a hand-laid-out parameter in
    the kernel, every kernel leaves it to the call (which permutes it around the whole function)."""
    regions = {s: i for i, s in enumerate(source_regions(func))} if source_marks else None
    lines = SourceLines(func)
    subs = [_kernel_function(func, k, lines) for k in kernels]
    parts = [_lower_kernel(sub, target, options, source_marks, regions) for sub in subs]
    addressed: dict = {}  # parameter -> whether each kernel addresses it through its layout
    for _, plan in parts:
        for g in plan.global_layouts:
            addressed.setdefault(g.name, set()).add(g.in_kernel)
    if any(len(ways) > 1 for ways in addressed.values()):
        parts = [_lower_kernel(sub, target, options, source_marks, regions, hand_layouts_in_kernel=False)
                 for sub in subs]
    body = tirx.SeqStmt([lowered.body for lowered, _ in parts])
    return func.with_body(body), FunctionPlan(tuple(plan for _, plan in parts))


def _kernel_function(func, kernel, lines: SourceLines):
    """`func` with one T.Kernel as its body, its source lines (`lines`: the function's) and thread count that
    kernel's."""
    sub = func.with_body(kernel)
    if func.attrs is not None and "tile_nb.tile_op_lines" in func.attrs:
        sub = sub.with_attr("tile_nb.tile_op_lines", [lines.line_of(c) or 0 for c in tile_calls(kernel)])
    threads = next(s.value for s in iter_stmts(kernel) if isinstance(s, tirx.AttrStmt)
                   and s.attr_key == "thread_extent" and s.node.thread_tag == "threadIdx.x")
    return sub.with_attr("tile_nb.threads", int(threads))


def _in_kernel(plan: KernelPlan, names: set) -> KernelPlan:
    """`plan` with the hand layouts of `names` marked as addressed in the kernel."""
    layouts = tuple(dataclasses.replace(g, in_kernel=True) if g.name in names else g
                    for g in plan.global_layouts)
    return dataclasses.replace(plan, global_layouts=layouts)

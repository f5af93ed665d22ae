"""tile_nb's TIR pipeline: TVM's "tirx" pipeline, then the launch parameters TVM cannot infer.

A kernel that calls the grid barrier (`T.sync_grid`, lowered to cooperative groups' `this_grid().sync()`)
must be launched cooperatively: every block resident at once, with the grid workspace the barrier uses.
TVM's CUDA runtime does that for a device function whose `tirx.kernel_launch_params` name
`tirx.use_cooperative_launch` (it launches with `cuLaunchKernelEx` and the cooperative attribute); its
passes never add the tag, so this pipeline adds it after `SplitHostDevice` has made the device functions.
A grid larger than the GPU holds at once is then refused by the driver at launch (an error, not a hang).
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.compilation_pipeline import register_tir_pipeline, tirx_pipeline

from ..lower.emit.intrin import GRID_SYNC_HELPER
from ..lower.irwalk import iter_stmts

__all__ = ["PIPELINE", "COOPERATIVE_LAUNCH", "calls_grid_sync"]

PIPELINE = "tile_nb"  # the name given to tvm.compile(..., tir_pipeline=PIPELINE)
COOPERATIVE_LAUNCH = "tirx.use_cooperative_launch"  # TVM's launch-parameter tag (runtime/metadata.h)
_LAUNCH_PARAMS = "tirx.kernel_launch_params"
_DYNAMIC_SHARED = "tirx.use_dyn_shared_memory"


def calls_grid_sync(func) -> bool:
    """Whether a device function's body calls the grid-barrier helper (a statement of its own: the emitter's
    `T.evaluate(intrin.grid_sync())`)."""
    return any(
        isinstance(s, tirx.Evaluate) and isinstance(s.value, tvm.ir.Call)
        and getattr(s.value.op, "name", None) == "tirx.cuda.func_call"
        and str(getattr(s.value.args[0], "value", "")) == GRID_SYNC_HELPER
        for s in iter_stmts(func.body)
    )


@tvm.transform.module_pass(opt_level=0, name="tile_nb.MarkCooperativeLaunch")
def _mark_cooperative_launch(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    updates = {}
    for gvar, func in mod.functions.items():
        params = (func.attrs or {}).get(_LAUNCH_PARAMS) if isinstance(func, tirx.PrimFunc) else None
        tags = [str(p) for p in params or ()]
        if params is None or COOPERATIVE_LAUNCH in tags or not calls_grid_sync(func):
            continue
        # TVM's runtime reads the dynamic-shared-memory tag only as the last one (it checks so at launch)
        at = tags.index(_DYNAMIC_SHARED) if _DYNAMIC_SHARED in tags else len(tags)
        updates[gvar] = func.with_attr(_LAUNCH_PARAMS, [*tags[:at], COOPERATIVE_LAUNCH, *tags[at:]])
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod


def _tile_nb_pipeline():
    lower, finalize_host, finalize_device = tirx_pipeline()

    @tvm.transform.module_pass(opt_level=0, name="tile_nb.Pipeline")
    def pipeline(mod: tvm.IRModule, ctx) -> tvm.IRModule:
        return _mark_cooperative_launch(lower(mod))

    return pipeline, finalize_host, finalize_device


register_tir_pipeline(PIPELINE, _tile_nb_pipeline)

"""tile_nb.interp: the CPU interpreter of the phase-2 tile IR (docs/IR.md).

`run(func, args)` executes a specialized `tvm.tirx.PrimFunc` on CPU torch tensors, in place, with the same
results as the CUDA path: block by block over the grid, each block's body once with whole-tile torch
operations (`T.parallel` loops are vectorized over the tile, not iterated per element).

Example::

    import torch, tile_nb.interp
    A = torch.randn(1000, 999).half(); B = torch.randn(999, 1030).half(); C = torch.empty(1000, 1030)
    tile_nb.interp.run(gemm_func, [A, B, C])       # gemm_func: the PrimFunc of a tile GEMM

Debugging mode: an access that the GPU would silently perform out of bounds raises `OutOfBoundsError`, which
names the buffer, the index, the block and parallel-loop values, and the user's source line (with a caret).
Global-memory regions of `T.copy` past a tensor's edge are not errors: they are guarded by contract. A read of
a shared / fragment / local element that the block has not written raises `UninitializedReadError` (the GPU
would read garbage; `TILE_NB_CHECK_UNINIT=0` turns that check off). `T.breakpoint()` stops in the debugger
with the kernel's tiles as local variables (docs/debugging.md). `access_map(func, args, block=...)` runs a
kernel and says which elements of each tensor one block read and wrote.

Semantics worth knowing: CTAs run one after another (x fastest); `threadIdx.x` is 0 in block-level code;
buffers start zeroed (but reading an element before writing it is an error, see above); `local`/`local.var`
buffers written inside `T.Parallel` are private per iteration; `T.gemm` computes in float32 (float64 for
float64, int64 for integer accumulators, which then wrap around to C's width) and rounds to C's dtype once per
call; max / min propagate NaN (docs/IR.md's numeric contract); torch runs with one intra-op thread while a
kernel runs (`run(..., threads=None)` keeps torch's setting).

Layout: `compiler.py` (rule tables, closures, frame), `exprs.py` (expression rules), `memory.py` (loads,
stores, atomics, regions, bounds checks), `affine.py` (`var + offset` accesses in parallel loops as strided
views), `stmts.py` (control flow, grid, parallel loops), `tileops.py` (tile primitives), `runner.py`
(arguments and the entry point), `values.py` (dtypes and arithmetic on numbers and tensors), `written.py`
(which elements each block wrote), `warps.py` (warp-specialized blocks: `T.ws` groups as coroutines,
mbarriers, `DeadlockError` and `OrderingError` checks), `debug.py` and `breakpoint.py` (T.print,
T.device_assert, T.breakpoint), `errors.py`.
"""
from .access import AccessMap
from .errors import (
                     DeadlockError,
                     InterpreterError,
                     OrderingError,
                     OutOfBoundsError,
                     SourceLocation,
                     UninitializedReadError,
)
from .footprint import access_map
from .runner import compile_func, run

__all__ = ["AccessMap", "DeadlockError", "InterpreterError", "OrderingError", "OutOfBoundsError",
           "SourceLocation", "UninitializedReadError", "access_map", "compile_func", "run"]

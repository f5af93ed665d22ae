"""`access_map(func, args, block=...)`: run a kernel on the interpreter and return which elements of each
tensor one block read and wrote (the masks access.py records while that block runs)."""
from __future__ import annotations

import torch

from .access import AccessMap, Trace
from .runner import BufferParam, compile_func, run_program

__all__ = ["access_map"]


def access_map(func, args: list, block=0, *, threads: int | None = 1) -> dict[str, AccessMap]:
    """Run the phase-2 PrimFunc `func` on CPU tensors `args` (in place, as `run`) and return, for each tensor
    parameter, which of its elements block `block` (an int or a tuple of up to 3 block indices, dims left out
    0) read and wrote.

    Example::

        func = matmul.specialize(A, B, C)
        maps = tile_nb.interp.access_map(func, [A, B, C], block=(1, 0))
        maps["A"].read      # bool tensor shaped as A: the rows of A block (1, 0) read
    """
    ids = (block,) if isinstance(block, int) else tuple(block)
    if not 1 <= len(ids) <= 3 or any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in ids):
        raise ValueError(f"access_map(block=...) must be a block index or a tuple of up to 3 ints >= 0; "
                         f"got {block!r}")
    program = compile_func(func)
    trace = Trace(ids)
    run_program(program, list(args), threads, trace)
    out = {}
    for p, t in zip(program.params, args, strict=True):
        if not isinstance(p, BufferParam):
            continue
        read, written = trace.masks.get(p.slot, (None, None))
        out[p.name] = AccessMap(read if read is not None else torch.zeros(t.shape, dtype=torch.bool),
                                written if written is not None else torch.zeros(t.shape, dtype=torch.bool))
    return out

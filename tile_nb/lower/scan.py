"""`T.tile.cumsum(dst, src, dim, reverse)`: the inclusive prefix sum of a tile along one dim.

The simple, correct form: a tile is a set of lines along `dim`; the threads take the lines round-robin
(`threads.distribute`: consecutive threads take consecutive lines) and each scans its lines serially, a running sum
in a register, one load and one store per element. The barriers before and after come from `Emitter.emit_seq`
(dst is written, src read, both in shared memory). A per-thread (`local`) destination is scanned whole by every
thread, as `T.reduce_*` does.

Cost: a line of n elements takes n dependent add steps (each a shared load and store, some 30 cycles), so a 1-d
tile of n is n steps on one thread while the others wait at the barrier; a [M, N] tile scanned along dim 1 takes
N steps on each of M threads (along dim 0, the threads read consecutive columns: no bank conflicts; along dim 1,
rows N apart: N a multiple of 32 four-byte words makes the 32 lanes of a warp hit one bank).

Fragments: layout inference (infer.py) keeps a fragment that T.cumsum reads or writes in shared memory, so the
scan always reads and writes memory; a T.gemm accumulator, which stays in registers, is refused with the fix.
docs/IR.md's rule: sums accumulate in `accumulation_dtype(dst.dtype)` (float32 for 16-bit floats, wrapping
integers), and each element is rounded to dst's dtype once, as the interpreter does.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .emitter import register_tile_op
from .errors import LoweringError
from .irwalk import region_of, scope_of
from .reduce import accumulation_dtype
from .threads import distribute, serial_nest

__all__ = ["lower_cumsum"]


def _cast(value, dtype):
    return value if str(value.ty) == str(dtype) else tirx.Cast(str(dtype), value)


@register_tile_op("cumsum")
def lower_cumsum(em, call):
    dst, drng = region_of(call.args[0])
    src, srng = region_of(call.args[1])
    dim, reverse = int(call.args[2]), bool(call.args[3])
    for buf in (src, dst):
        if buf in em.registers:
            raise LoweringError(
                f"T.cumsum of fragment {buf.name}, which is held in registers (a T.gemm accumulator), is not "
                "supported", hint=f"T.copy {buf.name} into a T.alloc_shared tile and scan that tile")
    if em.scope.thread_code:
        raise LoweringError("T.cumsum inside a T.Parallel loop is not supported: it is a whole-tile operation",
                            hint="call T.cumsum at block level, outside the loop")
    try:
        extents = [int(e) for _, e in srng]
    except (TypeError, ValueError):
        raise LoweringError(f"T.cumsum: the region of {src.name} has extents "
                            f"{[str(e) for _, e in srng]}; the scan needs them known at compile time") from None
    smins = [em.expr(m) for m, _ in srng]
    dmins = [em.expr(m) for m, _ in drng]
    acc = accumulation_dtype(str(dst.dtype))
    n = extents[dim]
    line_ext = [e for d, e in enumerate(extents) if d != dim]
    running = T.alloc_buffer((1,), acc, scope="local")
    IRBuilder.name(f"{dst.name}_prefix", running)

    def scan_line(line_idx):
        T.buffer_store(running, tirx.const(0, acc), [0])
        with T.serial(0, n) as k:
            i = (n - 1 - k) if reverse else k
            idx = list(line_idx)
            idx.insert(dim, i)
            value = _cast(em.load(src, [m + j for m, j in zip(smins, idx)]), acc)
            T.buffer_store(running, tirx.BufferLoad(running, [0]) + value, [0])
            em.store(dst, [m + j for m, j in zip(dmins, idx)], _cast(tirx.BufferLoad(running, [0]), dst.dtype))

    if scope_of(dst) in ("local", "local.var"):
        serial_nest(line_ext or [1], lambda idx: scan_line(idx if line_ext else []))
    else:
        distribute(em, line_ext or [1], lambda idx: scan_line(idx if line_ext else []))

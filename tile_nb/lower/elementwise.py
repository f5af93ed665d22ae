"""Block-level elementwise ops: `T.tile.fill` and the reductions `T.tile.sum / max / min`."""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import tirx as T

from .loops import distribute
from .lowering import LoweringError, region_of, register_tile_op, scope_of

__all__ = ["lower_fill"]


@register_tile_op("fill")
def lower_fill(lw, call):
    buf, rng = region_of(call.args[0])
    value = lw.expr(call.args[1])
    if str(value.ty) != str(buf.dtype):
        value = tirx.Cast(str(buf.dtype), value)
    mins = [lw.expr(m) for m, _ in rng]
    ext = [int(e) for _, e in rng]
    if buf in lw.frags:
        lay = lw.frags[buf]
        if ext != [lay.bm, lay.bn]:
            raise LoweringError(f"T.fill of register fragment {buf.name}: fill the whole fragment")
        if str(value.ty) != "float32":
            value = tirx.Cast("float32", value)
        with T.unroll(0, lay.regs) as r:
            T.buffer_store(lay.local, value, [r])
        return

    def body(it):
        lw.store(buf, [m + i for m, i in zip(mins, it)], value)

    if scope_of(buf) in ("local", "local.var") or lw.in_thread_code:
        from .copy import _serial

        _serial(ext, body)
    else:
        distribute(lw, ext, body)

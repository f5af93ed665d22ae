"""`T.tile.fill(dst, value)` (and `T.clear`): every element of a tile or region set to one value."""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import tirx as T

from ...language.memory import LOCAL_THREAD
from ..errors import LoweringError
from ..irwalk import region_of, scope_of
from .threads import distribute, serial_nest

__all__ = ["lower_fill"]


def lower_fill(em, call):
    buf, rng = region_of(call.args[0])
    value = em.expr(call.args[1])
    mins = [em.expr(m) for m, _ in rng]
    ext = [int(e) for _, e in rng]
    if buf in em.registers:
        layout = em.plan.layout(buf)
        if ext != list(layout.shape):
            raise LoweringError(f"T.fill of register fragment {buf.name}: fill the whole fragment")
        regs = em.registers[buf]
        if str(value.ty) != str(regs.dtype):
            value = tirx.Cast(str(regs.dtype), value)
        with T.unroll(0, layout.regs) as r:
            T.buffer_store(regs, value, [r])
        return
    if str(value.ty) != str(buf.dtype):
        value = tirx.Cast(str(buf.dtype), value)

    def body(it):
        em.store(buf, [m + i for m, i in zip(mins, it, strict=True)], value)

    if scope_of(buf) == LOCAL_THREAD:  # each thread fills its own row (per-thread code's locals)
        if not (em.prove(tirx.EQ(mins[0], 0)) and ext[0] == int(buf.shape[0])):
            raise LoweringError(f"T.fill of {buf.name}, which holds one row per thread: fill every row")
        serial_nest(ext[1:], lambda it: em.store(
            buf, [em.tx] + [m + i for m, i in zip(mins[1:], it, strict=True)], value))
    elif scope_of(buf) in ("local", "local.var") or em.scope.thread_code:
        serial_nest(ext, body)
    else:
        distribute(em, ext, body)

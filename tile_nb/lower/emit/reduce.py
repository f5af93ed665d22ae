"""`T.tile.sum / max / min(dst, src, axes, accum)`: reductions of a tile along one dim.

A source in registers (the plan's layout `L`) is reduced where it lives, in three steps (tilelang's and
Triton's scheme):
1. each thread combines the registers it holds of each result (`L.reduced_registers`), padding skipped;
2. the lanes holding parts of one result combine by an XOR butterfly of warp shuffles (`L.lane_masks`), after
   which every one of them holds the result;
3. when several warps hold parts of one result (`L.warp_slots`), the first lane of each writes its partial to
   the plan's workspace in shared memory, a barrier, and every thread combines the slots in order.
The result, in `L.slice(dim)`, goes to dst's registers (inference gives dst that layout) or, for a dst in
memory, is stored once (first replica). A source in memory is reduced serially: each thread computes the
results it holds (a register dst) or a share of them (round-robin).

docs/IR.md's rule: sums accumulate in float32 (float64 for float64, int32/int64 for integers, wrapping around)
and are rounded to dst's dtype once; with accum the old dst value joins in that precision. Max and min compare
in a dtype that holds the source exactly (`compare_dtype`), start from -inf / +inf (the integer limits), and a
NaN operand makes the result NaN (intrin.minmax_nan), as torch's amax / amin.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..analysis.reduction_dtypes import accumulation_dtype, compare_dtype, reduction_dtype
from ..exprs import conjunction
from ..irwalk import region_of, scope_of
from . import intrin
from .threads import distribute, serial_nest

__all__ = ["accumulation_dtype", "compare_dtype", "lower_finalize_reducer", "lower_reduce", "reduction_dtype"]


def _init(kind: str, dtype: str):
    if kind == "sum":
        return tirx.const(0, dtype)
    if dtype.startswith("float"):
        return tirx.const(float("-inf") if kind == "max" else float("inf"), dtype)
    return tirx.min_value(dtype) if kind == "max" else tirx.max_value(dtype)


_combine = intrin.combine


def _cast(value, dtype):
    return value if str(value.ty) == str(dtype) else tirx.Cast(str(dtype), value)


def lower_reduce(em, call):
    kind = call.op.name.rsplit(".", 1)[-1]
    dst, drng = region_of(call.args[0])
    src, srng = region_of(call.args[1])
    axes = sorted(int(a) % len(srng) for a in call.args[2])
    accum = bool(call.args[3])
    # T.reduce_absmax: `T.tile.max(..., absolute=1)` takes |x| of every source element.
    absolute = bool(int((call.config or {}).get("absolute", 0)))
    if src in em.registers and len(axes) == 1:
        _reduce_registers(em, call, kind, dst, drng, src, axes[0], accum, absolute)
    else:
        _reduce_serial(em, kind, dst, drng, src, srng, axes, accum, absolute)


def _reduce_registers(em, call, kind, dst, drng, src, dim, accum, absolute):
    layout = em.plan.layout(src)
    out = layout.slice(dim)
    acc = reduction_dtype(kind, src.dtype, dst.dtype)
    init = _init(kind, acc)
    tx = em.tx
    src_regs = em.registers[src]
    partial = T.alloc_buffer((out.regs,), acc, scope="local")
    IRBuilder.name(f"{dst.name}_partial", partial)
    count, _, _ = layout.reduced_registers(dim)
    with T.unroll(0, out.regs) as o:
        T.buffer_store(partial, init, [o])
        with T.unroll(0, count) as k:
            r = layout.register_of(o, k, dim)
            value = _cast(tirx.BufferLoad(src_regs, [r]), acc)
            if absolute:
                value = tirx.abs(value)
            valid = layout.valid(tx, r)
            if valid is not None:
                # A padding register leaves the partial as it is (max(p, p) = p). The identity
                # itself stays out of max/min: CUDA reads the literal -2147483648 as a long, and
                # max(int, long) is ambiguous.
                keep = tirx.const(0, acc) if kind == "sum" else tirx.BufferLoad(partial, [o])
                value = tirx.Select(valid, value, keep)
            T.buffer_store(partial, _combine(kind, tirx.BufferLoad(partial, [o]), value), [o])
        for mask in layout.lane_masks(dim):
            mine = tirx.BufferLoad(partial, [o])
            T.buffer_store(partial, _combine(kind, mine, intrin.shfl_xor(mine, mask, acc)), [o])
    slots, slot = layout.warp_slots(dim, tx)
    if slots > 1:
        _combine_warps(em, call, kind, out, layout, dim, partial, slots, slot)
    _write_result(em, kind, dst, drng, out, partial, accum, acc)


def _linear(coords, shape):
    lin = 0
    for c, n in zip(coords, shape, strict=True):
        lin = lin * n + c
    return lin


def _combine_warps(em, call, kind, out, layout, dim, partial, slots, slot):
    """Step 3: partials of the warps sharing a result meet in shared memory
    (one float per result and warp)."""
    tx = em.tx
    ws = em.view(call)
    with T.unroll(0, out.regs) as o:
        lin = _linear(out.element(tx, o), out.shape)
        guard = conjunction(out.valid(tx, o), layout.lane_is_first(tx, dim))
        if guard is None:
            T.buffer_store(ws, tirx.BufferLoad(partial, [o]), [lin * slots + slot])
        else:
            with T.If(guard), T.Then():
                T.buffer_store(ws, tirx.BufferLoad(partial, [o]), [lin * slots + slot])
    em.sync()
    with T.unroll(0, out.regs) as o:
        valid = out.valid(tx, o)
        lin = _linear(out.element(tx, o), out.shape)
        if valid is not None:
            lin = tirx.Select(valid, lin, 0)
        total = tirx.BufferLoad(ws, [lin * slots])
        for s in range(1, slots):  # in slot order: every thread combines the same values the same way
            total = _combine(kind, total, tirx.BufferLoad(ws, [lin * slots + s]))
        T.buffer_store(partial, total, [o])
    if em.scope.loop_depth > 0:
        em.sync()  # the next iteration writes the workspace again


def _write_result(em, kind, dst, drng, out, partial, accum, acc):
    tx = em.tx
    if dst in em.registers:
        dst_regs = em.registers[dst]
        with T.unroll(0, out.regs) as o:
            value = tirx.BufferLoad(partial, [o])
            if accum:
                value = _combine(kind, _cast(tirx.BufferLoad(dst_regs, [o]), acc), value)
            T.buffer_store(dst_regs, _cast(value, dst_regs.dtype), [o])
        return
    dmins = [em.expr(m) for m, _ in drng]
    with T.unroll(0, out.regs) as o:
        em.bind_range(o, out.regs)  # (index arithmetic near 2^31 must see its range: exprs.fit_int32)
        idx = _place(dmins, drng, out.element(tx, o), out.shape)
        guard = conjunction(out.valid(tx, o), out.replica_zero(tx))
        value = tirx.BufferLoad(partial, [o])

        def store():
            v = _combine(kind, _cast(em.load(dst, idx), acc), value) if accum else value
            em.store(dst, idx, _cast(v, dst.dtype))

        if guard is None:
            store()
        else:
            with T.If(guard), T.Then():
                store()


def _place(mins, rng, coords, shape) -> list:
    """Indices into a region (`mins`, `rng`) of the element at `coords` of a tile of `shape`: dim for dim when
    the ranks agree, else the region's non-unit dims take the tile's non-unit coordinates in order."""
    if len(mins) == len(coords):
        return [m + c for m, c in zip(mins, coords, strict=True)]
    idx = list(mins)
    region_dims = [d for d, (_, e) in enumerate(rng) if not (isinstance(e, tirx.IntImm) and int(e) == 1)]
    tile_coords = [c for c, n in zip(coords, shape, strict=True) if n != 1]
    for d, c in zip(region_dims, tile_coords, strict=True):
        idx[d] = idx[d] + c
    return idx


def _reduce_serial(em, kind, dst, drng, src, srng, axes, accum, absolute):
    """Each thread computes whole results by a serial loop over the reduced dims."""
    smins = [em.expr(m) for m, _ in srng]
    sext = [int(e) for _, e in srng]
    dmins = [em.expr(m) for m, _ in drng]
    out_dims = [d for d in range(len(sext)) if d not in axes]
    red_ext = [sext[d] for d in axes]
    acc = reduction_dtype(kind, src.dtype, dst.dtype)
    init = _init(kind, acc)

    def reduce_into(running, out_idx):
        T.buffer_store(running, init, [0])

        def step(red_idx):
            idx = [None] * len(sext)
            for d, i in zip(out_dims, out_idx, strict=False):
                idx[d] = i
            for d, i in zip(axes, red_idx, strict=True):
                idx[d] = i
            value = _cast(em.load(src, [m + i for m, i in zip(smins, idx, strict=True)]), acc)
            if absolute:
                value = tirx.abs(value)
            T.buffer_store(running, _combine(kind, tirx.BufferLoad(running, [0]), value), [0])

        serial_nest(red_ext, step)

    running = T.alloc_buffer((1,), acc, scope="local")
    IRBuilder.name(f"{dst.name}_running", running)
    if dst in em.registers:  # each thread computes the results it holds
        layout = em.plan.layout(dst)
        regs = em.registers[dst]
        with T.unroll(0, layout.regs) as o:
            coords = layout.element(em.tx, o)
            valid = layout.valid(em.tx, o)
            frame = [T.If(valid), T.Then()] if valid is not None else []
            for f in frame:
                f.__enter__()
            reduce_into(running, coords)
            value = tirx.BufferLoad(running, [0])
            if accum:
                value = _combine(kind, _cast(tirx.BufferLoad(regs, [o]), acc), value)
            T.buffer_store(regs, _cast(value, regs.dtype), [o])
            for f in reversed(frame):
                f.__exit__(None, None, None)
        return

    out_ext = [sext[d] for d in out_dims]

    def body(out_idx):
        full_dst = (
            [m + i for m, i in zip(dmins, out_idx, strict=True)]
            if len(dmins) == len(out_idx)
            else list(dmins)
        )
        reduce_into(running, out_idx)
        value = tirx.BufferLoad(running, [0])
        if accum:
            value = _combine(kind, _cast(em.load(dst, full_dst), acc), value)
        em.store(dst, full_dst, _cast(value, dst.dtype))

    if scope_of(dst) in ("local", "local.var") or em.scope.thread_code:
        serial_nest(out_ext or [1], lambda idx: body(idx if out_ext else []))
    else:
        distribute(em, out_ext or [1], lambda idx: body(idx if out_ext else []))


def lower_finalize_reducer(em, call):
    """T.finalize_reducer(r) (language/reducers.py): each thread holding a copy of an element of `r` added its
    own iterations' values into it; the copies (the layout's replicated lanes and warps) combine as a
    reduction's steps 2 and 3 do, after which every copy holds the sum (the max, the min: the op is the call's
    second argument). A sum reducer in shared memory was added into atomically: nothing is left to do."""
    buf = region_of(call.args[0])[0]
    if buf not in em.registers:
        return
    kind = str(call.args[1].value)
    layout = em.plan.layout(buf)
    regs = em.registers[buf]
    acc = reduction_dtype(kind, buf.dtype, buf.dtype)
    partial = T.alloc_buffer((layout.regs,), acc, scope="local")
    IRBuilder.name(f"{buf.name}_partial", partial)
    with T.unroll(0, layout.regs) as o:
        T.buffer_store(partial, _cast(tirx.BufferLoad(regs, [o]), acc), [o])
        for mask in layout.lane_masks(None):
            mine = tirx.BufferLoad(partial, [o])
            T.buffer_store(partial, _combine(kind, mine, intrin.shfl_xor(mine, mask, acc)), [o])
    slots, slot = layout.warp_slots(None, em.tx)
    if slots > 1:
        _combine_warps(em, call, kind, layout, layout, None, partial, slots, slot)
    with T.unroll(0, layout.regs) as o:
        T.buffer_store(regs, _cast(tirx.BufferLoad(partial, [o]), regs.dtype), [o])

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


_INIT = {"sum": lambda dt: tirx.const(0, dt), "max": lambda dt: tirx.min_value(dt), "min": lambda dt: tirx.max_value(dt)}
_COMBINE = {"sum": lambda a, b: a + b, "max": tirx.max, "min": tirx.min}


def _lower_reduce(lw, call, kind):
    """dst = reduce(src over `axes`) (combined with dst's old values when accum).

    Correctness first: each thread reduces whole output elements serially (outputs split over the threads).
    A register-fragment source is first written to its shared scratch tile (reserved in `analyze`).
    """
    dst, drng = region_of(call.args[0])
    src, srng = region_of(call.args[1])
    axes = sorted(int(a) % len(srng) for a in call.args[2])
    accum = bool(call.args[3])
    smins = [lw.expr(m) for m, _ in srng]
    sext = [int(e) for _, e in srng]
    dmins = [lw.expr(m) for m, _ in drng]
    out_dims = [d for d in range(len(sext)) if d not in axes]
    out_ext = [sext[d] for d in out_dims]
    red_ext = [sext[d] for d in axes]
    dtype = str(dst.dtype)
    read_src = lambda idx: lw.load(src, idx)
    if src in lw.frags:
        scratch = lw.scratch[call]
        lay = lw.frags[src]
        with T.unroll(0, lay.regs) as r:
            row, col = lay.element(lw.tx, r)
            T.buffer_store(scratch.view, tirx.BufferLoad(lay.local, [r]), [scratch.offset2(row, col)])
        lw.sync()
        read_src = lambda idx: scratch_load(scratch, [i - m for i, m in zip(idx, smins)])
        if str(src.dtype) != "float32":
            inner = read_src
            read_src = lambda idx: tirx.Cast(str(src.dtype), inner(idx))

    # docs/IR.md: sums of 16-bit floats accumulate in float32 and are rounded once, into dst.
    acc_dtype = "float32" if kind == "sum" and dtype in ("float16", "bfloat16") else dtype

    def body(out_idx):
        # The running value lives in dst itself when dst has the accumulation dtype: a per-thread scalar array
        # would be placed on the stack by nvcc (TVM declares local arrays alignas(64)).
        full_dst = [m + i for m, i in zip(dmins, out_idx)] if len(dmins) == len(out_idx) else list(dmins)
        if acc_dtype != dtype:
            running = T.alloc_buffer((1,), acc_dtype, scope="local")
            start = tirx.Cast(acc_dtype, lw.load(dst, full_dst)) if accum else _INIT[kind](acc_dtype)
            T.buffer_store(running, start, [0])
            read_acc = lambda: tirx.BufferLoad(running, [0])  # noqa: E731
            write_acc = lambda v: T.buffer_store(running, v, [0])  # noqa: E731
        else:
            read_acc = lambda: lw.load(dst, full_dst)  # noqa: E731
            write_acc = lambda v: lw.store(dst, full_dst, v)  # noqa: E731
            if not accum:
                lw.store(dst, full_dst, _INIT[kind](dtype))

        def rec(k, red_idx):
            if k == len(red_ext):
                idx = [None] * len(sext)
                for d, i in zip(out_dims, out_idx):
                    idx[d] = i
                for d, i in zip(axes, red_idx):
                    idx[d] = i
                v = read_src([m + i for m, i in zip(smins, idx)])
                if str(v.ty) != acc_dtype:
                    v = tirx.Cast(acc_dtype, v)
                write_acc(_COMBINE[kind](read_acc(), v))
                return
            with T.serial(0, red_ext[k]) as i:
                rec(k + 1, red_idx + [i])

        rec(0, [])
        if acc_dtype != dtype:
            lw.store(dst, full_dst, tirx.Cast(dtype, read_acc()))

    if dst in lw.frags:
        raise LoweringError(f"T.reduce into register fragment {dst.name} is not supported; "
                            f"reduce into a fragment that is not a T.gemm accumulator")
    if scope_of(dst) in ("local", "local.var") or lw.in_thread_code:
        from .copy import _serial

        _serial(out_ext or [1], lambda idx: body(idx if out_ext else []))
    else:
        distribute(lw, out_ext or [1], lambda idx: body(idx if out_ext else []))


def scratch_load(tile, idx):
    return tirx.BufferLoad(tile.view, [tile.offset2(idx[0], idx[1])])


for _kind in ("sum", "max", "min"):
    register_tile_op(_kind)(lambda lw, call, _k=_kind: _lower_reduce(lw, call, _k))

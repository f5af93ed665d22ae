"""Spreading an iteration space over a CTA: round-robin over the threads, or serially in each thread."""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import tirx as T

__all__ = ["distribute", "serial_nest"]


def serial_nest(extents, body_fn):
    """Run `body_fn(indices)` over every point of `extents` in one thread (nested serial loops)."""
    def rec(k, it):
        if k == len(extents):
            body_fn(it)
            return
        with T.serial(0, extents[k]) as i:
            rec(k + 1, it + [i])

    rec(0, [])


def distribute(em, extents, body_fn):
    """Run `body_fn(indices)` for every point of `extents` (ints, or expressions of T.dynamic
    dims), split over the threads round-robin: consecutive threads take consecutive points,
    so row-major accesses coalesce."""
    total = 1
    for e in extents:
        total = total * (int(e) if isinstance(e, (int, tirx.IntImm)) else e)
    threads = em.threads
    static = isinstance(total, int)
    steps = (total + threads - 1) // threads if static else tirx.floordiv(total + threads - 1, threads)
    with T.serial(0, steps) as it:
        if static:
            # so index arithmetic near 2^31 is seen to need 64 bits (exprs.fit_int32)
            em.bind_range(it, steps)
        flat = it * threads + em.tx
        idx, rest = [], flat
        for e in reversed(extents):
            e = int(e) if isinstance(e, (int, tirx.IntImm)) else e
            idx.append(tirx.floormod(rest, e))
            rest = tirx.floordiv(rest, e)
        idx.reverse()
        if not static or total % threads:
            with T.If(flat < total), T.Then():
                body_fn(idx)
        else:
            body_fn(idx)

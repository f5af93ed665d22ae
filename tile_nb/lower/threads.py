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
    """Run `body_fn(indices)` for every point of `extents`, split over the threads round-robin."""
    total = 1
    for e in extents:
        total *= int(e)
    threads = em.threads
    steps = (total + threads - 1) // threads
    with T.serial(0, steps) as it:
        flat = it * threads + em.tx
        idx, rest = [], flat
        for e in reversed(extents):
            idx.append(tirx.floormod(rest, int(e)))
            rest = tirx.floordiv(rest, int(e))
        idx.reverse()
        if total % threads:
            with T.If(flat < total), T.Then():
                body_fn(idx)
        else:
            body_fn(idx)

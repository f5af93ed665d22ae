"""Persistent CTAs for warp-specialized TMA kernels: one CTA per SM walks the kernel's tiles.

The kernel's grid of CTAs becomes a list of tiles (in the grouped order of `Emitter.bind_tile`); `ctas` CTAs
are launched (one per SM) and CTA b runs tiles b, b + ctas, b + 2 ctas, ... The stage ring and its mbarriers
are set up once and carry on from tile to tile: k-tile k of the CTA's i-th tile sits at ring position i * n +
k (n: the loop's trip count, the same for every tile). So the producer, which runs ahead of the consumers by
up to the ring's depth, loads the first k-tiles of the next tile while the consumers run the epilogue of this
one, and the consumers find them waiting: the pipeline fills once per CTA instead of once per tile.

    producer (its first thread):  for each of its tiles: bind the tile's grid coordinates; the k-loop's
                                  loads
    consumers:                    for each of its tiles: bind them; the kernel body (the k-loop at ring
                                  position i * n; its last stage released at the end), a consumer barrier when
                                  the body outside the loop uses shared memory (the next tile rewrites it)

Legal when the grid's extents are constants, the loop's trip count does not depend on the tile, and the loop's
copies depend only on the grid variables, the loop variable and the parameters (the producer binds nothing
else). Built by default where legal, the kernel has two or more consumer warpgroups (one CTA fills an SM) and
the grid has more tiles than the GPU has SMs, which is where it was measured to pay
(docs/decisions.md#persistent-ctas). `tile_nb.persistent` (or TILE_NB_PERSISTENT) = 0 turns it off, = 1 also
says in the plan why a kernel did not get it; `tile_nb.sm_count` (TILE_NB_SM_COUNT; runtime.compile sets it
from the GPU) is the number of SMs.

Where the tiles do not fill the last wave, stream_k.py shares that wave's k-tiles among all the CTAs instead:
every CTA runs `tiles // ctas` whole tiles, then its range of the rest (`Persistent.stream_k`).
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx

from ..irwalk import buffers_touched, region_of, seq_items, vars_bound_in
from .cluster import Multicast, plan_multicast
from .decisions import Refusal
from .stream_k import StreamK, plan_stream_k

__all__ = ["DEFAULT_SM_COUNT", "Persistent", "describe_persistent", "plan_persistent"]


DEFAULT_SM_COUNT = 132  # H100 SXM and H200


@dataclass(frozen=True)
class Persistent:
    body: tirx.Stmt  # the statement under the threadIdx.x launch: emitted once per tile
    tiles: int  # CTAs of the kernel's grid as written: the tiles
    ctas: int  # CTAs launched
    barrier_per_tile: bool  # statements outside the pipelined loop touch shared memory
    multicast: Multicast | None = None  # clusters of two CTAs sharing a tile by TMA multicast (cluster.py)
    stream_k: StreamK | None = None  # the last wave's tiles shared by k-tiles (stream_k.py)


def plan_persistent(func, options, tma, grid: dict, threads: int, threads_body, shared: dict,
                    accumulators: dict) -> tuple[Persistent | None, tuple[Refusal, ...]]:
    """The persistent form of a kernel with a TMA pipeline (`tma`) and what its cluster and stream-K analyses
    declined, or (None, why not). On by default where legal; the reason it was refused is given only when it
    was asked for (`tile_nb.persistent` = 1)."""
    mode = options.persistent
    if mode is False:
        return None, ()
    plan, why = _plan(func, options, tma, grid, threads, threads_body, shared, accumulators)
    if plan is not None and mode is not True and threads < 256:
        # One consumer warpgroup (TMA forced): several such CTAs share an SM,
        # which one CTA per SM would give up.
        return None, ()
    if plan is None:
        return None, (why,) if mode else ()
    return plan, why


def _plan(func, options, tma, grid, threads, threads_body, shared, accumulators):
    if tma is None:
        return None, Refusal(
            "persistent.no_tma", "no persistent CTAs (they need the TMA pipeline's producer)"
        )
    if tma.producer_threads == 0:
        return None, Refusal(
            "persistent.no_producer",
            "no persistent CTAs (they need a producer warp: tile_nb.producer_warp = 1 adds one)",
        )
    if set(grid) - {"blockIdx.x", "blockIdx.y"} or "blockIdx.x" not in grid:
        return None, Refusal(
            "persistent.grid_rank", "no persistent CTAs (a grid of one or two dimensions is supported)"
        )
    extents = [v[1] for v in grid.values()]
    if not all(isinstance(e, tvm.ir.prim.expr.IntImm) for e in extents):
        return None, Refusal(
            "persistent.dynamic_grid", "no persistent CTAs (the grid depends on a T.dynamic dimension)"
        )
    tiles = 1
    for e in extents:
        tiles *= int(e)
    sm_count = DEFAULT_SM_COUNT if options.sm_count is None else options.sm_count
    # One CTA per SM: ptxas may give a TMA kernel's threads all of an SM's registers (plan_tma's budget), and
    # a persistent CTA that has to wait for a free SM would run all of its tiles late.
    ctas = min(tiles, sm_count)
    if tiles <= sm_count:
        return None, Refusal(
            "persistent.fits", f"no persistent CTAs ({tiles} tiles fit on {sm_count} SMs at once)"
        )
    loop = tma.loop
    grid_vars = [v[0] for v in grid.values()]
    local = vars_bound_in(func.body)
    for e in (loop.min, loop.extent):
        used = tirx.analysis.undefined_vars(e)
        if any(v.same_as(g) for v in used for g in grid_vars + local):
            return None, Refusal(
                "persistent.trip_count",
                "no persistent CTAs (the pipelined loop's trip count differs from tile to tile)",
            )
    for c in tma.copies:
        for start, _ in region_of(c.call.args[1])[1]:
            for v in tirx.analysis.undefined_vars(start):
                if any(v.same_as(x) for x in local) and not v.same_as(loop.loop_var):
                    return None, Refusal(
                        "persistent.copy_index",
                        f"no persistent CTAs (the copy into {c.tile_buffer.name} uses {v.name}, which the "
                        "producer does not compute)",
                    )
    outside = [s for s in seq_items(threads_body) if not s.same_as(loop)]
    barrier = any(b in shared for s in outside for b in sum(buffers_touched(s), []))
    multicast, why_not = plan_multicast(options, tma, grid, ctas)
    stream_k, why_sk = plan_stream_k(
        options, tma, threads_body, accumulators, tiles, ctas, multicast is not None, threads
    )
    return Persistent(threads_body, tiles, ctas, barrier, multicast, stream_k), tuple(
        r for r in (why_not, why_sk) if r is not None)


def describe_persistent(pp: Persistent) -> str:
    """The plan's note on persistent CTAs, for people."""
    return (
        f"persistent: {pp.ctas} CTA{'s' if pp.ctas > 1 else ''} (one per SM) walk the {pp.tiles} tiles; the "
        "producer loads the next tile's first k-tiles during the epilogue"
    )

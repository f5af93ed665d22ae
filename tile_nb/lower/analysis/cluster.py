"""Clusters of two CTAs with TMA multicast, for persistent TMA kernels (persistent.py).

The two CTAs of a cluster walk their tiles in lock-step, on tiles that differ only along one grid axis (their
coordinates 2c and 2c + 1): a GEMM whose grid is (M tiles, N tiles) pairs tiles along M, and the two CTAs then
read the same B tile at every k-tile (the larger operand of 128x256 tiles; the largest such copy is chosen).
Each CTA's producer loads half of that tile's TMA boxes and multicasts them into both CTAs' shared memory, so
the L2 serves the shared operand once per pair (a 128x256x64 fp16 GEMM: 48 KiB per CTA and k-tile become 32
KiB). What changes in the pipeline (tma.py):

    full barrier:   each CTA's producer still expects the whole stage's bytes; half of them come from the peer
    empty barrier:  counts the consumer warps of both CTAs; lane r of each consumer warp arrives on CTA r's
                    (mapa): a producer overwrites a stage of the peer only once the peer's consumers are done
                    with it
    start:          a cluster barrier after the barriers' initialisation (the peer may signal them right away)
    end:            the producer waits until both CTAs released every stage before its CTA may exit (the
                    peer's consumers still arrive on this CTA's barriers)

The launch gets TVM's `clusterCtaIdx.x` thread axis (extent 2): TVM's runtime then launches with a cluster
dimension and reads the rank from `%cluster_ctarank`.

Legal for a persistent kernel with an even CTA count and a pipelined copy that does not depend on a grid
variable of even extent and splits in two (an even number of TMA boxes, or one box of a multiple of 16 rows);
the largest such copy is the one multicast. `tile_nb.cluster` (or TILE_NB_CLUSTER) = 2 asks for it (then the
plan says why a kernel did not get it), = 0 turns it off (the default), because L2-to-SM traffic does not
limit these kernels and they ran at parity without clusters (docs/decisions.md#clusters-are-opt-in). The
peer's stage is released with default semantics (`mbarrier.py: mbarrier_arrive_cluster`), since a
cluster-scope release stalls the warp every k-tile (same section). The PTX of it all is in mbarrier.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tvm import tirx

from ..irwalk import region_of
from .decisions import Refusal
from .layout import tirx_bits

__all__ = ["CLUSTER_SIZE", "Multicast", "describe_multicast", "plan_multicast"]

CLUSTER_SIZE = 2


@dataclass(frozen=True)
class Multicast:
    copy: int  # index in TmaPlan.copies of the copy both CTAs read: each loads half of it into both
    groups: tuple  # arrival groups holding that copy: their stage releases go to both CTAs
    axis: str  # the grid axis along which the pair's tiles differ (coordinates 2c and 2c + 1)
    halves: tuple  # (rank 0's boxes, rank 1's boxes): tma.Box values, all of one extent (their tensor map's)
    size: int = CLUSTER_SIZE  # CTAs per cluster


def split_boxes(boxes: tuple) -> tuple | None:
    """The boxes of a copy in two halves, one per CTA: half of the boxes each, or a single box cut in two
    along its rows (each half starting a whole 1 KiB swizzle pattern, 8 rows of up to 128 bytes, from the
    other), or None."""
    if len(boxes) % 2 == 0:
        half = len(boxes) // 2
        return boxes[:half], boxes[half:]
    (box,) = boxes if len(boxes) == 1 else (None,)
    if box is None or box.dims[1] % 16:
        return None
    cols, rows = box.dims[0], box.dims[1] // 2
    halves = tuple(
        replace(
            box,
            dims=(cols, rows) + box.dims[2:],
            elem_offset=box.elem_offset + r * rows * cols,
            coord_shift=(box.coord_shift[0], box.coord_shift[1] + r * rows) + box.coord_shift[2:],
        )
        for r in range(2)
    )
    return (halves[0],), (halves[1],)


def plan_multicast(options, tma, grid: dict, ctas: int) -> tuple[Multicast | None, Refusal | None]:
    """The multicast of a persistent kernel's pipeline, or (None, why not); the reason is given only when a
    cluster was asked for (`tile_nb.cluster` = 2)."""
    mode = options.cluster
    if mode == 0:
        return None, None
    if mode != CLUSTER_SIZE:
        return None, Refusal(
            "cluster.size",
            f"no cluster (tile_nb.cluster = {mode}: clusters of {CLUSTER_SIZE} CTAs are supported)",
        )
    if ctas % CLUSTER_SIZE:
        return None, Refusal(
            "cluster.odd_ctas",
            f"no cluster (clusters of {CLUSTER_SIZE} need an even number of CTAs; {ctas} would be launched)",
        )
    best = None  # (bytes of the copy's tile, copy index, grid axis, its halves)
    for axis, (var, extent) in grid.items():
        if int(extent) % CLUSTER_SIZE:
            continue
        for i, c in enumerate(tma.copies):
            starts = [start for start, _ in region_of(c.call.args[1])[1]]
            if any(v.same_as(var) for s in starts for v in tirx.analysis.undefined_vars(s)):
                continue  # differs between the two CTAs
            halves = split_boxes(c.boxes)
            if halves is None:
                continue
            size = c.tile_elems * tirx_bits(c.global_buf.dtype) // 8
            if best is None or size > best[0]:
                best = (size, i, axis, halves)
    if best is None:
        return None, Refusal(
            "cluster.no_copy",
            "no cluster (no pipelined copy that splits into two halves of TMA boxes is the same for tiles "
            "that differ along a grid axis of even extent)",
        )
    _, i, axis, halves = best
    groups = tuple(g for g, (_, members) in enumerate(tma.arrivals) if i in members)
    return Multicast(i, groups, axis, halves), None


def describe_multicast(multicast: Multicast, tma, grid: dict) -> str:
    """The plan's note on a multicast, for people."""
    c = tma.copies[multicast.copy]
    return (
        f"clusters of {multicast.size} CTAs on tiles that differ in "
        f"{grid[multicast.axis][0].name}: each loads "
        f"half of {c.tile_buffer.name} and multicasts it to both"
    )

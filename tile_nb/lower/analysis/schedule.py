"""The schedule of a `T.Pipelined` loop: which global->shared copies may be issued ahead of their iteration.

Prefetching copy c of iteration k + s - 1 while iteration k runs is only the same program as the user's loop
when nothing in between can change what c reads or see what it writes. A copy is prefetched when:
- its source region's start uses only the loop variable and values fixed before the loop: no variable bound in
  the body, no buffer written in the body (the gather pattern
  `row[0] = Idx[k]; T.copy(A[row[0] * 32, 0], A_s)` reads `row`, which the body
  writes: that copy stays in order);
- its destination tile is not read or written by a statement before it in the body (those statements would see
  the next iteration's tile);
- its source tensor is not written in the body.
Copies that fail stay where they are, as ordinary copies, and the reason is kept for the plan and the view.
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from ..exprs import walk_loads
from ..irwalk import buffers_touched, region_of, scope_of, seq_items, vars_bound_in

__all__ = ["PipelineSchedule", "is_global_to_shared_copy", "schedule_pipeline"]


@dataclass(frozen=True)
class PipelineSchedule:
    """One pipelined loop: the copies issued ahead, and why the others are not."""

    loop: tirx.For
    stages: int
    prefetched: tuple  # copy statements of the body issued `stages - 1` iterations ahead
    kept_in_order: tuple  # (copy statement, reason) for copies that run where they stand

    def is_prefetched(self, stmt) -> bool:
        return any(stmt.same_as(c) for c in self.prefetched)

    @property
    def notes(self) -> list[str]:
        return [f"{region_of(c.args[0])[0].name} is copied in order: {why}" for c, why in self.kept_in_order]


def is_global_to_shared_copy(stmt) -> bool:
    if not (isinstance(stmt, tirx.TilePrimitiveCall) and stmt.op.name == "tirx.tile.copy"):
        return False
    dst, src = region_of(stmt.args[0])[0], region_of(stmt.args[1])[0]
    return scope_of(dst) in ("shared.dyn", "shared") and scope_of(src) == "global"


def schedule_pipeline(loop: tirx.For) -> PipelineSchedule:
    stages = max(1, int(loop.annotations["num_stages"]))
    body = seq_items(loop.body)
    _, written = buffers_touched(loop.body)
    bound = vars_bound_in(loop.body)
    bound = [v for v in bound if not v.same_as(loop.loop_var)]
    prefetched, kept = [], []
    for pos, stmt in enumerate(body):
        if not is_global_to_shared_copy(stmt):
            continue
        why = _why_not_prefetchable(stmt, body[:pos], written, bound)
        if why is None:
            prefetched.append(stmt)
        else:
            kept.append((stmt, why))
    return PipelineSchedule(loop, stages, tuple(prefetched), tuple(kept))


def _why_not_prefetchable(copy, before, written, bound) -> str | None:
    dst, _ = region_of(copy.args[0])
    src, srng = region_of(copy.args[1])
    starts = [m for m, _ in srng] + [m for m, _ in region_of(copy.args[0])[1]]
    loaded, used_vars = [], []
    for e in starts:
        walk_loads(e, lambda ld: loaded.append(ld.source))
        used_vars.extend(tirx.analysis.undefined_vars(e))
    for var in used_vars:
        if any(var.same_as(b) for b in bound):
            return f"its start uses `{var.name}`, which the loop body computes"
    for buf in loaded:
        if any(buf.same_as(w) for w in written):
            return f"its start reads `{buf.name}`, which the loop body writes"
    if any(src.same_as(w) for w in written):
        return f"the loop body writes its source `{src.name}`"
    for stmt in before:
        reads, writes = buffers_touched(stmt)
        if any(dst.same_as(b) for b in reads + writes):
            return f"`{dst.name}` is used before the copy in the loop body"
    return None

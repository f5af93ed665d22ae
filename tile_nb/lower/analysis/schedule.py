"""The schedule of a `T.Pipelined` loop: which global->shared copies may be issued ahead of their iteration.

Besides `T.copy`, a gather loop may be issued ahead: a `T.Parallel` nest over a whole shared tile whose one
statement stores a global element, or 0 where a condition fails (`T.im2col`'s form:
`col[i, j] = T.if_then_else(inside, img[...], 0)`); its indices and condition may use only the nest's
variables, the loop variable and values fixed before the loop (`Gather`, emit/gather.py).

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

import tvm
from tvm import tirx

from ..exprs import walk_loads
from ..irwalk import buffers_touched, region_of, scope_of, seq_items, vars_bound_in

__all__ = ["Gather", "PipelineSchedule", "as_gather", "is_global_to_shared_copy", "prefetched_tile",
           "schedule_pipeline"]


@dataclass(frozen=True)
class Gather:
    """`for i, j in T.Parallel(...): dst[i, j] = src[...]` (or `T.if_then_else(cond, src[...], 0)`): a
    T.Parallel nest over the whole shared tile `dst` loading the global tensor `src`."""

    stmt: tirx.For  # the outer T.Parallel loop: the statement of the pipelined body
    loop_vars: tuple
    extents: tuple  # ints
    store: tirx.BufferStore
    load: object  # the BufferLoad of src
    cond: object  # tirx.PrimExpr, or None: always loaded

    @property
    def dst(self):
        return self.store.buffer

    @property
    def src(self):
        return self.load.source


def as_gather(stmt) -> Gather | None:
    """The gather loop `stmt` is (module docstring), or None."""
    nest = []
    while isinstance(stmt if not nest else nest[-1].body, tirx.For):
        loop = stmt if not nest else nest[-1].body
        if loop.kind != tirx.ForKind.PARALLEL or not isinstance(loop.extent, tirx.IntImm) \
                or not (isinstance(loop.min, tirx.IntImm) and int(loop.min) == 0):
            return None
        nest.append(loop)
    if not nest or not isinstance(nest[-1].body, tirx.BufferStore):
        return None
    store = nest[-1].body
    dst, loop_vars = store.buffer, tuple(l.loop_var for l in nest)
    extents = tuple(int(l.extent) for l in nest)
    if scope_of(dst) not in ("shared.dyn", "shared") or len(store.indices) != len(nest) \
            or any(not i.same_as(v) for i, v in zip(store.indices, loop_vars, strict=True)) \
            or tuple(int(x) for x in dst.shape) != extents:
        return None
    value, cond = store.value, None
    if isinstance(value, tvm.ir.expr.Call) and str(getattr(value.op, "name", "")).endswith(".if_then_else"):
        cond, value, other = value.args
        if not (isinstance(other, (tirx.IntImm, tirx.FloatImm)) and float(other.value) == 0.0):
            return None
    if not isinstance(value, tvm.ir.TensorLoad) or scope_of(value.source) != "global" \
            or str(value.source.dtype) != str(dst.dtype):
        return None
    return Gather(nest[0], loop_vars, extents, store, value, cond)


def prefetched_tile(stmt):
    """The shared tile a prefetched statement (a T.copy or a gather loop) fills."""
    if isinstance(stmt, tirx.TilePrimitiveCall):
        return region_of(stmt.args[0])[0]
    return as_gather(stmt).dst


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
        def verb(stmt):
            return "copied" if isinstance(stmt, tirx.TilePrimitiveCall) else "gathered"

        return [f"{prefetched_tile(c).name} is {verb(c)} in order: {why}" for c, why in self.kept_in_order]


def is_global_to_shared_copy(stmt) -> bool:
    if not (isinstance(stmt, tirx.TilePrimitiveCall) and stmt.op.name == "tirx.tile.copy"):
        return False
    dst, src = region_of(stmt.args[0])[0], region_of(stmt.args[1])[0]
    return scope_of(dst) in ("shared.dyn", "shared") and scope_of(src) == "global"


def schedule_pipeline(loop: tirx.For, gathers: bool = True) -> PipelineSchedule:
    """`gathers` False: gather loops stay in order (plan.make_plan, where their stages would not fit)."""
    stages = max(1, int(loop.annotations["num_stages"]))
    body = seq_items(loop.body)
    _, written = buffers_touched(loop.body)
    bound = vars_bound_in(loop.body)
    bound = [v for v in bound if not v.same_as(loop.loop_var)]
    prefetched, kept = [], []
    for pos, stmt in enumerate(body):
        if is_global_to_shared_copy(stmt):
            why = _why_not_prefetchable(stmt, body[:pos], written, bound)
        elif gathers and (gather := as_gather(stmt)) is not None:
            why = _why_gather_not_prefetchable(gather, body[:pos], written, bound)
        else:
            continue
        if why is None:
            prefetched.append(stmt)
        else:
            kept.append((stmt, why))
    return PipelineSchedule(loop, stages, tuple(prefetched), tuple(kept))


def _why_gather_not_prefetchable(gather: Gather, before, written, bound) -> str | None:
    exprs = [*gather.load.indices, *([gather.cond] if gather.cond is not None else [])]
    bound = [b for b in bound if not any(b.same_as(v) for v in gather.loop_vars)]  # the nest's own variables
    return _why_not_issued_ahead(exprs, gather.dst, gather.src, before, written, bound,
                                 what="gather", uses="its indices use", reads="its indices read")


def _why_not_prefetchable(copy, before, written, bound) -> str | None:
    dst, drng = region_of(copy.args[0])
    src, srng = region_of(copy.args[1])
    starts = [m for m, _ in srng] + [m for m, _ in drng]
    return _why_not_issued_ahead(starts, dst, src, before, written, bound,
                                 what="copy", uses="its start uses", reads="its start reads")


def _why_not_issued_ahead(exprs, dst, src, before, written, bound, *, what: str, uses: str,
                          reads: str) -> str | None:
    """Why a statement (`what`) filling `dst` from `src`, with addresses `exprs`, cannot run an iteration
    early (module docstring), or None; `uses` / `reads` begin the reasons about those addresses."""
    loaded, used_vars = [], []
    for e in exprs:
        walk_loads(e, lambda ld: loaded.append(ld.source))
        used_vars.extend(tirx.analysis.undefined_vars(e))
    for var in used_vars:
        if any(var.same_as(b) for b in bound):
            return f"{uses} `{var.name}`, which the loop body computes"
    for buf in loaded:
        if any(buf.same_as(w) for w in written):
            return f"{reads} `{buf.name}`, which the loop body writes"
    if any(src.same_as(w) for w in written):
        return f"the loop body writes its source `{src.name}`"
    for stmt in before:
        touched_reads, touched_writes = buffers_touched(stmt)
        if any(dst.same_as(b) for b in touched_reads + touched_writes):
            return f"`{dst.name}` is used before the {what} in the loop body"
    return None

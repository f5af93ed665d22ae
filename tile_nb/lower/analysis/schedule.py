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
- its source tensor is not written in the body;
- its destination tile is not used after the loop (the code there would read stage 0, not the stage of the
  last iteration).
Copies that fail stay where they are, as ordinary copies, and the reason is kept for the plan and the view.

Two forms of the body are recomputed for the iteration a copy is issued for (`AheadIssue`), as block-sparse
attention writes them (`blk = Idx[k]` then `if blk >= 0: T.copy(K[blk * 32, 0], K_s) ...`):
- a `Bind` at the body's top level whose value reads only the loop variable, values fixed before the loop,
  earlier such Binds and buffers the body does not write (no call with side effects): a copy's addresses may
  use its variable, which the issue computes again for its own iteration;
- a copy in the `then` branch of an `if` at the body's top level, whose condition obeys the address rules: it
  is issued only where the condition holds for its iteration. Its tile must be used nowhere in the body but
  after it in that branch: an iteration that skips the copy skips every use of its stage, so no stage holding
  an older iteration's block is ever read in its place.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import tirx

from ...language.irutil import is_handle
from ...language.stmtwalk import stmt_children, walk_expr
from ..exprs import uses_var, walk_loads
from ..irwalk import buffers_touched, region_of, scope_of, seq_items, vars_bound_in

__all__ = ["AheadIssue", "Gather", "PipelineSchedule", "as_gather", "buffers_used_after",
           "is_global_to_shared_copy", "prefetched_tile", "schedule_pipeline"]


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
class AheadIssue:
    """What issuing a prefetched statement for a later iteration needs besides the loop variable."""

    binds: tuple = ()  # the body's Binds its addresses or guard use (in body order), computed again
    guard: object = None  # the condition of the `if` it sits in, issued only where it holds (None: always)


@dataclass(frozen=True)
class PipelineSchedule:
    """One pipelined loop: the copies issued ahead, and why the others are not."""

    loop: tirx.For
    stages: int
    prefetched: tuple  # copy statements of the body issued `stages - 1` iterations ahead
    kept_in_order: tuple  # (copy statement, reason) for copies that run where they stand
    ahead: tuple = ()  # AheadIssue of each prefetched statement, in the same order

    def is_prefetched(self, stmt) -> bool:
        return any(stmt.same_as(c) for c in self.prefetched)

    def issue_of(self, stmt) -> AheadIssue:
        return next(a for c, a in zip(self.prefetched, self.ahead, strict=True) if stmt.same_as(c))

    @property
    def notes(self) -> list[str]:
        def verb(stmt):
            return "copied" if isinstance(stmt, tirx.TilePrimitiveCall) else "gathered"

        return [f"{prefetched_tile(c).name} is {verb(c)} in order: {why}" for c, why in self.kept_in_order]

    @property
    def guards(self) -> dict[str, str]:
        """Prefetched tile name -> the condition its copy is issued under, for the plan's summary."""
        return {prefetched_tile(c).name: str(a.guard)
                for c, a in zip(self.prefetched, self.ahead, strict=True) if a.guard is not None}


def is_global_to_shared_copy(stmt) -> bool:
    if not (isinstance(stmt, tirx.TilePrimitiveCall) and stmt.op.name == "tirx.tile.copy"):
        return False
    dst, src = region_of(stmt.args[0])[0], region_of(stmt.args[1])[0]
    return scope_of(dst) in ("shared.dyn", "shared") and scope_of(src) == "global"


def schedule_pipeline(loop: tirx.For, gathers: bool = True, used_after: tuple = ()) -> PipelineSchedule:
    """`gathers` False: gather loops stay in order (plan.make_plan, where their stages would not fit).
    `used_after`: the buffers code after the loop may touch (buffers_used_after)."""
    stages = max(1, int(loop.annotations["num_stages"]))
    body = seq_items(loop.body)
    _, written = buffers_touched(loop.body)
    bound = [v for v in vars_bound_in(loop.body) if not v.same_as(loop.loop_var)]
    binds = _recomputable_binds(body, written, bound)
    # a variable of a recomputed Bind is as good as the loop variable for an address
    bound = [v for v in bound if not any(v.same_as(b.var) for b in binds)]
    prefetched, ahead, kept = [], [], []
    for stmt, before, branch in _candidates(body):
        if is_global_to_shared_copy(stmt):
            why = _why_not_prefetchable(stmt, before, written, bound)
            exprs = _copy_addresses(stmt)
        elif gathers and (gather := as_gather(stmt)) is not None:
            why = _why_gather_not_prefetchable(gather, before, written, bound)
            exprs = _gather_addresses(gather)
        else:
            continue
        guard = branch.condition if branch is not None else None
        if why is None and any(prefetched_tile(stmt).same_as(b) for b in used_after):
            # it would read the stage its last block is not in
            why = f"`{prefetched_tile(stmt).name}` is used after the loop"
        if why is None and branch is not None:
            why = _why_guard_not_ahead(branch, prefetched_tile(stmt), body, written, bound)
        if why is None:
            prefetched.append(stmt)
            uses = exprs + ([guard] if guard is not None else [])
            ahead.append(AheadIssue(_binds_used(binds, uses), guard))
        else:
            kept.append((stmt, why))
    return PipelineSchedule(loop, stages, tuple(prefetched), tuple(kept), tuple(ahead))


def buffers_used_after(kernel_body, loop: tirx.For) -> list:
    """The buffers touched by statements that may run after `loop` ends: at each level around it, the
    statements after it, and inside a loop around it also those before it (run again after it)."""
    path = (*_enclosing(kernel_body, loop), loop)
    used, in_loop = [], False
    for outer, inner in zip(path, path[1:], strict=False):
        in_loop = in_loop or isinstance(outer, tirx.For)
        children = stmt_children(outer)
        pos = next(i for i, c in enumerate(children) if c.same_as(inner))
        for s in children[pos + 1:] + (children[:pos] if in_loop else []):
            reads, writes = buffers_touched(s)
            used += reads + writes
    return used


def _enclosing(stmt, target, path=()) -> tuple:
    """The statements around `target` in `stmt`, outermost first (() when `stmt` is `target`)."""
    if stmt.same_as(target):
        return path
    for child in stmt_children(stmt):
        found = _enclosing(child, target, (*path, stmt))
        if found is not None:
            return found
    return None


def _candidates(body):
    """(statement, the body's statements before it, the top-level `if` whose then-branch holds it or None)."""
    for pos, stmt in enumerate(body):
        yield stmt, body[:pos], None
        if isinstance(stmt, tirx.IfThenElse):
            branch = seq_items(stmt.then_case)
            for inner_pos, inner in enumerate(branch):
                yield inner, body[:pos] + branch[:inner_pos], stmt


def _recomputable_binds(body, written, bound) -> list:
    """The body's top-level Binds an issue ahead may compute again for its iteration (module docstring)."""
    out = []
    for stmt in body:
        if not isinstance(stmt, tirx.Bind) or is_handle(stmt.var) or not _pure(stmt.value):
            continue
        others = [v for v in bound if not v.same_as(stmt.var) and not any(v.same_as(b.var) for b in out)]
        if _why_address_not_ahead([stmt.value], written, others, uses="", reads="") is None:
            out.append(stmt)
    return out


def _binds_used(binds, exprs) -> tuple:
    """The Binds among `binds` that `exprs` use, with the Binds those use, in body order."""
    used, chosen = list(exprs), []
    for b in reversed(binds):  # a Bind uses only earlier ones
        if any(uses_var(e, b.var) for e in used):
            chosen.append(b)
            used.append(b.value)
    return tuple(reversed(chosen))


def _pure(expr) -> bool:
    """No call in `expr` changes state (an atomic, an extern call): computing it again changes nothing."""
    impure = []

    def visit(e):
        if isinstance(e, tvm.ir.expr.Call):
            kind = e.op.get_attr("TCallEffectKind") if isinstance(e.op, tvm.ir.Op) else None
            if kind is None or int(kind) > int(tirx.CallEffectKind.ReadState):
                impure.append(e)

    walk_expr(expr, visit)
    return not impure


def _copy_addresses(copy) -> list:
    return [m for m, _ in region_of(copy.args[1])[1]] + [m for m, _ in region_of(copy.args[0])[1]]


def _gather_addresses(gather: Gather) -> list:
    return [*gather.load.indices, *([gather.cond] if gather.cond is not None else [])]


def _why_gather_not_prefetchable(gather: Gather, before, written, bound) -> str | None:
    bound = [b for b in bound if not any(b.same_as(v) for v in gather.loop_vars)]  # the nest's own variables
    return _why_not_issued_ahead(_gather_addresses(gather), gather.dst, gather.src, before, written, bound,
                                 what="gather", uses="its indices use", reads="its indices read")


def _why_not_prefetchable(copy, before, written, bound) -> str | None:
    dst, src = region_of(copy.args[0])[0], region_of(copy.args[1])[0]
    return _why_not_issued_ahead(_copy_addresses(copy), dst, src, before, written, bound,
                                 what="copy", uses="its start uses", reads="its start reads")


def _why_guard_not_ahead(branch: tirx.IfThenElse, dst, body, written, bound) -> str | None:
    """Why a copy into `dst` in the then-branch of the body's `branch` cannot be issued ahead under its
    condition (module docstring), or None."""
    why = _why_address_not_ahead([branch.condition], written, bound, uses="the condition of its `if` uses",
                                 reads="the condition of its `if` reads")
    if why is not None:
        return why
    outside = [s for s in body if not s.same_as(branch)] + \
        ([branch.else_case] if branch.else_case is not None else [])
    for stmt in outside:
        reads, writes = buffers_touched(stmt)
        if any(dst.same_as(b) for b in reads + writes):
            return f"`{dst.name}` is used outside the `if` its copy sits in"
    return None


def _why_address_not_ahead(exprs, written, bound, *, uses: str, reads: str) -> str | None:
    """Why `exprs` (addresses, a condition) cannot be evaluated for a later iteration, or None."""
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
    return None


def _why_not_issued_ahead(exprs, dst, src, before, written, bound, *, what: str, uses: str,
                          reads: str) -> str | None:
    """Why a statement (`what`) filling `dst` from `src`, with addresses `exprs`, cannot run an iteration
    early (module docstring), or None; `uses` / `reads` begin the reasons about those addresses."""
    why = _why_address_not_ahead(exprs, written, bound, uses=uses, reads=reads)
    if why is not None:
        return why
    if any(src.same_as(w) for w in written):
        return f"the loop body writes its source `{src.name}`"
    for stmt in before:
        touched_reads, touched_writes = buffers_touched(stmt)
        if any(dst.same_as(b) for b in touched_reads + touched_writes):
            return f"`{dst.name}` is used before the {what} in the loop body"
    return None

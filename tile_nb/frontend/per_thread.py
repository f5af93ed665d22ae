"""Per-thread code (tilelang's SIMT style), elaborated into block-level IR.

A kernel body is block-level code: each statement describes the whole CTA. tilelang also lets a kernel use its
thread index as a value (`tn = T.get_thread_binding()`, then `B_s[tn, k] = B[n0 + tn, k]`): such statements
run once in every thread. This pass, run at the end of each elaboration phase, rewrites them into the
block-level form that both back ends run:

- a run of per-thread statements becomes `for tid in T.Parallel(threads)`, iteration `tid` being thread
  `tid` (the CUDA lowering gives a loop of `threads` iterations one to each thread; the interpreter runs it
  vectorized over the threads), with threadIdx.x replaced by `tid`;
- a `T.alloc_local` / `T.alloc_var` that per-thread statements write holds a value per thread: it becomes a
  `local.thread` buffer with a leading dim of `threads` (row t: thread t's registers), indexed by `tid`;
- a run ends before a statement that touches shared or global memory an earlier statement of the run wrote
  (or that writes what the run reads): the CUDA lowering puts a barrier between two T.Parallel loops there,
  as tilelang's thread-storage sync would, and the interpreter finishes every statement in all threads before
  the next (lock step), which a race-free kernel cannot tell from the GPU;
- control flow on block-level values (a `T.serial` loop, an `if` on a block index) stays and is looked into,
  so that a loop which writes and then reads shared memory gets its barriers inside; control flow on
  per-thread values (`if tk == 0:`) runs inside the per-thread loop, where the interpreter masks it.
Tile operations (T.copy, T.gemm, ...) stay block-level: one under per-thread control flow, or given a region
that depends on the thread, is refused, and so is per-thread code inside T.Parallel or a T.ws region.
"""
from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import prim
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..errors import DSLError
from ..language.memory import LOCAL_THREAD
from ..language.stmtwalk import LEAF as _LEAF
from ..language.stmtwalk import iter_stmts as _iter
from ..language.stmtwalk import stmt_children as _children
from ..language.stmtwalk import stmt_exprs as _stmt_exprs
from ..language.stmtwalk import walk_expr as _walk
from ..language.sync import BLOCK_LEVEL, WS_ATTR

__all__ = ["LOCAL_THREAD", "elaborate_per_thread"]

_LOCAL = ("local", "local.var")


def elaborate_per_thread(body, filename: str | None = None, tile_op_lines=(), hints: list | None = None):
    """`body` (a PrimFunc body) with the per-thread code of each T.Kernel in block-level form (unchanged when
    no kernel uses its thread index as a value), and the line of each tile operation left in it.
    `tile_op_lines`: the line of each tile operation of `body`, in program order (for errors; a copy made
    per-thread code leaves the list); what the rewrite decided that the plan should show is appended to
    `hints`."""
    calls = [s for s in _iter(body) if isinstance(s, TilePrimitiveCall)]
    lines = dict(zip(calls, tile_op_lines, strict=False))
    removed: list = []

    def rewrite(s):
        if isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent" \
                and s.node.thread_tag == "threadIdx.x":
            tx = s.node.var
            if not _uses(s.body, {tx}):
                return s
            kernel = _Kernel(tx, int(s.value), filename, lines, hints if hints is not None else [])
            new = tirx.AttrStmt(s.node, s.attr_key, s.value, kernel.run(s.body), s.span)
            removed.extend(kernel.copies_by_elements)
            return new
        return _map_children(s, rewrite)

    body = rewrite(body)
    kept = [line for call, line in zip(calls, tile_op_lines, strict=False)
            if not any(call.same_as(r) for r in removed)]
    return body, kept


# ---- expressions -------------------------------------------------------------------------------------------

def _map_expr(e, var_map: dict, on_load):
    """`e` with variables replaced through `var_map` (recursively: a value may name another mapped variable)
    and each load rebuilt by `on_load(load, new_indices)`."""
    def go(x):
        if isinstance(x, tvm.ir.TensorLoad):
            return on_load(x, [go(i) for i in x.indices])
        if isinstance(x, tvm.ir.expr.Var):
            return go(var_map[x]) if x in var_map else x
        if isinstance(x, _LEAF) or not isinstance(x, tvm.ir.Expr):
            return x
        if isinstance(x, tvm.ir.expr.Call):
            return tvm.ir.expr.Call(x.op, [go(a) for a in x.args], attrs=x.attrs, ret_ty=x.ty)
        if isinstance(x, prim.expr.Select):
            return prim.expr.Select(go(x.condition), go(x.true_value), go(x.false_value))
        if isinstance(x, prim.expr.Let):
            return prim.expr.Let(x.var, go(x.value), go(x.body))
        if isinstance(x, prim.expr.Ramp):
            return prim.expr.Ramp(go(x.base), go(x.stride), x.lanes)
        if isinstance(x, prim.expr.Broadcast):
            return prim.expr.Broadcast(go(x.value), x.lanes)
        if isinstance(x, prim.expr.Cast):
            return prim.expr.Cast(x.ty, go(x.value))
        if hasattr(x, "b"):
            return type(x)(go(x.a), go(x.b))
        if hasattr(x, "a"):
            return type(x)(go(x.a))
        return x

    return go(e)


def _map_children(s, fn):
    """`s` with each statement directly under it replaced by `fn(child)`."""
    if isinstance(s, tirx.SeqStmt):
        return _seq([fn(c) for c in s.seq])
    if isinstance(s, tirx.IfThenElse):
        other = fn(s.else_case) if s.else_case is not None else None
        return tirx.IfThenElse(s.condition, fn(s.then_case), other, s.span)
    if isinstance(s, tirx.For):
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, fn(s.body), s.thread_binding, s.annotations,
                        s.step, s.span)
    if isinstance(s, tirx.While):
        return tirx.While(s.condition, fn(s.body), s.span)
    if isinstance(s, tirx.AttrStmt):
        return tirx.AttrStmt(s.node, s.attr_key, s.value, fn(s.body), s.span)
    return s


def _seq(items: list):
    return items[0] if len(items) == 1 else tirx.SeqStmt(items)


def _uses(s, variables: set, buffers=frozenset()) -> bool:
    """Whether a statement subtree reads one of `variables`, or loads from or stores to one of `buffers`."""
    found = []

    def visit(e):
        if isinstance(e, tvm.ir.expr.Var) and e in variables or \
                isinstance(e, tvm.ir.TensorLoad) and e.source in buffers:
            found.append(e)

    for x in _iter(s):
        if isinstance(x, tirx.BufferStore) and x.buffer in buffers:
            return True
        for e in _stmt_exprs(x):
            _walk(e, visit)
            if found:
                return True
    return False


def _accesses(stmts) -> dict:
    """{buffer: [(node, writes)]} for the memory that is not a thread's own, accessed under `stmts`. A load
    inside an evaluated call (an atomic) counts as a write: the call may change the element it points at."""
    out: dict = {}

    def note(buf, node, writes):
        if buf.scope() not in _LOCAL + (LOCAL_THREAD,):
            out.setdefault(buf, []).append((node, writes))

    for stmt in stmts:
        for x in _iter(stmt):
            writes = isinstance(x, tirx.Evaluate)
            if isinstance(x, tirx.BufferStore):
                note(x.buffer, x, True)
            for e in _stmt_exprs(x):
                _walk(e, lambda ld, w=writes: note(ld.source, ld, w)
                      if isinstance(ld, tvm.ir.TensorLoad) else None)
    return out


def _hazard(stmts) -> bool:
    """Whether memory written under `stmts` is accessed there again (by another statement, or as a read): the
    threads would need a barrier between the two accesses."""
    return any(any(w for _, w in acc) and len(acc) > 1 for acc in _accesses(stmts).values())


# ---- the pass ----------------------------------------------------------------------------------------------

class _Kernel:
    """One T.Kernel's body: which values and buffers are per-thread, and the rewrite."""

    def __init__(self, tx, threads: int, filename: str | None, tile_op_lines: dict, hints: list):
        self.tx, self.threads, self.filename, self.tile_op_lines = tx, threads, filename, tile_op_lines
        self.hints = hints
        self.guards: list = []  # conditions on the thread index of the branches being split (_split)
        self.vars = {tx}  # per-thread variables: threadIdx.x and what Binds compute from per-thread values
        self.buffers: dict = {}  # per-thread local buffer -> its local.thread buffer
        self.inlined: dict = {}  # per-thread Bind var -> its value (the Bind is dropped, its uses inlined)
        self.copies_by_elements: list = []  # the T.copy calls made per-thread loops (_copy_by_elements)

    def run(self, body):
        locals_ = {s.buffer for s in _iter(body)
                   if isinstance(s, tirx.AllocBuffer) and s.buffer.scope() in _LOCAL}
        changed = True
        while changed:  # a local written by per-thread code is per-thread; so is a Bind of a per-thread value
            before = (len(self.vars), len(self.buffers))
            self._mark(body, False, locals_)
            # a copy between a thread's own slice and a local array is per-thread code: element by element
            before += (len(self.copies_by_elements),)
            body = _map_tree(body, lambda s: self._copy_by_elements(s, locals_)
                             if isinstance(s, TilePrimitiveCall) else None)
            changed = (len(self.vars), len(self.buffers), len(self.copies_by_elements)) != before
        return self._block(body)

    def _copy_by_elements(self, call, locals_):
        """A T.copy whose region depends on the thread index (`T.copy(A[row(tx), k0:k0 + n], a_local)`, and
        back) as a loop over its elements, which then runs per thread like any store; past a global tensor's
        edge nothing is read (0) nor written, as with every T.copy. Other tile operations are left as they
        are (None)."""
        if call.op.name.rsplit(".", 1)[-1] != "copy" or not self.per_thread(call):
            return None
        dst, src = call.args[0], call.args[1]
        if not (dst.source in locals_ or src.source in locals_):
            return None  # a block-level copy of a per-thread region: refused by _tile_op
        dst_dims, src_dims = _non_unit(dst), _non_unit(src)
        extents = [src.region[k].extent for k in src_dims]
        if len(dst_dims) != len(src_dims):
            raise self.error("T.copy between regions of different shapes", call)
        self.copies_by_elements.append(call)
        line = self.tile_op_lines.get(call)
        span = tvm.ir.Span(tvm.ir.SourceName(self.filename or "<kernel>"), line, line, 0, 0) if line else None
        loop_vars = [tirx.Var(f"e{k}", "int32") for k in range(len(extents))]
        src_idx, dst_idx = [r.min for r in src.region], [r.min for r in dst.region]
        for v, ks, kd in zip(loop_vars, src_dims, dst_dims, strict=True):
            src_idx[ks] = src_idx[ks] + v
            dst_idx[kd] = dst_idx[kd] + v
        value = tirx.BufferLoad(src.source, src_idx)
        inside = _inside(src.source, src_idx)
        if inside is not None:
            value = tirx.if_then_else(inside, value, tirx.const(0, src.source.dtype))
        if str(src.source.dtype) != str(dst.source.dtype):
            value = tirx.Cast(str(dst.source.dtype), value)
        body = tirx.BufferStore(dst.source, value, dst_idx, span)  # errors point at the T.copy
        inside = _inside(dst.source, dst_idx)
        if inside is not None:
            body = tirx.IfThenElse(inside, body, None, span)
        for v, n in reversed(list(zip(loop_vars, extents, strict=True))):
            body = tirx.For(v, 0, n, tirx.ForKind.SERIAL, body)
        return body

    def _per_thread_value(self, e) -> bool:
        found = []
        _walk(e, lambda x: found.append(x) if isinstance(x, tvm.ir.expr.Var) and x in self.vars or
              isinstance(x, tvm.ir.TensorLoad) and x.source in self.buffers else None)
        return bool(found)

    def _mark(self, s, divergent: bool, locals_) -> None:
        if isinstance(s, tirx.BufferStore):
            if s.buffer in locals_ and s.buffer not in self.buffers and (
                    divergent or any(self._per_thread_value(e) for e in _stmt_exprs(s))):
                buf = s.buffer
                self.buffers[buf] = tirx.decl_buffer((self.threads, *buf.shape), buf.dtype, buf.name,
                                                     scope=LOCAL_THREAD)
            return
        if isinstance(s, tirx.Bind):
            # per-thread when its value is (a value read the same by every thread stays a block-level
            # value, even under a per-thread branch: `pre = shared[k]` in it, used in a T.Parallel loop)
            if self._per_thread_value(s.value):
                self.vars.add(s.var)
            return
        if isinstance(s, (tirx.For, tirx.IfThenElse, tirx.While)):
            divergent = divergent or any(self._per_thread_value(e) for e in _stmt_exprs(s))
        for c in _children(s):
            self._mark(c, divergent, locals_)

    def per_thread(self, s) -> bool:
        return _uses(s, self.vars, frozenset(self.buffers))

    def _divergent(self, s) -> bool:
        """Control flow whose condition or bounds differ between threads (runs inside a per-thread loop)."""
        return isinstance(s, (tirx.For, tirx.IfThenElse, tirx.While)) and any(
            self._per_thread_value(e) for e in _stmt_exprs(s))

    def error(self, message: str, stmt, hint: str = BLOCK_LEVEL) -> DSLError:
        """An error at the first line of `stmt` the IR knows (a store's span, a tile operation's line)."""
        return DSLError(message, filename=self.filename, lineno=self._line(stmt), hint=hint)

    # block-level statements: kept, with per-thread statements under them rewritten
    def _block(self, s):
        if isinstance(s, tirx.SeqStmt):
            return _seq(self._sequence(list(s.seq)))
        if isinstance(s, tirx.AllocBuffer) and s.buffer in self.buffers:
            return tirx.AllocBuffer(self.buffers[s.buffer])
        if isinstance(s, TilePrimitiveCall):
            return self._tile_op(s)
        if not self.per_thread(s) and not self._holds_thread_buffers(s):
            return s
        if isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
            raise self._in_parallel(s)
        if isinstance(s, tirx.AttrStmt) and s.attr_key == WS_ATTR:
            raise self.error("per-thread code inside a warp-specialized region (T.ws, or an `if` on the "
                             "thread index that chooses warp groups) is not supported yet", s)
        if isinstance(s, (tirx.For, tirx.IfThenElse, tirx.While, tirx.AttrStmt)) and not self._divergent(s):
            return _map_children(_unpipelined(s), lambda c: _seq(self._sequence(_items(c))))
        return self._wrap([s])

    def _in_parallel(self, loop) -> DSLError:
        return self.error("per-thread code (a statement that uses the thread index of T.get_thread_binding() "
                          "or a per-thread local) inside T.Parallel", loop,
                          hint="a T.Parallel loop already spreads its iterations over the threads ("
                               + BLOCK_LEVEL + "): index by its loop variables instead")

    def _holds_thread_buffers(self, s) -> bool:
        return any(isinstance(x, tirx.AllocBuffer) and x.buffer in self.buffers or
                   isinstance(x, TilePrimitiveCall) and self._regions_of_thread_buffers(x) for x in _iter(s))

    def _regions_of_thread_buffers(self, call) -> bool:
        return any(isinstance(a, tvm.ir.expr.TensorRegion) and a.source in self.buffers for a in call.args)

    def _sequence(self, items: list) -> list:
        """A statement list with its per-thread statements grouped into per-thread loops: a group grows while
        no barrier is needed inside it, and a statement with a tile op (or a barrier need) under block-level
        control flow is looked into instead."""
        out, group = [], []

        def flush():
            if group:
                out.append(self._wrap(list(group)))
                group.clear()

        for s in items:
            if isinstance(s, tirx.Bind) and s.var in self.vars:
                self.inlined[s.var] = s.value  # used by later statements, which may land in other loops
                continue
            if self._splits(s):
                flush()
                out.extend(self._split(s))
                continue
            if isinstance(s, TilePrimitiveCall) or not self.per_thread(s) or self._look_into(s):
                flush()
                out.append(self._block(s))
                continue
            if group and _hazard(group + [s]):
                flush()
            group.append(s)
        flush()
        return out or [tirx.Evaluate(0)]

    def _splits(self, s) -> bool:
        """An `if` on the thread index alone (`if tx < 32:`) around tile operations."""
        return isinstance(s, tirx.IfThenElse) and self._divergent(s) \
            and not _uses(tirx.Evaluate(s.condition), set(), frozenset(self.buffers)) \
            and any(isinstance(x, TilePrimitiveCall) for x in _iter(s))

    def _split(self, s) -> list:
        """tilelang runs the branches of `if tx < 32: A else: B` in different threads at once; their tile
        operations describe whole tiles, whichever threads run them. Here A runs, then B, each with all the
        threads: the same results wherever A and B do not use each other's (which, run at once without a
        barrier between them, would be a race). Per-thread statements in a branch keep the condition."""
        self.hints.append(f"the `if` on the thread index at line {self._line(s) or '?'} holds tile "
                          "operations: its branches run one after the other, each in all threads")
        out = []
        for cond, branch in ((s.condition, s.then_case), (tirx.Not(s.condition), s.else_case)):
            if branch is None:
                continue
            self.guards.append(cond)
            try:
                out.extend(self._sequence(_items(branch)))
            finally:
                self.guards.pop()
        return out

    def _line(self, stmt):
        for x in _iter(stmt):
            line = self.tile_op_lines.get(x) if isinstance(x, TilePrimitiveCall) else \
                getattr(getattr(x, "span", None), "line", None)
            if line:
                return line
        return None

    def _look_into(self, s) -> bool:
        has_tile_op = any(isinstance(x, TilePrimitiveCall) for x in _iter(s))
        shared_alloc = any(isinstance(x, tirx.AllocBuffer) and x.buffer.scope().startswith("shared")
                           for x in _iter(s))
        if self._divergent(s):
            if has_tile_op:
                raise self.error("a tile operation under control flow that differs between threads (a loop "
                                 "or an `if` on the thread index): tile operations are block-level", s)
            return False
        block_control = isinstance(s, (tirx.SeqStmt, tirx.For, tirx.IfThenElse, tirx.AttrStmt))
        return block_control and (has_tile_op or shared_alloc or _hazard([s]))

    def _tile_op(self, call):
        if self.per_thread(call):
            raise self.error(f"the tile operation T.{call.op.name.rsplit('.', 1)[-1]} is given a region or "
                             "value that depends on the thread index: tile operations are block-level", call,
                             hint=BLOCK_LEVEL + "; copy per-thread values element by element "
                                                  "(`B_s[tx, k] = B[..., k]`)")
        if not self._regions_of_thread_buffers(call):
            return call
        args = []
        for a in call.args:
            if isinstance(a, tvm.ir.expr.TensorRegion) and a.source in self.buffers:
                new = self.buffers[a.source]
                a = tvm.ir.expr.TensorRegion(new, [tvm.ir.Range.from_min_extent(0, self.threads), *a.region],
                                             a.ty)
            args.append(a)
        return TilePrimitiveCall(*args, op=call.op)

    def _wrap(self, stmts: list):
        """`for tid in T.Parallel(threads)` over `stmts`, the thread index and per-thread locals indexed by
        `tid`."""
        for x in (x for s in stmts for x in _iter(s)):
            if isinstance(x, tirx.For) and x.kind == tirx.ForKind.PARALLEL:
                raise self._in_parallel(x)
        tid = tirx.Var("tid", "int32")
        var_map = {**self.inlined, self.tx: tid}

        def on_load(ld, idx):
            if ld.source in self.buffers:
                return tirx.BufferLoad(self.buffers[ld.source], [tid, *idx])
            return tirx.BufferLoad(ld.source, idx)

        def expr(e):
            return _map_expr(e, var_map, on_load)

        def stmt(s):
            if isinstance(s, tirx.BufferStore):
                idx = [expr(i) for i in s.indices]
                buf = s.buffer
                if buf in self.buffers:
                    buf, idx = self.buffers[buf], [tid, *idx]
                return tirx.BufferStore(buf, expr(s.value), idx, s.span)
            if isinstance(s, tirx.Evaluate):
                return tirx.Evaluate(expr(s.value), s.span)
            if isinstance(s, tirx.Bind):
                return tirx.Bind(s.var, expr(s.value), s.span)
            if isinstance(s, TilePrimitiveCall):
                raise self.error(f"the tile operation T.{s.op.name.rsplit('.', 1)[-1]} inside per-thread "
                                 "code: tile operations are block-level", s)
            if isinstance(s, tirx.AllocBuffer):
                return tirx.AllocBuffer(self.buffers.get(s.buffer, s.buffer))
            if isinstance(s, tirx.For):
                s = _unpipelined(s)
                return tirx.For(s.loop_var, expr(s.min), expr(s.extent), s.kind, stmt(s.body),
                                s.thread_binding, s.annotations, s.step, s.span)
            if isinstance(s, tirx.IfThenElse):
                other = stmt(s.else_case) if s.else_case is not None else None
                return tirx.IfThenElse(expr(s.condition), stmt(s.then_case), other, s.span)
            if isinstance(s, tirx.While):
                return tirx.While(expr(s.condition), stmt(s.body), s.span)
            if isinstance(s, tirx.AttrStmt):
                value = expr(s.value) if isinstance(s.value, tvm.ir.Expr) else s.value
                return tirx.AttrStmt(s.node, s.attr_key, value, stmt(s.body), s.span)
            return _map_children(s, stmt)

        body = _seq([stmt(s) for s in stmts])
        if self.guards:  # inside a branch of a split `if` (_split): this branch's threads only
            cond = expr(self.guards[0])
            for g in self.guards[1:]:
                cond = tirx.And(cond, expr(g))
            body = tirx.IfThenElse(cond, body, None)
        return tirx.For(tid, 0, self.threads, tirx.ForKind.PARALLEL, body)


def _non_unit(region) -> list[int]:
    """The dims of a region whose extent is not 1 (the last one if all are)."""
    dims = [k for k, r in enumerate(region.region)
            if not (isinstance(r.extent, tirx.IntImm) and int(r.extent) == 1)]
    return dims or [len(region.region) - 1]


def _inside(buffer, indices):
    """`indices` within a global buffer's shape (None for a buffer of another scope: its accesses are the
    interpreter's and the lowering's bounds checks' business)."""
    if buffer.scope() != "global":
        return None
    cond = None
    for i, dim in zip(indices, buffer.shape, strict=True):
        test = tirx.And(i >= 0, i < dim)
        cond = test if cond is None else tirx.And(cond, test)
    return cond


def _map_tree(s, fn):
    """`s` with every statement for which `fn` returns a replacement replaced (looked into otherwise)."""
    new = fn(s)
    if new is not None:
        return new
    return _map_children(s, lambda c: _map_tree(c, fn))


def _items(s) -> list:
    return list(s.seq) if isinstance(s, tirx.SeqStmt) else [s]


def _unpipelined(s):
    """A T.Pipelined loop without tile operations (one around per-thread code: hadamard's shuffle rounds) as
    the serial loop it is: there are no copies to overlap."""
    if not (isinstance(s, tirx.For) and s.annotations and "num_stages" in s.annotations) or \
            any(isinstance(x, TilePrimitiveCall) for x in _iter(s.body)):
        return s
    kept = {k: v for k, v in s.annotations.items() if k != "num_stages"}
    return tirx.For(s.loop_var, s.min, s.extent, s.kind, s.body, s.thread_binding, kept, s.step, s.span)

"""Statement rules: control flow, allocation, the grid, and `T.parallel` loops vectorized over the tile.

Block-level code (everything inside `T.Kernel`) runs once per CTA. The grid (`launch_thread("blockIdx.*")`)
becomes nested Python loops; `threadIdx.x` is bound to 0 because block-level code describes the whole CTA.
A `T.parallel` loop is not iterated: its loop var becomes an index tensor (`arange`) and the body runs once,
every expression a tensor over the iteration space; `if` on a loop var turns into a mask of active iterations.
Serial loops inside parallel loops stay Python loops (they are genuinely sequential).
"""
from __future__ import annotations

import torch
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..language.sync import WS_ATTR
from . import grid, warps, written
from . import values as V
from .addresses import tensor_at
from .compiler import TILE_RULES, Compiler, op_short_name, stmt_rule
from .errors import InterpreterError
from .memory import write_back_overlays

__all__: list[str] = []


@stmt_rule(tirx.SeqStmt)
def _seq(comp: Compiler, node):
    body = [comp.stmt(s) for s in node.seq]

    def seq(f):
        for s in body:
            s(f)
    return seq


@stmt_rule(tirx.Evaluate)
def _evaluate(comp: Compiler, node):
    if isinstance(node.value, (tirx.IntImm, tirx.FloatImm)):
        return lambda f: None
    value = comp.expr(node.value)

    def evaluate(f):
        value(f)
    return evaluate


@stmt_rule(tirx.Bind)
def _bind(comp: Compiler, node):
    slot, value = comp.slot(node.var), comp.expr(node.value)

    def bind(f):
        v = value(f)
        if V.is_tensor(v) and v._base is not None:
            v = v.clone()  # a load may be a view of its buffer: the binding keeps the value read now
        f.vals[slot] = v
    return bind


@stmt_rule(tirx.AssertStmt)
def _assert(comp: Compiler, node):
    cond = comp.expr(node.condition)
    message = "".join(str(getattr(p, "value", p)) for p in node.message_parts)
    location = comp.location

    def check(f):
        c = cond(f)
        ok = bool(c.all()) if V.is_tensor(c) else bool(c)
        if not ok:
            raise InterpreterError(f"assertion failed: {message}", location)
    return check


# ---- buffers -----------------------------------------------------------------------------------------------

@stmt_rule(tirx.AllocBuffer)
def _alloc(comp: Compiler, node):
    buf = node.buffer
    slot = comp.buffer_slot(buf)
    shape = comp.exprs(buf.shape)
    dtype = V.torch_dtype(buf.dtype)
    tracked = buf.scope() in written.TRACKED
    if tracked:
        comp.tracked.append(slot)

    def alloc(f):
        # Zeros, not garbage: runs are reproducible (the GPU gives whatever the memory held). Reads of
        # elements not yet written are errors (written.py): a fresh mask per allocation, so per CTA.
        dims = [int(s(f)) for s in shape]
        f.vals[slot] = torch.zeros(dims, dtype=dtype)
        if tracked and f.written is not None:
            f.written[slot] = False
    return alloc


@stmt_rule(tirx.DeclBuffer)
def _decl(comp: Compiler, node):
    buf = node.buffer
    slot = comp.buffer_slot(buf)
    data = node.data
    if isinstance(data, tirx.Var):  # over an address bound in the kernel: T.make_tensor(table[i], ...)
        return _decl_at_address(comp, buf, slot, comp.slot(data))
    if getattr(getattr(data, "op", None), "name", None) == "tirx.buffer_data":
        data = data.args[0]  # `T.Tensor(shape, dtype, A.data)`: a view of the buffer A (TVM 0.27's A.data)
    if data is None or not hasattr(data, "__chandle__") or data.__chandle__() not in comp._slots:
        raise NotImplementedError(f"DeclBuffer over {data!r}: only views of a buffer already in scope are "
                                  f"supported by the CPU interpreter")
    source = comp.slot(data)
    shape = comp.exprs(buf.shape)
    dtype = V.torch_dtype(buf.dtype)

    def decl(f):
        base = f.vals[source]
        if base.dtype != dtype:
            raise InterpreterError(
                f"DeclBuffer '{buf.name}' reinterprets {base.dtype} as {dtype}: unsupported"
            )
        n, dims = _numel(shape, f), [int(s(f)) for s in shape]
        if not base.is_contiguous():  # reshape would copy: writes through the view would be lost
            raise InterpreterError(
                f"the view '{buf.name}' is over a non-contiguous tensor {tuple(base.shape)}"
            )
        if n > base.numel():
            raise InterpreterError(f"the view '{buf.name}' {tuple(dims)} has {n} elements, more than the "
                                   f"{base.numel()} of the tensor it views {tuple(base.shape)}")
        f.vals[slot] = base.reshape(-1)[:n].view(dims)
        if f.written is not None and f.written[source] is not None:
            f.written[source] = True  # writes through the view are not tracked: stop checking the buffer
    return decl


def _decl_at_address(comp: Compiler, buf, slot: int, address: int):
    shape, dtype, location = comp.exprs(buf.shape), V.torch_dtype(buf.dtype), comp.location

    def decl(f):
        f.vals[slot] = tensor_at(int(f.vals[address]), [int(s(f)) for s in shape], dtype, buf.name, location)
    return decl


def _numel(shape, f) -> int:
    n = 1
    for s in shape:
        n *= int(s(f))
    return n


# ---- launch: the grid --------------------------------------------------------------------------------------

@stmt_rule(tirx.AttrStmt)
def _attr(comp: Compiler, node):
    if node.attr_key == WS_ATTR:
        return _warp_specialized(comp, node)
    if node.attr_key != "thread_extent":
        return comp.stmt(node.body)  # pragmas and hints do not change the result
    iv = node.node
    tag = str(iv.thread_tag)
    slot = comp.slot(iv.var)
    extent = comp.expr(node.value)
    if not tag.startswith("blockIdx"):
        comp.closed.add(slot)  # threadIdx is 0 in block-level code: not shown at a T.breakpoint
    body = comp.stmt(node.body)
    if tag.startswith("blockIdx") and comp.grid_sync:
        return _coroutine_grid(comp, node, slot, extent, body)
    if tag.startswith("blockIdx"):
        axis = tag[-1]
        tracked = comp.tracked  # (filled while the whole function compiles)

        def grid(f):
            for b in range(int(extent(f))):
                f.vals[slot] = b
                f.block[axis] = b
                w = f.written
                # a new CTA has written nothing yet (buffers allocated outside the grid too)
                if w is not None:
                    for s in tracked:
                        if w[s] is not None:
                            w[s] = False
                if f.trace is not None:  # the innermost grid loop decides last
                    f.access = f.trace.active(f.block)
                body(f)
            f.block.pop(axis, None)
        return grid

    if comp.warps is not None and tag == "threadIdx.x":
        buffers = comp.buffers  # (filled while the whole function compiles)

        def warp_groups(f):
            f.vals[slot] = 0
            warps.run_block(body, f, int(extent(f)), buffers)
        return warp_groups

    def thread(f):
        f.vals[slot] = 0  # block-level code is written for the whole CTA, not per thread
        body(f)
    return thread


def _coroutine_grid(comp: Compiler, node, slot: int, extent, body):
    """A grid loop of a kernel with T.sync_grid: the innermost loop hands each block, with its own frame, to
    the grid's scheduler instead of running it; the outermost runs them all once every block is collected."""
    axis = str(node.node.thread_tag)[-1]
    tracked = comp.tracked
    innermost = not _has_grid_loop(node.body)

    def grid_loop(f):
        outermost = f.grid is None
        if outermost:
            f.grid = grid.GridScheduler()
        for b in range(int(extent(f))):
            f.vals[slot] = b
            f.block[axis] = b
            if innermost:
                f.grid.add(grid.fork_block(f, tracked), body)
            else:
                body(f)
        f.block.pop(axis, None)
        if outermost:
            scheduler, f.grid = f.grid, None
            scheduler.run()
    return grid_loop


def _has_grid_loop(stmt) -> bool:
    return grid.any_stmt(stmt, lambda s: isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent"
                         and str(s.node.thread_tag).startswith("blockIdx"))


def _warp_specialized(comp: Compiler, node):
    """`with T.ws(k)`: the body's statements run in those warp groups only (warps.py)."""
    if comp.warps is None:
        raise NotImplementedError("a T.ws region outside a warp-specialized function")
    ids = tuple(k for k in range(32) if int(node.value) >> k & 1)
    saved, comp.warps.ids = comp.warps.ids, ids
    try:
        return comp.stmt(node.body)
    finally:
        comp.warps.ids = saved


# ---- loops -------------------------------------------------------------------------------------------------

@stmt_rule(tirx.For)
def _for(comp: Compiler, node):
    kind = int(node.kind)
    if kind in (int(tirx.ForKind.PARALLEL), int(tirx.ForKind.VECTORIZED), int(tirx.ForKind.THREAD_BINDING)):
        return _parallel_for(comp, node)
    return _serial_for(comp, node)


def _serial_for(comp: Compiler, node):
    slot = comp.slot(node.loop_var)
    start, extent = comp.expr(node.min), comp.expr(node.extent)
    step = comp.expr(node.step) if node.step is not None else None
    body = comp.stmt(node.body)
    comp.closed.add(slot)  # out of scope after the loop (for T.breakpoint)

    def serial(f):
        lo, n = start(f), extent(f)
        inc = 1 if step is None else int(step(f))
        if V.is_tensor(n) and n.dim() > 0:
            return _ragged_serial(f, slot, lo, n, inc, body)
        lo = int(lo)
        vals = f.vals
        for i in range(lo, lo + int(n), inc):
            vals[slot] = i
            body(f)
    return serial


def _ragged_serial(f, slot, lo, n, inc, body):
    """A serial loop whose trip count depends on a parallel loop var: run the longest, mask the rest."""
    saved = f.mask
    try:
        for i in range(int(lo), int(lo) + int(n.max()), inc):
            active = (i < lo + n)
            f.mask = active if saved is None else saved & active
            if bool(f.mask.any()):
                f.vals[slot] = i
                body(f)
    finally:
        f.mask = saved


def _parallel_for(comp: Compiler, node):
    slot = comp.slot(node.loop_var)
    start, extent = comp.expr(node.min), comp.expr(node.extent)
    step = comp.expr(node.step) if node.step is not None else None
    key = node.loop_var.__chandle__()
    comp.par_vars[key] = (slot, len(comp.par_vars), node.loop_var.name)
    try:
        body = comp.stmt(node.body)
    finally:
        del comp.par_vars[key]
        comp.closed.add(slot)

    def parallel(f):
        lo, n = int(start(f)), int(extent(f))
        inc = 1 if step is None else int(step(f))
        saved_shape, outermost = f.par_shape, not f.par_shape
        index = _index_tensor(lo, n, inc, len(saved_shape))
        if index.numel() == 0:
            return
        f.vals[slot] = index
        f.ranges[slot] = (lo, index.numel(), inc)
        f.par_shape = (index.numel(),) + saved_shape
        if outermost:
            f.overlays = {}
        try:
            body(f)
        finally:
            f.par_shape = saved_shape
        if outermost:
            write_back_overlays(f, comp)
            f.overlays = None
    return parallel


_INDEX_CACHE: dict = {}


def _index_tensor(lo: int, n: int, inc: int, depth: int) -> torch.Tensor:
    """The values of a parallel loop var, shaped (extent,) + (1,) * depth; cached, as every CTA asks for the
    same ones (they are never written in place)."""
    key = (lo, n, inc, depth)
    index = _INDEX_CACHE.get(key)
    if index is None:
        index = torch.arange(lo, lo + n, inc)
        index = index.view((index.numel(),) + (1,) * depth)
        if len(_INDEX_CACHE) > 4096:
            _INDEX_CACHE.clear()
        _INDEX_CACHE[key] = index
    return index


@stmt_rule(tirx.While)
def _while(comp: Compiler, node):
    cond, body = comp.expr(node.condition), comp.stmt(node.body)

    def while_(f):
        while True:
            c = cond(f)
            if V.is_tensor(c) and c.dim() > 0:
                raise InterpreterError("a while loop whose condition depends on a parallel loop var is not "
                                       "supported by the CPU interpreter")
            if not c:
                return
            body(f)
    return while_


# ---- branches ----------------------------------------------------------------------------------------------

@stmt_rule(tirx.IfThenElse)
def _if(comp: Compiler, node):
    cond = comp.expr(node.condition)
    then = comp.stmt(node.then_case)
    orelse = comp.stmt(node.else_case) if node.else_case is not None else None

    def if_(f):
        c = cond(f)
        if not V.is_tensor(c) or c.dim() == 0:
            if c:
                then(f)
            elif orelse is not None:
                orelse(f)
            return
        # The condition varies over parallel iterations: run each branch on the iterations that take it.
        c = c.to(torch.bool)
        saved = f.mask
        try:
            active = c if saved is None else saved & c
            if bool(active.any()):
                f.mask = active
                then(f)
            if orelse is not None:
                active = ~c if saved is None else saved & ~c
                if bool(active.any()):
                    f.mask = active
                    orelse(f)
        finally:
            f.mask = saved
    return if_


# ---- tile primitives ---------------------------------------------------------------------------------------

@stmt_rule(TilePrimitiveCall)
def _tile_call(comp: Compiler, node):
    name = op_short_name(node.op)
    rule = TILE_RULES.get(name)
    if rule is None:
        raise NotImplementedError(f"the CPU interpreter has no rule for tile primitive T.tile.{name}\n"
                                  f"{comp.location.describe()}")
    comp.location = location = comp.tile_location()  # (Compiler.stmt restores the enclosing one afterwards)
    run = rule(comp, node)

    def tile_call(f):
        if f.par_shape:
            raise InterpreterError(f"T.tile.{name} inside a T.Parallel loop is not supported",
                                   location)
        run(f)
    return tile_call

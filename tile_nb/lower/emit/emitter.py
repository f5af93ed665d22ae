"""The emitter: re-emits the tile IR through TVM's IR builder as thread-level TIRx, following a `KernelPlan`.

It walks the body statement by statement: tile ops go to the rule rules.py lists for them (one module per op
family: copy.py, elementwise.py, reduce.py, gemm.py), loops to loops.py / pipeline.py / tma.py,
and CTA barriers are inserted wherever shared memory written by one statement is read (or rewritten) by a
later one. The plan is never changed here; what the emitter keeps is what emission itself creates (the pool
views, the register arrays, the TMA tensor maps) and what holds while one construct is emitted (`Scope`, the
variable map, the pipeline stage of each tile, the registers of the fragments a loop runs over).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass

import tvm
import tvm.sym
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T
from tvm.tirx.script.builder import ir as _ir

from ...language.extern import is_extern_call
from ...language.irutil import is_handle
from ...language.memory import LOCAL_THREAD
from ...language.stmtwalk import atomic_op
from ..analysis.arch import ArchCaps
from ..analysis.layout import accumulator_register_dtype
from ..diagnostics import SourceLines
from ..errors import LoweringError
from ..exprs import fit_int32, reaches_int32_limit, rewrite, walk_loads, widen_index
from ..irwalk import atomic_element, atomic_target, buffers_touched, iter_stmts, region_of, scope_of
from ..sourcemap import MARK_BEGIN, MARK_END, mark, source_regions
from . import intrin
from .hand_layouts import LaidOut, laid_out, linear_index
from .rules import KERNEL_HOOKS, STATEMENT_RULES, TILE_OPS

__all__ = ["Emitter", "Scope"]


@dataclass(frozen=True)
class Scope:
    """What holds for the code being emitted right now."""

    thread_code: bool = False  # inside a T.Parallel body: per-thread code, no CTA-wide ops or barriers
    consumer: bool = False  # in a warp-specialized kernel, code only the consumer threads run
    mma_in_flight: bool = False  # the T.gemm being emitted leaves its wgmma group in flight (wait_group 1)
    # the T.gemm being emitted only issues its MMAs; the loop schedule waits (tma.py)
    mma_deferred: bool = False
    pingpong: int = 0  # consumer warpgroups issuing their wgmma groups in turns (tma.py), 0: no turns
    pipeline_stages: int = 0  # num_stages of the cp.async pipeline being emitted (0: none)
    pipeline_base: object = 0  # k-tiles of the TMA stage ring used by earlier tiles (persistent.py)
    # (first k-tile, count): the part of the pipelined loop a stream-K CTA runs (stream_k.py)
    k_segment: object = None
    # serial loops around this code (a reduction's workspace is reused across iterations)
    loop_depth: int = 0
    # in a loop over a replicated layout: the condition "first replica", which stores to memory and atomics
    # run under (registers are written by every replica)
    replica_guard: object = None
    # the statements the pipeline being emitted issues ahead (pipeline.py): where they stand they emit nothing
    issued_ahead: tuple = ()


class Emitter:
    def __init__(self, func: tirx.PrimFunc, plan, target, *, source_marks: bool = True,
                 hand_layouts_in_kernel: bool = True, regions: dict | None = None):
        self.func = func
        self.plan = plan
        self.target = target
        self.threads = plan.threads
        self.caps = ArchCaps.of(plan.arch)  # what the target has (cp.async, mma.sync m16n8k16, ...)
        self.lines = SourceLines(func)
        # statement -> its region id (sourcemap.py): its code is bracketed by marks the views map lines with
        # (`regions`: the whole function's, where `func` is one of its T.Kernels)
        if regions is None:
            regions = {s: i for i, s in enumerate(source_regions(func))}
        self.regions = regions if source_marks else {}
        self.scope = Scope()
        self.tx = None
        self.cluster_rank = None  # the CTA's rank in its cluster (cluster.py), None: no clusters
        # tx of the warp's lane 0 (warp-uniform): warp roles, wgmma warpgroups (see is_consumer)
        self.warp_tx = None
        self.pool = None
        self.views: dict = {}  # shared tile buffer (or reduction call) -> its view in the pool
        self.registers: dict = {}  # register fragment -> its per-thread register array
        self.locals: dict = {}  # local / local.var buffer -> emitted buffer
        self.var_map: dict = {}  # tile IR var -> expression in the emitted code
        self.stage: dict = {}  # shared tile -> stage index expression (inside a pipelined loop)
        self.loop_registers: dict = {}  # fragment -> (indices, register index) inside a fragment-driven loop
        self.tensor_maps: dict = {}  # TmaCopy -> tensor map handle (host code)
        self.store_map = None  # the TMA store epilogue's tensor map of C (epilogue.py)
        self.spill_view = None  # the spill tile's stages seen as C's dtype (epilogue.declare_spill_view)
        self.flat_views: dict = {}  # strided global tensor -> a flat view of its memory (see `global_ref`)
        # tensor with a hand layout -> hand_layouts.LaidOut, addressed through its layout (see `global_ref`)
        self.hand_layouts_in_kernel = hand_layouts_in_kernel
        self.laid_out: dict = {}
        self.barriers = None  # the TMA stage barriers' view
        # wgmma reads its shared operands through the async proxy, which sees ordinary stores only after
        # `fence.proxy.async` (see `sync`): the operand tiles, and whether one was
        # stored to since the last fence
        self.wgmma_operands = _gemm_operands(func) if plan.uses_wgmma else frozenset()
        self.unfenced_shared_writes = False
        self._host_done = False
        self.analyzer = tvm.sym.Analyzer()

    # ---- scoped state --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def scoped(self, **changes):
        saved = self.scope
        self.scope = dataclasses.replace(saved, **changes)
        try:
            yield
        finally:
            self.scope = saved

    @contextlib.contextmanager
    def bound(self, table: str, entries: dict):
        """Temporarily add `entries` to one of the emitter's maps (var_map, stage, loop_registers)."""
        target = getattr(self, table)
        saved = dict(target)
        target.update(entries)
        try:
            yield
        finally:
            setattr(self, table, saved)

    # ---- the whole function --------------------------------------------------------------------------------
    def run(self) -> tirx.PrimFunc:
        with IRBuilder() as ib, T.prim_func(), contextlib.ExitStack() as facts:
            T.func_name("tile_nb_lowered")
            for var in self._dynamic_vars(self.plan.divisible):
                # The JIT checked it for this call: vector and async accesses along this dim stay legal.
                facts.enter_context(self.analyzer.constraint_scope(tirx.floormod(var, 16) == 0))
            self.emit(self.func.body)
        return self.func.with_body(ib.get().body)

    def _dynamic_vars(self, names) -> list:
        """The T.dynamic dims named `names`: the free variables of the parameters' shapes and strides."""
        from tvm.tirx.buffer import is_buffer_var

        found = {}
        for p in self.func.params:
            if is_buffer_var(p):
                for e in list(p.shape) + list(p.strides):
                    for v in tirx.analysis.undefined_vars(e):
                        if v.name in names:
                            found.setdefault(v.name, v)
        return list(found.values())

    # ---- expressions and buffer access ---------------------------------------------------------------------
    def expr(self, e):
        """Rewrite a tile-IR expression for the emitted code (vars, buffer accesses)."""
        approx = intrin.approx_math if self.plan.options.approx_math else None
        return rewrite(e, self.var_map, lambda ld, idx: self.load(ld.source, idx), fit=self.fit_int32,
                       minmax=intrin.minmax_nan, approx=approx, narrow=True)

    def fit_int32(self, cond):
        """`cond` with its int32 index arithmetic in int64 where it can reach
        the int32 limits (docs/IR.md)."""
        return fit_int32(cond, self.analyzer)

    def prove(self, cond) -> bool:
        return bool(self.analyzer.can_prove(cond))

    def bind_range(self, var, extent):
        self.analyzer.bind(var, tvm.ir.Range(0, extent))

    def tile(self, buf):
        return self.plan.shared[buf]

    def view(self, key):
        return self.views[key]

    def shared_offset(self, buf, indices):
        return self.tile(buf).offset(indices, self.stage.get(buf))

    def load(self, buf, indices):
        if buf in self.plan.shared:
            return tirx.BufferLoad(self.view(buf), [self.shared_offset(buf, indices)])
        if buf in self.registers:
            value = tirx.BufferLoad(self.registers[buf], [self.register_index(buf, indices)])
            # Accumulators are held in float32 whatever their declared dtype; reads see the declared dtype.
            return value if str(value.ty) == str(buf.dtype) else tirx.Cast(str(buf.dtype), value)
        if buf in self.locals:
            return tirx.BufferLoad(self.locals[buf], self.local_index(buf, indices))
        return tirx.BufferLoad(*self.global_ref(buf, indices))

    def store(self, buf, indices, value):
        if buf in self.plan.shared:
            T.buffer_store(self.view(buf), value, [self.shared_offset(buf, indices)])
        elif buf in self.registers:
            regs = self.registers[buf]
            if str(value.ty) != str(regs.dtype):
                value = tirx.Cast(str(regs.dtype), value)
            T.buffer_store(regs, value, [self.register_index(buf, indices)])
        elif buf in self.locals:
            T.buffer_store(self.locals[buf], value, self.local_index(buf, indices))
        else:
            target, idx = self.global_ref(buf, indices)
            T.buffer_store(target, value, idx)

    def local_index(self, buf, indices) -> list:
        """The index into a thread's registers of a local buffer: a `local.thread` one (per-thread code,
        frontend/per_thread.py) holds this thread's row only, so its first index must be this thread."""
        if scope_of(buf) != LOCAL_THREAD:
            return list(indices)
        if self.tx is None or not self.prove(tirx.EQ(indices[0], self.tx)):
            raise LoweringError(
                f"{buf.name}[{', '.join(str(i) for i in indices)}] reads another thread's per-thread value "
                f"({buf.name} holds one row per thread, and this code runs in thread {self.tx})")
        return list(indices[1:])

    def global_ref(self, buf, indices) -> tuple:
        """(buffer, indices) addressing element `indices` of a global tensor. A tensor with declared strides
        (T.StridedTensor) is addressed through a flat view, with the offset computed from its strides: TVM
        0.27's CUDA code generation flattens a strided parameter as if it were row-major
        (docs/decisions.md#workarounds-for-what-the-toolchain-does-on-the-gpu)."""
        entry = self.laid_out.get(buf)
        if entry is not None:  # a hand layout: the element's position under it (emit/hand_layouts.py)
            if entry.wide:
                indices = [widen_index(i) for i in indices]
            return entry.view, [self.analyzer.simplify(linear_index(entry, indices))]
        if self._wide_offsets(buf, indices):  # docs/IR.md's index width
            indices = [widen_index(i) for i in indices]
        flat = self.flat_views.get(buf)
        if flat is None:
            return buf, list(indices)
        offset = 0
        for i, stride in zip(indices, buf.strides, strict=True):
            offset = offset + i * stride
        return flat, [offset]

    def _wide_offsets(self, buf, indices) -> bool:
        """Whether an access computes its offset into a global tensor in int64: the tensor has int64 dims
        (2^31 elements or more), or the offset of this access can reach the int32 limits (an edge tile's rows
        past a tensor just below 2^31 elements)."""
        if any(str(n.ty) == "int64" for n in buf.shape):
            return True
        strides = list(buf.strides) or [None] * len(indices)
        if not all(isinstance(n, tirx.IntImm) for n in list(buf.shape) + list(buf.strides)):
            return False  # T.dynamic dims: 32-bit, checked at the call
        if list(buf.strides):
            offset = sum((i * st for i, st in zip(indices, strides, strict=True)), tirx.const(0, "int32"))
        else:
            offset, stride = tirx.const(0, "int32"), 1
            for i, n in zip(reversed(indices), reversed(list(buf.shape)), strict=True):
                offset, stride = offset + i * stride, stride * int(n)
        return reaches_int32_limit(offset, self.analyzer)

    def global_pointer(self, buf, indices):
        return intrin.address_of(*self.global_ref(buf, indices))

    def emit_flat_views(self):
        """Flat views of the strided tensor parameters, declared once at kernel entry."""
        from tvm.tirx.buffer import is_buffer_var

        for p in self.func.params:
            if not (is_buffer_var(p) and list(p.strides)):
                continue
            extent = 1
            for n, stride in zip(p.shape, p.strides, strict=True):
                extent = extent + (n - 1) * stride
            view = T.decl_buffer((extent,), str(p.dtype), data=p.data)
            IRBuilder.name(f"{p.name}_flat", view)
            self.flat_views[p] = view
        if not self.hand_layouts_in_kernel:
            return
        for layout in self.plan.global_layouts:
            p = next(q for q in self.func.params if q.name == layout.name)
            extents = laid_out(p, layout)
            if extents is None:
                continue  # a T.dynamic dim, or not a permutation: the call permutes (and refuses) it
            numel = math.prod(int(n) for n in p.shape)
            view = T.decl_buffer((numel,), str(p.dtype), data=p.data)
            IRBuilder.name(f"{p.name}_laid_out", view)
            self.laid_out[p] = LaidOut(p, view, layout, extents, wide=numel > 2**31 - 1)

    def register_index(self, buf, indices):
        """Register of a fragment element; valid only inside a loop over this fragment's registers."""
        if buf in self.loop_registers:
            expect, reg = self.loop_registers[buf]
            if len(expect) == len(indices) and all(
                tvm_ffi.structural_equal(a, b) for a, b in zip(expect, indices, strict=True)
            ):
                return reg
        raise LoweringError(
            f"fragment {buf.name} (held in registers) is accessed at [{', '.join(str(i) for i in indices)}]; "
            f"inside T.Parallel it must be indexed by the loop variables in order")

    # ---- statements ----------------------------------------------------------------------------------------
    def issued_ahead(self, stmt) -> bool:
        """Whether the pipeline being emitted issues `stmt` ahead (schedule.AheadIssue): where it stands it
        emits nothing."""
        return any(stmt.same_as(c) for c in self.scope.issued_ahead)

    def emit(self, stmt):
        if self.issued_ahead(stmt):
            return  # a copy of a pipelined loop under its `if`
        with self.marked(stmt):
            self._emit(stmt)

    @contextlib.contextmanager
    def marked(self, stmt):
        """Bracket the code emitted inside with `stmt`'s source marks (sourcemap.py), if it has a region;
        rules that emit a statement of the tile IR themselves (a pipeline's prefetched copies) use it too."""
        region = None if self.scope.thread_code else self.regions.get(stmt)
        if region is None:
            yield
            return
        T.evaluate(mark(MARK_BEGIN, region))
        yield
        T.evaluate(mark(MARK_END, region))

    def _emit(self, stmt):
        if self.needs_consumer_guard(stmt):
            # Warp-specialized kernels: the producer warp runs only its loads (tma.py).
            with self.scoped(consumer=True), T.If(self.is_consumer()), T.Then():
                self._emit(stmt)
            return
        if (rule := self._statement_rule(stmt)) is not None:
            rule(self, stmt)
        elif isinstance(stmt, tirx.SeqStmt):
            self.emit_seq(list(stmt.seq))
        elif isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent":
            self.emit_launch(stmt)
        elif isinstance(stmt, tirx.AttrStmt):
            with T.attr(stmt.node, stmt.attr_key, self.expr(stmt.value)):
                self.emit(stmt.body)
        elif isinstance(stmt, tirx.AllocBuffer):
            self.emit_alloc(stmt.buffer)
        elif isinstance(stmt, tirx.TilePrimitiveCall):
            self.note_operand_write(
                next((a.source for a in stmt.args if isinstance(a, tvm.ir.expr.TensorRegion)), None)
            )
            fn = TILE_OPS.get(stmt.op.name)
            if fn is None:
                raise self.lines.locate(
                    LoweringError(f"tile op {stmt.op.name} has no CUDA lowering in tile_nb yet"), stmt
                )
            try:
                fn(self, stmt)
            except LoweringError as err:
                raise self.lines.locate(err, stmt) from None
        elif isinstance(stmt, tirx.BufferStore):
            self.note_operand_write(stmt.buffer)
            try:
                indices, value = [self.expr(i) for i in stmt.indices], self.expr(stmt.value)
                if self._block_level_update(stmt):
                    # Block-level code describes the CTA once (docs/IR.md): were every thread to run
                    # `X[i] = X[i] + v`, they would update X[i] in turns (1 to 4 adds seen for 128 threads)
                    # where the interpreter updates it once. One thread does, between two barriers: what the
                    # threads wrote before is in place, and what it wrote is seen by all after.
                    self.sync()
                    with T.If(self.tx == 0), T.Then():
                        self.store(stmt.buffer, indices, value)
                    self.sync()
                    return
                with self._first_replica(
                    stmt.buffer not in self.registers and stmt.buffer not in self.locals
                ):
                    self.store(stmt.buffer, indices, value)
            except LoweringError as err:
                raise self.lines.locate(err, stmt) from None
        elif isinstance(stmt, tirx.Evaluate):
            if atomic_target(stmt.value) in self.registers:
                self._add_into_register(stmt)
                return
            kind = atomic_op(stmt.value)
            if kind in ("max", "min"):
                target = atomic_target(stmt.value)
                if scope_of(target) not in ("global", "shared", "shared.dyn"):
                    raise self.lines.locate(LoweringError(
                        f"{target.name} is a max / min reducer that the plan does not keep in registers; the "
                        "lowering combines such reducers in registers only"), stmt)
                # T.atomic_max / T.atomic_min into memory: CUDA has no float atomicMax (intrin.atomic_extreme)
                address, update = (self.expr(a) for a in stmt.value.args[1:3])
                value = intrin.atomic_extreme(kind, address, update, str(target.dtype))
            else:
                value = self.expr(stmt.value)
            if is_extern_call(value) and is_handle(value):
                # `T.call_extern("handle", f, ...)` as a statement calls a void f: TVM would print a
                # handle-typed call cast to (void*), which a void function's result cannot take
                value = tirx.call_extern("int32", value.args[0].value, *value.args[1:])
            if self._block_level_atomic(stmt.value):
                # Block-level code describes the CTA once (docs/IR.md), and the interpreter adds once per CTA:
                # one thread adds, not every thread of the block.
                with T.If(self.tx == 0), T.Then():
                    T.evaluate(value)
                return
            with self._first_replica(True):
                T.evaluate(value)
        elif isinstance(stmt, tirx.IfThenElse):
            with T.If(self.expr(stmt.condition)):
                with T.Then():
                    self.emit(stmt.then_case)
                if stmt.else_case is not None:
                    with T.Else():
                        self.emit(stmt.else_case)
        elif isinstance(stmt, tirx.Bind) and is_handle(stmt.var):
            # an address a T.decl_buffer is over (language/pointers.py): the same var, which the decl names
            _ir.add_to_parent(tirx.Bind(stmt.var, self.expr(stmt.value), stmt.span))
        elif isinstance(stmt, tirx.Bind):
            bound = T.Bind(self.expr(stmt.value))
            IRBuilder.name(stmt.var.name, bound)  # the CUDA keeps the user's name (`float v = ...`)
            self.var_map[stmt.var] = bound
        elif isinstance(stmt, tirx.DeclBuffer):
            _ir.add_to_parent(stmt)
        else:
            raise LoweringError(f"statement {type(stmt).__name__} is not supported by the lowering:\n{stmt}")

    def _add_into_register(self, stmt):
        """An atomic add (max, min) into a register fragment (a T.alloc_reducer's update,
        language/reducers.py): the thread combines into its own copy, on every replica (T.finalize_reducer
        combines the copies)."""
        load, value = atomic_element(stmt.value), stmt.value.args[2]
        buf = load.source
        try:
            reg = self.register_index(buf, [self.expr(i) for i in load.indices])
        except LoweringError as err:
            raise self.lines.locate(err, stmt) from None
        regs = self.registers[buf]
        mine, other = tirx.BufferLoad(regs, [reg]), tirx.Cast(str(regs.dtype), self.expr(value))
        T.buffer_store(regs, intrin.combine(atomic_op(stmt.value), mine, other), [reg])

    def _block_level_atomic(self, value) -> bool:
        """An atomic (`T.atomic_add` of one element) outside any T.Parallel loop. (buffers_touched counts its
        buffer as written, so a later read of a shared one waits at a barrier for thread 0's add.)"""
        return not self.scope.thread_code and self.tx is not None and atomic_target(value) is not None

    @contextlib.contextmanager
    def _first_replica(self, memory_effect: bool):
        """Side effects on memory run once per element: on the first replica of a replicated loop layout."""
        guard = self.scope.replica_guard
        if not memory_effect or guard is None:
            yield
            return
        with T.If(guard), T.Then():
            yield

    def _statement_rule(self, stmt):
        for matches, emit in STATEMENT_RULES:
            if matches(self, stmt):
                return emit
        return None

    def emit_launch(self, stmt):
        extent = stmt.value
        tag = stmt.node.thread_tag
        is_threads = tag == "threadIdx.x"
        if is_threads:
            extent = extent + self.plan.producer_threads
        elif self.plan.persistent is not None:  # persistent.py: one CTA per SM walks the tiles
            extent = tirx.const(self.plan.persistent.ctas if tag == "blockIdx.x" else 1, "int32")
        if not self._host_done:
            self._host_done = True
            for hook in KERNEL_HOOKS["host"]:  # host code: before the first launch dimension
                hook(self)
        self.bind_range(stmt.node.var, extent)
        with (
            T.attr(stmt.node, "thread_extent", extent),
            self._cluster_axis(tag),
            self._ctas_per_sm(is_threads),
        ):
            if is_threads:
                self.tx = stmt.node.var
                if self.plan.uses_wgmma:  # (a TMA pipeline is built for wgmma loops only)
                    self.warp_tx = T.Bind(intrin.warp_uniform(self.tx))
                    IRBuilder.name("warp_tx", self.warp_tx)
                self.emit_flat_views()
                self.emit_pool()
                if self.plan.persistent is None:
                    self.emit_raster()
                for hook in KERNEL_HOOKS["thread"]:
                    hook(self)
            self.emit(stmt.body)
            if is_threads:
                for hook in KERNEL_HOOKS["end"]:
                    hook(self)

    @contextlib.contextmanager
    def _ctas_per_sm(self, is_threads: bool):
        """Under threadIdx.x: `__launch_bounds__(threads, n)` where the plan counts on n CTAs per SM, so that
        ptxas keeps each thread's registers to what n CTAs leave instead of taking more and fitting fewer CTAs
        (docs/decisions.md#launch-bounds-where-the-plan-counts-on-two-ctas-per-sm)."""
        if not is_threads or self.plan.ctas_per_sm <= 1:
            yield
            return
        with T.attr(0, "tirx.launch_bounds_min_blocks_per_sm", self.plan.ctas_per_sm):
            yield

    @contextlib.contextmanager
    def _cluster_axis(self, tag: str):
        """Under blockIdx.x of a kernel launched in clusters (cluster.py): TVM's `clusterCtaIdx.x`
        thread axis, whose extent is the cluster size the runtime launches with;
        `self.cluster_rank` is the CTA's rank."""
        multicast = self.plan.persistent.multicast if self.plan.persistent is not None else None
        if tag != "blockIdx.x" or multicast is None:
            yield
            return
        rank = tirx.IterVar(
            None, tirx.Var("clusterCtaIdx.x", "int32"), tirx.IterVar.ThreadIndex, "clusterCtaIdx.x"
        )
        self.bind_range(rank.var, multicast.size)
        self.cluster_rank = rank.var
        with T.attr(rank, "thread_extent", multicast.size):
            yield

    def emit_pool(self):
        """One uint8 `shared.dyn` allocation; each shared tile and workspace is a
        DeclBuffer view at its offset."""
        plan = self.plan
        if not plan.shared and not plan.workspaces and plan.tma is None:
            return
        self.pool = T.alloc_buffer((plan.pool_bytes,), "uint8", scope="shared.dyn")
        IRBuilder.name("smem_pool", self.pool)
        for key, tile in list(plan.shared.items()) + list(plan.workspaces.items()):
            view = T.decl_buffer((tile.elems * tile.stages,), tile.dtype, data=self.pool.data,
                                 byte_offset=tile.byte_offset, scope="shared.dyn")
            IRBuilder.name(tile.name or tile.buffer.name, view)
            self.views[key] = view

    def emit_raster(self):
        """Grouped CTA order for GEMM kernels (L2 reuse): see `bind_tile`.

        Legal because CTAs of one launch are independent: only which CTA computes which (bx, by) changes.
        """
        if self.plan.heavy_first:  # plan.py: _heavy_first (a 3-d attention grid gets no grouping below)
            self._emit_heavy_first(self.plan.heavy_first)
            return
        if self.plan.raster_group <= 1:
            return
        (bx, gx), (by, _) = self.plan.grid["blockIdx.x"], self.plan.grid["blockIdx.y"]
        self.var_map.update(self.bind_tile(by * int(gx) + bx))

    def _emit_heavy_first(self, group: int):
        """The grid walked in groups of `group` (y, z) rows, each group from its
        largest bx down across its rows:
        CTA number L = bx + gx (by + gy bz) in the hardware's launch order computes the tile below."""
        grid = self.plan.grid
        bx, gx = grid["blockIdx.x"][0], int(grid["blockIdx.x"][1])
        rows = [(grid[t][0], int(grid[t][1])) for t in ("blockIdx.y", "blockIdx.z") if t in grid]
        lin, stride = bx, gx
        for var, extent in rows:
            lin, stride = lin + var * stride, stride * extent
        per_group = gx * group
        rem = tirx.floormod(lin, per_group)
        row = tirx.floordiv(lin, per_group) * group + tirx.floormod(rem, group)
        coords = {bx: (gx - 1 - tirx.floordiv(rem, group), gx)}
        for var, extent in rows:
            coords[var] = (tirx.floormod(row, extent), extent)
            row = tirx.floordiv(row, extent)
        for var, (value, extent) in coords.items():
            # one register each, read from lane 0: left as expressions, they were substituted into
            # every use and ptxas needed 35 more registers (two CTAs per SM then spill); the
            # shuffle keeps them warp-uniform
            bound = T.Bind(intrin.warp_uniform(value))
            IRBuilder.name(f"{var.name}_heavy_first", bound)
            self.var_map[var] = bound
            self.analyzer.bind(bound, tvm.ir.Range(0, extent))

    def bind_tile(self, lin, pair=None) -> dict:
        """The grid variables of the CTA tile with linear index `lin` (emitted as Binds): {var: expression}.
        With `plan.raster_group` > 1, consecutive tiles walk `group` tiles down x before moving along y, so
        the tiles in flight at once share A row-tiles and B column-tiles; otherwise x varies fastest, as the
        hardware launches a grid. `pair` = (axis, rank): `lin` indexes pairs of tiles along that axis (the
        grid with half its extent there), and the tile is the pair's `rank`-th (cluster.py)."""
        grid = self.plan.grid
        extents = {
            tag: int(e) // (2 if pair is not None and tag == pair[0] else 1) for tag, (_, e) in grid.items()
        }
        bx, by = grid["blockIdx.x"][0], grid.get("blockIdx.y", (None,))[0]
        gx, group = extents["blockIdx.x"], self.plan.raster_group
        if by is None:
            coords = {bx: lin}
        elif group > 1 and gx % group == 0:
            per_group = group * extents["blockIdx.y"]
            gid, rem = tirx.floordiv(lin, per_group), tirx.floormod(lin, per_group)
            coords = {bx: gid * group + tirx.floormod(rem, group), by: tirx.floordiv(rem, group)}
        else:
            coords = {bx: tirx.floormod(lin, gx), by: tirx.floordiv(lin, gx)}
        if pair is not None:
            var = grid[pair[0]][0]
            coords[var] = coords[var] * 2 + pair[1]
        out = {}
        for var, value in coords.items():
            bound = T.Bind(value)
            IRBuilder.name(
                f"{var.name}_tile" if self.plan.persistent is not None else f"{var.name}_raster", bound
            )
            extent = grid["blockIdx.x" if var.same_as(bx) else "blockIdx.y"][1]
            self.analyzer.bind(bound, tvm.ir.Range(0, int(extent)))
            out[var] = bound
        return out

    def emit_alloc(self, buf):
        scope = scope_of(buf)
        if buf in self.plan.shared:
            return  # a view in the pool, declared at kernel entry
        layout = self.plan.layout(buf)
        if layout is not None:
            # Accumulators live in float32 registers (what the tensor cores accumulate in; int32 for integer
            # products); other register fragments in their own dtype.
            dtype = accumulator_register_dtype(buf) if buf in self.plan.accumulators else str(buf.dtype)
            regs = T.alloc_buffer((layout.regs,), dtype, scope="local")
            IRBuilder.name(buf.name, regs)
            self.registers[buf] = regs
            return
        if scope in ("local", "local.var", LOCAL_THREAD):
            shape = tuple(buf.shape)[1:] if scope == LOCAL_THREAD else tuple(buf.shape)  # this thread's row
            new = T.alloc_buffer(shape, str(buf.dtype), scope="local")
            IRBuilder.name(buf.name, new)
            self.locals[buf] = new
            return
        raise self.lines.locate(LoweringError(f"buffer {buf.name} in scope {scope} is not supported"),
                                buffer_name=buf.name)

    def touches_shared(self, stmt):
        reads, writes = buffers_touched(stmt)
        shared = self.plan.shared
        return any(b in shared for b in reads), any(b in shared for b in writes)

    def emit_seq(self, stmts):
        """Emit statements in order, with a CTA barrier wherever shared memory written (or read) by one
        statement is read (or written) by a later one. Where `late_waits` says so, a wgmma T.gemm is waited
        for only before the first later statement that needs it (`LateWaits`)."""
        if self.scope.thread_code:
            for s in stmts:
                self.emit(s)
            return
        late = LateWaits(self) if self.late_waits() else None
        pending_write = pending_read = False
        global_writes: set = set()  # global tensors written since the last barrier
        for s in stmts:
            if self.issued_ahead(s):
                continue  # no barrier for what it writes here
            if isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer, tirx.Bind)):
                self.emit(s)
                continue
            if isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent":
                # A T.Kernel of a function with several: its launch orders it after the one before, and a
                # barrier here would be host code (TVM refuses a device call there)
                self.emit(s)
                pending_write = pending_read = False
                continue
            if late is not None:
                late.before(s)
            r, w = self.touches_shared(s)
            reads, writes = buffers_touched(s)
            # a global tensor read after a statement wrote it: another thread may have written the element
            reads_global_written = any(b in global_writes for b in reads)
            if (pending_write and (r or w)) or (pending_read and w) or reads_global_written:
                if late is not None:
                    # after the barrier another warpgroup may write a tile this one's group still reads
                    late.drain()
                self.sync()
                pending_write = pending_read = False
                global_writes.clear()
            if late is not None and late.takes(s):
                with self.scoped(mma_deferred=True):
                    self.emit(s)
                late.issued(s)
            else:
                self.emit(s)
            pending_write |= w
            pending_read |= r
            # (not a block-level store: every thread writes the same value, or thread 0 between two barriers
            # when it reads what it writes, _block_level_update)
            if not isinstance(s, tirx.BufferStore):
                global_writes.update(b for b in writes if scope_of(b) == "global")
        if late is not None:
            late.drain()

    def late_waits(self) -> bool:
        """Whether this block's wgmma T.gemm may be waited for late: the option is on, the kernel issues no
        TMA loads (their loops have their own schedule: tma.py), and no enclosing schedule already decides
        the gemm's waits."""
        sc = self.scope
        return (self.plan.uses_wgmma and self.plan.options.wgmma_late_wait and self.plan.tma is None
                and not (sc.mma_in_flight or sc.mma_deferred or sc.pingpong))

    def needs_consumer_guard(self, stmt) -> bool:
        tma = self.plan.tma
        if tma is None or tma.producer_threads == 0 or self.scope.consumer or self.tx is None:
            return False
        if isinstance(stmt, (tirx.SeqStmt, tirx.AttrStmt, tirx.AllocBuffer, tirx.DeclBuffer, tirx.Bind)):
            return False
        return not stmt.same_as(tma.loop)

    def sync(self):
        """A barrier over the threads that run block-level code (all of them, or the consumers of a
        warp-specialized kernel). A wgmma operand tile written by ordinary stores before it is fenced first
        (`fence.proxy.async`): a wgmma after the barrier reads it through the async proxy, and without the
        fence may read what the tile held before (seen on the H200: the backward attention kernel's dK took an
        earlier query block's dS)."""
        if self.unfenced_shared_writes:
            self.fence_shared_writes()
        if self.plan.tma is None:
            T.evaluate(intrin.cta_sync())
            return
        if self.scope.consumer:
            T.evaluate(intrin.named_barrier(self.threads))
        else:
            with T.If(self.is_consumer()), T.Then():
                T.evaluate(intrin.named_barrier(self.threads))

    def is_consumer(self):
        """The condition "this thread is one of the kernel's own (not the TMA producer's)", decided per warp
        from lane 0's thread index, so that ptxas sees branches on it as warp-uniform (tma.py)."""
        return (self.warp_tx if self.warp_tx is not None else self.tx) < self.threads

    def commit_copies(self):
        """cp.async.commit_group; nothing where the copies are plain loads and stores (sm_75: no cp.async)."""
        if self.caps.cp_async:
            T.evaluate(intrin.cp_async_commit())

    def async_copies_landed(self, pending: int):
        """cp.async.wait_group, plus the proxy fence wgmma needs to see data written by the generic proxy.
        Without cp.async each copy has completed in its thread already: the barrier after this suffices."""
        if self.caps.cp_async:
            T.evaluate(intrin.cp_async_wait(pending))
        if self.plan.uses_wgmma:
            self.fence_shared_writes()

    def _block_level_update(self, stmt) -> bool:
        """`X[i] = f(X[...])` outside T.Parallel on shared or global memory (not a plain copy
        `X[0] = X[n - 1]`, where every thread writes the value it read, or rewrites the element unchanged)."""
        buf = stmt.buffer
        if self.scope.thread_code or buf in self.registers or buf in self.locals:
            return False
        if isinstance(stmt.value, tvm.ir.TensorLoad):           # a BufferLoad: a plain copy
            return False
        loads = []
        walk_loads(stmt.value, loads.append)
        if not any(ld.source.same_as(buf) for ld in loads):
            return False
        if self.tx is None:
            raise LoweringError(
                f"{buf.name} is read and written by one block-level statement, and this kernel has no thread "
                "index to choose the one thread that should run it",
                hint=f"use T.atomic_add({buf.name}[...], value) for a sum, or a kernel variable "
                     "(T.alloc_var)",
            )
        return True

    def note_operand_write(self, buf):
        """Before a statement that writes `buf`: a wgmma operand stored to by ordinary stores needs the proxy
        fence at the next barrier (a copy that lands by cp.async fences itself in `async_copies_landed`)."""
        if buf is not None and buf in self.wgmma_operands:
            self.unfenced_shared_writes = True

    def fence_shared_writes(self):
        """`fence.proxy.async.shared::cta`: this thread's shared-memory stores become visible to the async
        proxy (wgmma operands, TMA stores) once a barrier orders them."""
        T.evaluate(intrin.fence_proxy_async())
        self.unfenced_shared_writes = False

    def round_accumulator(self, buf):
        """docs/IR.md's accumulation rule: a T.gemm accumulates in float32 and its result is rounded to the
        accumulator's dtype, as the interpreter does: a float16 C holds float16
        values between T.gemm calls."""
        if str(buf.dtype) == accumulator_register_dtype(buf):
            return
        acc = self.registers[buf]
        with T.unroll(0, self.plan.layout(buf).regs) as r:
            T.buffer_store(
                acc, tirx.Cast("float32", tirx.Cast(str(buf.dtype), tirx.BufferLoad(acc, [r]))), [r]
            )


def _gemm_operands(func) -> frozenset:
    """The A and B tiles of every T.gemm in the kernel (the shared ones are what wgmma reads)."""
    operands = set()
    for s in iter_stmts(func.body):
        if isinstance(s, tirx.TilePrimitiveCall) and s.op.name == "tirx.tile.gemm":
            regions = [a for a in s.args if isinstance(a, tvm.ir.expr.TensorRegion)]
            operands.update(r.source for r in regions[1:3])
    return frozenset(operands)


class LateWaits:
    """The wgmma groups of one statement block still in flight, waited for late: before the first later
    statement that reads or writes a group's accumulator, writes its register A operand or its shared operand
    tiles, or is compound (a loop or branch: its statements are not tracked one by one); before the block's
    next barrier; and at its end (an enclosing loop's next iteration refills the stages they read). Groups
    complete in order, so waiting for one waits for every older one: `wait_group n` with n the younger
    groups that may stay in flight. The tensor cores run a group while the statements between run (a
    backward attention's dV while its dS is computed, its dK while dQ is added to memory)."""

    def __init__(self, em):
        self.em = em
        self.groups: list = []  # in issue order: (the T.gemm call, buffers the statements after must spare)

    def takes(self, stmt) -> bool:
        from ..analysis.mma import GemmKind

        return (isinstance(stmt, tirx.TilePrimitiveCall) and stmt.op.name == "tirx.tile.gemm"
                and self.em.plan.gemms.get(stmt) is GemmKind.WGMMA
                and str(stmt.args[0].source.dtype) == accumulator_register_dtype(stmt.args[0].source))

    def issued(self, call) -> None:
        self.groups.append((call, [region_of(call.args[i])[0] for i in range(3)]))  # C, A, B

    def before(self, stmt) -> None:
        if not self.groups:
            return
        parallel = isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.PARALLEL  # per-thread code
        if not (parallel or isinstance(stmt, (tirx.TilePrimitiveCall, tirx.BufferStore, tirx.Evaluate))):
            self.drain()
            return
        reads, writes = buffers_touched(stmt)
        youngest = -1
        for i, (_, (acc, a, b)) in enumerate(self.groups):
            if any(x.same_as(acc) for x in (*reads, *writes)) or any(
                    x.same_as(a) or x.same_as(b) for x in writes):
                youngest = i
        if youngest >= 0:
            self._wait(youngest)

    def drain(self) -> None:
        if self.groups:
            self._wait(len(self.groups) - 1)

    def _wait(self, youngest: int) -> None:
        from .wgmma import wait_for_gemm

        pending = len(self.groups) - 1 - youngest
        for call, _ in self.groups[: youngest + 1]:
            wait_for_gemm(self.em, call, pending)
        del self.groups[: youngest + 1]

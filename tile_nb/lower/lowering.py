"""The lowering driver: phase-2 tile IR (docs/IR.md) -> thread-level TIRx for `tvm.compile(..., "tirx")`.

Passes, in order (each reads the result of the one before):
1. `analyze`: find every buffer's role and choose layouts (layout inference):
   - the C operand of `T.gemm` -> registers: `WgmmaAccLayout` (Hopper wgmma, sm_90a, when the tile fits;
     wgmma.py) or `MmaAccLayout` (mma.sync m16n8k16, gemm.py); its A/B shared tiles -> swizzled `SharedTile`s
     (wgmma's B stored [K, N]: 64-column panels);
   - shared tiles written by copies inside `T.Pipelined(num_stages=s)` -> `s` stages;
   - other `local.fragment` buffers -> backed by shared memory (correct for any access pattern; see elementwise.py);
   - every shared tile -> a byte range in the CTA's single dynamic shared-memory pool (TVM allows one
     `shared.dyn` allocation per kernel; the runtime raises the 48 KB limit from the launch parameter).
2. `emit`: re-emit the body through TVM's IR builder, replacing each tile op by thread-level code (op lowerings
   live in copy.py, gemm.py, elementwise.py; the pipelined loop in pipeline.py) and inserting CTA barriers
   between statements that touch shared memory (`needs_sync`).
"""
from __future__ import annotations

import tvm
import tvm.sym
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T
from tvm.tirx.script.builder import ir as _ir

from . import intrin
from .budget import check_registers, check_shared, layout_pool
from .diagnostics import SourceLines
from .errors import LoweringError
from .exprs import rewrite
from .irwalk import buffers_touched, iter_stmts, region_of, scope_of, seq_items  # noqa: F401 (re-exported)
from .layout import MmaAccLayout, SharedTile, tirx_bits
from .schedule import schedule_pipeline
from .wgmma import WgmmaAccLayout, fence_proxy_async, wgmma_eligible

__all__ = ["TILE_OPS", "Lowerer", "LoweringError", "register_tile_op"]

# op name (as `T.tile.<name>` prints) -> lowering function(lowerer, call)
TILE_OPS: dict = {}


def register_tile_op(name: str):
    def deco(fn):
        TILE_OPS["tirx.tile." + name] = fn
        return fn

    return deco


class Lowerer:
    """State of one lowering: layouts, the shared pool, variable maps; `run()` returns the new PrimFunc."""

    def __init__(self, func: tirx.PrimFunc, target):
        self.func = func
        self.target = target
        self.lines = SourceLines(func)
        self.threads = None
        attrs = func.attrs or {}
        if "tile_nb.threads" in attrs:
            self.threads = int(attrs["tile_nb.threads"])
        self.tx = None
        self.shared: dict = {}  # tile IR buffer -> SharedTile (shared.dyn and shared-backed fragments)
        self.frags: dict = {}  # tile IR buffer -> MmaAccLayout (register fragments)
        self.locals: dict = {}  # tile IR local/local.var buffer -> emitted buffer
        self.var_map: dict = {}  # tile IR var -> expression in the emitted code
        self.stage: dict = {}  # shared buffer -> stage index expression (inside a pipelined loop)
        self.frag_reg: dict = {}  # fragment -> (indices, register index) inside a fragment-driven loop
        self.pool = None
        self.pool_bytes = 0
        self.analyzer = tvm.sym.Analyzer()
        self.gemm_operands: set = set()
        self.panel_operands: set = set()  # wgmma B operands stored [K, N]
        self.block_vars: dict = {}  # "blockIdx.x" -> (var, extent)
        self.scratch: dict = {}  # reduce call on a register fragment -> SharedTile scratch
        self.pipelined_stages: dict = {}  # shared tile -> stages of the pipeline prefetching into it
        self.schedules: dict = {}  # T.Pipelined loop -> PipelineSchedule (schedule.py)
        self.in_thread_code = False
        self.after_pipeline: list = []  # callbacks emitted right after a pipelined loop
        self.in_pipeline_stages = 0  # num_stages of the pipelined loop being emitted (0: none)
        # Warp-specialized TMA pipeline (tma.py): the plan, or None and the reason in `pipeline_note`.
        self.tma = None
        self.pipeline_note = ""
        self.in_consumer = False  # emitting code that only the consumer threads run
        self.ws_loop_active = False  # inside the consumer loop of the TMA pipeline

    # ---- pass 1: layout inference and pool layout -------------------------------------------------
    def analyze(self):
        allocs = {}
        for s in iter_stmts(self.func.body):
            try:
                self._analyze_stmt(s, allocs)
            except LoweringError as err:
                raise self.lines.locate(err, s) from None
        self._analyze_buffers(allocs)

    def _analyze_stmt(self, s, allocs):
        if isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent":
            if s.node.thread_tag == "threadIdx.x" and self.threads is None:
                self.threads = int(s.value)
            if s.node.thread_tag.startswith("blockIdx."):
                self.block_vars[s.node.thread_tag] = (s.node.var, s.value)
        if isinstance(s, tirx.AllocBuffer):
            allocs[s.buffer] = s.buffer
        if isinstance(s, tirx.TilePrimitiveCall) and s.op.name == "tirx.tile.gemm":
            c, a, b = (region_of(s.args[i])[0] for i in range(3))
            if scope_of(c) != "local.fragment":
                raise LoweringError(f"T.gemm: the accumulator {c.name} must be a fragment (alloc_fragment), "
                                    f"got scope {scope_of(c)}")
            if c not in self.frags:
                if self.wgmma_enabled() and wgmma_eligible(self.target, s, self.threads):
                    self.frags[c] = WgmmaAccLayout(int(c.shape[0]), int(c.shape[1]), self.threads // 128)
                    if not bool(s.args[5]):
                        self.panel_operands.add(b)
                else:
                    self.frags[c] = MmaAccLayout(int(c.shape[0]), int(c.shape[1]), self.threads // 32)
            # A fragment operand (e.g. FlashAttention's probabilities) is fine as long as it is not itself
            # a register accumulator: other fragments are backed by shared memory (checked below).
            for op in (a, b):
                if scope_of(op) not in ("shared.dyn", "local.fragment"):
                    raise LoweringError(
                        f"T.gemm: operand {op.name} in scope {scope_of(op)} is not supported; "
                        f"A and B must be shared tiles (alloc_shared) or fragments")
                self.gemm_operands.add(op)
        if isinstance(s, tirx.For) and "num_stages" in (s.annotations or {}):
            schedule = self.schedules[s] = schedule_pipeline(s)
            for copy in schedule.prefetched:
                self.pipelined_stages[region_of(copy.args[0])[0]] = schedule.stages

    def _analyze_buffers(self, allocs):
        for s in iter_stmts(self.func.body):
            if isinstance(s, tirx.TilePrimitiveCall) and s.op.name in ("tirx.tile.sum", "tirx.tile.max",
                                                                       "tirx.tile.min"):
                src = region_of(s.args[1])[0]
                if src in self.frags:
                    lay = self.frags[src]
                    self.scratch[s] = SharedTile(src, (lay.bm, lay.bn), "float32")
        for op in self.gemm_operands:
            if op in self.frags:
                raise LoweringError(
                    f"T.gemm: operand {op.name} is itself a T.gemm accumulator (held in registers); copy it to "
                    f"another fragment or shared tile (T.copy) before using it as A or B")
        for buf in allocs:
            scope = scope_of(buf)
            if scope == "shared.dyn" or scope == "shared" or (scope == "local.fragment" and buf not in self.frags):
                tile = SharedTile(buf, tuple(int(x) for x in buf.shape), str(buf.dtype))
                tile.swizzle = buf in self.gemm_operands and tile.can_swizzle()
                tile.panel = buf in self.panel_operands
                tile.stages = self.pipelined_stages.get(buf, 1)
                self.shared[buf] = tile
        if self.pipelined_stages:
            from .tma import plan_tma

            self.tma, self.pipeline_note = plan_tma(self)
        self.layout_pool()
        kept = [note for sched in self.schedules.values() for note in sched.notes]
        if kept and self.tma is None:
            self.pipeline_note = "; ".join(([self.pipeline_note] if self.pipeline_note else []) + kept)

    def aligned(self, buf) -> bool:
        """Whether a global tensor's data pointer is 16-byte aligned: true unless the call said otherwise
        (`tile_nb.unaligned`, set per call by the JIT; such calls get their own kernel)."""
        unaligned = (self.func.attrs or {}).get("tile_nb.unaligned", None)
        return unaligned is None or buf.name not in [str(n) for n in unaligned]

    def wgmma_enabled(self) -> bool:
        import os

        attr = (self.func.attrs or {}).get("tile_nb.wgmma", None)
        if attr is not None:
            return bool(int(attr))
        return os.environ.get("TILE_NB_WGMMA", "1") != "0"

    def wgmma_overlap(self) -> bool:
        """Keep one wgmma group in flight across k-tiles (attribute `tile_nb.wgmma_overlap`)."""
        return (self.uses_wgmma and bool(int((self.func.attrs or {}).get("tile_nb.wgmma_overlap", 0)))
                and all(str(buf.dtype) == "float32" for buf in self.frags))

    def round_accumulator(self, buf):
        """docs/IR.md's accumulation rule: a T.gemm accumulates in float32 and its result is rounded to the
        accumulator's dtype, as the interpreter does: a float16 C holds float16 values between T.gemm calls."""
        if str(buf.dtype) == "float32":
            return
        acc = self.frags[buf].local
        with T.unroll(0, self.frags[buf].regs) as r:
            T.buffer_store(acc, tirx.Cast("float32", tirx.Cast(str(buf.dtype), tirx.BufferLoad(acc, [r]))), [r])

    @property
    def uses_wgmma(self) -> bool:
        return any(isinstance(l, WgmmaAccLayout) for l in self.frags.values())

    def async_copies_landed(self, pending: int):
        """cp.async.wait_group, plus the proxy fence wgmma needs to see data written by the generic proxy."""
        T.evaluate(intrin.cp_async_wait(pending))
        if self.uses_wgmma:
            T.evaluate(fence_proxy_async())


    def layout_pool(self):
        """Offsets of the shared tiles (and the TMA barriers) in the pool; checks the block's budgets."""
        tiles = list(self.shared.values()) + list(self.scratch.values())
        offset = layout_pool(tiles)
        if self.tma is not None:
            offset = (offset + 7) // 8 * 8
            self.tma.barrier_offset = offset
            offset += 16 * self.tma.stages  # full[s] and empty[s], 8 bytes each
        self.pool_bytes = offset
        arch = str(self.target.attrs.get("arch", "sm_90a")) if self.target is not None else "sm_90a"
        check_shared(tiles, offset, arch, self.lines)
        check_registers(self.frags, self.lines)

    def emit_pool(self):
        """One uint8 `shared.dyn` allocation; each shared tile is a DeclBuffer view at its offset."""
        if not self.shared and not self.scratch:
            return
        self.pool = T.alloc_buffer((self.pool_bytes,), "uint8", scope="shared.dyn")
        IRBuilder.name("smem_pool", self.pool)
        for tile in list(self.shared.values()) + list(self.scratch.values()):
            view = T.decl_buffer((tile.elems * tile.stages,), tile.dtype, data=self.pool.data,
                                 byte_offset=tile.byte_offset, scope="shared.dyn")
            IRBuilder.name(tile.buffer.name, view)
            tile.view = view

    def emit_raster(self):
        """Grouped CTA order for GEMM kernels (L2 reuse): consecutive CTAs walk `group` tiles down x before
        moving along y, so the CTAs resident at once share A row-tiles and B column-tiles.

        Legal because CTAs of one launch are independent: only which CTA computes which (bx, by) changes.
        Off with `TILE_NB_RASTER=0` or the function attribute `tile_nb.raster_group = 0`.
        """
        import os

        group = int((self.func.attrs or {}).get("tile_nb.raster_group", os.environ.get("TILE_NB_RASTER", "8")))
        if group <= 1 or not self.frags or set(self.block_vars) != {"blockIdx.x", "blockIdx.y"}:
            return
        (bx, gx), (by, gy) = self.block_vars["blockIdx.x"], self.block_vars["blockIdx.y"]
        if not (isinstance(gx, tvm.ir.prim.expr.IntImm) and isinstance(gy, tvm.ir.prim.expr.IntImm)):
            return
        gx, gy = int(gx), int(gy)
        group = min(group, gx)
        if gx % group or gy < 2:
            return  # keep the index math a few shifts: only whole groups
        lin = by * gx + bx
        per_group = group * gy
        gid, rem = tirx.floordiv(lin, per_group), tirx.floormod(lin, per_group)
        new_bx = T.Bind(gid * group + tirx.floormod(rem, group))
        IRBuilder.name("bx_raster", new_bx)
        new_by = T.Bind(tirx.floordiv(rem, group))
        IRBuilder.name("by_raster", new_by)
        self.var_map[bx], self.var_map[by] = new_bx, new_by
        self.analyzer.bind(new_bx, tvm.ir.Range(0, gx))
        self.analyzer.bind(new_by, tvm.ir.Range(0, gy))

    # ---- buffer access --------------------------------------------------------------------------
    def load(self, buf, indices):
        if buf in self.shared:
            tile = self.shared[buf]
            return tirx.BufferLoad(tile.view, [tile.offset(indices, self.stage.get(buf))])
        if buf in self.frags:
            # Accumulators are held in float32 whatever the declared dtype (a fp16 `C_local` accumulates in
            # fp32 registers: more accurate, and what mma.sync f32 gives); reads see the declared dtype.
            value = tirx.BufferLoad(self.frags[buf].local, [self.frag_index(buf, indices)])
            return value if str(buf.dtype) == "float32" else tirx.Cast(str(buf.dtype), value)
        if buf in self.locals:
            return tirx.BufferLoad(self.locals[buf], list(indices))
        return tirx.BufferLoad(buf, list(indices))

    def store(self, buf, indices, value):
        if buf in self.shared:
            tile = self.shared[buf]
            T.buffer_store(tile.view, value, [tile.offset(indices, self.stage.get(buf))])
        elif buf in self.frags:
            if str(value.ty) != "float32":
                value = tirx.Cast("float32", value)
            T.buffer_store(self.frags[buf].local, value, [self.frag_index(buf, indices)])
        elif buf in self.locals:
            T.buffer_store(self.locals[buf], value, list(indices))
        else:
            T.buffer_store(buf, value, list(indices))

    def frag_index(self, buf, indices):
        """Register index of a fragment element; valid only where a loop runs over this fragment's registers."""
        if buf in self.frag_reg:
            expect, reg = self.frag_reg[buf]
            if all(tvm_ffi.structural_equal(a, b) for a, b in zip(expect, indices)):
                return reg
        raise LoweringError(
            f"fragment {buf.name} (a T.gemm accumulator, held in registers) is accessed at "
            f"[{', '.join(str(i) for i in indices)}]; inside T.Parallel it must be indexed by the loop "
            f"variables in order")

    def expr(self, e):
        """Rewrite a tile-IR expression for the emitted code (vars, buffer accesses)."""
        return rewrite(e, self.var_map, lambda ld, idx: self.load(ld.source, idx))

    def prove(self, cond) -> bool:
        return bool(self.analyzer.can_prove(cond))

    def bind_range(self, var, extent):
        self.analyzer.bind(var, tvm.ir.Range(0, extent))

    # ---- pass 2: emission -------------------------------------------------------------------------
    def run(self) -> tirx.PrimFunc:
        self.analyze()
        if self.threads is None:
            raise LoweringError("the kernel has no threadIdx.x launch (T.Kernel(..., threads=...))")
        with IRBuilder() as ib, T.prim_func():
            T.func_name("tile_nb_lowered")
            self.emit(self.func.body)
        body = ib.get().body
        func = self.func.with_body(body)
        if self.pipeline_note:
            func = func.with_attr("tile_nb.pipeline", self.pipeline_note)
        return func

    def emit(self, stmt):
        if self.needs_consumer_guard(stmt):
            # Warp-specialized kernels: the producer warp runs only its loads (tma.py).
            self.in_consumer = True
            with T.If(self.tx < self.threads), T.Then():
                self.emit(stmt)
            self.in_consumer = False
            return
        if isinstance(stmt, tirx.SeqStmt):
            self.emit_seq(list(stmt.seq))
        elif isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent":
            from . import tma

            extent = stmt.value
            if self.tma is not None and stmt.node.thread_tag == "threadIdx.x":
                extent = extent + tma.PRODUCER_THREADS
            if self.tma is not None and self.tma.copies[0].tensor_map is None:
                tma.emit_tensor_maps(self.tma)  # host code: before the first launch dimension
            self.bind_range(stmt.node.var, extent)
            with T.attr(stmt.node, "thread_extent", extent):
                if stmt.node.thread_tag == "threadIdx.x":
                    self.tx = stmt.node.var
                    self.emit_pool()
                    self.emit_raster()
                    if self.tma is not None:
                        tma.emit_barrier_init(self, self.tma)
                self.emit(stmt.body)
        elif self.tma is not None and stmt.same_as(self.tma.loop):
            from .tma import emit_ws_loop

            emit_ws_loop(self, self.tma)
        elif isinstance(stmt, tirx.AttrStmt):
            with T.attr(stmt.node, stmt.attr_key, self.expr(stmt.value)):
                self.emit(stmt.body)
        elif isinstance(stmt, tirx.AllocBuffer):
            self.emit_alloc(stmt.buffer)
        elif isinstance(stmt, tirx.TilePrimitiveCall):
            fn = TILE_OPS.get(stmt.op.name)
            if fn is None:
                raise LoweringError(f"tile op {stmt.op.name} has no CUDA lowering in tile_nb yet")
            try:
                fn(self, stmt)
            except LoweringError as err:
                raise self.lines.locate(err, stmt) from None
        elif isinstance(stmt, tirx.For):
            from .loops import emit_for

            emit_for(self, stmt)
        elif isinstance(stmt, tirx.BufferStore):
            self.store(stmt.buffer, [self.expr(i) for i in stmt.indices], self.expr(stmt.value))
        elif isinstance(stmt, tirx.Evaluate):
            T.evaluate(self.expr(stmt.value))
        elif isinstance(stmt, tirx.IfThenElse):
            with T.If(self.expr(stmt.condition)):
                with T.Then():
                    self.emit(stmt.then_case)
                if stmt.else_case is not None:
                    with T.Else():
                        self.emit(stmt.else_case)
        elif isinstance(stmt, tirx.Bind):
            self.var_map[stmt.var] = T.Bind(self.expr(stmt.value))
        elif isinstance(stmt, tirx.DeclBuffer):
            _ir.add_to_parent(stmt)
        else:
            raise LoweringError(f"statement {type(stmt).__name__} is not supported by the lowering:\n{stmt}")

    def emit_alloc(self, buf):
        scope = scope_of(buf)
        if buf in self.shared:
            return  # a view in the pool, declared at kernel entry
        if buf in self.frags:
            lay = self.frags[buf]
            lay.local = T.alloc_buffer((lay.regs,), "float32", scope="local")
            IRBuilder.name(buf.name, lay.local)
            return
        if scope in ("local", "local.var"):
            new = T.alloc_buffer(tuple(buf.shape), str(buf.dtype), scope="local")
            IRBuilder.name(buf.name, new)
            self.locals[buf] = new
            return
        raise LoweringError(f"buffer {buf.name} in scope {scope} is not supported")

    def touches_shared(self, stmt):
        reads, writes = buffers_touched(stmt)
        return any(b in self.shared for b in reads), any(b in self.shared for b in writes)

    def emit_seq(self, stmts):
        """Emit statements in order, with a CTA barrier wherever shared memory written (or read) by one
        statement is read (or written) by a later one."""
        if self.in_thread_code:
            for s in stmts:
                self.emit(s)
            return
        pending_write = pending_read = False
        for s in stmts:
            if isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer, tirx.Bind)):
                self.emit(s)
                continue
            r, w = self.touches_shared(s)
            if (pending_write and (r or w)) or (pending_read and w):
                self.sync()
                pending_write = pending_read = False
            self.emit(s)
            pending_write |= w
            pending_read |= r

    def needs_consumer_guard(self, stmt) -> bool:
        if self.tma is None or self.in_consumer or self.tx is None:
            return False
        if isinstance(stmt, (tirx.SeqStmt, tirx.AttrStmt, tirx.AllocBuffer, tirx.DeclBuffer, tirx.Bind)):
            return False
        return not stmt.same_as(self.tma.loop)

    def sync(self):
        if self.tma is None:
            T.evaluate(intrin.cta_sync())
            return
        from .tma import named_barrier

        if self.in_consumer:
            T.evaluate(named_barrier(self.threads))
        else:
            with T.If(self.tx < self.threads), T.Then():
                T.evaluate(named_barrier(self.threads))


def dtype_bits(dtype) -> int:
    return tirx_bits(dtype)

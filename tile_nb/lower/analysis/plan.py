"""The lowering plan: every decision about a kernel, made before any code is
emitted, kept as one frozen object.

`make_plan(func, target)` runs the analyses in order:
1. the launch: threads per block and the grid;
2. the MMA of each `T.gemm` (wgmma on sm_90a where the tile fits, mma.sync otherwise; wgmma.py, gemm.py; FMAs
   on the CUDA cores for float32 / float64 and 8-bit inputs off wgmma, fma_gemm.py) and the register layout of
   its accumulator;
3. the schedule of each `T.Pipelined` loop (schedule.py: which copies may be issued ahead);
4. layout inference for the other fragments (infer.py: registers, or shared memory with the reason);
5. the shared tiles (swizzled for the tensor cores, one copy per pipeline
   stage) and the reductions' workspaces;
6. the warp-specialized TMA pipeline where it applies (tma.py), or why not; over it, persistent CTAs
   (persistent.py) and the TMA-store epilogue with its staging tile (epilogue.py);
7. the shared-memory pool and the budgets (budget.py).
The emitters (emitter.py and the op modules) read the plan and never decide anything the plan holds; the
compiled kernel keeps `plan.summary()`, which the notebook view renders.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from types import MappingProxyType

import tvm
import tvm.sym
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from ..diagnostics import SourceLines
from ..errors import LoweringError
from ..irwalk import buffers_touched, iter_stmts, region_of, scope_of, seq_items, tile_calls
from ..options import LoweringOptions
from .arch import ArchCaps
from .arch_rules import check_target
from .bounds import check_static_bounds
from .budget import (
    MAX_REGISTERS_PER_THREAD,
    WGMMA_HEADROOM,
    check_registers,
    check_shared,
    layout_pool,
    layout_pool_reusing,
    max_shared_bytes,
    packed_registers,
    spill_note,
)
from .cluster import describe_multicast
from .decisions import TWO_CTAS_PER_SM, GemmKind, PipelineKind, Refusal
from .epilogue import TmaStore, describe_store, plan_tma_store
from .fragments import FragmentLayout
from .global_layouts import global_layouts
from .infer import FragmentPlan, infer_layouts, layout_groups, rows_coupled
from .layout import (
    MmaAccLayout,
    SharedTile,
    WgmmaAccLayout,
    accumulator_register_dtype,
    common_warps_along_m,
    tirx_bits,
)
from .mma import (
    eight_bit_fma_reason,
    eight_bit_gemm,
    fma_gemm,
    gemm_k,
    gemm_kind,
    is_tf32,
    narrow_b,
    read_as_panels,
    wgmma_eligible,
    wgmma_refusal,
    wgmma_register_a_ok,
    wgmma_split,
)
from .persistent import Persistent, describe_persistent, plan_persistent
from .reduction_dtypes import reduction_dtype
from .schedule import buffers_used_after, prefetched_tile, schedule_pipeline
from .stream_k import StreamK, describe_stream_k
from .tma import TmaPlan, describe_tma, plan_tma

__all__ = ["FunctionPlan", "KernelPlan", "PlanFacts", "make_plan", "render_pipeline_note"]

_REDUCTIONS = ("tirx.tile.sum", "tirx.tile.max", "tirx.tile.min")


@dataclass(frozen=True)
class PlanFacts:
    """What the analyses before the TMA choice decided (launch, MMAs, layouts, shared tiles, schedules): the
    input of plan_tma, and the first fields of the KernelPlan. Mappings are read-only (MappingProxyType)."""

    name: str
    arch: str
    threads: int
    grid: Mapping  # "blockIdx.x" -> (var, extent)
    accumulators: Mapping  # T.gemm C buffer -> MmaAccLayout | WgmmaAccLayout
    gemms: Mapping  # T.gemm call -> decisions.GemmKind (the instruction it runs on: mma.gemm_kind)
    fragments: FragmentPlan
    shared: Mapping  # buffer -> SharedTile, offsets assigned (shared tiles and shared-memory fragments)
    workspaces: Mapping  # reduction call -> SharedTile (cross-warp partial results)
    pipelines: Mapping  # T.Pipelined For -> schedule.PipelineSchedule (its `stages`: what num_stages became)
    unaligned: frozenset  # names of tensor params whose data pointer is not 16-byte aligned in this call
    # global tensors the kernel declares (T.Tensor(shape, dtype, A.data) views, T.make_tensor(table[i],
    # ...)) -> what each is: no tensor map can be encoded for them on the host
    declared_in_kernel: Mapping
    divisible: frozenset  # names of T.dynamic dims that are multiples of 16 in this call (checked by the JIT)
    packed: frozenset  # 16-bit register fragments held two to a register (wgmma's register A)
    options: LoweringOptions  # what the plan was made under (options.resolve)
    # the kernel calls T.sync_grid: launched cooperatively (every CTA resident at once; backend/pipeline.py)
    cooperative_launch: bool

    # ---- queries the emitters use --------------------------------------------------------------------------
    def layout(self, buf) -> FragmentLayout | None:
        """The register layout of a fragment held in registers (accumulators included), else None."""
        acc = self.accumulators.get(buf)
        if acc is not None:
            return acc.linear()
        return self.fragments.layout(buf)

    def register_layouts(self) -> dict:
        """Every fragment held in registers (the T.gemm accumulators included) -> its layout."""
        return {b: a.linear() for b, a in self.accumulators.items()} | dict(self.fragments.layouts)

    @property
    def fragment_registers(self) -> int:
        """32-bit registers per thread that the register fragments (accumulators included) take."""
        return sum(packed_registers(b, lay, self.packed) for b, lay in self.register_layouts().items())

    def in_registers(self, buf) -> bool:
        return buf in self.accumulators or self.fragments.layout(buf) is not None

    def aligned(self, buf) -> bool:
        """Whether a global tensor's data pointer is 16-byte aligned (true unless the call said otherwise)."""
        return buf.name not in self.unaligned

    @property
    def uses_wgmma(self) -> bool:
        return any(isinstance(a, WgmmaAccLayout) for a in self.accumulators.values())


@dataclass(frozen=True)
class KernelPlan(PlanFacts):
    """What the lowering decided for one phase-2 PrimFunc: built once, read-only; every decision is a field
    (`pipeline_note` renders them for people)."""

    tma: TmaPlan | None  # the warp-specialized TMA pipeline (its producer_warp, stages, overlap, ...)
    persistent: Persistent | None  # one CTA per SM walks the grid's tiles (its stream_k, multicast)
    tma_store: TmaStore | None  # the accumulator leaves through shared memory and TMA stores
    refusals: tuple  # Refusal(code, text) of the analyses that declined (decisions.py), in the note's order
    pool_bytes: int
    barrier_offset: int  # bytes into the pool of the TMA stage barriers (tma.TmaPlan.barrier_count)
    producer_threads: int  # threads launched besides the kernel's own (the TMA pipeline's producer warp)
    raster_group: int  # CTA grouping of GEMM grids (1: none)
    # CTAs the plan counts on sharing an SM: ptxas keeps the registers to that (launch bounds)
    ctas_per_sm: int
    # >0: CTAs launched heaviest first, in groups of this many (y, z) rows (_heavy_first); 0: no
    heavy_first: int
    wgmma_overlap: bool  # keep one wgmma group in flight across k-tiles of a cp.async pipeline
    notes: tuple = ()
    # GlobalLayout of each tensor parameter with a hand layout: the call permutes it around the launch
    global_layouts: tuple = ()
    # (later tile, earlier tile) names of shared tiles given the same bytes because their uses do not overlap
    # (only where the pool would not fit otherwise: _reusable_lives)
    shared_reuse: tuple = ()

    # ---- decisions, as fields for code --------------------------------------------------------------------
    @property
    def pipeline_kind(self) -> PipelineKind | None:
        """How the pipelined loops run: TMA, cp.async, or None without a T.Pipelined loop."""
        return PipelineKind.TMA if self.tma is not None else PipelineKind.CP_ASYNC if self.pipelines else None

    @property
    def stream_k(self) -> StreamK | None:
        return self.persistent.stream_k if self.persistent is not None else None

    @property
    def launch_threads(self) -> int:
        """Threads per block as launched: the kernel's and the producer warp's."""
        return self.threads + self.producer_threads

    def refusal(self, area: str) -> Refusal | None:
        """What the analysis of `area` (decisions.AREAS) declined, when the plan says it."""
        return next((r for r in self.refusals if r.area == area), None)

    @property
    def pipeline_note(self) -> str:
        return render_pipeline_note(self)

    @property
    def all_notes(self) -> list:
        """The notes people read: the analyses' and one per hand layout of a parameter (whether the kernel
        addresses it or the call permutes it, which the lowering decides after the plan)."""
        return list(self.notes) + [g.note for g in self.global_layouts]

    def keeps_mma_in_flight(self, loop) -> bool:
        """Whether the T.gemm of this pipelined loop leaves one wgmma group in flight across
        iterations (the TMA pipeline, or the overlap variant of the cp.async one); the loop then
        drains it after its last iteration."""
        if self.tma is not None and loop.same_as(self.tma.loop):
            return self.tma.in_flight
        schedule = self.pipelines.get(loop)
        return (
            schedule is not None and schedule.stages >= 3 and bool(schedule.prefetched) and self.wgmma_overlap
        )

    # ---- what the compiled kernel keeps --------------------------------------------------------------------
    def summary(self) -> dict:
        """The plan as plain data (JSON-serializable): what the notebook view and the disk cache keep."""
        fragments = []
        for buf, acc in self.accumulators.items():
            kind = _mma_kind(acc, "mma.sync")
            fragments.append(
                {
                    "name": buf.name,
                    "shape": _shape(buf),
                    "dtype": str(buf.dtype),
                    "where": "registers",
                    "layout": f"T.gemm accumulator ({kind}): " + acc.linear().describe(),
                }
            )
        for buf, layout in self.fragments.layouts.items():
            if buf not in self.accumulators:
                fragments.append({"name": buf.name, "shape": _shape(buf), "dtype": str(buf.dtype),
                                  "where": "registers", "layout": layout.describe(),
                                  "picture": layout.picture(self.threads) if len(buf.shape) == 2 else ""})
        for buf, why in self.fragments.shared.items():
            fragments.append({"name": buf.name, "shape": _shape(buf), "dtype": str(buf.dtype),
                              "where": "shared memory", "layout": why})
        shared = [{"name": t.name or t.buffer.name, "bytes": t.nbytes, "offset": t.byte_offset,
                   "swizzle": t.swizzle or t.panel, "stages": t.stages}
                  for t in list(self.shared.values()) + list(self.workspaces.values())]
        pipelines = [{"loop": s.loop.loop_var.name, "stages": s.stages,
                      "prefetched": [prefetched_tile(c).name for c in s.prefetched], "in_order": s.notes,
                      "guarded": s.guards}
                     for s in self.pipelines.values()]
        sync_mma = "mma.sync m16n8k16" if ArchCaps.of(self.arch).mma_k16 else "mma.sync m16n8k8 (two per k16)"
        mma = [{"name": buf.name, "kind": _mma_kind(a, sync_mma),
                "tile": [a.bm, a.bn]} for buf, a in self.accumulators.items()]
        return {
            "arch": self.arch, "threads": self.threads, "fragments": fragments, "shared": shared,
            "shared_bytes": self.pool_bytes, "fragment_registers": self.fragment_registers,
            "mma": mma, "pipelines": pipelines, "pipeline": self.pipeline_note, "notes": self.all_notes,
            "assumes": [f"{n} % 16 == 0" for n in sorted(self.divisible)] +
                       [f"{n} not 16-byte aligned" for n in sorted(self.unaligned)],
            # the decisions as fields (code reads these, never the note)
            "pipeline_kind": self.pipeline_kind.value if self.pipeline_kind is not None else None,
            "producer_warp": self.tma.producer_warp if self.tma is not None else None,
            "softmax_overlap": self.tma is not None and self.tma.overlap is not None,
            "launch_threads": self.launch_threads, "ctas_per_sm": self.ctas_per_sm,
            "persistent_ctas": self.persistent.ctas if self.persistent is not None else None,
            "stream_k": self.stream_k is not None, "cluster": self.persistent.multicast.size
            if self.persistent is not None and self.persistent.multicast is not None else 0,
            "tma_store": self.tma_store is not None, "cooperative_launch": self.cooperative_launch,
            "refusals": [r.to_dict() for r in self.refusals],
            "options": self.options.changed(),
            "global_layouts": [g.to_dict() for g in self.global_layouts],
        }


def _mma_kind(acc, sync_mma: str) -> str:
    """Which path computes a T.gemm accumulator, for the plan's summary."""
    if isinstance(acc, WgmmaAccLayout):
        return "wgmma"
    if acc.tf32:
        return "mma.sync m16n8k8 tf32"
    return "fma (CUDA cores, exact products)" if acc.fma else sync_mma


def render_pipeline_note(plan: KernelPlan) -> str:
    """The plan's pipeline note, for people (the notebook view, `kernel.pipeline`): what the TMA, persistent,
    cluster, stream-K and epilogue analyses built, or why not, from the plan's fields."""
    said = {r.area: r.text for r in plan.refusals}
    first = describe_tma(plan.tma) if plan.tma is not None else said.get("tma", "")
    kept = [n for schedule in plan.pipelines.values() for n in schedule.notes]
    if kept and plan.tma is None:
        first = "; ".join(([first] if first else []) + kept)
    pp = plan.persistent
    if pp is not None:
        cluster = (
            describe_multicast(pp.multicast, plan.tma, plan.grid) if pp.multicast else said.get("cluster", "")
        )
        stream_k = describe_stream_k(pp.stream_k) if pp.stream_k else said.get("stream_k", "")
        walk = "; ".join(x for x in (describe_persistent(pp), cluster, stream_k) if x)
    else:
        walk = said.get("persistent", "")
    store = describe_store(plan.tma_store, pp) if plan.tma_store is not None else said.get("tma_store", "")
    return "; ".join(x for x in (first, walk, store) if x)


def _attr(func, name: str):
    """A function attribute that is not a lowering option (the call's facts, the symbol), else None."""
    return (func.attrs or {}).get(name, None)


def _shape(buf) -> list:
    return [int(x) for x in buf.shape]


def _arch(target) -> str:
    return str(target.attrs.get("arch", "sm_90a")) if target is not None else "sm_90a"


@dataclass(frozen=True)
class FunctionPlan:
    """The plans of a function with several T.Kernels, one per kernel in launch order (lowering.py plans and
    emits each on its own), and notes on the whole function."""

    kernels: tuple
    notes: tuple = ()

    @property
    def pipeline_note(self) -> str:
        return "; ".join(f"kernel {i}: {p.pipeline_note}"
                         for i, p in enumerate(self.kernels, 1) if p.pipeline_note)

    @property
    def all_notes(self) -> list:
        return list(self.notes) + [f"kernel {i}: {n}"
                                   for i, p in enumerate(self.kernels, 1) for n in p.all_notes]

    def summary(self) -> dict:
        """The first kernel's summary with the whole function's notes (numbered by kernel; the function's own
        under "function_notes"), pipeline, largest shared pool, cooperative launch, hand layouts and
        assumptions, and every kernel's summary under "kernels"."""
        each = [p.summary() for p in self.kernels]
        out = dict(each[0])
        layouts = {g["name"]: g for s in each for g in s["global_layouts"]}
        out.update(pipeline=self.pipeline_note, notes=self.all_notes, kernels=each,
                   function_notes=list(self.notes),
                   shared_bytes=max(s["shared_bytes"] for s in each),
                   cooperative_launch=any(s["cooperative_launch"] for s in each),
                   global_layouts=list(layouts.values()),
                   assumes=sorted({a for s in each for a in s["assumes"]}),
                   refusals=[r for s in each for r in s["refusals"]])
        return out


def make_plan(func: tirx.PrimFunc, target, options: LoweringOptions | None = None) -> KernelPlan:
    """The kernel's plan. Two choices made here give way where the plan they lead to does not build, and the
    plan's notes say so: the wgmma column split (auto: mma.sync instead; e.g. a TMA pipeline, whose stages
    keep shared tiles from sharing bytes as cp.async's may) and gather loops issued ahead (their stages
    multiply the tile's shared memory: in order instead, as before they were issued ahead). Where neither
    helps, the error is the plan's without either."""
    options = LoweringOptions() if options is None else options
    splits = (True, False) if options.wgmma_column_split is None else (options.wgmma_column_split,)
    failed: dict = {}
    for gathers in (True, False):
        for split in splits:
            try:
                plan = _make_plan(func, target, options, split, gathers)
            except LoweringError as err:
                failed[(split, gathers)] = err
                continue
            plan = _spilling_for_tma(plan, func, target, options, split, gathers)
            notes = ()
            if not split and (True, gathers) in failed:
                notes += (f"wgmma with the warpgroups splitting a T.gemm's columns would not build "
                          f"({_first_line(failed[(True, gathers)])}); mma.sync instead "
                          "(tile_nb.wgmma_column_split = 1 insists)",)
            if not gathers:
                notes += ("gather loops (T.im2col) of the pipelined loops run in order: issued ahead they "
                          f"would not build ({_first_line(failed[(splits[0], True)])})",)
            return replace(plan, notes=plan.notes + notes)
    raise failed[(splits[-1], False)]


def _spilling_for_tma(plan: KernelPlan, func, target, options: LoweringOptions, split: bool,
                      gathers: bool) -> KernelPlan:
    """`plan`, or where fragments moved to shared memory for registers took the pipelined loop off TMA (the
    loop's other statements may not touch shared memory there), the plan that keeps them in registers and
    lets ptxas spill what does not fit: tilelang's choice, and 2.6x faster on DeepSeek's fp8 GEMM with two
    accumulators, whose second accumulator would otherwise demote the pipeline to cp.async."""
    why = plan.refusal("tma")
    if why is None or why.code != "tma.shared_memory" or not plan.fragments.over_budget:
        return plan
    try:
        spilled = _make_plan(func, target, options, split, gathers, spill=True)
    except LoweringError:
        return plan
    if spilled.tma is None:
        return plan
    kept = ", ".join(sorted(b.name for b in plan.fragments.over_budget if spilled.in_registers(b)))
    note = (f"{kept} kept in registers past what a thread can spare: in shared memory the pipelined loop "
            f"would run on {why.text}")
    return replace(spilled, notes=spilled.notes + (note,))


def _first_line(err) -> str:
    return str(err).splitlines()[0]


def _make_plan(func: tirx.PrimFunc, target, options: LoweringOptions, column_split: bool,
               gathers: bool = True, spill: bool = False) -> KernelPlan:
    lines = SourceLines(func)
    arch = _arch(target)
    threads, grid = _launch(func)
    if threads is None:
        raise LoweringError("the kernel has no threadIdx.x launch (T.Kernel(..., threads=...))")
    kernels = _thread_launches(func)
    if len(kernels) > 1:
        _check_one_thread_count(kernels, lines)
        # (lowering.py plans each T.Kernel on its own where the function's top level holds only kernels;
        # otherwise) one plan serves every T.Kernel of the function, and the grid-order schedules (CTA raster
        # groups, heaviest first, persistent CTAs) are per launch: off, so that no kernel follows another's
        # grid
        grid = {}
    check_target(func, ArchCaps.of(arch), lines)
    check_static_bounds(func, lines)
    try:
        accumulators, gemms, gemm_operands, panel_operands, register_a, kept_off_wgmma = _choose_mma(
            func, target, threads, lines, options, column_split
        )
    except LoweringError as err:
        raise lines.locate(err) from None
    pipelines = {s: schedule_pipeline(s, gathers, tuple(buffers_used_after(func.body, s)))
                 for s in iter_stmts(func.body)
                 if isinstance(s, tirx.For) and "num_stages" in (s.annotations or {})}
    pinned = {b: a.linear() for b, a in accumulators.items()}
    # ptxas may spill fragments past a thread's registers (budget.SPILL_ALLOWANCE) only where every T.gemm is
    # a wgmma whose accumulator fits beside what the instruction needs: a wgmma group holds its whole
    # accumulator live, so a 128x256 tile over 128 threads (256 registers in one accumulator) stays refused
    may_spill = bool(accumulators) and all(
        isinstance(a, WgmmaAccLayout) and a.regs + WGMMA_HEADROOM <= MAX_REGISTERS_PER_THREAD
        for a in accumulators.values()
    )
    spill = spill and may_spill  # layout inference keeps in registers only what check_registers accepts
    fragments, packed = infer_layouts(func, threads, pinned, lines, spill=spill), frozenset()
    if register_a:
        # A fragment A operand of a wgmma T.gemm stays in registers in the layout of a wgmma
        # accumulator of its shape (the A fragment of wgmma's register form): FlashAttention's
        # probabilities never touch shared memory. Not where another use needs another layout, the
        # registers do not fit, or keeping it would push other fragments (row statistics) out to shared
        # memory: then it goes through shared memory itself.
        in_registers = frozenset(register_a)
        try:
            with_a = infer_layouts(
                func,
                threads,
                pinned | {b: a.linear() for b, a in register_a.items()},
                lines,
                packed=in_registers,
                spill=spill,
            )
            check_registers(pinned | dict(with_a.layouts), lines, packed=in_registers, spill=may_spill)
            if set(with_a.shared) <= set(fragments.shared):
                fragments, packed = with_a, in_registers
        except LoweringError:
            pass
    for op in gemm_operands:
        if op in accumulators:
            raise lines.locate(
                LoweringError(
                    f"T.gemm: operand {op.name} is itself a T.gemm accumulator (held in registers); copy "
                    "it to another "
                    "fragment or shared tile (T.copy) before using it as A or B"
                ),
                buffer_name=op.name,
            )
    stages = {prefetched_tile(c): s.stages for s in pipelines.values() for c in s.prefetched}
    shared = {}
    for s in iter_stmts(func.body):
        if not isinstance(s, tirx.AllocBuffer):
            continue
        buf = s.buffer
        scope = scope_of(buf)
        in_pool = scope in ("shared.dyn", "shared") or (
            scope == "local.fragment" and buf not in accumulators and fragments.layout(buf) is None)
        if in_pool:
            tile = SharedTile(
                buf,
                tuple(int(x) for x in buf.shape),
                str(buf.dtype),
                stages=stages.get(buf, 1),
                panel=buf in panel_operands,
            )
            # the FMA and TF32 paths' operands (layout.SharedTile.can_swizzle)
            wide = tirx_bits(tile.dtype) > 16
            shared[buf] = replace(tile, swizzle=buf in gemm_operands and tile.can_swizzle()
                                  and (options.wide_swizzle or not wide))
    workspaces = _workspaces(func, accumulators, fragments, threads)
    unaligned = frozenset(str(n) for n in _attr(func, "tile_nb.unaligned") or [])
    declared_in_kernel = {str(v): "a T.Tensor(shape, dtype, data) view declared in the kernel"
                          for v, _ in _attr(func, "tile_nb.views") or []}
    declared_in_kernel |= {str(t): f"made in the kernel from an address in {table}"
                           for t, table in _attr(func, "tile_nb.pointer_tensors") or []}
    divisible = frozenset(str(n) for n in _attr(func, "tile_nb.divisible") or [])
    wgmma_overlap = (
        any(isinstance(a, WgmmaAccLayout) for a in accumulators.values())
        and options.wgmma_overlap
        and all(str(b.dtype) == accumulator_register_dtype(b) for b in accumulators)
    )
    fragments = replace(
        fragments,
        layouts=MappingProxyType(fragments.layouts),
        shared=MappingProxyType(fragments.shared),
        loop_layouts=MappingProxyType(fragments.loop_layouts),
    )
    facts = PlanFacts(
        name=str(_attr(func, "global_symbol") or "main"),
        arch=arch,
        threads=threads,
        grid=MappingProxyType(grid),
        accumulators=MappingProxyType(accumulators),
        gemms=MappingProxyType(gemms),
        fragments=fragments,
        shared=MappingProxyType(dict(shared)),
        workspaces=MappingProxyType(workspaces),
        pipelines=MappingProxyType(pipelines),
        unaligned=unaligned,
        declared_in_kernel=MappingProxyType(declared_in_kernel),
        divisible=divisible,
        packed=packed,
        options=options,
        cooperative_launch=any(c.op.name == "tirx.tile.sync_grid" for c in tile_calls(func.body)),
    )
    tma, why_tma = plan_tma(func, facts) if stages else (None, None)
    ctas_per_sm = tma.ctas_per_sm if tma is not None else \
        2 if why_tma is not None and why_tma.code == TWO_CTAS_PER_SM else 1
    body = _threads_body(func)
    persistent, why_persistent = plan_persistent(
        func, options, tma, grid, threads, body, shared, accumulators
    )
    barrier_bytes = 8 * tma.barrier_count if tma is not None else 0
    tma_store, why_store, stage = plan_tma_store(
        options, tma, persistent, threads, body, accumulators, shared, barrier_bytes, arch, unaligned,
        facts.declared_in_kernel,
    )
    if stage is not None:
        shared[stage.buffer] = stage
    refusals = tuple(r for r in (why_tma, *why_persistent, why_store) if r is not None)
    keys = list(shared) + list(workspaces)
    tiles = list(shared.values()) + list(workspaces.values())
    placed, end = layout_pool(tiles)
    shared_reuse, unused_tiles, limit = (), (), max_shared_bytes(arch)
    if end > limit and persistent is None and tma_store is None:
        # over the limit: tiles whose uses do not overlap share bytes (MLA's K/V stages and output staging
        # tile; the tiles of a function's separate T.Kernels); emit_seq's barrier between a statement reading
        # shared memory and a later one writing it orders the old tile's last reads before the new tile's
        # first writes, and kernels launched one after another never overlap. (Not across the tiles of a
        # persistent CTA, whose loads for its next tile run ahead, nor under a TMA store, which reads its tile
        # after the threads move on.)
        tma_tiles = {c.tile_buffer for c in tma.copies} if tma is not None else set()
        lives = _reusable_lives([launch.body for launch in kernels], shared, tma_tiles, lines)
        reused, reused_end = layout_pool_reusing(tiles, lives)
        if reused_end <= limit:  # else the refusal lists the tiles as laid out plainly
            placed, end = reused, reused_end
            shared_reuse = _overlapping(reused, lives)
            unused_tiles = tuple(b.name for b, span in lives.items() if span == NEVER_LIVE)
    barrier_offset = (end + 7) // 8 * 8
    pool_bytes = barrier_offset + 8 * tma.barrier_count if tma is not None else end  # 8 B per mbarrier
    check_shared(placed, pool_bytes, arch, lines)
    check_registers(
        {b: a.linear() for b, a in accumulators.items()} | dict(fragments.layouts), lines, packed=packed,
        spill=may_spill,
    )
    by_key = dict(zip(keys, placed, strict=True))
    notes = tuple(f"{b.name} is in shared memory: {why}" for b, why in fragments.shared.items())
    notes += tuple(f"{name} is allocated and no statement uses it: it takes no bytes of its own (the pool "
                   "would not fit otherwise)" for name in unused_tiles)
    spills = spill_note(facts.fragment_registers)
    notes += (spills,) if spills else ()
    notes += _fp8_accumulation_notes(func, accumulators)
    notes += _eight_bit_fma_notes(gemms, target, threads, options)
    notes += _mixed_accumulator_notes(kept_off_wgmma, target, threads, options, lines)
    if pipelines and not ArchCaps.of(arch).cp_async:
        notes += (
            f"{arch} has no cp.async: the pipelined copies are plain loads and stores, so a thread waits for "
            "its own loads and only other warps' work overlaps them (the stages and barriers stay)",
        )
    hand_layouts = global_layouts(func)
    heavy_first = _heavy_first(options, func, grid, pipelines)
    if heavy_first:
        notes += (
            "CTAs launched heaviest first: the pipelined loop's trip count grows with blockIdx.x, "
            "so the grid "
            f"runs in groups of {heavy_first} (y, z) rows, each from its largest blockIdx.x down "
            "(tile_nb.heavy_first = 0 keeps the launch order)",
        )
    if facts.cooperative_launch:
        notes += (
            "T.sync_grid: launched cooperatively, so every CTA of the grid is resident at once; the driver "
            "refuses a grid larger than the GPU holds at once (SMs x CTAs per SM) at launch",
        )
    placed_facts = replace(facts, shared=MappingProxyType({b: by_key[b] for b in shared}),
                           workspaces=MappingProxyType({c: by_key[c] for c in workspaces}))
    return KernelPlan(
        **{f.name: getattr(placed_facts, f.name) for f in fields(PlanFacts)},
        tma=tma,
        persistent=persistent,
        tma_store=tma_store,
        refusals=refusals,
        pool_bytes=pool_bytes,
        barrier_offset=barrier_offset,
        producer_threads=tma.producer_threads if tma is not None else 0,
        raster_group=_raster_group(options, grid, accumulators),
        ctas_per_sm=ctas_per_sm,
        heavy_first=heavy_first,
        wgmma_overlap=wgmma_overlap,
        notes=notes,
        global_layouts=hand_layouts,
        shared_reuse=shared_reuse,
    )


def _fp8_accumulation_notes(func, accumulators) -> tuple:
    """The numeric caveat of 8-bit float MMAs, said where the plan is read (docs/IR.md, "8-bit floats")."""
    notes = []
    for s in iter_stmts(func.body):
        if isinstance(s, tirx.TilePrimitiveCall) and s.op.name == "tirx.tile.gemm":
            c, a = region_of(s.args[0])[0], region_of(s.args[1])[0]
            if "float8" in str(a.dtype) and isinstance(accumulators.get(c), WgmmaAccLayout):
                note = (
                    f"T.gemm into {c.name}: Hopper's 8-bit float MMAs accumulate with fewer bits "
                    "than float32 "
                    '(docs/IR.md, "8-bit floats"); the interpreter sums in float32'
                )
                if note not in notes:
                    notes.append(note)
    return tuple(notes)


def _kept_off_wgmma(func, gemms: list, target, threads: int, transpose_a: bool = False) -> dict:
    """Accumulators that a wgmma-eligible T.gemm adds to but that stay off wgmma (on sm_90a) -> why: the
    first T.gemm into the same accumulator that wgmma cannot take (a transposed A, a part of a tile, FMA or
    TF32 inputs), or the accumulator off wgmma whose register layout this one must share (infer.layout_groups:
    a T.Parallel loop or a copy joins them, directly or through other fragments)."""
    refused, eligible = {}, set()
    for s in gemms:
        c = region_of(s.args[0])[0]
        if wgmma_refusal(target, s, threads, transpose_a) is None:
            eligible.add(c)
        else:
            refused.setdefault(c, s)
    if not eligible or not refused:
        return {}
    kept = {c: s for c, s in refused.items() if c in eligible}
    reached = {c: c for c in refused}  # fragment -> the accumulator off wgmma whose layout it must share
    groups = layout_groups(func)
    changed = True
    while changed:
        changed = False
        for group in groups:
            source = next((reached[b] for b in group if b in reached), None)
            for b in group:
                if source is not None and b not in reached:
                    reached[b], changed = source, True
    for b, source in reached.items():
        if b in eligible and b not in kept:
            kept[b] = source
    return kept


def _mixed_accumulator_notes(kept_off: dict, target, threads: int, options: LoweringOptions, lines) -> tuple:
    """Where a T.gemm that could run on wgmma runs on mma.sync (`kept_off`: `_kept_off_wgmma`'s), and why."""
    if not options.wgmma:
        return ()
    notes = []
    for c, why in kept_off.items():
        if not isinstance(why, tirx.TilePrimitiveCall):  # follows the accumulator `why`
            notes.append(
                f"T.gemm into {c.name} on mma.sync, not wgmma: it shares its register layout with {why.name} "
                "(a T.Parallel loop or a copy indexes both), whose T.gemm runs on mma.sync"
            )
            continue
        line = lines.line_of(why)
        where = f"the T.gemm at line {line}" if line is not None else "another T.gemm"
        notes.append(
            f"T.gemm into {c.name} on mma.sync, not wgmma: {where} adds to it too and cannot run on wgmma "
            f"({wgmma_refusal(target, why, threads, options.wgmma_transpose_a)}); one register "
            "layout serves every T.gemm into an accumulator (accumulate that product in its own fragment to "
            "keep the others on wgmma)"
        )
    return tuple(notes)


def _eight_bit_fma_notes(gemms, target, threads: int, options: LoweringOptions) -> tuple:
    """Where an 8-bit T.gemm runs on the CUDA cores (no tensor-core shape for it), and why."""
    notes = []
    for call, kind in gemms.items():
        if kind is GemmKind.FMA and eight_bit_gemm(call):
            c, a, b = (region_of(call.args[i])[0] for i in range(3))
            why = eight_bit_fma_reason(call, target, threads, options.wgmma)
            what = "float" if "float" in str(a.dtype) else "integer"
            reg = accumulator_register_dtype(c)
            notes.append(
                f"8-bit {what} T.gemm into {c.name} ({a.dtype} x {b.dtype}) on the CUDA cores: {why}; the "
                f"operands convert exactly to {reg} and each product adds by one "
                + ("FMA" if what == "float" else "multiply-add (wrapping in int32, as wgmma's)")
            )
    return tuple(dict.fromkeys(notes))


def _threads_body(func):
    """The statement under the threadIdx.x launch (what each CTA runs)."""
    for s in iter_stmts(func.body):
        if (
            isinstance(s, tirx.AttrStmt)
            and s.attr_key == "thread_extent"
            and s.node.thread_tag == "threadIdx.x"
        ):
            return s.body
    return None


def _launch(func):
    threads = int(func.attrs["tile_nb.threads"]) if func.attrs and "tile_nb.threads" in func.attrs else None
    grid = {}
    for s in _launches(func):
        tag = s.node.thread_tag
        if tag == "threadIdx.x" and not threads:
            threads = int(s.value)
        elif tag.startswith("blockIdx."):
            grid[tag] = (s.node.var, s.value)
    return threads or None, grid


def _launches(func) -> list:
    """The launch dimensions (thread_extent AttrStmts) of `func`'s T.Kernels, in order."""
    return [s for s in iter_stmts(func.body)
            if isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent"]


def _thread_launches(func) -> list:
    """The threadIdx.x launches of `func`: one per T.Kernel."""
    return [s for s in _launches(func) if s.node.thread_tag == "threadIdx.x"]


def _check_one_thread_count(launches: list, lines) -> None:
    """The fragments' register layouts are planned once per function for one number of threads: a kernel
    launched with another number would own other elements than its layouts say (out-of-range stores on the
    GPU), so it is refused."""
    first = int(launches[0].value)
    for launch in launches[1:]:
        if int(launch.value) != first:
            raise lines.locate(
                LoweringError(
                    f"this T.Kernel has threads={int(launch.value)}, an earlier one in the same function "
                    f"threads={first}: tile_nb's CUDA lowering plans the fragments of a function's kernels "
                    "for one number of threads",
                    hint="give every T.Kernel of the function the same threads=, or put each kernel in its "
                         "own function (the interpreter runs them as written)",
                ),
                # the launch has no line of its own: the kernel's first statement that has one
                next((st for st in iter_stmts(launch.body) if lines.line_of(st) is not None), None),
            )


def _choose_mma(func, target, threads: int, lines, options: LoweringOptions, column_split: bool = True):
    """The accumulators' layouts, the instruction of every T.gemm (GemmKind), and the shared operands
    (swizzled; wgmma's [K, N] B in 64-column panels), and the accumulators kept off wgmma with why
    (`_kept_off_wgmma`, for the plan's notes); `column_split` False keeps a T.gemm whose rows cannot cover the
    warpgroups on mma.sync."""
    use_wgmma, register_form = options.wgmma, options.wgmma_register_a
    ta = options.wgmma_transpose_a  # an A stored [K, M] on wgmma
    row_users = rows_coupled(func)
    accumulators, operands, panels, register_a = {}, set(), set(), {}
    gemms = [
        s
        for s in iter_stmts(func.body)
        if isinstance(s, tirx.TilePrimitiveCall) and s.op.name == "tirx.tile.gemm"
    ]
    # an accumulator that an FMA or TF32 T.gemm adds to keeps mma.sync's layout, even where another T.gemm
    # into it could run on wgmma (whose asynchronous groups the FMAs would race)
    not_wgmma = {region_of(s.args[0])[0] for s in gemms if fma_gemm(s) or is_tf32(s)}
    # so does an 8-bit T.gemm that wgmma cannot take (it runs as FMAs too)
    not_wgmma |= {
        region_of(s.args[0])[0]
        for s in gemms if eight_bit_gemm(s) and not wgmma_eligible(target, s, threads, ta)
    }
    # and so does one that another T.gemm wgmma cannot take adds to (a transposed A, a part of a tile): one
    # register layout serves every T.gemm into an accumulator, and mma.sync's serves them all; and so does one
    # that shares a register layout with an accumulator off wgmma (a T.Parallel loop indexes both)
    kept_off = _kept_off_wgmma(func, gemms, target, threads, ta)
    not_wgmma |= set(kept_off)
    for s in iter_stmts(func.body):
        if not (isinstance(s, tirx.TilePrimitiveCall) and s.op.name == "tirx.tile.gemm"):
            continue
        try:
            c, a, b = (region_of(s.args[i])[0] for i in range(3))
            if scope_of(c) != "local.fragment":
                raise LoweringError(
                    f"T.gemm: the accumulator {c.name} must be a fragment (alloc_fragment), got "
                    f"scope {scope_of(c)}"
                )
            if c not in accumulators:
                bm, bn = int(c.shape[0]), int(c.shape[1])
                # float32 / float64, or 8-bit inputs off wgmma: exact products on the CUDA cores, in
                # mma.sync's layout
                if fma_gemm(s) or (eight_bit_gemm(s) and (c in not_wgmma or not use_wgmma)):
                    accumulators[c] = MmaAccLayout.choose(bm, bn, threads // 32, rows_per_warp=c in row_users,
                                                          fma=True)
                elif is_tf32(s):  # T.tfloat32: mma.sync m16n8k8 .tf32 (wgmma's TF32 form is not built)
                    accumulators[c] = MmaAccLayout.choose(bm, bn, threads // 32, rows_per_warp=c in row_users,
                                                          tf32=True)
                elif use_wgmma and c not in not_wgmma and wgmma_eligible(target, s, threads, ta) and (
                        (split := wgmma_split(bm, bn, threads // 128, bool(s.args[5]),
                                            narrow_b=narrow_b(s)))[1] == 1
                        or column_split):
                    rows, cols = split  # eligible: (row groups, column groups), not a refusal
                    accumulators[c] = WgmmaAccLayout(bm, bn, rows, cols)
                    if register_form and scope_of(a) == "local.fragment" and wgmma_register_a_ok(s):
                        # every column group reads all of A: each holds a copy
                        register_a[a] = WgmmaAccLayout(bm, gemm_k(s), rows, 1, replicas=cols)
                else:
                    accumulators[c] = MmaAccLayout.choose(bm, bn, threads // 32, rows_per_warp=c in row_users)
            for op in (a, b):
                if scope_of(op) not in ("shared.dyn", "local.fragment"):
                    raise LoweringError(
                        f"T.gemm: operand {op.name} in scope {scope_of(op)} is not supported; A and "
                        "B must be shared tiles (alloc_shared) or fragments"
                    )
                operands.add(op)
        except LoweringError as err:
            raise lines.locate(err, s) from None
    _share_row_warps(accumulators, row_users, threads // 32)
    kinds = {}
    for s in gemms:  # once every accumulator has its layout (several T.gemm may share one: the first's)
        try:
            c = region_of(s.args[0])[0]
            kinds[s] = gemm_kind(s, accumulators[c])
            if kinds[s] is GemmKind.WGMMA:
                _add_panels(s, panels)
            why = wgmma_refusal(target, s, threads, ta) if kinds[s] is GemmKind.WGMMA else None
            if why is not None:
                raise LoweringError(
                    f"T.gemm into {c.name}: an earlier T.gemm into it runs on wgmma, whose accumulator "
                    f"layout this one must use, and it cannot run on wgmma ({why}); accumulate it in its own "
                    "fragment and add the two in a T.Parallel loop"
                )
        except LoweringError as err:
            raise lines.locate(err, s) from None
    return accumulators, kinds, operands, panels, register_a, kept_off


def _add_panels(gemm, panels: set) -> None:
    """The shared operands of a wgmma T.gemm stored in 64-column panels (mma.read_as_panels). Every T.gemm's,
    not only the first into an accumulator: a second T.gemm into it reads its own operands through these
    descriptors too (with one panel the layouts coincide, so only operands of more than 64 columns showed the
    difference)."""
    a, b = (region_of(gemm.args[i])[0] for i in (1, 2))
    a_panels, b_panels = read_as_panels(gemm)
    if a_panels:
        panels.add(a)
    if b_panels:
        panels.add(b)


def _reusable_lives(bodies: list, shared: dict, tma_tiles: set, lines) -> dict:
    """Buffer -> (first, last) index of the top-level statements of the CTAs' code (`bodies`, one per
    T.Kernel, numbered on from one kernel to the next) that use each shared tile; a body that is not a
    sequence is one statement, so its tiles share with those of other kernels only. A tile that a pipelined
    loop's TMA loads fill is live from its kernel's start (a producer warp starts loading while the consumers
    run the statements before the loop). A wgmma operand ends with the statement of its T.gemm like any other
    tile: a wgmma group still in flight there is waited for before the next CTA barrier (emitter.LateWaits
    drains before it, a pipelined loop after its last iteration, other T.gemm right after their issue), and a
    later statement that writes shared memory after that statement read it comes after such a barrier.
    A tile the user allocated (`lines` knows its line) that no statement uses is never live (`NEVER_LIVE`:
    tilelang's examples allocate a bias tile whether or not they add a bias); the lowering's own tiles that
    no statement names (a TMA store's staging tile, reduction scratch) have no span: live throughout."""
    lives: dict = {}
    start = 0
    for body in bodies:
        items = seq_items(body)
        for index, item in enumerate(items, start):
            reads, writes = buffers_touched(item)
            for buf in set(reads) | set(writes):
                if buf in shared:
                    first = start if buf in tma_tiles else index
                    earlier = lives.get(buf, (first, index))
                    lives[buf] = (min(earlier[0], first), max(earlier[1], index))
        start += len(items)
    for buf in shared:
        if buf not in lives and is_buffer_var(buf) and lines.alloc_line(buf.name) is not None:
            lives[buf] = NEVER_LIVE
    return lives


NEVER_LIVE = (float("inf"), float("-inf"))  # the span of a tile no statement uses: it meets no other


def _overlapping(tiles, lives: dict) -> tuple:
    """(later, earlier) names of the tiles that `layout_pool_reusing` placed on common bytes."""
    pairs = []
    for a in tiles:
        for b in tiles:
            spans = (lives.get(a.buffer, NEVER_LIVE), lives.get(b.buffer, NEVER_LIVE))
            if NEVER_LIVE not in spans and spans[1][1] < spans[0][0] \
                    and a.byte_offset < b.byte_offset + b.nbytes and b.byte_offset < a.byte_offset + a.nbytes:
                pairs.append((a.buffer.name, b.buffer.name))
    return tuple(pairs)


def _share_row_warps(accumulators: dict, row_users: set, warps: int) -> None:
    """mma.sync accumulators of one height whose rows meet row statistics but could not put all their warps
    along M (MmaAccLayout.choose) each chose their own warp grid: a row statistic shared by two of them
    (FlashAttention's and MLA's scores and output with 64 rows on 8 warps) would then need two register
    layouts. Give them the grid they can all take, where there is one."""
    by_height: dict = {}
    for buf, layout in accumulators.items():
        if buf in row_users and isinstance(layout, MmaAccLayout):
            by_height.setdefault(layout.bm, []).append(buf)
    for bufs in by_height.values():
        if len({accumulators[b].wm for b in bufs}) < 2:
            continue
        wm = common_warps_along_m([(accumulators[b].bm, accumulators[b].bn) for b in bufs], warps)
        if wm is not None:
            for b in bufs:
                accumulators[b] = replace(accumulators[b], wm=wm, wn=warps // wm, wgmma_rows=False)


def _workspaces(func, accumulators, fragments: FragmentPlan, threads: int) -> dict:
    """Shared memory for the cross-warp step of reductions over register fragments: one float per result and
    warp sharing it."""
    out = {}
    for s in iter_stmts(func.body):
        if isinstance(s, tirx.TilePrimitiveCall) and s.op.name == "tirx.tile.finalize_reducer":
            out.update(_reducer_workspace(s, fragments))
            continue
        if not (isinstance(s, tirx.TilePrimitiveCall) and s.op.name in _REDUCTIONS):
            continue
        dst, src = region_of(s.args[0])[0], region_of(s.args[1])[0]
        layout = accumulators[src].linear() if src in accumulators else fragments.layout(src)
        if layout is None:
            continue
        dim = int(s.args[2][0]) % len(src.shape)
        slots, _ = layout.warp_slots(dim, tirx.const(0, "int32"))
        if slots <= 1:
            continue
        results = 1
        for k, n in enumerate(layout.shape):
            if k != dim:
                results *= n
        # the dtype the emitter's partials have (emit/reduce.py): int64 sums would lose bits in int32 slots
        kind = s.op.name.rsplit(".", 1)[-1]
        out[s] = SharedTile(src, (results, slots), reduction_dtype(kind, src.dtype, dst.dtype),
                            name=f"{src.name}_partials")
    return out


def _reducer_workspace(call, fragments: FragmentPlan) -> dict:
    """T.finalize_reducer over copies held by several warps: one value per element and warp."""
    buf = region_of(call.args[0])[0]
    layout = fragments.layout(buf)
    if layout is None:
        return {}
    slots, _ = layout.warp_slots(None, tirx.const(0, "int32"))
    if slots <= 1:
        return {}
    kind = str(call.args[1].value)  # the partials' dtype, as lower_finalize_reducer's (emit/reduce.py)
    dtype = reduction_dtype(kind, buf.dtype, buf.dtype)
    return {call: SharedTile(buf, (math.prod(int(n) for n in buf.shape), slots), dtype,
                             name=f"{buf.name}_partials")}


def _heavy_first(options: LoweringOptions, func, grid: dict, pipelines: Mapping) -> int:
    """Rows of (blockIdx.y, blockIdx.z) per group when CTAs are launched heaviest first, or 0. Where the trip
    count of the kernel's T.Pipelined loop grows with bx (causal attention: Q block bx reads bx + 1 KV
    blocks), the grid is run in groups of G rows (heads), each group from its largest bx down across its G
    rows: the heaviest CTAs of a group start first and the grid ends on light ones (longest processing time
    first, as FlashAttention-3 orders its persistent tiles), while the CTAs in flight stay within a few heads
    (their K and V in L2). Legal for any kernel (CTAs of one launch are independent); applied only where every
    bx's trip count is a known constant, non-decreasing and not all equal. On by default
    (`tile_nb.heavy_first` / TILE_NB_HEAVY_FIRST = 0 turns it off), because groups of heads beat both launch
    order and reversing bx within one head, in a model of dispatch and on the GPU
    (docs/decisions.md#flashattention-heaviest-ctas-first-in-groups-of-heads)."""
    if not options.heavy_first or "blockIdx.x" not in grid:
        return 0
    rows = 1
    for tag in ("blockIdx.y", "blockIdx.z"):
        if tag in grid:
            if not isinstance(grid[tag][1], tvm.ir.prim.expr.IntImm):
                return 0
            rows *= int(grid[tag][1])
    bx, gx = grid["blockIdx.x"]
    loops = list(pipelines)
    if not isinstance(gx, tvm.ir.prim.expr.IntImm) or not 2 <= int(gx) <= 1024 or len(loops) != 1:
        return 0
    analyzer = tvm.sym.Analyzer()
    counts = []
    for i in range(int(gx)):
        analyzer.bind(bx, tirx.const(i, "int32"), allow_override=True)
        count = analyzer.simplify(loops[0].extent)
        if not isinstance(count, tvm.ir.prim.expr.IntImm):
            return 0
        counts.append(int(count))
    if counts != sorted(counts) or counts[0] == counts[-1]:
        return 0
    return next(g for g in (8, 4, 2, 1) if rows % g == 0)


def _raster_group(options: LoweringOptions, grid: dict, accumulators: dict) -> int:
    """Grouped CTA order for GEMM grids (L2 reuse), `tile_nb.raster_group` /
    TILE_NB_RASTER (default 8, 1: off):
    only for 2-d grids of constant extents dividing into whole groups."""
    group = options.raster
    if group <= 1 or not accumulators or set(grid) != {"blockIdx.x", "blockIdx.y"}:
        return 1
    (_, gx), (_, gy) = grid["blockIdx.x"], grid["blockIdx.y"]
    if not (isinstance(gx, tvm.ir.prim.expr.IntImm) and isinstance(gy, tvm.ir.prim.expr.IntImm)):
        return 1
    group = min(group, int(gx))
    if int(gx) % group or int(gy) < 2:
        return 1  # keep the index math a few shifts: only whole groups
    return group


"""`T.Pipelined` on Hopper: TMA tile loads and a producer warp (warp specialization), for wgmma loops.

Chosen by `plan_tma` when the target is sm_90a, the loop's `T.gemm`s run on wgmma (wgmma.py), every
copy in the loop body is a whole global tile into a shared operand of one of them, and the loop's
other statements touch registers only (GEMM epilogue math, FlashAttention's softmax between Q K^T and
P V). Otherwise pipeline.py's cp.async schedule runs; the reason is kept in the lowered function's
`tile_nb.pipeline` attribute. `tile_nb.tma` = 0 / 1 (or the environment variable TILE_NB_TMA) turns
it off / on wherever it is legal.

Why: with cp.async every thread issues its share of each tile's 16-byte copies and all threads meet at a CTA
barrier every k-tile, so the tensor cores idle while the barrier drains. Here one thread of an extra warp
issues a few `cp.async.bulk.tensor` per k-tile (the TMA unit does the addressing, swizzle and out-of-bounds
zero fill), and stages are handed over through mbarriers, so consumers never wait for each other.

    producer warp (threads [T, T+32), its first lane):
        for k in [0, n): s = k % S
            wait empty[s]  (parity ((k / S) & 1) ^ 1: passes at once on the first round)
            arrive full[s] expecting the bytes of every box, then one TMA per box into stage s
    consumers (the kernel's own T threads):
        for k in [0, n): s = k % S
            wait full[s]  (parity (k / S) & 1)
            the gemm on stage s (wgmma fence, MMAs, commit, wait_group 1: the group of k-1 has finished)
            lane 0 of each warp: arrive empty[(k - 1) % S]   (k > 0)
            (with several T.gemm, or statements reading the accumulator: every T.gemm waits for its own group
             (wait_group 0) and the warp arrives on empty[s] at the end of the iteration)
        wait_group 0

Without a producer warp (where two CTAs of a FlashAttention-like loop share an SM, which the warp's registers
would not allow; `tile_nb.producer_warp` = 0 anywhere) the first consumer thread issues the first S - 1
k-tiles before the loop and, in iteration k, k-tile k + S - 1 into the stage of k - 1: at the top of the
iteration when each iteration waits for its MMAs (that stage was released at the end of k - 1), or right after
the release when one wgmma group stays in flight. One consumer warpgroup keeps the producer warp: at two CTAs
per SM it beat this schedule at three, and both beat cp.async
(docs/decisions.md#one-consumer-warpgroup-a-producer-warp-two-ctas-per-sm).

Everything outside the loop runs on the consumer threads only (`Emitter._emit` guards what
`Emitter.needs_consumer_guard` selects; CTA barriers become the named barrier 1 over the T consumer threads).
Shared layouts are unchanged: the swizzled tiles of wgmma.py are exactly what TMA writes with its 64B/128B
swizzle modes (tile bases are 1 KiB aligned in the pool), and a [K, N] B operand in 64-column panels is loaded
one panel (box of 64 columns) at a time.
Tensor maps are encoded on the host for each call (`runtime.cuTensorMapEncodeTiled`) and passed to the kernel
as `const __grid_constant__ CUtensorMap` parameters by TVM's codegen.
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from ..exprs import const_int, walk_loads
from ..irwalk import buffers_touched, iter_stmts, region_of, scope_of, seq_items, vars_bound_in
from .budget import SHARED_PER_SM, WGMMA_HEADROOM
from .decisions import TWO_CTAS_PER_SM, Refusal
from .layout import WgmmaAccLayout, accumulator_register_dtype, tirx_bits
from .schedule import is_global_to_shared_copy

__all__ = ["Box", "Overlap", "PRODUCER_THREADS", "TmaCopy", "TmaPlan", "describe_tma", "plan_tma"]


PRODUCER_THREADS = 32  # a producer warp; a producer warpgroup (128) where registers move to the consumers
# setmaxnreg: the producer warpgroup keeps 24 registers per thread; the consumers share what is left of the
# 64512 that CUTLASS and tilelang budget per CTA (1 producer + 2 consumer warpgroups: 24 / 240).
_PRODUCER_REGISTERS = 24
_REGISTER_POOL = 64512
_SWIZZLE_KIND = {64: 2, 128: 3}  # CUtensorMapSwizzle for 64- and 128-byte rows
def _refuse(reason: str, text: str) -> Refusal:
    return Refusal(f"tma.{reason}", text)


# plan_tma's note where two CTAs of a kernel with several T.gemm share an SM on cp.async
_TWO_CTAS_PER_SM = (
    "cp.async (two CTAs fit an SM; with several T.gemm per iteration that measured faster than TMA + a "
    "producer warp; tile_nb.tma = 1 forces TMA, tile_nb.producer_warp = 0 TMA without the warp)"
)
# Beside the fragments of an overlapped loop (the accumulators' headroom counted apart): FlashAttention at
# head dim 64 with 192x128 tiles (three consumer warpgroups at 160 registers, FlashAttention-3's hdim-64
# configuration) counts 138 and ptxas 13.0 builds it without spills; tests/test_lower_tma.py checks that.
_OVERLAP_HEADROOM = 16


@dataclass(frozen=True)
class Box:
    """One TMA load per k-tile: a box of the global tensor into `elem_offset` of the tile's stage."""

    dims: tuple  # box extents, innermost first
    elem_offset: int  # within one stage of the shared tile
    coord_shift: tuple  # added to the region's start coordinates (innermost first)


@dataclass(frozen=True)
class TmaCopy:
    call: tirx.Stmt
    tile_buffer: tirx.Buffer  # the shared tile it fills
    tile_elems: int  # elements of one stage of that tile
    global_buf: tirx.Buffer
    swizzle: int
    boxes: tuple


@dataclass(frozen=True)
class Overlap:
    """A loop `head..., G1, early..., late..., G2` (two T.gemm, G2 last) run as FlashAttention-3
    overlaps softmax and MMAs inside a warpgroup: iteration k issues G1 of k, then G2 of k-1, runs
    `early` (the softmax: touches neither G2's accumulator nor its operands) while G2 of k-1 is in
    flight, waits for it, then runs `late`."""

    first: int  # index in rest of G1
    late: int  # index in rest of the first statement that needs G2 of the previous iteration done
    late_groups: tuple  # arrival groups read by G2: released one iteration later, after its wait


@dataclass(frozen=True)
class TmaPlan:
    loop: tirx.For
    stages: int
    copies: tuple
    rest: tuple  # the loop body without the copies: the gemm (and register-only statements)
    in_flight: bool = True  # one wgmma group stays in flight across iterations (see plan_tma)
    pingpong: int = 0  # consumer warpgroups that take turns issuing their T.gemm (see _pingpong), 0: none
    # Copies that share a "full" and an "empty" barrier, grouped by the statement
    # of `rest` that first reads them:
    # (index in rest, indices in copies). FlashAttention's Q K^T waits for K only; V may still be arriving.
    arrivals: tuple = ()
    # the softmax/MMA overlap inside a warpgroup (see _overlap), None: in order
    overlap: Overlap | None = None
    producer_threads: int = PRODUCER_THREADS
    # (producer, consumer) registers per thread after setmaxnreg, None: no change
    registers: tuple | None = None
    ctas_per_sm: int = 1  # CTAs the plan counts on sharing an SM (2: no producer warp, so that two fit)
    # why each k-tile's MMAs complete before its stage is released (in_flight False), for people
    waits: tuple = ()
    no_overlap: str = ""  # why a loop of two T.gemm runs in order (overlap None), for people; "": not asked
    # why the first consumer thread issues the loads where a producer warp would be the default, for people
    no_producer: str = ""

    @property
    def producer_warp(self) -> bool:
        """A producer warp (or warpgroup) issues the loads; False: the first consumer thread does."""
        return self.producer_threads > 0

    @property
    def barrier_count(self) -> int:
        """full[s][group] for every stage and arrival group, then empty[s][group]."""
        return 2 * self.stages * len(self.arrivals)

    def group_bytes(self, group) -> int:
        total = 0
        for i in group:
            c = self.copies[i]
            elem = tirx_bits(c.global_buf.dtype) // 8
            for b in c.boxes:
                n = elem
                for d in b.dims:
                    n *= d
                total += n
        return total


def plan_tma(func, plan) -> tuple[TmaPlan | None, Refusal | None]:
    """The warp-specialized TMA plan of this kernel's pipelined loop, or (None, why not: a Refusal whose code
    `TWO_CTAS_PER_SM` means two CTAs of a FlashAttention-like loop share an SM on cp.async). `plan`
    is the kernel's plan so far (plan.py: accumulators, shared tiles, pipeline schedules).
    `describe_tma` renders a plan's note."""
    options = plan.options
    mode = options.tma
    threads = plan.threads
    if mode is False:
        return None, _refuse("off", "cp.async (TMA turned off: tile_nb.tma = 0)")
    if plan.cooperative_launch:
        return None, _refuse(
            "grid_sync",
            "cp.async (T.sync_grid: every thread of the block must reach the grid barrier, and the TMA "
            "pipeline's producer threads part from the others)",
        )
    if not plan.uses_wgmma:
        return None, _refuse(
            "no_wgmma", "cp.async (no wgmma T.gemm: TMA pipelines are built for the Hopper wgmma path)"
        )
    if threads % 128 or threads + PRODUCER_THREADS > 1024:
        return None, _refuse(
            "threads",
            "cp.async (threads must be a multiple of 128 and leave room for a 32-thread producer warp)",
        )
    loops = [s for s in _top_level(func.body) if isinstance(s, tirx.For) and s in plan.pipelines]
    nested = [s for s in plan.pipelines if not any(s.same_as(t) for t in loops)]
    if len(loops) != 1 or nested:
        return None, _refuse(
            "loops", "cp.async (TMA needs exactly one T.Pipelined loop at the kernel's top level)"
        )
    loop = loops[0]
    schedule = plan.pipelines[loop]
    stages = schedule.stages
    if stages < 2:
        return None, _refuse("stages", "cp.async (num_stages < 2)")
    if schedule.kept_in_order:
        return None, _refuse("in_order_copy", "cp.async (a copy of the loop cannot be issued ahead)")
    if any(a.binds or a.guard is not None for a in schedule.ahead):
        return None, _refuse("ahead_values", "cp.async (a copy of the loop is placed by a value the loop "
                                             "body reads, or runs under an `if`: the TMA producer issues "
                                             "whole stages)")
    if not all(is_global_to_shared_copy(c) for c in schedule.prefetched):
        return None, _refuse("gather", "cp.async (a gather loop of the pipeline, e.g. T.im2col, is issued "
                                       "ahead element group by element group; TMA loads whole boxes)")
    body = seq_items(loop.body)
    copies = list(schedule.prefetched)
    rest = [s for s in body if not schedule.is_prefetched(s)]
    gemms = [s for s in rest if isinstance(s, tirx.TilePrimitiveCall) and s.op.name == "tirx.tile.gemm"]
    if not gemms:
        return None, _refuse("no_gemm", "cp.async (the pipelined loop body holds no T.gemm)")
    others = [s for s in rest if not any(s.same_as(g) for g in gemms)]
    for s in others:
        reads, writes = buffers_touched(s)
        # plan.shared: shared tiles and the fragments the plan keeps in shared memory (FlashAttention's P
        # without wgmma's register form), as the emitter's touches_shared counts them
        if any(b in plan.shared for b in reads + writes):
            return None, _refuse(
                "shared_memory",
                "cp.async (a statement of the pipelined loop besides its T.gemm "
                "uses shared memory, which the stage release does not order)",
            )
    # Where two CTAs of a FlashAttention-like loop (several T.gemm) fit an SM, a producer warp would leave
    # room for one (registers are granted per warp; 256 threads at 128 registers fill half the SM), so the
    # first consumer thread issues the loads, at 256 threads only, where that beat cp.async
    # (docs/decisions.md#two-ctas-per-sm-the-first-consumer-thread-issues-the-loads,
    # docs/decisions.md#when-cpasync-stays).
    # tile_nb.producer_warp = 0 (TILE_NB_PRODUCER_WARP=0): no producer warp for any TMA kernel, 1: always one
    # (cp.async where two CTAs fit).
    producer_mode = options.producer_warp
    # a producer warp skips the code before the loop: it cannot place copies by what that code computes
    computed = _computed_before_the_loop(func, loop, copies)
    no_producer = f"a copy's position reads {computed}, which the threads compute before the loop" \
        if computed else ""
    if computed and producer_mode is True:
        return None, _refuse("copy_index", f"cp.async (no producer warp: {no_producer})")
    two = len(gemms) > 1 and _two_ctas_fit(plan)
    inline = bool(computed) or producer_mode is False or (producer_mode is None and two and threads == 256)
    if mode is not True and two and not inline:
        return None, Refusal(TWO_CTAS_PER_SM, _TWO_CTAS_PER_SM)
    if mode is not True and threads < 256 and len(gemms) > 1:
        # FlashAttention with one consumer warpgroup whose two CTAs do not fit (head dim 256) keeps cp.async
        # until TMA is measured there
        # (docs/decisions.md#two-ctas-per-sm-the-first-consumer-thread-issues-the-loads)
        return None, _refuse(
            "one_warpgroup",
            "cp.async (one consumer warpgroup and several T.gemm per iteration: "
            "TMA is not measured there yet; tile_nb.tma = 1 forces it)",
        )
    accs = [region_of(g.args[0])[0] for g in gemms]
    if not all(isinstance(plan.accumulators.get(c), WgmmaAccLayout) for c in accs):
        return None, _refuse("gemm_not_wgmma", "cp.async (a T.gemm of the loop is not on wgmma)")
    # ptxas caps a thread's registers at 65536 over the launch's threads rounded up to whole warpgroups (seen:
    # 416 threads get 128 registers, not 157)
    budget = 65536 // -(-(threads + PRODUCER_THREADS) // 128) // 128
    largest = max(plan.accumulators[c].regs for c in accs)
    # why a producer warp leaves the consumers too few registers; a producer warpgroup may not
    warp_short = None
    if budget < plan.fragment_registers or budget < largest + WGMMA_HEADROOM:
        warp_short = (f"cp.async (with a producer warp each thread may use {budget} registers; the register "
                      f"fragments alone take {plan.fragment_registers}, the largest accumulator {largest})")
    # The wgmma group of iteration k stays in flight into iteration k+1 only when nothing reads the
    # accumulator in between: one T.gemm and no other statement in the loop, no rounding (16-bit
    # accumulators are rounded after every T.gemm, docs/IR.md), no clearing. Otherwise each iteration
    # waits for its MMAs and releases its own stage (FlashAttention: Q K^T, the softmax, then P V,
    # all on the stage's K and V tiles).
    c_buf, gemm = accs[0], gemms[0]
    waits = [
        why
        for cond, why in (
            (len(gemms) > 1, f"{len(gemms)} T.gemm in the loop"),
            (bool(others), "the loop reads the accumulator"),
            (
                str(c_buf.dtype) != accumulator_register_dtype(c_buf),
                f"{c_buf.dtype} accumulators are rounded after every T.gemm",
            ),
            (float(gemm.args[7].value) == 0.0, "clear_accum=True"),
        )
        if cond
    ]
    in_flight = not waits
    operands = {region_of(g.args[i])[0] for g in gemms for i in (1, 2)}
    planned = []
    for c in copies:
        # its tensor map would be encoded on the host, which knows no tensor the kernel declares
        name = region_of(c.args[1])[0].name
        if name in plan.declared_in_kernel:
            return None, _refuse("copy", f"cp.async ({name} is {plan.declared_in_kernel[name]})")
        tc, why = _plan_copy(plan, c, operands)
        if tc is None:
            return None, _refuse("copy", f"cp.async ({why})")
        planned.append(tc)
    if not planned:
        return None, _refuse("no_copies", "cp.async (no global->shared copies in the loop)")
    pingpong = _pingpong(options, threads, gemms)
    arrivals = _arrival_groups(rest, planned)
    overlap, why_not = _overlap(options, rest, gemms, planned, arrivals, pingpong)
    if overlap is not None and inline:  # the overlap's registers come from a producer warpgroup (setmaxnreg)
        overlap, why_not = None, "no producer warpgroup to take registers from"
    registers = None
    if overlap is not None:
        registers, why_not = _overlap_registers(plan, threads, largest)
        overlap = overlap if registers is not None else None
    if registers is None and warp_short and not inline:
        return None, _refuse("registers", warp_short)
    producer = 128 if registers is not None else 0 if inline else PRODUCER_THREADS
    return TmaPlan(
        loop,
        stages,
        tuple(planned),
        tuple(rest),
        in_flight,
        pingpong,
        arrivals,
        overlap,
        producer,
        registers,
        2 if two and inline else 1,
        tuple(waits),
        "" if overlap is not None else why_not,
        no_producer,
    ), None


def _computed_before_the_loop(func, loop, copies) -> str:
    """The first value a copy's position reads that only the consumer threads compute: a load of a register,
    `T.alloc_var` or shared buffer (their stores before the loop run on the consumers alone), directly or
    through a variable bound to such a load (every thread evaluates `Bind`s), as "name (what)"; "" when
    every position is made of block indices, parameters, the loop variable, loads of global tensors and
    variables bound to those, which the producer evaluates as well."""
    binds = {s.var: s.value for s in iter_stmts(func.body) if isinstance(s, tirx.Bind)}
    others = [v for v in vars_bound_in(func.body) if v not in binds and not v.same_as(loop.loop_var)]

    def first(expr, seen) -> str:
        for v in tirx.analysis.undefined_vars(expr):
            if any(v.same_as(o) for o in others):
                return f"{v.name} (a loop variable of the kernel)"
            if v in binds and v not in seen:
                found = first(binds[v], seen | {v})
                if found:
                    return found
        loads = []
        walk_loads(expr, loads.append)
        return next((f"{ld.source.name} (a {scope_of(ld.source)} buffer)" for ld in loads
                     if scope_of(ld.source) != "global"), "")

    for c in copies:
        for start, _ in region_of(c.args[1])[1]:
            found = first(start, frozenset())
            if found:
                return found
    return ""


def describe_tma(tma: TmaPlan) -> str:
    """The pipeline note of a TMA plan, for people (the plan's `pipeline_note` starts with it)."""
    note = (
        "TMA + mbarriers, loads issued by the first consumer thread (no producer warp"
        + (f": {tma.no_producer})" if tma.no_producer else ")")
        if tma.producer_threads == 0
        else f"TMA + mbarriers, producer {'warpgroup' if tma.registers else 'warp'} (warp-specialized)"
    )
    if not tma.in_flight and tma.overlap is None:
        note += f"; each k-tile's MMAs complete before its stage is released ({'; '.join(tma.waits)})"
    if tma.pingpong:
        note += f"; {tma.pingpong} consumer warpgroups take turns issuing their T.gemm (ping-pong)"
    if len(tma.arrivals) > 1:
        note += "; each T.gemm waits only for the tiles it reads"
    if tma.overlap is not None:
        note += (
            "; softmax/MMA overlap: the second T.gemm of iteration k-1 runs under iteration k's statements "
            "between the two T.gemm; each stage's tiles are released when the T.gemm reading them "
            "is done; the "
            f"producer hands its registers to the consumers (setmaxnreg {tma.registers[0]} / "
            f"{tma.registers[1]})"
        )
    elif tma.no_overlap:
        note += f"; no softmax/MMA overlap ({tma.no_overlap})"
    return note


def _two_ctas_fit(plan) -> bool:
    """Whether two CTAs of this kernel share an SM's shared memory (and, at <= 256 threads, its registers at
    128 per thread)."""
    return plan.threads <= 256 and 2 * (_pool_bytes(plan) + 1024) <= SHARED_PER_SM


def _overlap_registers(plan, threads: int, largest: int) -> tuple[tuple | None, str]:
    """(producer, consumer) registers per thread for the overlapped loop, or (None, why not). The second
    T.gemm's operands stay live through the next iteration's softmax: a producer warpgroup keeps 24 registers
    (setmaxnreg) and the consumers share the rest."""
    consumer = min(240, (_REGISTER_POOL - 128 * _PRODUCER_REGISTERS) // threads // 8 * 8)
    need = max(plan.fragment_registers + _OVERLAP_HEADROOM, largest + WGMMA_HEADROOM)
    if threads + 128 > 1024 or consumer < need:
        return (
            None,
            f"it needs about {need} registers per consumer thread; {consumer} are to be had at "
            f"{threads} threads",
        )
    return (_PRODUCER_REGISTERS, consumer), ""


def _overlap(options, rest, gemms, copies, arrivals, pingpong) -> tuple[Overlap | None, str]:
    """Whether the loop can overlap its second T.gemm with the next iteration's register work (Overlap), or
    (None, why not); (None, "") where the question does not arise (not two T.gemm).

    Moving G2 of iteration k-1 after `head` and G1 of iteration k, and `early` before G2's completion, keeps
    every read and write of the in-order loop when none of those statements touches G2's accumulator or
    operands. `late` (from the first statement between the T.gemm that touches G2's accumulator or A operand
    on) runs after G2 of k-1 completes, as in order. On by default; `tile_nb.softmax_overlap` = 0 (or
    TILE_NB_SOFTMAX_OVERLAP=0) turns it off."""
    if len(gemms) != 2:
        return None, ""
    if not options.softmax_overlap:
        return None, "tile_nb.softmax_overlap = 0"
    if pingpong:
        return None, "ping-pong schedules its T.gemm by turns"
    g1, g2 = gemms
    if not rest[-1].same_as(g2):
        return None, "the second T.gemm is not the loop's last statement"
    first = next(i for i, st in enumerate(rest) if st.same_as(g1))
    c2, a2, b2 = (region_of(g2.args[i])[0] for i in range(3))
    if any(str(region_of(g.args[0])[0].dtype) != "float32" for g in gemms):
        return None, "an accumulator is not float32 (16-bit accumulators are rounded after every T.gemm)"
    g2_buffers = (c2, a2, b2)

    def touches(st, bufs):
        reads, writes = buffers_touched(st)
        return any(b.same_as(x) for b in reads + writes for x in bufs)

    if any(touches(st, g2_buffers) for st in rest[:first + 1]):
        return None, "a statement up to the first T.gemm touches the second T.gemm's operands"
    late = next((i for i in range(first + 1, len(rest) - 1) if touches(rest[i], (c2, a2))), len(rest) - 1)
    late_groups = tuple(g for g, (_, members) in enumerate(arrivals)
                        if any(touches(g2, (copies[ci].tile_buffer,)) for ci in members))
    return Overlap(first, late, late_groups), ""


def _arrival_groups(rest, copies) -> tuple:
    """((index of the first statement in `rest` reading them, copy indices), ...) in statement order."""
    first = {}
    for ci, c in enumerate(copies):
        use = next(
            i for i, s in enumerate(rest) if any(b.same_as(c.tile_buffer) for b in buffers_touched(s)[0])
        )
        first.setdefault(use, []).append(ci)
    return tuple((i, tuple(first[i])) for i in sorted(first))


def _pingpong(options, threads: int, gemms) -> int:
    """Consumer warpgroups that take turns at the tensor cores, or 0.

    With several T.gemm per iteration and register work between them (FlashAttention's softmax),
    warpgroups that start together also finish their MMAs together and then all run their softmax
    while the tensor cores idle. Taking turns (FlashAttention-3's ping-pong schedule) puts one
    warpgroup's softmax under another's MMAs:
    warpgroup w waits on named barrier 2 + w before issuing a T.gemm, and after issuing it lets warpgroup w +
    1 go; the last warpgroup lets the first start. Off by default, because without the overlap of softmax and
    MMAs inside a warpgroup that FlashAttention-3 pairs it with it did not pay
    (docs/decisions.md#flashattention-ping-pong-is-opt-in-row-sums-stay-a-chain).
    `tile_nb.wgmma_pingpong` = 1 (or TILE_NB_PINGPONG=1) turns it on."""
    groups = threads // 128
    if not options.pingpong or len(gemms) < 2 or groups < 2 or groups > 14:  # barrier ids 2 .. 15
        return 0
    return groups


def _pool_bytes(plan) -> int:
    """The shared tiles' bytes (stages included), before alignment."""
    return sum(t.nbytes for t in plan.shared.values()) + sum(t.nbytes for t in plan.workspaces.values())


def _top_level(stmt):
    """Statements reached from the kernel body through sequences and attributes only (not loops or ifs)."""
    if isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            yield from _top_level(s)
    elif isinstance(stmt, tirx.AttrStmt):
        yield from _top_level(stmt.body)
    else:
        yield stmt


def _plan_copy(plan, call, operands):
    dst, drng = region_of(call.args[0])
    src, srng = region_of(call.args[1])
    if dst not in operands:
        return None, f"the copy into {dst.name} does not feed a T.gemm of the loop"
    tile = plan.shared[dst]
    if str(src.dtype) != str(dst.dtype) or tirx_bits(src.dtype) not in (8, 16):
        return None, f"the copy {src.name} -> {dst.name} is not an 8- or 16-bit copy without conversion"
    elem = tirx_bits(src.dtype) // 8
    if len(tile.shape) != 2 or [const_int(e) for _, e in drng] != [int(x) for x in tile.shape]:
        return None, f"the copy into {dst.name} does not write the whole 2-D tile"
    if list(src.strides) or const_int(src.elem_offset) != 0 or scope_of(src) != "global":
        return None, f"{src.name} is not a contiguous global tensor"
    if not plan.aligned(src):
        return None, f"{src.name}'s data pointer is not 16-byte aligned in this call"
    rank = len(src.shape)
    if rank > 5:
        return None, f"{src.name} has rank {rank} (TMA handles up to 5)"
    ext = [const_int(e) for _, e in srng]
    if ext[:-2] != [1] * (rank - 2) or ext[-2:] != [int(x) for x in tile.shape]:
        return None, f"the copy from {src.name} must take a [rows, cols] tile from its last two dimensions"
    inner = const_int(src.shape[-1])
    if inner is None:
        return (
            None,
            f"{src.name}'s last dimension is not a compile-time constant (TMA needs 16-byte row strides)",
        )
    if inner * elem % 16:
        return None, f"{src.name}'s rows are not a multiple of 16 bytes (TMA needs 16-byte strides)"
    rows, cols = (int(x) for x in tile.shape)
    if tile.panel:
        if cols % 64 or rows > 256:
            return None, f"{dst.name} is not made of 64-column panels of at most 256 rows"
        boxes = tuple(Box((64, rows) + (1,) * (rank - 2), p * rows * 64, (64 * p,) + (0,) * (rank - 1))
                      for p in range(cols // 64))
        return TmaCopy(call, dst, tile.elems, src, _SWIZZLE_KIND[128], boxes), ""
    if not tile.swizzle or cols * elem not in _SWIZZLE_KIND or rows > 256:
        return None, f"{dst.name} is not a 64- or 128-byte-row swizzled tile of at most 256 rows"
    box = Box((cols, rows) + (1,) * (rank - 2), 0, (0,) * rank)
    return TmaCopy(call, dst, tile.elems, src, _SWIZZLE_KIND[cols * elem], (box,)), ""

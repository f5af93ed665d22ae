"""Layout inference: a register layout for every `local.fragment`, or the reason it lives in shared memory.

Each op and loop that touches fragments says how their layouts relate
(tilelang's layout inference, in the small):
- `T.gemm`'s accumulator has the layout of its MMA (fixed before inference, `fragments.mma_accumulator`);
- a `T.Parallel` nest relates the fragments it indexes by all its loop variables in order (one layout, which
  drives the loop: each thread runs over its own registers), and those indexed by the first variable only (the
  row slice of that layout) or the last only (the column slice);
- `T.reduce_*(src, dst, dim)`: dst has src's layout sliced over dim; a fragment-to-fragment `T.copy`: equal;
- a copy between a fragment and global or shared memory, and `T.fill`, accept any layout (the default
  `fragments.blocked` vectorizes along the last dim for the narrowest dtype it is copied with).
Fragments that cannot be registers are placed in shared memory, with the reason: operands of `T.gemm` (the
tensor cores, and the FMA path, read them there), tiles of rank above 2, partial regions, and element
accesses other than at the loop point of a `T.Parallel` nest (they would read another thread's registers).
A fragment that two relations give different layouts is an error naming both, with the fix. When the
register fragments need more registers than a thread can spare, the largest non-accumulator fragments move to
shared memory, noted in the plan (with `spill`: only past what ptxas may spill).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import tirx

from ..errors import LoweringError
from ..exprs import walk_loads
from ..irwalk import region_of, scope_of
from .budget import MAX_REGISTERS_PER_THREAD, SPILL_ALLOWANCE, packed_registers
from .fragments import FragmentLayout, blocked

__all__ = ["FragmentPlan", "infer_layouts", "layout_groups", "rows_coupled"]

# Registers left for addresses, loop counters and temporaries when fragments are placed in registers.
_REGISTER_HEADROOM = 40


@dataclass(frozen=True)
class FragmentPlan:
    """The outcome of layout inference."""

    layouts: dict  # fragment buffer -> FragmentLayout (in registers)
    shared: dict  # fragment buffer -> why it is in shared memory
    loop_layouts: dict  # outermost T.parallel For of a nest -> the FragmentLayout that drives it
    registers: int = 0  # 32-bit registers per thread that the register fragments take
    over_budget: frozenset = frozenset()  # the fragments in `shared` moved there for registers (_over_budget)

    def layout(self, buf) -> FragmentLayout | None:
        return self.layouts.get(buf)


@dataclass
class _Loop:
    """A T.Parallel nest: its loop variables, extents, and the fragments it indexes by them."""

    stmt: tirx.For
    loop_vars: list
    extents: list
    line: int | None
    full: list = field(default_factory=list)
    rows: list = field(default_factory=list)  # indexed [v0] (slice over the last dim)
    cols: list = field(default_factory=list)  # indexed [v_last] (slice over the first dim)


def _is_parallel(s) -> bool:
    return isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL


def _static_shape(buf) -> tuple | None:
    try:
        return tuple(int(x) for x in buf.shape)
    except (TypeError, ValueError):
        return None


def _whole(buf, rng) -> bool:
    shape = _static_shape(buf)
    if shape is None or len(rng) != len(shape):
        return False
    return all(
        isinstance(m, tvm.ir.prim.expr.IntImm)
        and int(m) == 0
        and isinstance(e, tvm.ir.prim.expr.IntImm)
        and int(e) == n
        for (m, e), n in zip(rng, shape, strict=True)
    )


def _bits(dtype) -> int:
    return tvm.DataType(str(dtype)).bits


class _Collector:
    """One walk over the body: the fragments, their relations, and what forces some into shared memory."""

    def __init__(self, func, lines, accumulators: dict, packed=frozenset()):
        self.lines = lines
        self.accumulators = accumulators
        self.packed = frozenset(packed)  # 16-bit fragments held as packed pairs (wgmma's register A operands)
        self.fragments: list = []
        self.alloc_line: dict = {}
        self.shared: dict = {}  # buf -> reason
        self.equal: list = []  # (buf, buf, why, line)
        self.slices: list = []  # (parent, dim, child, why, line)
        self.loops: list[_Loop] = []
        self.narrowest: dict = {}  # buf -> narrowest element bits it is copied with
        self.visit(func.body, None)

    def force_shared(self, buf, reason: str):
        self.shared.setdefault(buf, reason)

    def is_fragment(self, buf) -> bool:
        return scope_of(buf) == "local.fragment"

    def visit(self, stmt, loop: _Loop | None):
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                self.visit(s, loop)
        elif isinstance(stmt, tirx.AllocBuffer):
            if self.is_fragment(stmt.buffer):
                self.fragments.append(stmt.buffer)
                shape = _static_shape(stmt.buffer)
                if shape is None or len(shape) > 2:
                    self.force_shared(stmt.buffer, "register layouts cover 1-d and 2-d tiles only")
        elif _is_parallel(stmt) and loop is None:
            nest = [stmt]
            while _is_parallel(nest[-1].body):
                nest.append(nest[-1].body)
            extents = [_static_int(l.extent) for l in nest]
            new = _Loop(
                stmt, [l.loop_var for l in nest], extents, self.lines.line_of(_first_line_stmt(nest[-1].body))
            )
            self.loops.append(new)
            self.visit(nest[-1].body, new)
        elif isinstance(stmt, tirx.For):
            self.loads(stmt.min, loop)
            self.loads(stmt.extent, loop)
            self.visit(stmt.body, loop)
        elif isinstance(stmt, tirx.TilePrimitiveCall):
            self.tile_op(stmt, loop)
        elif isinstance(stmt, tirx.BufferStore):
            self.access(stmt.buffer, stmt.indices, loop, stmt)
            self.loads(stmt.value, loop, stmt)
            for i in stmt.indices:
                self.loads(i, loop, stmt)
        elif isinstance(stmt, tirx.IfThenElse):
            self.loads(stmt.condition, loop)
            self.visit(stmt.then_case, loop)
            if stmt.else_case is not None:
                self.visit(stmt.else_case, loop)
        elif isinstance(stmt, tirx.While):
            self.loads(stmt.condition, loop)
            self.visit(stmt.body, loop)
        elif isinstance(stmt, tirx.Evaluate):
            self.loads(stmt.value, loop, stmt)
        elif isinstance(stmt, tirx.Bind):
            self.loads(stmt.value, loop, stmt)
        elif isinstance(stmt, tirx.AttrStmt):
            self.loads(stmt.value, loop) if isinstance(stmt.value, tvm.ir.Expr) else None
            self.visit(stmt.body, loop)
        elif hasattr(stmt, "body") and isinstance(stmt.body, tirx.Stmt):
            self.visit(stmt.body, loop)

    def loads(self, expr, loop, stmt=None):
        walk_loads(expr, lambda ld: self.access(ld.source, ld.indices, loop, stmt))

    def access(self, buf, indices, loop: _Loop | None, stmt):
        if not self.is_fragment(buf):
            return
        where = f" (line {self.lines.line_of(stmt)})" if stmt is not None and self.lines.line_of(stmt) else ""
        if loop is None:
            self.force_shared(buf, f"it is read or written element by element outside T.Parallel{where}")
            return
        shape = _static_shape(buf)
        lv = loop.loop_vars
        same = lambda idx, vs: len(idx) == len(vs) and all(  # noqa: E731
            isinstance(i, tvm.ir.expr.Var) and i.same_as(v) for i, v in zip(idx, vs, strict=True))
        idx = list(indices)
        if same(idx, lv) and shape == tuple(loop.extents):
            _add_once(loop.full, buf)
        elif len(lv) == 2 and same(idx, lv[:1]) and shape == (loop.extents[0],):
            _add_once(loop.rows, buf)
        elif len(lv) == 2 and same(idx, lv[1:]) and shape == (loop.extents[1],):
            _add_once(loop.cols, buf)
        else:
            text = ", ".join(str(i) for i in idx)
            self.force_shared(
                buf,
                f"T.Parallel indexes it at [{text}]{where}, not at the loop point: the element "
                "may be held by another thread",
            )

    def tile_op(self, call, loop):
        line = self.lines.line_of(call)
        name = call.op.name.rsplit(".", 1)[-1]
        regions = [region_of(a) for a in call.args if isinstance(a, tvm.ir.expr.TensorRegion)]
        for a in call.args:
            if isinstance(a, tvm.ir.expr.TensorRegion):
                for r in a.region:
                    self.loads(r.min, loop, call)
        if loop is not None:
            for buf, _ in regions:
                if self.is_fragment(buf):
                    self.force_shared(buf, f"T.{name} runs inside a T.Parallel loop (line {line})")
            return
        frags = [(buf, rng) for buf, rng in regions if self.is_fragment(buf)]
        for buf, rng in frags:
            if not _whole(buf, rng) and buf not in self.accumulators:
                self.force_shared(buf, f"T.{name} at line {line} uses a part of it")
        if name == "gemm":
            for buf, _ in regions[1:3]:
                # (pinned: wgmma's register A operand)
                if self.is_fragment(buf) and buf not in self.accumulators:
                    self.force_shared(
                        buf,
                        f"it is an operand of T.gemm (line {line}): T.gemm reads its operands "
                        "from shared memory",
                    )
        elif name == "copy":
            (dst, _), (src, _) = regions[0], regions[1]
            for frag, other in ((dst, src), (src, dst)):
                if self.is_fragment(frag) and scope_of(other) in _PER_THREAD:
                    self.force_shared(
                        frag,
                        f"T.copy at line {line} moves it to or from the per-thread buffer "
                        f"{other.name}, which every thread holds whole",
                    )
            if self.is_fragment(dst) and self.is_fragment(src):
                if _static_shape(dst) == _static_shape(src):
                    self.equal.append((dst, src, f"T.copy({src.name}, {dst.name})", line))
                else:
                    self.force_shared(
                        dst, f"T.copy at line {line} copies between fragments of different shapes"
                    )
            for frag, other in ((dst, src), (src, dst)):
                if self.is_fragment(frag):
                    bits = min(_bits(frag.dtype), _bits(other.dtype))
                    self.narrowest[frag] = min(self.narrowest.get(frag, bits), bits)
        elif name == "cumsum":
            for buf, _ in regions:
                if self.is_fragment(buf):  # scan.py scans shared memory, line by line
                    self.force_shared(buf, f"T.cumsum at line {line} scans it in shared memory")
        elif name in ("sum", "max", "min"):
            (dst, _), (src, _) = regions[0], regions[1]
            if self.is_fragment(src) and scope_of(dst) in _PER_THREAD:
                self.force_shared(
                    src,
                    f"T.reduce_{name} at line {line} reduces it into the per-thread buffer "
                    f"{dst.name}, which every thread holds whole",
                )
            axes = [int(a) % len(src.shape) for a in call.args[2]]
            if self.is_fragment(dst) and len(dst.shape) != max(len(src.shape) - len(axes), 1):
                # a 1-d tile into a [1, 1] fragment: dst is no slice of src's
                # layout; the reduction stores to it
                self.force_shared(
                    dst,
                    f"T.reduce_{name} at line {line} gives a {len(src.shape) - len(axes)}-d "
                    f"result, and {dst.name} is {len(dst.shape)}-d",
                )
            elif self.is_fragment(dst) and self.is_fragment(src) and len(axes) == 1:
                self.slices.append(
                    (src, axes[0], dst, f"T.reduce_{name}({src.name}, {dst.name}, dim={axes[0]})", line)
                )
            elif self.is_fragment(dst) and self.is_fragment(src):
                self.force_shared(dst, f"T.reduce_{name} at line {line} reduces over several dims")


_PER_THREAD = ("local", "local.var")


def _add_once(items: list, buf):
    if not any(b.same_as(buf) for b in items):
        items.append(buf)


def _static_int(e):
    try:
        return int(e)
    except (TypeError, ValueError):
        return None


def _first_line_stmt(stmt):
    from ..irwalk import iter_stmts

    for s in iter_stmts(stmt):
        if isinstance(s, (tirx.BufferStore, tirx.TilePrimitiveCall, tirx.Evaluate)):
            return s
    return stmt


def _register_cost(buf, layout: FragmentLayout, packed=frozenset()) -> int:
    """32-bit registers a fragment takes per thread: two for a 64-bit element; half for a 16-bit one that
    wgmma reads as packed pairs (a register A operand)."""
    return packed_registers(buf, layout, packed)


def infer_layouts(
    func: tirx.PrimFunc, threads: int, accumulators: dict, lines, packed=frozenset(), spill: bool = False
) -> FragmentPlan:
    """Layouts of the fragments of `func` (a phase-2 PrimFunc). `accumulators`: fragments whose layout the MMA
    fixes (T.gemm C buffers, and A operands that wgmma reads from registers) -> that FragmentLayout.
    Fragments over a thread's spare registers move to shared memory; with `spill`, only those past what
    ptxas may spill (budget.SPILL_ALLOWANCE)."""
    c = _Collector(func, lines, accumulators, packed)
    over_budget = set()
    while True:
        while _drop_driverless(c):  # forcing a fragment into shared memory can take the driver out of a loop
            pass
        layouts = _solve(c, threads)
        demoted = _over_budget(c, layouts, spill)
        if not demoted:
            break
        # each pass must move a fragment out of registers, or the loop would not end
        assert any(buf not in c.shared for buf in demoted), (
            f"{[b.name for b in demoted]} are already in shared memory"
        )
        for buf, reason in demoted.items():
            c.force_shared(buf, reason)
        over_budget.update(demoted)
    shared = {b: c.shared[b] for b in c.fragments if b in c.shared and b not in accumulators}
    loop_layouts = {}
    for loop in c.loops:
        driver = next((b for b in loop.full if b in layouts), None)
        if driver is not None:
            loop_layouts[loop.stmt] = layouts[driver]
    registers = sum(_register_cost(b, l, c.packed) for b, l in layouts.items())
    return FragmentPlan(layouts, shared, loop_layouts, registers, frozenset(over_budget))


def rows_coupled(func: tirx.PrimFunc) -> set:
    """2-d fragments whose rows meet a row statistic: reduced over their last dim, or driving a T.Parallel
    loop that also indexes a 1-d fragment by the row. An accumulator among them gets all its warps along M (a
    row is then never split between warps, and the row statistics of two accumulators share one layout)."""
    from ..diagnostics import SourceLines

    c = _Collector(func, SourceLines(func), {})
    out = {src for src, dim, _, _, _ in c.slices if dim == len(src.shape) - 1 and len(src.shape) == 2}
    for loop in c.loops:
        if loop.rows:
            out.update(loop.full)
    return out


def layout_groups(func: tirx.PrimFunc) -> list:
    """Sets of fragments that must share one register layout: those a T.Parallel loop indexes by its whole
    loop point, and the two sides of a copy between fragments."""
    from ..diagnostics import SourceLines

    c = _Collector(func, SourceLines(func), {})
    return [set(loop.full) for loop in c.loops if len(loop.full) > 1] + [{a, b} for a, b, _, _ in c.equal]


def _drop_driverless(c: _Collector) -> bool:
    """Loops that index row or column fragments but no register fragment by the full loop point cannot give
    those a layout: they go to shared memory."""
    changed = False
    for loop in c.loops:
        if any(b not in c.shared for b in loop.full):
            continue
        for buf in loop.rows + loop.cols:
            if buf not in c.shared:
                c.force_shared(
                    buf,
                    f"the T.Parallel loop at line {loop.line} indexes it by one loop variable, "
                    "and no register fragment covers the whole loop",
                )
                changed = True
    return changed


class _Conflict(Exception):
    pass


def _solve(c: _Collector, threads: int) -> dict:
    """Assign layouts: accumulators first, then defaults in program order,
    propagating equalities and slices."""
    regs = [b for b in c.fragments if b not in c.shared]
    equal = [(a, b, why, line) for a, b, why, line in c.equal if a not in c.shared and b not in c.shared]
    slices = [s for s in c.slices if s[0] not in c.shared and s[2] not in c.shared]
    for loop in c.loops:
        full = [b for b in loop.full if b not in c.shared]
        for b in full[1:]:
            equal.append((full[0], b, f"the T.Parallel loop at line {loop.line} indexes both", loop.line))
        if full:
            for b in (b for b in loop.rows if b not in c.shared):
                slices.append(
                    (
                        full[0],
                        1,
                        b,
                        f"the T.Parallel loop at line {loop.line} (row of {full[0].name})",
                        loop.line,
                    )
                )
            for b in (b for b in loop.cols if b not in c.shared):
                slices.append((full[0], 0, b, f"the T.Parallel loop at line {loop.line} (column of "
                                              f"{full[0].name})", loop.line))
    layouts: dict = {}
    origin: dict = {}  # buf -> (why, line): what gave it its layout

    def assign(buf, layout, why, line):
        if buf in layouts:
            if layouts[buf] != layout:
                raise _Conflict((buf, why, line))
            return False
        layouts[buf] = layout
        origin[buf] = (why, line)
        return True

    def propagate():
        progress = True
        while progress:
            progress = False
            for a, b, why, line in equal:
                if a in layouts:
                    progress |= assign(b, layouts[a], why, line)
                elif b in layouts:
                    progress |= assign(a, layouts[b], why, line)
            for parent, dim, child, why, line in slices:
                if parent in layouts:
                    progress |= assign(child, layouts[parent].slice(dim), why, line)

    try:
        for buf, layout in c.accumulators.items():
            if buf in regs:
                assign(buf, layout, f"the T.gemm accumulator {buf.name}", c.lines.alloc_line(buf.name))
        propagate()
        for buf in sorted(regs, key=lambda b: -len(b.shape)):  # 2-d tiles first: rows come from them
            if buf in layouts:
                continue
            assign(
                buf, _choose(buf, layouts, slices, threads, c), "its first use", c.lines.alloc_line(buf.name)
            )
            propagate()
    except _Conflict as conflict:
        buf, why, line = conflict.args[0]
        first_why, first_line = origin.get(buf, ("", None))
        err = LoweringError(
            f"fragment {buf.name} needs two different register layouts: one from {first_why}"
            f"{f' (line {first_line})' if first_line else ''}, another from {why}"
            f"{f' (line {line})' if line else ''}",
            hint=f"stage it through shared memory (T.alloc_shared for {buf.name}, or T.copy into a "
                 "shared tile "
            "between the two uses), or use one fragment per use",
        )
        raise c.lines.locate(err, buffer_name=buf.name) from None
    return layouts


def _choose(buf, layouts: dict, slices: list, threads: int, c: _Collector) -> FragmentLayout:
    """A layout for `buf`: one already chosen for a tile of its shape when the slices it must produce then
    match, else the default blocked layout."""
    shape = _static_shape(buf)
    candidates = [l for b, l in layouts.items() if l.shape == shape]
    bits = c.narrowest.get(buf, _bits(buf.dtype))
    candidates.append(blocked(shape, threads, max(1, 128 // bits)))
    for cand in candidates:
        if all(child not in layouts or layouts[child] == cand.slice(dim)
               for parent, dim, child, _, _ in slices if parent.same_as(buf)):
            return cand
    return candidates[-1]


def _over_budget(c: _Collector, layouts: dict, spill: bool) -> dict:
    """The largest non-accumulator fragments to move to shared memory so that the rest fit a thread's
    registers (empty when they fit); with `spill`, the registers and what ptxas may spill."""
    if spill:
        budget = MAX_REGISTERS_PER_THREAD + SPILL_ALLOWANCE
        limit = f"the {budget} registers a thread has and ptxas may spill"
    else:
        budget = MAX_REGISTERS_PER_THREAD - _REGISTER_HEADROOM
        limit = f"the {budget} registers a thread can spare"
    demoted = {}
    movable = sorted((b for b in layouts if b not in c.accumulators),
                     key=lambda b: -_register_cost(b, layouts[b], c.packed))
    total = sum(_register_cost(b, l, c.packed) for b, l in layouts.items())
    for buf in movable:
        if total <= budget:
            break
        total -= _register_cost(buf, layouts[buf], c.packed)
        demoted[buf] = (f"the register fragments need more than {limit}; "
                        f"{buf.name} ({layouts[buf].regs} registers per thread) is the largest")
    return demoted

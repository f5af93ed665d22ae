"""Warp-specialized kernels (`T.ws`, mbarriers, `T.tma_copy`; language/sync.py) on the GPU: run in their
written order.

A `T.ws` kernel says which warp group runs each statement and orders the groups with mbarriers. The
interpreter runs the groups as written (interp/warps.py), as coroutines, and reports a read that no barrier
orders after its write. On the GPU tile_nb runs the same statements one after another in the order they are
written, by every thread, with its own schedule (its pipeline, its warp specialization, its barriers): the
`T.ws` regions, the mbarriers and their waits and arrivals drop out, and a `T.tma_copy` is the `T.copy` it
was written as.

That gives the kernel's result exactly when the written order is itself an order the barriers allow: then
every read sees the write it sees when the groups run concurrently (a program without races has one result
whatever order its barriers allow). `in_written_order` makes sure of it before the lowering (`_Walk`): it
walks the kernel's statements in order with the barriers' phase counts (an arrive counts the threads of its
region: 128 per warp group), and where a wait's phase has not completed when the walk reaches it (a consumer
written before the producer it waits for), that order is refused. Consecutive regions of disjoint warp groups
run concurrently, so their order is free: where the written one is refused, the other orders of those runs are
tried (`_an_allowed_order`, at most `MAX_ORDERS`), and where none passes the kernel is refused at the written
order's first blocked wait. Loops are walked iteration by iteration (at most `WALK_ITERATIONS` of one loop;
past that, and for loops whose trip count is not known at compile time, the first `WALK_ITERATIONS` are
checked and the statements after the loop are not).

A register fragment used in the regions of two warp groups is refused here as on the interpreter (each
group would have its own registers on a GPU that ran the groups as written).
"""
from __future__ import annotations

import itertools
import operator

from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..language.sync import BARRIER_SCOPE, WARP_GROUP, WS_ATTR
from .diagnostics import SourceLines
from .errors import LoweringError
from .irwalk import buffers_touched, children, iter_stmts, region_of, tile_calls

__all__ = ["MAX_ORDERS", "WALK_ITERATIONS", "in_written_order", "uses_warp_groups"]

SYNC_OPS = ("tirx.tile.ws", "tirx.tile.barrier_init", "tirx.tile.mbarrier_arrive", "tirx.tile.mbarrier_wait",
            "tirx.tile.tma_copy")
WALK_ITERATIONS = 64
MAX_ORDERS = 120  # orders of the runs of concurrent regions tried
_REGISTERS = ("local.fragment", "local", "local.var")
_DOCS = "docs/tilelang.md, \"Warp specialization on the GPU\""


def _is_sync(stmt) -> bool:
    return isinstance(stmt, TilePrimitiveCall) and stmt.op.name in SYNC_OPS


def _has_sync(stmt) -> bool:
    return any(_is_sync(s) or (isinstance(s, tirx.AttrStmt) and s.attr_key == WS_ATTR)
               for s in iter_stmts(stmt))


def uses_warp_groups(func) -> bool:
    return _has_sync(func.body)


def in_written_order(func: tirx.PrimFunc) -> tuple[tirx.PrimFunc, str | None]:
    """(`func` as one program in an order its barriers allow, with its `T.ws` regions and mbarrier operations
    taken out; the plan's note on it), or (`func`, None) where it has none. The order is the written one,
    except that consecutive regions of different warp groups (which run concurrently, as the branches of
    `if tx < 128: ... else: ...` do) may be taken in another order where the written one would wait for a
    later one."""
    if not uses_warp_groups(func):
        return func, None
    lines = SourceLines(func)
    _check_registers(func, lines)
    order, moved = _an_allowed_order(func, lines)
    body = _or_nothing(_erase(func.body, order))
    out = func.with_body(body)
    if func.attrs is not None and "tile_nb.tile_op_lines" in func.attrs:
        out = out.with_attr("tile_nb.tile_op_lines", [lines.line_of(c) or 0 for c in tile_calls(body)])
    note = ("T.ws regions and mbarriers run as one program in their written order, which their barriers "
            "allow (checked at compile time): every thread runs each statement, and tile_nb's own schedule "
            "(pipeline, warp specialization, barriers) replaces the hand-written one")
    if moved:
        note += "; " + "; ".join("the regions of warp groups " + " and ".join(map(str, groups))
                                 + " run in that order" for groups in moved)
    return out, f"{note} ({_DOCS})"


def _an_allowed_order(func, lines: SourceLines):
    """({SeqStmt: its items in the order to run}, [[warp groups of each region of a reordered run], ...]):
    the written order if
    the barriers allow it, else the first order of the runs of concurrent regions that they allow; the
    written order's error where none is."""
    runs = _concurrent_runs(func.body)
    choices = [list(itertools.permutations(range(len(items)))) for _, _, items in runs]
    first_error = None
    for n, pick in enumerate(itertools.product(*choices)):
        if n == MAX_ORDERS:
            break
        order = {}
        for (seq, start, items), perm in zip(runs, pick, strict=True):
            new = list(order.get(seq, seq.seq))
            new[start:start + len(items)] = [items[i] for i in perm]
            order[seq] = new
        try:
            _Walk(func, lines, order).walk(func.body, {}, None)
        except LoweringError as err:
            first_error = first_error or err
            continue
        moved = [[_groups(_ws_mask(items[i])) for i in perm]
                 for (_, _, items), perm in zip(runs, pick, strict=True) if list(perm) != sorted(perm)]
        return order, moved
    raise first_error


def _concurrent_runs(body) -> list:
    """[(SeqStmt, start, [regions])]: maximal runs of two or more consecutive `T.ws` regions of disjoint
    warp groups with barrier operations in them."""
    runs = []
    for stmt in iter_stmts(body):
        if not isinstance(stmt, tirx.SeqStmt):
            continue
        items, start = list(stmt.seq), 0
        while start < len(items):
            end, mask = start, 0
            while end < len(items) and _ws_mask(items[end]) and not _ws_mask(items[end]) & mask:
                mask |= _ws_mask(items[end])
                end += 1
            if end - start >= 2 and any(_has_sync(x) for x in items[start:end]):
                runs.append((stmt, start, items[start:end]))
            start = max(end, start + 1)
    return runs


def _ws_mask(stmt) -> int:
    return int(stmt.value) if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == WS_ATTR else 0


# ---- the check ------------------------------------------------------------------------------------------

class _Walk:
    """The written order's walk: the barriers' phases, statement by statement."""

    def __init__(self, func, lines: SourceLines, order: dict):
        self.lines = lines
        self.order = order
        self.threads = int((func.attrs or {}).get("tile_nb.threads", WARP_GROUP))
        self.barriers: dict = {}  # (buffer, index) -> [arrivals per phase, arrived, completed phases]
        self.checking = True

    def fail(self, message, stmt, hint=None):
        return self.lines.locate(LoweringError(message, hint=hint), stmt)

    def value(self, expr, env, stmt, what) -> int:
        v = _evaluate(expr, env)
        if v is None:
            raise self.fail(
                f"{what} is not known at compile time ({expr}): tile_nb runs a T.ws kernel on the GPU in its "
                "written order and checks at compile time that its barriers allow that order, which needs "
                "barrier indices, parities and the conditions around them as functions of loop counters",
                stmt, hint=f"index barriers by loop counters and constants ({_DOCS})")
        return v

    def walk(self, stmt, env, mask):
        if not self.checking or not _has_sync(stmt):
            return
        if isinstance(stmt, tirx.SeqStmt):
            for s in self.order.get(stmt, stmt.seq):
                self.walk(s, env, mask)
        elif isinstance(stmt, tirx.AttrStmt):
            self.walk(stmt.body, env, int(stmt.value) if stmt.attr_key == WS_ATTR else mask)
        elif isinstance(stmt, tirx.For):
            self.walk_loop(stmt, env, mask)
        elif isinstance(stmt, tirx.IfThenElse):
            cond = self.value(stmt.condition, env, stmt, "the condition of an `if` around barrier operations")
            branch = stmt.then_case if cond else stmt.else_case
            if branch is not None:
                self.walk(branch, env, mask)
        elif isinstance(stmt, TilePrimitiveCall):
            self.walk_call(stmt, env, mask)
        else:
            raise self.fail(f"barrier operations inside a {type(stmt).__name__} statement: tile_nb cannot "
                            "check their written order for the GPU", stmt)

    def walk_loop(self, loop, env, mask):
        start = self.value(loop.min, env, loop, "the start of a loop around barrier operations")
        extent = _evaluate(loop.extent, env)
        for i in range(WALK_ITERATIONS if extent is None else min(extent, WALK_ITERATIONS)):
            self.walk(loop.body, {**env, loop.loop_var: start + i}, mask)
        if extent is None or extent > WALK_ITERATIONS:
            self.checking = False  # the phases after a loop walked in part are not known

    def walk_call(self, call, env, mask):
        name = call.op.name
        if name == "tirx.tile.barrier_init":
            buf = region_of(call.args[0])[0]
            for i, count in enumerate(call.args[1:]):
                self.barriers[(buf, i)] = [int(count), 0, 0]
        elif name == "tirx.tile.mbarrier_arrive":
            bar, label = self.barrier(call, env)
            threads = self.threads if mask is None else WARP_GROUP * bin(mask).count("1")
            if bar[1] + threads > bar[0]:
                raise self.fail(f"{threads} threads arrive at {label}, whose phase {bar[2]} expects {bar[0]} "
                                f"arrivals and has {bar[1]}: the arrivals of one statement would spill into "
                                "the next phase", call,
                                hint="give T.alloc_barrier the number of threads that arrive per phase (128 "
                                     "per warp group)")
            bar[1] += threads
            if bar[1] == bar[0]:
                bar[1], bar[2] = 0, bar[2] + 1
        elif name == "tirx.tile.mbarrier_wait":
            bar, label = self.barrier(call, env)
            parity = self.value(call.args[1], env, call, "the parity of T.mbarrier_wait_parity")
            if bar[2] % 2 == parity:  # the phase of this parity is the one in progress
                raise self.fail(
                    f"this wait on {label} (parity {parity}) comes, in the written order, before the phase "
                    f"it waits for completes ({label} is in phase {bar[2]} with {bar[1]} of {bar[0]} "
                    "arrivals): tile_nb runs a T.ws kernel on the GPU one statement after another in the "
                    "order written, so what a wait waits for must be written before it", call,
                    hint=f"write the producing region before the consuming one ({_DOCS})")

    def barrier(self, call, env):
        buf, rng = region_of(call.args[0])
        index = self.value(rng[0][0], env, call, f"the index into {buf.name}")
        bar = self.barriers.get((buf, index))
        if bar is None:
            raise self.fail(f"{buf.name}[{index}] is used before T.alloc_barrier initializes it", call)
        return bar, f"{buf.name or 'a barrier'}[{index}]"


_BINARY = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "FloorDiv": operator.floordiv,
           "FloorMod": operator.mod, "Min": min, "Max": max, "EQ": operator.eq, "NE": operator.ne,
           "LT": operator.lt, "LE": operator.le, "GT": operator.gt, "GE": operator.ge,
           "And": lambda a, b: a and b, "Or": lambda a, b: a or b, "BitwiseXor": operator.xor,
           "BitwiseAnd": operator.and_, "BitwiseOr": operator.or_, "ShiftLeft": operator.lshift,
           "ShiftRight": operator.rshift}


def _evaluate(expr, env: dict):
    """The integer value of `expr` with the loop counters of `env` (Var -> int); None where it depends on
    anything else (a block index, a tensor's value, a T.dynamic size)."""
    if isinstance(expr, (tirx.IntImm, int)):
        return int(expr)
    if isinstance(expr, tirx.Var):
        return env.get(expr)
    kind = type(expr).__name__
    if kind in _BINARY:
        a, b = _evaluate(expr.a, env), _evaluate(expr.b, env)
        if a is None or b is None or kind in ("FloorDiv", "FloorMod") and b == 0:
            return None
        return int(_BINARY[kind](a, b))
    if kind == "Not":
        a = _evaluate(expr.a, env)
        return None if a is None else int(not a)
    if kind == "Cast":
        return _evaluate(expr.value, env) if "int" in str(expr.dtype) or str(expr.dtype) == "bool" else None
    if kind == "Select":
        cond = _evaluate(expr.condition, env)
        return None if cond is None else _evaluate(expr.true_value if cond else expr.false_value, env)
    return None


def _check_registers(func, lines: SourceLines) -> None:
    """A register buffer used in the regions of two different sets of warp groups is refused (each group
    would have its own copy on a GPU that ran the groups as written; the interpreter refuses it too)."""
    owners: dict = {}

    def visit(stmt, mask):
        if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == WS_ATTR:
            mask = int(stmt.value)
        if isinstance(stmt, (TilePrimitiveCall, tirx.BufferStore)) and mask is not None:
            reads, writes = buffers_touched(stmt)
            for buf in {*reads, *writes}:
                if buf.scope() not in _REGISTERS:
                    continue
                owner = owners.setdefault(buf.name, (mask, lines.line_of(stmt)))
                if owner[0] != mask:
                    raise lines.locate(LoweringError(
                        f"{buf.name} ({buf.scope()}) is used by warp groups {_groups(mask)} here and by "
                        f"warp groups {_groups(owner[0])} at line {owner[1]}: it lives in registers, so each "
                        "group would have its own copy",
                        hint="allocate one buffer per warp group, or pass the values through shared memory "
                             "and a barrier"), stmt)
        for child in children(stmt):
            visit(child, mask)

    visit(func.body, None)


def _groups(mask: int) -> list:
    return [k for k in range(mask.bit_length()) if mask >> k & 1]


# ---- the erasure ----------------------------------------------------------------------------------------

def _erase(stmt, order: dict):
    """`stmt` without T.ws regions (their bodies stay), mbarrier operations and barrier allocations, its
    sequences in `order`; None where nothing is left."""
    if _is_sync(stmt) or _is_barrier_alloc(stmt):
        return None
    if not _has_sync(stmt):
        return stmt
    if isinstance(stmt, tirx.SeqStmt):
        items = [s for s in (_erase(x, order) for x in order.get(stmt, stmt.seq)) if s is not None]
        return None if not items else items[0] if len(items) == 1 else tirx.SeqStmt(items, stmt.span)
    if isinstance(stmt, tirx.AttrStmt):
        body = _erase(stmt.body, order)
        if stmt.attr_key == WS_ATTR:
            return body
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, _or_nothing(body), stmt.span)
    if isinstance(stmt, tirx.For):
        body = _or_nothing(_erase(stmt.body, order))
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding,
                        stmt.annotations, stmt.step, stmt.span)
    if isinstance(stmt, tirx.IfThenElse):
        other = _erase(stmt.else_case, order) if stmt.else_case is not None else None
        return tirx.IfThenElse(stmt.condition, _or_nothing(_erase(stmt.then_case, order)), other, stmt.span)
    if isinstance(stmt, tirx.While):
        return tirx.While(stmt.condition, _or_nothing(_erase(stmt.body, order)), stmt.span)
    raise LoweringError(f"T.ws regions or barrier operations inside a {type(stmt).__name__} statement")


def _is_barrier_alloc(stmt) -> bool:
    return isinstance(stmt, (tirx.AllocBuffer, tirx.DeclBuffer)) and stmt.buffer.scope() == BARRIER_SCOPE


def _or_nothing(stmt):
    return stmt if stmt is not None else tirx.Evaluate(0)

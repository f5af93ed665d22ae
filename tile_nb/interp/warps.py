"""Warp-specialized blocks (`T.ws`, mbarriers, `T.tma_copy`; language/sync.py) on the interpreter.

A block whose kernel uses them runs as one coroutine per warp group (threads // 128 of them), each a Python
thread of which exactly one runs at a time (a strict hand-off: deterministic). A group runs until it must
wait: at an mbarrier wait whose phase has not completed, or at a statement outside `T.ws` (run by every group:
it executes once, when the last group reaches it, as a block-wide step). Then the next group that can go on
runs, the next higher id first. So a producer group runs as far ahead as its waits allow before the consumer
catches up, which is the schedule that exposes missing synchronization. When no group can go on, the block is
deadlocked: an error at the waiting statement names each group's barrier, its phase and arrivals.

Ordering checks (happens-before, by vector clocks): each group's clock advances at each arrive; a completed
phase carries the join of its arrivers' clocks and a wait that sees it completed takes them. Reads and writes
of shared tiles by tile operations (`T.copy`, `T.gemm`, ...) are recorded as boxes; one group's access that
conflicts with another group's earlier one (read after write, write after read or write) without an arrive ->
wait chain between them is an error at the user's line. A `T.tma_copy` write lands with its barrier's phase:
reading (or overwriting) it before a wait on that phase is an error, in the issuing group too.
"""
from __future__ import annotations

import threading

from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..language.sync import BARRIER_SCOPE, WARP_GROUP, WS_ATTR
from .compiler import Compiler, Frame, op_short_name, tile_rule
from .errors import DeadlockError, InterpreterError, OrderingError, location_of
from .memory import compile_region

__all__ = ["uses_warp_groups", "WarpInfo", "run_threads"]

_SHARED = ("shared", "shared.dyn")
_REGISTERS = ("local.fragment", "local", "local.var")
_CONTAINERS = (tirx.SeqStmt, tirx.IfThenElse, tirx.While, tirx.AttrStmt, tirx.Bind)
_SYNC_OPS = ("ws", "barrier_init", "mbarrier_arrive", "mbarrier_wait", "tma_copy")


def uses_warp_groups(func) -> bool:
    """Whether `func` has a `T.ws` region or an mbarrier: its blocks then run as warp-group coroutines."""
    def walk(node) -> bool:
        if isinstance(node, tirx.AttrStmt) and node.attr_key == WS_ATTR:
            return True
        if isinstance(node, TilePrimitiveCall):
            return op_short_name(node.op) in _SYNC_OPS
        if isinstance(node, tirx.SeqStmt):
            return any(walk(s) for s in node.seq)
        children = [getattr(node, k, None) for k in ("body", "then_case", "else_case")]
        return any(walk(c) for c in children if isinstance(c, tirx.Stmt))
    return walk(func.body)


class WarpInfo:
    """Compile-time side, kept on the `Compiler` (`comp.warps`): the groups of the `T.ws` being compiled."""

    def __init__(self):
        self.ids: tuple | None = None  # None: outside any T.ws (every group)
        self.leaves = 0
        self.touched: set = set()  # slots the statement being compiled uses (Compiler.slot)

    def wrap(self, comp: Compiler, node, closure):
        """A block-level statement's closure, run by its groups (every group
        outside T.ws), with its checks."""
        if isinstance(node, _CONTAINERS) or (isinstance(node, tirx.For) and int(node.kind) not in _PARALLEL) \
                or comp.par_vars:
            return closure
        if isinstance(node, TilePrimitiveCall) and op_short_name(node.op) == "ws":
            return closure  # the region's marker: no step of its own (that would sync its groups at entry)
        ids, key = self.ids, self.leaves
        self.leaves += 1
        accesses = _accesses(comp, node)
        registers = tuple(s for s in sorted(self.touched) if s in comp.buffers
                          and comp.buffers[s].scope() in _REGISTERS)
        location = comp.location if comp.location.line is not None else _first_located(node, comp.location)
        shares = isinstance(node, (tirx.AllocBuffer, tirx.DeclBuffer))
        buffers = comp.buffers  # (filled while the whole function compiles)

        def leaf(f):
            g = f.warp
            if g is None:  # outside the block's threads (grid-level code)
                closure(f)
                return
            g.sched.leaf(g, key, ids, f, closure, accesses, location, buffers if shares else None, registers)
        return leaf


def _first_located(node, fallback):
    """The location of the first statement with a source line under `node` (a `T.Parallel` loop has none)."""
    stack = [node]
    while stack:
        s = stack.pop()
        if getattr(s, "span", None) is not None:
            loc = location_of(s)
            if loc.line is not None:
                return loc
        if isinstance(s, tirx.SeqStmt):
            stack.extend(reversed(list(s.seq)))
        else:
            stack.extend(c for c in (getattr(s, k, None) for k in ("else_case", "then_case", "body"))
                         if isinstance(c, tirx.Stmt))
    return fallback


_PARALLEL = (int(tirx.ForKind.PARALLEL), int(tirx.ForKind.VECTORIZED), int(tirx.ForKind.THREAD_BINDING))


def _accesses(comp: Compiler, node):
    """(region, is_write) of the shared tiles a tile operation reads and writes; the first region is written
    (and read too by T.gemm and accumulating reductions), the others read."""
    if not isinstance(node, TilePrimitiveCall) or op_short_name(node.op) in _SYNC_OPS:
        return ()
    regions = [a for a in node.args if hasattr(a, "source") and hasattr(a, "region")]
    out = []
    for k, r in enumerate(regions):
        if r.source.scope() in _SHARED:
            if k == 0:
                out.append((compile_region(comp, r), True))
                if op_short_name(node.op) in ("gemm", "sum", "max", "min"):
                    out.append((compile_region(comp, r), False))
            else:
                out.append((compile_region(comp, r), False))
    return tuple(out)


# ---- run time ----------------------------------------------------------------------------------------------

class _Abort(BaseException):
    """Ends a group's thread when another group failed."""


class _Barrier:
    __slots__ = ("arrived", "completed", "count", "last_obs", "last_vc", "name", "pending", "pending_obs")

    def __init__(self, name: str, count: int, ngroups: int):
        self.name, self.count = name, count
        self.arrived = 0
        self.completed = 0  # phases completed; the phase in progress is this one
        self.pending = [0] * ngroups  # join of the clocks of this phase's arrivals
        self.last_vc = None  # the clocks the latest completed phase carries
        self.pending_obs: dict = {}  # and the barrier phases its arrivers had seen complete (TMA landings)
        self.last_obs: dict = {}


class _Access:
    __slots__ = ("box", "epoch", "gid", "line", "tma", "write")

    def __init__(self, box, gid, epoch, write, line, tma=None):
        self.box, self.gid, self.epoch, self.write, self.line, self.tma = box, gid, epoch, write, line, tma


class Group:
    """One warp group: its frame (own loop variables, shared buffers), clock and what it waits for."""

    def __init__(self, sched, gid: int, size: int, frame: Frame):
        self.sched, self.gid, self.size, self.frame = sched, gid, size, frame
        self.vc = [0] * sched.ngroups
        self.observed: dict = {}  # barrier key -> latest phase this group saw completed
        self.ready = None  # while blocked: a callable saying whether it may go on
        self.waiting = ""  # while blocked: what it waits for (for the deadlock message)
        self.where = None  # and the statement's location
        self.done = False
        self.counts: dict = {}  # leaf key -> times reached (collective statements are matched by it)
        frame.warp = self


def run_block(body, f: Frame, threads: int, buffers: dict) -> None:
    """Run a block's body as warp-group coroutines (see the module docstring)."""
    _Scheduler(threads, buffers).run(body, f)


class _Scheduler:
    def __init__(self, threads: int, buffers: dict):
        self.ngroups = max(1, -(-threads // WARP_GROUP))
        self.sizes = [min(WARP_GROUP, threads - WARP_GROUP * k) for k in range(self.ngroups)]
        self.buffers = buffers
        self.cv = threading.Condition()
        self.current = 0
        self.error: BaseException | None = None
        self.barriers: dict = {}  # (buffer slot, index) -> _Barrier
        self.collective: dict = {}  # (leaf key, n) -> set of arrived groups, or True once it ran
        self.shadow: dict = {}  # buffer slot -> [_Access]
        self.owners: dict = {}  # register buffer slot -> (group, line) of its first use inside a T.ws

    # -- coroutines -----------------------------------------------------------------------------------------
    def run(self, body, f: Frame) -> None:
        self.groups = [Group(self, k, self.sizes[k], _fork(f)) for k in range(self.ngroups)]
        run_threads(self, [threading.Thread(target=self._main, args=(g, body), daemon=True,
                                            name=f"tile_nb warp group {g.gid}") for g in self.groups])

    def _main(self, g: Group, body) -> None:
        with self.cv:
            while self.current != g.gid and self.error is None:
                self.cv.wait()
        try:
            if self.error is None:
                body(g.frame)
        except _Abort:
            return
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            with self.cv:
                self.error = self.error or err
                self.cv.notify_all()
            return
        with self.cv:
            g.done = True
            if self.error is not None:
                return
            nxt = self._next(g.gid)
            if nxt is not None:
                self.current = nxt.gid
            elif not all(h.done for h in self.groups):
                self.error = self._deadlock(None)
            self.cv.notify_all()

    def _next(self, after: int):
        n = self.ngroups
        for k in range(1, n + 1):
            h = self.groups[(after + k) % n]
            if not h.done and (h.ready is None or h.ready()):
                return h
        return None

    def block(self, g: Group, ready, waiting: str, location) -> None:
        """Let other groups run until `ready()` holds for `g`."""
        if ready():
            return
        with self.cv:
            g.ready, g.waiting, g.where = ready, waiting, location
            nxt = self._next(g.gid)
            if nxt is None:
                err = self._deadlock(location)
                self.error = self.error or err
                self.cv.notify_all()
                g.ready = None
                raise err
            self.current = nxt.gid
            self.cv.notify_all()
            while self.current != g.gid and self.error is None:
                self.cv.wait()
            g.ready = None
            if self.error is not None:
                raise _Abort()

    def _deadlock(self, location) -> InterpreterError:
        blocked = [h for h in self.groups if not h.done and h.ready is not None]
        lines = [f"  warp group {h.gid} {h.waiting}" for h in blocked]
        lines += [
            f"  warp group {h.gid} ended (reached the end of the kernel)" for h in self.groups if h.done
        ]
        if location is None and blocked:
            location = blocked[0].where
        return DeadlockError(
            "deadlock: no warp group can go on (the GPU would hang)\n" + "\n".join(lines),
            location,
            hint="each wait needs arrivals that come before it in some group; "
            "check the parity (a fresh barrier is in phase 0: waiting on parity 1 returns "
            "at once) and the arrive counts",
        )

    # -- statements ------------------------------------------------------------------------------------------
    def leaf(
        self, g: Group, key: int, ids, f: Frame, closure, accesses, location, buffers, registers
    ) -> None:
        members = tuple(range(self.ngroups)) if ids is None else tuple(k for k in ids if k < self.ngroups)
        if g.gid not in members:
            return
        if len(members) == 1:
            for s in registers:
                self.own(g, s, location)
        if len(members) > 1:
            n = g.counts.get(key, 0)
            g.counts[key] = n + 1
            slot = self.collective.setdefault((key, n), set())
            slot.add(g.gid)
            if len(slot) < len(members):
                where = f" at line {location.line}" if location.line is not None else ""
                self.block(
                    g,
                    lambda: self.collective.get((key, n)) is True,
                    f"waits{where} for warp groups {sorted(set(members) - slot)} to reach the statement "
                    f"that groups {list(members)} run together",
                    location,
                )
                return
            joined = [max(c) for c in zip(*(self.groups[m].vc for m in members), strict=True)]
            seen = _merge(*(self.groups[m].observed for m in members))
            for m in members:
                self.groups[m].vc, self.groups[m].observed = list(joined), dict(seen)
        f.members = members
        try:
            for region, write in accesses:
                self.check(g, members, region, write, f, location)
            closure(f)
        finally:
            f.members = None
        if buffers is not None:  # an allocation: every group's frame sees the buffer
            for s in buffers:
                for h in self.groups:
                    h.frame.vals[s] = f.vals[s]
        if len(members) > 1:
            self.collective[(key, n)] = True

    # -- ordering checks -------------------------------------------------------------------------------------
    def own(self, g: Group, slot: int, location) -> None:
        """A fragment / local buffer used inside `T.ws(k)` lives in group k's registers: one group only (the
        interpreter keeps one copy, the GPU one per group, so a second group
        would see values it cannot have)."""
        owner = self.owners.setdefault(slot, (g.gid, location.line))
        if owner[0] != g.gid:
            buf = self.buffers[slot]
            raise OrderingError(
                f"{buf.name} ({buf.scope()}) is used by warp group {g.gid} here and by warp group "
                f"{owner[0]} at line "
                f"{owner[1]}: it lives in registers, so each group would have its own copy on the GPU",
                location,
                hint="allocate one buffer per warp group, or pass the values through shared memory "
                     "and a barrier",
            )

    def check(self, g: Group, members, region, write: bool, f: Frame, location) -> None:
        _, starts, exts = region.resolve(f)
        box = tuple((s, s + e) for s, e in zip(starts, exts, strict=True))
        records = self.shadow.setdefault(region.slot, [])
        for rec in records:
            if not (write or rec.write) or not _overlap(rec.box, box):
                continue
            if rec.tma is not None:
                bkey, phase = rec.tma
                if g.observed.get(bkey, -1) < phase:
                    bar = self.barriers[bkey]
                    verb = "overwrites" if write else "reads"
                    raise OrderingError(
                        f"warp group {g.gid} {verb} {region.name}{_show(box)} before the T.tma_copy at line "
                        f"{rec.line} into it has landed: that copy completes with phase {phase} of "
                        f"{bar.name}, "
                        f"and this group has not waited for it",
                        location,
                        hint=f"T.mbarrier_wait_parity({bar.name}, {phase % 2}) first",
                    )
            elif rec.gid not in members and g.vc[rec.gid] < rec.epoch:
                if rec.write:
                    what = f"written by warp group {rec.gid} at line {rec.line}"
                    hint = (
                        "the writer arrives at a barrier after writing, and this group waits on it before "
                        "reading"
                    )
                else:
                    what = f"still being read by warp group {rec.gid} (line {rec.line})"
                    hint = (
                        "the reader arrives at a barrier after its read (releasing the tile), and this group "
                        "waits on it before writing"
                    )
                raise OrderingError(
                    f"warp group {g.gid} {'writes' if write else 'reads'} {region.name}{_show(box)}, "
                    f"{what}, with no "
                    f"barrier between them: the order is not guaranteed on the GPU",
                    location,
                    hint=hint,
                )
        line = location.line
        if write:
            records[:] = [r for r in records if not _inside(r.box, box)]
        else:
            records[:] = [r for r in records if r.write or r.gid != g.gid or r.box != box]
        records.append(_Access(box, g.gid, g.vc[g.gid], write, line))

    def tma_landing(self, g: Group, region, bkey, f: Frame) -> None:
        """The write just recorded into `region` lands with barrier `bkey`'s phase in progress."""
        _, starts, exts = region.resolve(f)
        box = tuple((s, s + e) for s, e in zip(starts, exts, strict=True))
        phase = self.barrier(bkey).completed
        for rec in reversed(self.shadow.get(region.slot, [])):
            if rec.write and rec.box == box:
                rec.tma = (bkey, phase)
                return

    # -- barriers --------------------------------------------------------------------------------------------
    def barrier(self, bkey) -> _Barrier:
        bar = self.barriers.get(bkey)
        if bar is None:
            raise InterpreterError(f"barrier {bkey} used before T.alloc_barrier")
        return bar

    def init(self, slot: int, name: str, counts) -> None:
        for i, c in enumerate(counts):
            self.barriers[(slot, i)] = _Barrier(f"{name}[{i}]", c, self.ngroups)

    def arrive(self, g: Group, members, bkey, location) -> None:
        bar = self.barrier(bkey)
        threads = sum(self.sizes[m] for m in members)
        if bar.arrived + threads > bar.count:
            raise InterpreterError(
                f"{threads} threads (warp groups {list(members)}) arrive at {bar.name}, whose phase "
                f"{bar.completed} expects {bar.count} arrivals and has {bar.arrived}: the arrivals of "
                "one statement "
                f"would spill into the next phase",
                location,
                hint="give T.alloc_barrier the number of threads that arrive per phase (128 per warp group)",
            )
        for m in members:
            bar.pending = [max(a, b) for a, b in zip(bar.pending, self.groups[m].vc, strict=True)]
            bar.pending_obs = _merge(bar.pending_obs, self.groups[m].observed)
        bar.arrived += threads
        if bar.arrived == bar.count:
            bar.last_vc, bar.pending = bar.pending, [0] * self.ngroups
            bar.last_obs, bar.pending_obs = bar.pending_obs, {}
            bar.completed += 1
            bar.arrived = 0
        for m in members:
            self.groups[m].vc[m] += 1

    def wait(self, g: Group, members, bkey, parity: int, location) -> None:
        bar = self.barrier(bkey)

        def ready():
            return bar.completed % 2 != parity
        where = f" at line {location.line}" if location.line is not None else ""
        self.block(
            g,
            ready,
            f"waits{where} on {bar.name} for parity {parity}: it is in phase {bar.completed} "
            f"with {bar.arrived} of {bar.count} arrivals",
            location,
        )
        if bar.completed:  # the latest completed phase (of the other parity than the one in progress)
            for m in members:
                h = self.groups[m]
                h.vc = [max(a, b) for a, b in zip(h.vc, bar.last_vc, strict=True)]
                h.observed = _merge(h.observed, bar.last_obs, {bkey: bar.completed - 1})


def run_threads(scheduler, threads: list) -> None:
    """Start a scheduler's coroutine threads and wait for them (in short joins, so Ctrl-C reaches this
    thread); an interruption is recorded as the scheduler's error, which stops its threads, and the first
    error any thread recorded (`scheduler.error`, under `scheduler.cv`) is raised here."""
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.1)
    except BaseException as err:  # Ctrl-C: stop the threads too
        with scheduler.cv:
            scheduler.error = scheduler.error or err
            scheduler.cv.notify_all()
        raise
    if scheduler.error is not None:
        raise scheduler.error


def _fork(f: Frame) -> Frame:
    """A group's frame: its own variables (a copy), the block's buffers, written masks and trace (shared)."""
    g = Frame(len(f.vals))
    g.vals = list(f.vals)
    g.block, g.written, g.trace, g.access = f.block, f.written, f.trace, f.access
    return g


def _merge(*seen: dict) -> dict:
    """The latest phase of each barrier seen complete, over several groups' knowledge."""
    out: dict = {}
    for d in seen:
        for k, p in d.items():
            if p > out.get(k, -1):
                out[k] = p
    return out


def _overlap(a, b) -> bool:
    return all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b, strict=True))


def _inside(a, b) -> bool:
    return all(lo2 <= lo1 and hi1 <= hi2 for (lo1, hi1), (lo2, hi2) in zip(a, b, strict=True))


def _show(box) -> str:
    return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in box) + "]"


# ---- the tile primitives -----------------------------------------------------------------------------------

def _barrier_key(comp: Compiler, region, what: str):
    r = compile_region(comp, region, what)

    def key(f):
        _, starts, _ = r.resolve(f)
        return (r.slot, int(starts[0]))
    return key


def _group(f: Frame, location, what: str):
    g = f.warp
    if g is None:
        raise InterpreterError(f"{what} outside the block's threads", location)
    return g, f.members


@tile_rule("ws")
def _ws(comp: Compiler, node):
    return lambda f: None  # the region itself is the AttrStmt around it (stmts.py)


@tile_rule("barrier_init")
def _barrier_init(comp: Compiler, node):
    region = compile_region(comp, node.args[0], "T.alloc_barrier")
    counts = [int(c) for c in node.args[1:]]
    if region.buffer.scope() != BARRIER_SCOPE:
        raise NotImplementedError(f"T.tile.barrier_init on {region.name}, not a barrier buffer")
    location = comp.location

    def init(f):
        g, _ = _group(f, location, "T.alloc_barrier")
        g.sched.init(region.slot, region.name, counts)
    return init


@tile_rule("mbarrier_arrive")
def _arrive(comp: Compiler, node):
    key, location = _barrier_key(comp, node.args[0], "T.mbarrier_arrive"), comp.location

    def arrive(f):
        g, members = _group(f, location, "T.mbarrier_arrive")
        g.sched.arrive(g, members, key(f), location)
    return arrive


@tile_rule("mbarrier_wait")
def _wait(comp: Compiler, node):
    key, location = _barrier_key(comp, node.args[0], "T.mbarrier_wait_parity"), comp.location
    parity = comp.expr(node.args[1])

    def wait(f):
        g, members = _group(f, location, "T.mbarrier_wait_parity")
        p = int(parity(f))
        if p not in (0, 1):
            raise InterpreterError(f"T.mbarrier_wait_parity: parity must be 0 or 1; got {p}", location)
        g.sched.wait(g, members, key(f), p, location)
    return wait


@tile_rule("tma_copy")
def _tma(comp: Compiler, node):
    dst = compile_region(comp, node.args[0], "T.tma_copy")
    key, location = _barrier_key(comp, node.args[1], "T.tma_copy"), comp.location

    def tma(f):
        g, _ = _group(f, location, "T.tma_copy")
        g.sched.tma_landing(g, dst, key(f), f)
    return tma

"""Warp specialization and mbarriers (tilelang's `T.ws`, `T.alloc_barrier`, `T.mbarrier_*`, `T.tma_copy`).

```python
bars = T.alloc_barrier([128, 128])           # two mbarriers, each completes a phase after 128 thread arrivals
with T.ws(1):                                # run by warp group 1 (threads 128..255) only
    T.mbarrier_wait_parity(bars[1], (ko + 1) % 2)
    T.tma_copy(A[...], A_s, barrier=bars[0])
    T.mbarrier_arrive(bars[0])               # every thread of the group arrives: 128 arrivals
```

IR: `with T.ws(k)` is an `AttrStmt("tile_nb.ws", mask)` (bit k set for each group) whose body starts with the
tile primitive `T.tile.ws(k, ...)`; a barrier allocation is a `shared.barrier` uint64 buffer followed by
`T.tile.barrier_init(bars, count, ...)`; an arrive / wait is `T.tile.mbarrier_arrive(bars[i:i+1])` /
`T.tile.mbarrier_wait(bars[i:i+1], parity)`; `T.tma_copy(src, dst, barrier=b)` is a `T.copy` followed by
`T.tile.tma_copy(dst, b[i:i+1])`, which says that the copy is asynchronous and lands with b's current phase.
The CPU interpreter runs these (interp/warps.py); the CUDA lowering runs such a kernel as one program in an
order its barriers allow (lower/written_order.py), or refuses it at the user's line (docs/tilelang.md).
"""
from __future__ import annotations

import threading

from . import state as _state
from .irutil import is_buffer, is_load

__all__ = ["sync_threads", "ws", "get_thread_binding", "thread_binding", "ThreadIndex", "WarpGroups",
           "warp_groups_of",
           "warp_groups_region",
           "alloc_barrier", "mbarrier_arrive", "mbarrier_wait_parity", "barrier_arrive", "barrier_wait",
           "tma_copy", "WS_ATTR", "BARRIER_SCOPE", "WARP_GROUP", "BLOCK_LEVEL", "wgmma_gemm", "wait_wgmma",
           "fence_proxy_async", "sync_grid"]

WS_ATTR = "tile_nb.ws"
BARRIER_SCOPE = "shared.barrier"
WARP_GROUP = 128  # threads per warp group

_OPS = {"ws": "a warp-specialized region: the warp groups that run it (tile_nb)",
        "barrier_init": "the arrive counts of a barrier buffer's mbarriers (tile_nb)",
        "mbarrier_arrive": "the running threads arrive at an mbarrier (tile_nb)",
        "mbarrier_wait": "wait until the mbarrier phase of a parity has completed (tile_nb)",
        "tma_copy": "the copy just before is asynchronous and completes with this mbarrier's phase (tile_nb)",
        "sync_grid": "every block of the grid waits here for all others (tile_nb)",
        "finalize_reducer": "combine the copies of a T.alloc_reducer's partial sums (tile_nb)"}
_LOCK = threading.Lock()


def _op(short: str):
    """The tile primitive `T.tile.<short>`, registered in TVM's op registry
    once per process (as T.cumsum's)."""
    import tvm
    from tvm.ir import _ffi_api

    name = f"tirx.tile.{short}"
    with _LOCK:
        if name not in tvm.ir.Op.list_op_names():
            _ffi_api.RegisterOp(name, _OPS[short])
            tvm.ir.register_op_attr(name, "TIRxOpCategory", "tile_primitive")
            tvm.ir.register_op_attr(name, "TScriptPrinterName", short)
    return tvm.ir.Op.get(name)


def _emit(short: str, *args) -> None:
    from tvm.script.ir_builder import tirx as T
    from tvm.tirx.tile_primitive import TilePrimitiveCall

    T.add_to_parent(TilePrimitiveCall(*args, op=_op(short)))
    _state.active().record_tile_op()


def _in_kernel(what: str):
    st = _state.active(what)
    if not st.kernel_open:
        raise st.error(f"{what} must be called inside `with T.Kernel(...)`")
    return st


class ws:  # noqa: N801 - tilelang's name
    """`with T.ws(k):` the statements inside run in warp group k only (threads 128*k .. 128*k +
    127); `T.ws(0, 1)` in groups 0 and 1 together. Statements outside any `T.ws` run in every warp
    group. Groups synchronize through mbarriers (`T.alloc_barrier`); the interpreter runs them as
    coroutines and checks their ordering."""

    def __init__(self, *group_ids):
        st = _in_kernel("T.ws")
        ids = (
            tuple(group_ids[0])
            if len(group_ids) == 1 and isinstance(group_ids[0], (list, tuple))
            else group_ids
        )
        groups = -(-(st.threads or WARP_GROUP) // WARP_GROUP)
        if not ids or any(isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < groups for k in ids):
            raise st.error(
                f"T.ws(...) takes warp group ids, compile-time ints in [0, {groups}) for a kernel of "
                f"{st.threads} threads ({WARP_GROUP} per group); got {group_ids!r}"
            )
        if st.ws_ids is not None and not set(ids) <= set(st.ws_ids):
            raise st.error(
                f"T.ws({_ids(ids)}) is inside T.ws({_ids(st.ws_ids)}): a region inside another runs "
                "in some of its warp groups only"
            )
        self.ids = tuple(sorted(set(ids)))
        self._frame = None
        self._outer = None

    def __enter__(self):
        from tvm import ir, tirx
        from tvm.script.ir_builder import tirx as T

        st = _state.active("T.ws")
        mask = sum(1 << k for k in self.ids)
        self._frame = _state.frame(T.attr(ir.StringImm("warp_group"), WS_ATTR, tirx.const(mask, "int32")))
        self._frame.__enter__()
        _emit("ws", *[tirx.const(k, "int32") for k in self.ids])
        self._outer, st.ws_ids = st.ws_ids, self.ids
        return self

    def __exit__(self, exc_type, exc, tb):
        st = _state.active("T.ws")
        st.ws_ids = self._outer
        return self._frame.__exit__(exc_type, exc, tb)


BLOCK_LEVEL = (
    "tile_nb's kernel bodies are block-level code; statements that use the thread index as a value run once "
    "per thread (per-thread code, docs/tilelang.md), and an `if` on it that holds for whole warp groups "
    "chooses those groups (`if tx < 128:`, T.ws(k))"
)


def _ids(ids) -> str:
    return ", ".join(str(k) for k in ids)


class ThreadIndex:
    """tilelang's thread index along one dim of `T.Kernel(threads=(x, y, z))`: thread t (CUDA's order, x
    fastest) has index `t % x` along dim 0, `t // x % y` along dim 1 and `t // (x * y)` along dim 2."""

    def __init__(self, st, dim: int = 0):
        dims = st.thread_dims or (st.threads,)
        self.threads, self.var = st.threads, st.thread_var
        self.extent = dims[dim]
        self.stride = 1
        for d in dims[:dim]:
            self.stride *= d

    def value(self):
        """The index as an IR expression of the block's threadIdx.x."""
        from tvm import tirx

        v = self.var
        if self.stride > 1:
            v = tirx.floordiv(v, self.stride)
        if self.stride * self.extent < self.threads:
            v = tirx.floormod(v, self.extent)
        return v


def warp_groups_of(cond):
    """The `WarpGroups` where `cond` holds, when it is a condition on the thread index alone that holds for
    all or none of each warp group's threads (`tx < 128`, `ty == 1`); else `cond` itself (a per-thread
    condition, or one that does not involve the thread index)."""
    st = _state.active("if")
    var = st.thread_var
    if var is None or not _only_thread_index(cond, var):
        return cond
    threads = st.threads
    groups = -(-threads // WARP_GROUP)
    ids = []
    for k in range(groups):
        group = range(WARP_GROUP * k, min(WARP_GROUP * (k + 1), threads))
        hits = {bool(_value_at(cond, var, t)) for t in group}
        if len(hits) > 1:
            return cond  # it splits a warp group: a per-thread condition
        if hits == {True}:
            ids.append(k)
    return WarpGroups(frozenset(ids), groups)


_INT_OPS = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
            "FloorDiv": lambda a, b: a // b, "FloorMod": lambda a, b: a % b,
            "Div": lambda a, b: int(a / b), "Mod": lambda a, b: a - int(a / b) * b,
            "Min": min, "Max": max, "EQ": lambda a, b: a == b, "NE": lambda a, b: a != b,
            "LT": lambda a, b: a < b, "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b,
            "GE": lambda a, b: a >= b, "And": lambda a, b: a and b, "Or": lambda a, b: a or b}


def _only_thread_index(e, var) -> bool:
    """Whether `e` is integer arithmetic and comparisons on `var` and constants, and mentions `var`."""
    from tvm import tirx

    if isinstance(e, tirx.IntImm):
        return False
    seen = []

    def ok(x) -> bool:
        if isinstance(x, tirx.IntImm):
            return True
        if isinstance(x, tirx.Var):
            seen.append(x)
            return x.same_as(var)
        if type(x).__name__ == "Not":
            return ok(x.a)
        return type(x).__name__ in _INT_OPS and ok(x.a) and ok(x.b)

    return ok(e) and bool(seen)


def _value_at(e, var, t: int):
    from tvm import tirx

    if isinstance(e, tirx.IntImm):
        return int(e.value)
    if isinstance(e, tirx.Var):
        return t
    if type(e).__name__ == "Not":
        return not _value_at(e.a, var, t)
    return _INT_OPS[type(e).__name__](_value_at(e.a, var, t), _value_at(e.b, var, t))


_SYMBOLS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


class WarpGroups:
    """The warp groups where a condition on `T.get_thread_binding()` holds: the condition of an `if`, which
    the front end builds as `T.ws` regions (the `else` branch: the other groups)."""

    def __init__(self, ids: frozenset, groups: int):
        self.ids, self.groups = ids, groups

    def both(self, other) -> WarpGroups:
        return WarpGroups(self.ids & _groups_of(other), self.groups)

    def either(self, other) -> WarpGroups:
        return WarpGroups(self.ids | _groups_of(other), self.groups)

    def others(self) -> WarpGroups:
        return WarpGroups(frozenset(range(self.groups)) - self.ids, self.groups)

    def __bool__(self):
        raise _state.active("T.get_thread_binding").error(
            "a condition on the thread index of T.get_thread_binding() that chooses whole warp groups can "
            "only be the condition of an `if`", hint=BLOCK_LEVEL)


def _groups_of(x) -> frozenset:
    if not isinstance(x, WarpGroups):
        raise _state.active("T.get_thread_binding").error(
            "a condition on the thread index of T.get_thread_binding() that chooses whole warp groups can "
            f"only be combined with another one (`tx >= 128 and tx < 256`); got {x!r}",
            hint=BLOCK_LEVEL,
        )
    return x.ids


def get_thread_binding(dim: int = 0):
    """`tx = T.get_thread_binding(dim=0)`: tilelang's thread index. `if tx < 128:` runs its body as `T.ws(0)`
    and its `else` as the other groups (`elif tx >= 128 and tx < 256:` as `T.ws(1)`); used as a value, it
    makes the statements that use it per-thread code (frontend/per_thread.py). `dim` 1 and 2 are the y and z
    of `T.Kernel(threads=(x, y, z))`."""
    st = _in_kernel("T.get_thread_binding")
    ndim = len(st.thread_dims or (st.threads,))
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < ndim:
        raise st.error(f"T.get_thread_binding(dim=...): expected an int from 0 to {ndim - 1} (the kernel's "
                       f"threads={st.thread_dims[0] if ndim == 1 else st.thread_dims!r} has {ndim} "
                       f"dim{'s' if ndim > 1 else ''}); got {dim!r}", hint=BLOCK_LEVEL)
    return _thread_index(st, dim)


def _thread_index(st, dim: int):
    index = ThreadIndex(st, dim)
    value = index.value()
    st.thread_indices.append((value, index.stride, index.extent))  # (T.tvm_thread_allreduce names them)
    return value


_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


def thread_binding(start, stop, thread: str = "threadIdx.x", annotations=None):
    """`tx = T.thread_binding(0, x, thread="threadIdx.x")` inside a kernel: tilelang's other spelling of
    `T.get_thread_binding(dim)` (the tag names the dim; the range must be the whole of that dim of
    `threads=`). The same rules as T.get_thread_binding."""
    del annotations
    st = _in_kernel("T.thread_binding")
    dims = st.thread_dims or (st.threads,)
    if thread not in _THREAD_TAGS[: len(dims)]:
        raise st.error(f"T.thread_binding(thread=...): expected one of "
                       f"{', '.join(map(repr, _THREAD_TAGS[: len(dims)]))} (the kernel's threads= has "
                       f"{len(dims)} dim{'s' if len(dims) > 1 else ''}); got {thread!r}", hint=BLOCK_LEVEL)
    dim = _THREAD_TAGS.index(thread)
    if start != 0 or stop != dims[dim]:
        raise st.error(f"T.thread_binding({start!r}, {stop!r}, thread={thread!r}): the range must be the "
                       f"whole {thread} of the kernel, 0 to {dims[dim]}", hint=BLOCK_LEVEL)
    return _thread_index(st, dim)


def warp_groups_region(cond: WarpGroups, branch: str):
    """The `T.ws` region of an `if` on warp groups: the `then` branch runs in `cond`'s groups, `else` in the
    others (front end)."""
    st = _state.active("if")
    groups = cond if branch == "then" else cond.others()
    if st.ws_ids is not None:  # inside another region: its groups only (an `elif` after `if tx < 128:`)
        groups = groups.both(WarpGroups(frozenset(st.ws_ids), groups.groups))
    if not groups.ids:
        why = "it holds for no warp group" if branch == "then" else "it holds for every warp group"
        raise st.error(f"this `if` on the thread index of T.get_thread_binding() has an empty `{branch}` "
                       f"branch: {why}", hint=BLOCK_LEVEL)
    return ws(*sorted(groups.ids))


def alloc_barrier(arrive_count):
    """`bars = T.alloc_barrier([128, 128])`: mbarriers in shared memory, one per count (an int: one
    barrier, used as `bars` or `bars[0]`). A barrier's phase completes when `count` threads have arrived
    (`T.mbarrier_arrive` inside `T.ws(k)` is 128 arrivals, outside any T.ws one per thread of the
    block); it starts in phase 0."""
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    st = _in_kernel("T.alloc_barrier")
    counts = [arrive_count] if isinstance(arrive_count, int) and not isinstance(arrive_count, bool) else \
        list(arrive_count) if isinstance(arrive_count, (list, tuple)) else None
    if not counts or any(isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= 1024 for c in counts):
        raise st.error(
            f"T.alloc_barrier(arrive_count=...) takes an int or a list of ints in [1, 1024] (threads "
            f"that arrive per phase); got {arrive_count!r}"
        )
    buf = T.alloc_buffer((len(counts),), "uint64", scope=BARRIER_SCOPE)
    st.record_alloc(buf)
    _emit("barrier_init", buf[0:len(counts)], *[tirx.const(c, "int32") for c in counts])
    return buf


def _barrier(what: str, st, mbarrier):
    """`bars[i]` (or `bars`: its first barrier) as the one-element region `bars[i:i+1]`."""
    if is_buffer(mbarrier) and mbarrier.scope() == BARRIER_SCOPE:
        return mbarrier[0:1]
    if is_load(mbarrier) and mbarrier.source.scope() == BARRIER_SCOPE and len(mbarrier.indices) == 1:
        i = mbarrier.indices[0]
        return mbarrier.source[i:i + 1]
    raise st.error(f"{what}: mbarrier must be a barrier from T.alloc_barrier (`bars` or `bars[i]`); got "
                   f"{mbarrier!r}")


def mbarrier_arrive(mbarrier, cta_id=None):
    """`T.mbarrier_arrive(bars[i])`: the threads running this statement arrive at the barrier (128 in a
    `T.ws(k)` region, every thread of the block outside one)."""
    st = _in_kernel("T.mbarrier_arrive")
    if cta_id is not None:
        raise st.error(
            "T.mbarrier_arrive(cta_id=...) arrives at another CTA's cluster barrier: tile_nb has no "
            "cluster barriers yet"
        )
    _emit("mbarrier_arrive", _barrier("T.mbarrier_arrive", st, mbarrier))


def mbarrier_wait_parity(mbarrier, parity):
    """`T.mbarrier_wait_parity(bars[i], p)`: wait until the barrier's latest phase of parity p has completed.
    A fresh barrier is in phase 0, so waiting on parity 1 returns at once (the idiom of a producer's first
    wait on an 'empty' barrier)."""
    from tvm import tirx

    from .irutil import as_expr, is_expr

    st = _in_kernel("T.mbarrier_wait_parity")
    if isinstance(parity, bool) or not (isinstance(parity, int) or is_expr(parity)):
        raise st.error(
            f"T.mbarrier_wait_parity(parity=...) must be an int expression (0 or 1); got {parity!r}"
        )
    if isinstance(parity, int) and parity not in (0, 1):
        raise st.error(f"T.mbarrier_wait_parity(parity=...) must be 0 or 1; got {parity}")
    region = _barrier("T.mbarrier_wait_parity", st, mbarrier)
    _emit("mbarrier_wait", region, as_expr(parity, "int32") if not isinstance(parity, int) else
          tirx.const(parity, "int32"))


def barrier_arrive(mbarrier):
    """tilelang's `T.barrier_arrive(b)`: `T.mbarrier_arrive(b)`."""
    mbarrier_arrive(mbarrier)


def barrier_wait(mbarrier, parity):
    """tilelang's `T.barrier_wait(b, parity)`: `T.mbarrier_wait_parity(b, parity)`."""
    mbarrier_wait_parity(mbarrier, parity)


def tma_copy(src, dst, *, barrier=None, cluster_mask=None, leader_scope_threads=None, eviction_policy=None,
             annotations=None):
    """`T.tma_copy(A[...], A_s, barrier=b)`: an asynchronous copy from global to shared memory that
    completes with b's current phase; it does not arrive (arrive with `T.mbarrier_arrive(b)`), and
    `A_s` may be read only after a wait on that phase. tilelang's `eviction_policy` and
    `annotations` are accepted, not applied."""
    from . import memory

    st = _in_kernel("T.tma_copy")
    del leader_scope_threads, eviction_policy, annotations  # how the copy is issued, never what arrives
    if cluster_mask is not None:
        raise st.error("T.tma_copy(cluster_mask=...) multicasts within a cluster: tile_nb has no clusters in "
                       "T.tma_copy yet")
    if barrier is None:
        raise st.error(
            "T.tma_copy(src, dst, barrier=...): a load needs the mbarrier it completes on (tile_nb has "
            "no TMA stores through T.tma_copy)",
            hint="T.copy(src, dst) is a synchronous copy",
        )
    bar = _barrier("T.tma_copy", st, barrier)
    memory.copy(src, dst)  # validates both operands and their shapes
    from .irutil import is_region

    dst_region = memory.region_of(dst) if is_buffer(dst) or is_region(dst) else \
        memory.region_of(dst, [r.extent for r in memory.region_of(src).region], what="T.tma_copy")
    if dst_region.source.scope() not in ("shared", "shared.dyn"):
        raise st.error(
            f"T.tma_copy: dst {dst_region.source.name} is in {dst_region.source.scope()} memory; a TMA "
            "load writes shared memory"
        )
    _emit("tma_copy", dst_region, bar)



def wgmma_gemm(A, B, C, transpose_A: bool = False, transpose_B: bool = False, policy=None,
               clear_accum: bool = False, annotations=None):
    """tilelang's `T.wgmma_gemm(A, B, C, ...)`: a Hopper wgmma that runs on until `T.wait_wgmma`. tile_nb
    builds it as `T.gemm` (complete when the statement ends), which is one of the orders the GPU may take:
    results agree wherever the program waits before it reads C. `annotations` are accepted, not used."""
    from .compute import gemm

    del annotations
    gemm(A, B, C, transpose_A=transpose_A, transpose_B=transpose_B, clear_accum=clear_accum, policy=policy)


def wait_wgmma(id: int = 0):  # noqa: A002 - tilelang's name
    """tilelang's `T.wait_wgmma(n)`: wait until at most n wgmma groups are in flight; tile_nb's
    `T.wgmma_gemm` completes at once, so there is nothing to wait for."""
    st = _in_kernel("T.wait_wgmma")
    if isinstance(id, bool) or not isinstance(id, int) or id < 0:
        raise st.error(f"T.wait_wgmma(n) takes a compile-time int >= 0; got {id!r}")


def fence_proxy_async():
    """tilelang's `T.fence_proxy_async()`: orders shared-memory writes before the asynchronous proxy (TMA,
    wgmma) reads them; tile_nb's tile operations complete in program order, so it has no effect here."""
    _in_kernel("T.fence_proxy_async")


def sync_threads():
    """tilelang's `T.sync_threads()` (CUDA's `__syncthreads()`): every thread of the block waits here.
    tile_nb's statements are the whole block's and complete in program order (the CUDA lowering places the
    barriers that order them), so it has no effect here. Inside `with T.ws(...)` or a warp-group branch only
    some warp groups would reach it, which on the GPU waits forever: refused there."""
    st = _in_kernel("T.sync_threads")
    if st.ws_ids is not None:
        raise st.error(
            "T.sync_threads() inside a warp-group region: only the warp groups of this region reach it, and "
            "a block barrier waits for every thread (a deadlock on the GPU)",
            hint="order warp groups with mbarriers (T.alloc_barrier, T.barrier_arrive / T.barrier_wait)",
        )


def sync_grid():
    """tilelang's `T.sync_grid()`: a barrier across the whole grid; every block waits until all blocks have
    reached it, and their global writes before it are visible after it. On the interpreter the blocks run as
    coroutines that hand over at each grid barrier (interp/grid.py); on CUDA it is cooperative groups' grid
    barrier, and the kernel is launched cooperatively (every block resident at once; backend/pipeline.py)."""
    _in_kernel("T.sync_grid")
    _emit("sync_grid")

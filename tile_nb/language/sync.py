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
The CPU interpreter runs these (interp/warps.py); the CUDA lowering has no rule for them yet, so it refuses
such a kernel at the user's line (docs/tilelang.md).
"""
from __future__ import annotations

import threading

from . import state as _state
from .irutil import is_buffer, is_load

__all__ = ["ws", "alloc_barrier", "mbarrier_arrive", "mbarrier_wait_parity", "barrier_arrive", "barrier_wait",
           "tma_copy", "WS_ATTR", "BARRIER_SCOPE", "WARP_GROUP"]

WS_ATTR = "tile_nb.ws"
BARRIER_SCOPE = "shared.barrier"
WARP_GROUP = 128  # threads per warp group

_OPS = {"ws": "a warp-specialized region: the warp groups that run it (tile_nb)",
        "barrier_init": "the arrive counts of a barrier buffer's mbarriers (tile_nb)",
        "mbarrier_arrive": "the running threads arrive at an mbarrier (tile_nb)",
        "mbarrier_wait": "wait until the mbarrier phase of a parity has completed (tile_nb)",
        "tma_copy": "the copy just before is asynchronous and completes with this mbarrier's phase (tile_nb)"}
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
        if st.ws_ids is not None:
            raise st.error(f"T.ws{ids} is inside T.ws{st.ws_ids}: warp-specialized regions cannot be nested")
        self.ids = tuple(sorted(set(ids)))
        self._frame = None

    def __enter__(self):
        from tvm import ir, tirx
        from tvm.script.ir_builder import tirx as T

        st = _state.active("T.ws")
        mask = sum(1 << k for k in self.ids)
        self._frame = _state.frame(T.attr(ir.StringImm("warp_group"), WS_ATTR, tirx.const(mask, "int32")))
        self._frame.__enter__()
        _emit("ws", *[tirx.const(k, "int32") for k in self.ids])
        st.ws_ids = self.ids
        return self

    def __exit__(self, exc_type, exc, tb):
        st = _state.active("T.ws")
        st.ws_ids = None
        return self._frame.__exit__(exc_type, exc, tb)


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


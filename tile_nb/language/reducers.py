"""tilelang's thread all-reduce, TVM's low-level spelling that tilelang kernels write by hand:

```python
with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, accum_dtype)]), "reduce_scope",
            T.reinterpret(T.uint64(0), dtype="handle")):
    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, total[0], tk, dtype="handle"))
```

Every thread gets, in `total[0]`, the reduction of `acc[0]` over the threads that differ from it only in the
thread indices named at the end (`tk = T.get_thread_binding(1)`). tile_nb elaborates it into per-thread code
(frontend/per_thread.py): each thread writes its value to a shared scratch row, and after the barrier that a
read of it needs, each thread combines its group's values in index order. Both back ends run that code; the
combination order is the same in each thread, so every thread of a group holds the same value.
"""
from __future__ import annotations

from . import state as _state
from .compute import ATOMIC_CALLS

__all__ = ["comm_reducer", "attr", "evaluate", "tvm_thread_allreduce", "tvm_warp_shuffle", "alloc_reducer",
           "finalize_reducer", "REDUCER_OPS"]


class CommReducer:
    """`T.comm_reducer(combiner, identities)`: how values combine (`lambda x, y: x + y`)."""

    def __init__(self, combiner, identities):
        self.combiner = combiner
        self.identities = list(identities) if isinstance(identities, (list, tuple)) else [identities]


def comm_reducer(combiner, identity):
    st = _state.active("T.comm_reducer")
    if not callable(combiner):
        raise st.error(f"T.comm_reducer(combiner, identity): combiner must be a function of two values; got "
                       f"{combiner!r}")
    reducer = CommReducer(combiner, identity)
    if len(reducer.identities) != 1:
        raise st.error("T.comm_reducer: tile_nb reduces one value at a time; got "
                       f"{len(reducer.identities)} identities")
    return reducer


class attr:  # noqa: N801 - tilelang's name
    """`with T.attr(reducer, "reduce_scope", ...)`: the reducer of the `T.tvm_thread_allreduce` inside. Other
    attributes are TVM's lowering internals, which tile_nb does not take."""

    def __init__(self, node, key, value=None):
        st = _state.active("T.attr")
        if key != "reduce_scope" or not isinstance(node, CommReducer):
            raise st.error(f"T.attr(node, {key!r}, ...): tile_nb takes T.attr only as the reduce scope of a "
                           "thread all-reduce (`T.attr(T.comm_reducer(...), \"reduce_scope\", ...)`); got "
                           f"{type(node).__name__}")
        del value  # TVM's scope handle (`T.reinterpret(T.uint64(0), dtype="handle")`)
        self.reducer = node
        self._outer = None

    def __enter__(self):
        st = _state.active("T.attr")
        self._outer, st.reducer = st.reducer, self.reducer
        return self

    def __exit__(self, *exc):
        _state.active("T.attr").reducer = self._outer
        return False


class _Reduced:
    """What `T.tvm_thread_allreduce` gives: its statements are in the kernel already; T.evaluate takes it."""


def evaluate(value) -> None:
    """`T.evaluate(T.tvm_thread_allreduce(...))`; an IR call is evaluated for its effect."""
    if isinstance(value, _Reduced):
        return
    from tvm.script.ir_builder import tirx as T

    T.evaluate(value)


def tvm_thread_allreduce(count, value, condition, dst, *thread_indices, dtype="handle"):
    """Reduce `value` over the threads that differ only in `thread_indices` (values of T.get_thread_binding)
    with the enclosing `T.attr` reducer; every thread of a group gets the result in `dst` (an element of a
    T.alloc_local)."""
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    from .irutil import dtype_of, is_load
    from .memory import alloc_shared

    del dtype
    st = _state.active("T.tvm_thread_allreduce")
    if not st.kernel_open:
        raise st.error("T.tvm_thread_allreduce must be called inside `with T.Kernel(...)`")
    if st.reducer is None:
        raise st.error("T.tvm_thread_allreduce needs its reducer: call it inside "
                       "`with T.attr(T.comm_reducer(...), \"reduce_scope\", ...)`")
    if int(count) != 1:
        raise st.error(f"T.tvm_thread_allreduce(count, ...): tile_nb reduces one value; got count={count}")
    if not (condition is True or isinstance(condition, tirx.IntImm) and int(condition) == 1):
        raise st.error(f"T.tvm_thread_allreduce(..., condition, ...): tile_nb takes True only; got "
                       f"{condition!r}")
    if not is_load(dst) or dst.source.scope() not in ("local", "local.var"):
        raise st.error(f"T.tvm_thread_allreduce(..., dst, ...): expected an element of a T.alloc_local, "
                       f"which receives the result in each thread; got {dst!r}")
    dims = []
    for index in thread_indices:
        found = next((d for d in st.thread_indices if d[0].same_as(index)), None)
        if found is None:
            raise st.error(f"T.tvm_thread_allreduce: the threads to reduce over are named by values of "
                           f"T.get_thread_binding(dim); got {index!r}")
        dims.append(found[1:])
    if not dims:
        raise st.error("T.tvm_thread_allreduce: name the thread indices to reduce over (`tk`)")
    tx = st.thread_var
    scratch = alloc_shared((st.threads,), dtype_of(value))
    T.buffer_store(scratch, value, [tx])
    base = tx
    for index, (stride, _) in zip(thread_indices, dims, strict=True):
        base = base - index * stride
    members = [base]
    for stride, extent in dims:  # every thread of the group, in index order
        members = [m + j * stride for m in members for j in range(extent)]
    combine = st.reducer.combiner
    dst_buf, dst_idx = dst.source, list(dst.indices)
    T.buffer_store(dst_buf, tirx.BufferLoad(scratch, [members[0]]), dst_idx)
    for m in members[1:]:
        T.buffer_store(dst_buf, combine(tirx.BufferLoad(dst_buf, dst_idx), tirx.BufferLoad(scratch, [m])),
                       dst_idx)
    return _Reduced()


# op -> the update's call: T.atomic_add / max / min's (compute.ATOMIC_CALLS), so that one rule serves both
REDUCER_OPS = {"sum": ATOMIC_CALLS["add"], "max": ATOMIC_CALLS["max"], "min": ATOMIC_CALLS["min"]}


def alloc_reducer(shape, dtype, op: str = "sum", replication=None):
    """`r = T.alloc_reducer(n, dtype, op="sum")`: tilelang's reducer, a fragment whose updates inside
    T.Parallel combine the values of every iteration: `r[i] += v` (op="sum"), `r[i] = T.max(r[i], v)` ("max"),
    `r[i] = T.min(r[i], v)` ("min"). Each thread holding a copy of `r[i]` combines its own iterations' values;
    `T.finalize_reducer(r)` combines the copies, after which every copy holds the result (the order of these
    uses is checked by frontend/reducer_check.py). `replication` ("all" or "none": where tilelang keeps the
    copies) is recorded, not applied: tile_nb's layout inference places `r`."""
    from .hints import record_hint
    from .memory import alloc_fragment

    st = _state.active("T.alloc_reducer")
    if op not in REDUCER_OPS:
        raise st.error(f"T.alloc_reducer(op={op!r}): op must be one of {', '.join(map(repr, REDUCER_OPS))}")
    buf = alloc_fragment(shape, dtype)
    st.reducers[buf] = op
    st.on_reducer_store = reducer_update  # memory.store hands a store into a reducer to it
    if replication is not None:
        record_hint(st, f"alloc_reducer(replication={replication!r}) (tile_nb's layout inference places "
                        f"{buf.name})")
    return buf


def finalize_reducer(reducer, batch: int = 1) -> None:
    """`T.finalize_reducer(r)`: combine the copies of a reducer's partial results (a T.tile.finalize_reducer
    op whose second argument names the reducer's op; the interpreter, which combines every update into the one
    value, has nothing left to do). `batch` (how many elements tilelang's all-reduce combines per barrier) is
    a schedule choice tile_nb's lowering makes itself: recorded as a hint."""
    import tvm
    from tvm.script.ir_builder import tirx as T
    from tvm.tirx.tile_primitive import TilePrimitiveCall

    from .hints import record_hint
    from .irutil import is_buffer
    from .sync import _op

    st = _state.active("T.finalize_reducer")
    if not is_buffer(reducer) or reducer not in st.reducers:
        raise st.error(f"T.finalize_reducer takes a buffer made by T.alloc_reducer; got {reducer!r}")
    if batch != 1:
        record_hint(st, f"finalize_reducer(batch={batch}) (tile_nb's lowering combines the copies itself)")
    region = reducer[tuple(slice(0, n) for n in reducer.shape)]
    op = tvm.ir.StringImm(st.reducers[reducer])
    T.add_to_parent(TilePrimitiveCall(region, op, op=_op("finalize_reducer")))
    st.record_tile_op()


def reducer_update(st, buffer, indices, value) -> bool:
    """A store into a reducer, `r[i] = r[i] + v` (or T.max / T.min of r[i] and v for those ops): emitted as
    an atomic combine of `v` into the element (which the CPU interpreter applies over the iterations of a
    T.Parallel loop and the CUDA lowering applies to the thread's copy); True when `buffer` is a reducer and
    the store was emitted."""
    import tvm_ffi
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    from .irutil import is_load

    op = st.reducers.get(buffer)
    if op is None:
        return False

    def own_element(x) -> bool:
        return is_load(x) and x.source.same_as(buffer) and \
            tvm_ffi.structural_equal(list(x.indices), list(indices))

    form = {"sum": tirx.Add, "max": tirx.Max, "min": tirx.Min}[op]
    operands = [getattr(value, "a", None), getattr(value, "b", None)] if isinstance(value, form) else []
    mine = next((k for k, x in enumerate(operands) if own_element(x)), None)
    if mine is None:
        spelled = {"sum": "r[i] += v", "max": "r[i] = T.max(r[i], v)", "min": "r[i] = T.min(r[i], v)"}[op]
        raise st.error(f"{buffer.name} is a reducer (T.alloc_reducer, op={op!r}): update it as "
                       f"`{spelled.replace('r[', buffer.name + '[')}`",
                       hint="a reducer's copies hold partial results until T.finalize_reducer")
    load, other = operands[mine], operands[1 - mine]
    call = tirx.call_extern(buffer.dtype, REDUCER_OPS[op], tirx.address_of(load), other)
    T.add_to_parent(tirx.Evaluate(call, st.span()))
    return True


def tvm_warp_shuffle(mask, value, lane, width, warp_size=32):
    """`T.tvm_warp_shuffle(mask, v, lane, width, warp_size)` in per-thread code: the value `v` of thread
    `lane` of this thread's group of `width` consecutive threads (CUDA's `__shfl_sync`; every thread takes
    part). Elaborated as a store of `v` into a shared scratch row and a read of the source thread's element,
    between which the per-thread pass (frontend/per_thread.py) puts a barrier: the same values on both back
    ends."""
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    from .irutil import dtype_of
    from .memory import alloc_shared

    st = _state.active("T.tvm_warp_shuffle")
    if not st.kernel_open:
        raise st.error("T.tvm_warp_shuffle must be called inside `with T.Kernel(...)`")
    if int(mask) & 0xFFFFFFFF != 0xFFFFFFFF:
        raise st.error(f"T.tvm_warp_shuffle(mask, ...): tile_nb takes the full mask 0xFFFFFFFF (every thread "
                       f"of the warp); got {int(mask):#x}")
    for name, n in (("width", width), ("warp_size", warp_size)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n & (n - 1) or n > 32:
            raise st.error(f"T.tvm_warp_shuffle({name}=...): expected a power of 2 up to 32; got {n!r}")
    tx = st.thread_var
    scratch = alloc_shared((st.threads,), dtype_of(value))
    T.buffer_store(scratch, value, [tx])
    return tirx.BufferLoad(scratch, [tirx.floordiv(tx, width) * width + tirx.floormod(lane, width)])

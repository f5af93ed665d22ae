"""Memory in the tile language: allocations, `T.copy`, `T.clear` / `T.fill`, `T.empty`, `T.make_tensor`.

Copies and fills build TVM tile primitives (`T.tile.copy` / `T.tile.fill`); docs/IR.md gives their meaning.
"""
from __future__ import annotations

from . import state as _state
from .dtypes import PACKED_4BIT, TF32, as_dtype
from .irutil import align_extents, as_expr, is_buffer, is_expr, is_load, is_region

__all__ = [
    "alloc_shared",
    "alloc_fragment",
    "alloc_local",
    "alloc_var",
    "alloc_global",
    "copy",
    "clear",
    "fill",
    "empty",
    "make_tensor",
    "region_of",
]


def _shape(shape) -> tuple:
    return tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)


def _alloc(what: str, shape, dtype, scope: str):
    from tvm.script.ir_builder import tirx as T

    st = _state.active(what)
    if not st.kernel_open:
        raise st.error(f"{what} must be called inside `with T.Kernel(...)`")
    if str(dtype) in PACKED_4BIT:  # a T.int4 / T.uint4 tile: one value per byte (language/packed.py)
        dtype = PACKED_4BIT[str(dtype)]
    try:
        dt = as_dtype(dtype)
    except ValueError as err:
        raise st.error(f"{what} dtype: {err}") from None
    buf = T.alloc_buffer(_shape(shape), str(dt), scope=scope)
    st.record_alloc(buf)
    if isinstance(dt, TF32):
        st.tf32.append(buf)
    return buf


# tilelang's `scope=` argument of each allocation: the scopes that mean the same
# memory here, and what they become.
# static or dynamic: both are shared memory
# A T.alloc_local / T.alloc_var that per-thread code writes (frontend/per_thread.py) becomes a buffer of this
# scope with a leading dim of one row per thread: row t holds thread t's values.
LOCAL_THREAD = "local.thread"
_SHARED_SCOPES = {"shared.dyn": "shared.dyn", "shared": "shared.dyn"}
_FRAGMENT_SCOPES = {"local.fragment": "local.fragment", "local": "local"}  # "local": a per-thread array
_LOCAL_SCOPES = {"local": "local"}


def _scope(what: str, scope, known: dict) -> str:
    if scope not in known:
        st = _state.active(what)
        raise st.error(f"{what}(scope=...): expected one of {', '.join(map(repr, known))}; got {scope!r}",
                       hint="a buffer in global memory is T.alloc_global(shape, dtype)")
    return known[scope]


def alloc_shared(shape, dtype, scope="shared.dyn"):
    """A tile in shared memory, one per CTA: `A_s = T.alloc_shared((128, 32), T.float16)`. tilelang's `scope`
    ("shared.dyn" or "shared") is accepted: tile_nb places every shared tile in dynamic shared memory, which
    holds the same values."""
    return _alloc("T.alloc_shared", shape, dtype, _scope("T.alloc_shared", scope, _SHARED_SCOPES))


def alloc_fragment(shape, dtype, scope="local.fragment"):
    """A tile held in the registers of the CTA's threads (an accumulator):
    `T.alloc_fragment((128, 128), T.float32)`. `scope="local"` (tilelang's) makes a
    per-thread array, as `T.alloc_local`."""
    return _alloc("T.alloc_fragment", shape, dtype, _scope("T.alloc_fragment", scope, _FRAGMENT_SCOPES))


def alloc_local(shape, dtype, scope="local"):
    """A small per-thread array in registers."""
    return _alloc("T.alloc_local", shape, dtype, _scope("T.alloc_local", scope, _LOCAL_SCOPES))


def alloc_var(dtype, init=None):
    """A per-thread scalar, read and written as `x[0]`; `init` stores an initial value."""
    buf = _alloc("T.alloc_var", (1,), dtype, "local.var")
    if init is not None:
        store(buf, (0,), init)
    return buf


def alloc_global(shape, dtype, scope="global"):
    """`ws = T.alloc_global((M, S), T.float32)` outside `with T.Kernel(...)`: a scratch tensor in
    global memory that every `T.Kernel` of the body can read and write (tilelang's workspace, as flash
    decoding's split and combine kernels share partial results). Each call allocates it (`torch.empty`
    on the call's device: its values start undefined, so write before reading) and drops it
    afterwards; it is not returned."""
    st = _state.active("T.alloc_global")
    if st.kernel_open:
        raise st.error(
            "T.alloc_global must be called outside `with T.Kernel(...)` (a scratch tensor the kernels "
            "of the body share)",
            hint="inside a kernel, use T.alloc_shared or T.alloc_fragment",
        )
    if scope != "global":
        raise st.error(f"T.alloc_global(scope=...): expected 'global'; got {scope!r}")
    try:
        dt = as_dtype(dtype)
    except ValueError as err:
        raise st.error(f"T.alloc_global dtype: {err}") from None
    return st.on_global(_shape(shape), dt)


def region_of(x, extents=None, what: str = "T.copy"):
    """A `TensorRegion` from a buffer, a slice `A[a:b, c:d]`, or a start corner `A[i, j]` (then `extents`
    gives its size, aligned to the trailing dims)."""
    st = _state.active(what)
    if is_buffer(x):
        return x[tuple(slice(0, d) for d in x.shape)]
    if is_region(x):
        return x
    # a kernel variable read by name (`T.clear(x)`): itself
    if is_load(x) and x.source.scope() == "local.var":
        return x.source[tuple(slice(0, d) for d in x.source.shape)]
    if is_load(x):
        indices = list(x.indices)
        if extents is None:
            raise st.error(
                f"{what}: both operands are start corners (`A[i, j]`); give one as a buffer or a slice "
                "so that the size of the copy is known"
            )
        sizes = align_extents(list(extents), len(indices))
        if sizes is None:
            raise st.error(
                f"{what}: a tile of shape {list(extents)} cannot start at a {len(indices)}-d corner of "
                f"'{x.source.name}'",
                hint="give the region as a slice, e.g. A[i:i + m, j:j + n]",
            )
        return x.source[tuple(slice(i, i + n) for i, n in zip(indices, sizes, strict=True))]
    raise st.error(f"{what}: expected a buffer, a slice `A[a:b, ...]` or a start corner `A[i, j]`; got {x!r}")


def _extents(region) -> list:
    return [r.extent for r in region.region]


_EVICTION_POLICIES = ("evict_normal", "evict_first", "evict_last")


def copy(src, dst, *, disable_tma: bool = False, eviction_policy: str | None = None,
         coalesced_width: int | None = None):
    """`T.copy(src, dst)`: copy a tile between any two of global, shared and fragment memory. Either
    side may be a start corner `A[i, j]`; rows and columns past the edge of a global tensor are not read
    (0) nor written. tilelang's `disable_tma=`, `eviction_policy=` and `coalesced_width=` say how to
    move the data, never what arrives: recorded in `tile_nb.hints`, not applied (tile_nb's lowering
    picks TMA, cp.async and vector widths)."""
    from tvm.tirx.script import tile as Tx

    from .hints import record_hint

    st = _state.active("T.copy")
    if eviction_policy is not None and eviction_policy not in _EVICTION_POLICIES:
        raise st.error(
            f"T.copy(eviction_policy=...): expected one of {', '.join(map(repr, _EVICTION_POLICIES))}; "
            f"got {eviction_policy!r}"
        )
    if coalesced_width is not None and (
        isinstance(coalesced_width, bool) or not isinstance(coalesced_width, int) or coalesced_width < 1
    ):
        raise st.error(f"T.copy(coalesced_width=...): expected a positive int; got {coalesced_width!r}")
    given = [f"{k}={v!r}" for k, v in (("disable_tma", disable_tma), ("eviction_policy", eviction_policy),
                                       ("coalesced_width", coalesced_width)) if v not in (None, False)]
    if given:
        record_hint(st, f"copy({', '.join(given)}) (not applied: tile_nb picks how copies move data)")
    if _is_packed(src) or _is_packed(dst):
        from .packed import PackedRef, PackedTensor, unpack_copy

        if isinstance(dst, (PackedRef, PackedTensor)):
            tensor = dst if isinstance(dst, PackedTensor) else dst.tensor
            raise st.error(f"T.copy into the {tensor.dtype!r} tensor '{tensor.name}': tile_nb reads packed "
                           "4-bit tensors, it does not write them",
                           hint="write the values to an int8 output, or pack them into one in the kernel")
        unpack_copy(src, region_of(dst) if is_buffer(dst) or is_region(dst) else region_of(dst, None))
        return
    src_region = region_of(src) if is_buffer(src) or is_region(src) else None
    dst_region = region_of(dst) if is_buffer(dst) or is_region(dst) else None
    if src_region is None and dst_region is None:
        region_of(src, None)  # raises the two-corners error
    if src_region is None:
        src_region = region_of(src, _extents(dst_region))
    if dst_region is None:
        dst_region = region_of(dst, _extents(src_region))
    try:
        Tx.copy(dst_region, src_region)
    except ValueError as err:
        raise st.error(
            f"T.copy: the source region {_describe(src_region)} and the destination region "
            f"{_describe(dst_region)} have different shapes",
            hint=str(err).split(";")[0],
        ) from None
    st.record_tile_op()


def _is_packed(x) -> bool:
    return type(x).__name__ in ("PackedRef", "PackedTensor")


def _describe(region) -> str:
    dims = ", ".join(str(e) for e in _extents(region))
    return f"{region.source.name}[{dims}]"


def fill(buffer, value):
    """`T.fill(buf, value)`: set every element of a tile (or region)."""
    from tvm.tirx.script import tile as Tx

    st = _state.active("T.fill")
    region = region_of(buffer, what="T.fill")
    Tx.fill(region, as_expr(value, region.source.dtype))
    st.record_tile_op()


def clear(buffer):
    """`T.clear(buf)`: fill with zeros."""
    fill(buffer, 0)


def store(buffer, indices, value):
    """`buf[i, j] = value` inside a kernel (the front end rewrites subscript assignments to this)."""
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    st = _state.active("a buffer store")
    if not isinstance(indices, tuple):
        indices = (indices,)
    if len(indices) != len(buffer.shape):
        raise st.error(f"'{buffer.name}' has {len(buffer.shape)} dims but is indexed with {len(indices)}")
    if any(isinstance(i, slice) for i in indices):
        raise st.error(f"assigning to a slice of '{buffer.name}' is not supported; use T.copy, T.fill, or a "
                       "T.Parallel loop storing element by element")
    value = as_expr(value, buffer.dtype)
    if st.reducers and st.on_reducer_store(st, buffer, indices, value):  # `r[i] += v` on a T.alloc_reducer
        return
    T.add_to_parent(tirx.BufferStore(buffer, value, list(indices), st.span()))


def empty(*shape, dtype=None):
    """`out = T.empty((M, N), dtype)`: an output tensor the call allocates and returns (`return out`).
    tilelang's spellings `T.empty(M, N, dtype=dt)` and `T.empty([M, N], dtype=dt)` mean the same."""
    st = _state.active("T.empty")
    if st.kernel_open:
        raise st.error("T.empty must be called before `with T.Kernel(...)`, at the top of the kernel body")
    if dtype is None and len(shape) >= 2 and _is_dtype(shape[-1]):
        shape, dtype = shape[:-1], shape[-1]
    if dtype is None:
        raise st.error(f"T.empty{shape!r} has no dtype", hint="T.empty((M, N), T.float16) or "
                       "T.empty(M, N, dtype=T.float16)")
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = tuple(shape[0])
    try:
        dt = as_dtype(dtype)
    except ValueError as err:
        raise st.error(f"T.empty dtype: {err}") from None
    return st.on_empty(_shape(shape), dt)


def _is_dtype(value) -> bool:
    if isinstance(value, (list, tuple, int)) or is_expr(value):
        return False
    try:
        as_dtype(value)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def make_tensor(pointer, shape, dtype):
    """`A = T.make_tensor(A, (M, K), T.float16)`: view a `T.ptr` parameter as a row-major tensor; in a
    kernel, `T.make_tensor(A_ptrs[i], (M, K), T.float16)` makes one of a pointer table's tensors
    (language/pointers.py)."""
    from .pointers import is_table_element, table_tensor

    st = _state.active("T.make_tensor")
    try:
        dt = as_dtype(dtype)
    except ValueError as err:
        raise st.error(f"T.make_tensor dtype: {err}") from None
    if is_table_element(st, pointer):
        return table_tensor(st, pointer, _shape(shape), dt)
    return st.on_make_tensor(pointer, _shape(shape), dt)


def tensor_view(shape, dtype, data, strides=None, scope=None):
    """tilelang's `T.Tensor(shape, dtype, A.data)` inside a kernel: a row-major view over the memory of the
    global tensor `A` (a parameter, output or `T.alloc_global`), as a reshape: the same dtype, no more
    elements than `A`. Reads and writes through it are reads and writes of `A` (`out_flat = T.Tensor((N * OH *
    OW, F), dt, out.data)` flattens an NHWC output to a matrix)."""
    from tvm.script.ir_builder import tirx as T

    st = _state.active("T.Tensor(shape, dtype, data)")
    if not st.kernel_open:
        raise st.error("T.Tensor(shape, dtype, data) (a view over a tensor's memory) must be made inside "
                       "`with T.Kernel(...)`")
    if strides is not None or scope not in (None, "global"):
        raise st.error(
            "T.Tensor(shape, dtype, data): a view is row-major over global memory; strides= and scope= "
            f"are not supported with data= (got strides={strides!r}, scope={scope!r})"
        )
    base = _view_base(st, data)
    try:
        dt = as_dtype(dtype)
    except ValueError as err:
        raise st.error(f"T.Tensor(shape, dtype, data) dtype: {err}") from None
    if str(dt) != str(base.dtype):
        raise st.error(
            f"T.Tensor(shape, dtype, data): a view keeps the tensor's dtype; '{base.name}' holds "
            f"{base.dtype}, the view asks for {dt}",
            hint="reinterpreting a tensor's bytes as another dtype is not supported; use T.reinterpret on "
            "the values",
        )
    shape = _shape(shape)
    _check_view_size(st, base, shape)
    view = T.decl_buffer(shape, str(dt), data=base.data)
    st.views.append((view, base))
    return view


def _view_base(st, data):
    """The global buffer whose `.data` a view names (`A.data` is TVM's
    `buffer_data(A)`; `A` itself is accepted)."""
    if is_buffer(data):
        base = data
    elif getattr(getattr(data, "op", None), "name", None) == "tirx.buffer_data":
        base = data.args[0]
    else:
        raise st.error(
            f"T.Tensor(shape, dtype, data): data must be a global tensor's `.data` (a parameter, an "
            f"output or a T.alloc_global); got {data!r}"
        )
    if str(base.scope()) != "global":
        raise st.error(f"T.Tensor(shape, dtype, data): a view is over a global tensor; '{base.name}' is in "
                       f"{base.scope()} memory")
    if list(base.strides):
        raise st.error(
            f"T.Tensor(shape, dtype, data): a view reshapes a contiguous tensor; '{base.name}' is a "
            f"T.StridedTensor",
            hint="index the strided tensor itself",
        )
    return base


def _check_view_size(st, base, shape) -> None:
    """A view may not reach past the tensor (checked when both sizes are known when the kernel is built)."""
    def numel(dims):
        n = 1
        for d in dims:
            n = n * d
        return n

    try:
        want, have = int(numel(shape)), int(numel(base.shape))
    except (TypeError, ValueError):
        return  # symbolic: the interpreter's bounds checks still apply to every access
    if want > have:
        raise st.error(
            f"T.Tensor(shape, dtype, data): the view {tuple(shape)} has {want} elements, more than "
            f"'{base.name}' {tuple(int(d) for d in base.shape)} holds ({have})"
        )

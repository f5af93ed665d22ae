"""Buffer accesses: loads, stores, atomics and tile regions, with the bounds checks of the debugging mode.

Every element access is checked against the buffer's shape; an index past the buffer (which the GPU would
perform silently) raises `OutOfBoundsError` naming the buffer, the index and the user's line. Inside parallel
loops only the active iterations (the mask of enclosing `if`s) are checked, and masked-off iterations read a
clamped index instead of faulting. Tile regions of *global* buffers are guarded by contract: elements past the
edge read as 0 and are not written.
"""
from __future__ import annotations

import torch
from tvm import ir, tirx
from tvm.tirx.buffer import is_buffer_var

from . import access, written
from . import values as V
from .affine import add_into, compile_slice_access, store_into
from .compiler import Compiler, expr_rule, op_short_name, stmt_rule
from .errors import InterpreterError, OutOfBoundsError, RaceError, UninitializedReadError

__all__ = ["Region", "clip", "compile_extern", "compile_region"]

_LOCAL_SCOPES = ("local", "local.var")


def _check_index(comp: Compiler, f, slot: int, t: torch.Tensor, idx: tuple, location, loops=()):
    """Raise OutOfBoundsError for the first active out-of-range index; returns
    idx with tensor parts clamped."""
    if len(idx) != t.dim():
        raise InterpreterError(f"buffer '{comp.buffers[slot].name}' of rank {t.dim()} indexed with "
                               f"{len(idx)} indices", location)
    bad = None
    for k, n in zip(idx, t.shape, strict=True):
        if V.is_tensor(k):
            out = (k < 0) | (k >= n)
            bad = out if bad is None else bad | out
        elif not 0 <= k < n:
            bad = True if bad is None else bad | True
    if bad is None:
        return idx
    if bad is True and f.mask is None:
        _raise_oob(comp, f, slot, t, idx, None, location, loops)
    if not V.is_tensor(bad):
        bad = torch.tensor(bad)
    if f.mask is not None:
        bad = bad & f.mask
    if bool(bad.any()):
        _raise_oob(comp, f, slot, t, idx, bad, location, loops)
    # Masked-off iterations may hold out-of-range indices (`if i < n: x[i]`): clamp them so torch can gather.
    # An index held in a narrow integer (a uint8 position) is made int64: torch reads uint8 tensors as masks.
    return tuple(
        _as_index(k.clamp(0, n - 1)) if V.is_tensor(k) else min(max(k, 0), n - 1)
        for k, n in zip(idx, t.shape, strict=True)
    )


def _as_index(k: torch.Tensor) -> torch.Tensor:
    return k if k.dtype in (torch.int64, torch.int32) else k.long()


def _check_written(comp: Compiler, f, slot: int, m: torch.Tensor, idx: tuple, location, loops=()):
    """Raise UninitializedReadError when an active iteration reads an element
    of `m`'s buffer never written."""
    got = m[idx]
    if got.dim() == 0:
        if bool(got):
            return
        bad = None
    else:
        bad = ~got if f.mask is None else ~got & f.mask
        if not bool(bad.any()):
            return
    buf = comp.buffers[slot]
    loop = {}
    if bad is None:
        point = [int(k) for k in idx]
    else:
        first, point = written.first_bad(bad, idx)
        loop = _loop_values(
            f, loops, torch.broadcast_shapes(bad.shape, *[k.shape for k in idx if V.is_tensor(k)]), first
        )
    raise UninitializedReadError(buf.name, tuple(point), tuple(m.shape), buf.scope(), location, f.block_ids(),
                                 loop=loop)


def _raise_oob(comp, f, slot, t, idx, bad, location, loops):
    loop = {}
    if bad is not None and V.is_tensor(bad) and bad.dim() > 0:
        first = [int(c) for c in torch.nonzero(bad)[0]]
        full = torch.broadcast_shapes(bad.shape, *[k.shape for k in idx if V.is_tensor(k)])
        first = [0] * (len(full) - len(first)) + first
        loop = _loop_values(f, loops, full, first)
        point = []
        for k in idx:
            if V.is_tensor(k):
                k = k.expand(full) if k.dim() else k
                point.append(int(k[tuple(first)]) if k.dim() else int(k))
            else:
                point.append(int(k))
    else:
        point = [int(k) for k in idx]
    raise OutOfBoundsError(comp.buffers[slot].name, tuple(point), tuple(t.shape), location, f.block_ids(),
                           loop=loop)


def _loop_values(f, loops, full, first) -> dict:
    """Values of the parallel loop vars at the first bad iteration (those the offending index varies with)."""
    values = {}
    for slot, depth, name in sorted(loops, key=lambda v: v[1]):
        dim = len(full) - 1 - depth
        if 0 <= dim < len(full) and full[dim] > 1 and slot in f.ranges:
            lo, _, inc = f.ranges[slot]
            values[name] = lo + first[dim] * inc
    return values


# ---- loads and stores --------------------------------------------------------------------------------------

@expr_rule(ir.TensorLoad)
def _buffer_load(comp: Compiler, node):
    buf = node.source  # a buffer Var (TVM 0.27 spells BufferLoad as an ir.TensorLoad of a buffer var)
    if not is_buffer_var(buf):
        raise NotImplementedError(f"the CPU interpreter only loads from buffers, not from {buf}")
    slot = comp.buffer_slot(buf)
    index = comp.exprs(node.indices)
    location = comp.location
    loops = tuple(comp.par_vars.values())
    local = buf.scope() in _LOCAL_SCOPES
    glob = buf.scope() == "global"
    sliced = compile_slice_access(comp, node.indices, cache=not glob)

    def load(f):
        t = f.vals[slot]
        if glob and f.access is not None:
            access.record_element(f, slot, t, access.READ, sliced, index)
        m = f.written[slot] if f.written is not None else None  # (written.mask_of, inlined: the hot path)
        if m is True:
            m = None
        elif m is False:
            m = written.mask_of(f.written, slot, t)
        if sliced is not None and not (f.overlays and slot in f.overlays):
            view = sliced.view(f, t)
            if view is not None and (m is None or written.all_written(sliced.view(f, m), f.mask)):
                return view  # (a read of an unwritten element goes on to the path below, which names it)
        idx = tuple(i(f) for i in index)
        if local and f.overlays and slot in f.overlays and not any(V.is_tensor(k) for k in idx):
            _check_index(comp, f, slot, t, idx, location, loops)
            if m is not None:
                _check_written(comp, f, slot, m, idx, location, loops)
            return f.overlays[slot][idx]
        idx = _check_index(comp, f, slot, t, idx, location, loops)
        if m is not None:
            _check_written(comp, f, slot, m, idx, location, loops)
        value = t[idx]
        if value.dim() == 0 and not value.dtype.is_floating_point:
            return value.item()  # integer and bool scalars stay Python values: they become indices and bounds
        return value
    return load


@stmt_rule(tirx.BufferStore)
def _buffer_store(comp: Compiler, node):
    slot = comp.buffer_slot(node.buffer)
    index = comp.exprs(node.indices)
    value_fn = comp.expr(node.value)
    location = comp.location
    loops = tuple(comp.par_vars.values())
    local = node.buffer.scope() in _LOCAL_SCOPES
    glob = node.buffer.scope() == "global"
    sliced = compile_slice_access(comp, node.indices, cache=not glob)
    wrap = _int_wrapper(str(node.buffer.dtype))
    tdtype = V.torch_dtype(node.buffer.dtype)
    saturating = tdtype if tdtype in V.SATURATING else None  # (float8_e5m2: the GPU's satfinite conversion)

    def store(f):
        t = f.vals[slot]
        if glob and f.access is not None:
            access.record_element(f, slot, t, access.WRITE, sliced, index)
        value = value_fn(f)
        if wrap is not None and type(value) is int:
            value = wrap(value)
        if saturating is not None:
            value = V.saturate(value, saturating)
        w = f.written
        m = w[slot] if w is not None else None
        if m is True:
            m = None
        elif m is False:
            m = written.mask_of(w, slot, t)
        if sliced is not None and not (f.overlays and slot in f.overlays):
            view = sliced.view(f, t)
            if view is not None and store_into(view, value, f.mask):
                if m is not None:
                    written.mark_view(w, slot, m, sliced.view(f, m), f.mask)
                return
        idx = tuple(i(f) for i in index)
        if not f.par_shape:
            _check_index(comp, f, slot, t, idx, location, loops)
            t[idx] = value
            if m is not None:
                written.mark_index(w, slot, m, idx)
            return
        if local and not any(V.is_tensor(k) for k in idx):
            _check_index(comp, f, slot, t, idx, location, loops)
            _store_overlay(f, slot, t, idx, value)
            if m is not None:
                written.mark_index(w, slot, m, idx)  # by some active iteration: counted as written for all
            return
        idx = _check_index(comp, f, slot, t, idx, location, loops)
        clash = _scatter(t, idx, value, f.mask, accumulate=False)
        if clash is not None:
            element, values = clash
            raise RaceError(
                f"iterations of the T.Parallel loop (or threads of per-thread code) write different values "
                f"to {node.buffer.name}[{', '.join(map(str, element))}] here ({values[0]} and {values[1]}, "
                "among others): on the GPU one of them stays, which one depending on timing", location,
                hint="give each iteration its own element, or reduce the values (T.atomic_add, a reduction)")
        if m is not None:
            _scatter(m, idx, True, f.mask, accumulate=False)
    return store


def _int_wrapper(dtype: str):
    """For an integer buffer, the function a Python int stored into it goes through: block-level
    integer values are exact Python ints, and the store keeps their low bits as the GPU's integer
    arithmetic does (docs/IR.md)."""
    tdtype = V.torch_dtype(dtype)
    if tdtype.is_floating_point or tdtype == torch.bool:
        return None
    info = torch.iinfo(tdtype)
    lo, hi = info.min, info.max
    return lambda x: x if lo <= x <= hi else V.wrap_scalar(x, tdtype)


def _scatter(t: torch.Tensor, idx: tuple, value, mask, accumulate: bool, space: tuple = ()):
    """t[idx] = value (or += with accumulate) for indices/values broadcast over the parallel iteration space;
    `space` (the loops' whole iteration space) makes an atomic add once per iteration even where neither its
    index nor its value depends on the loop variables. A plain store that gives one element two different
    values (a race on the GPU) is not made: it returns (that element, two of its values) instead."""
    t, value = V.signed_target(t, value)  # uint16/32/64: the same bits through a signed view
    index, val = _scatter_operands(t, idx, value, mask, space)
    if not accumulate and val.numel() > 1:
        clash = _clash(t.shape, index, val)
        if clash is not None:
            return clash
    t.index_put_(index, val, accumulate=accumulate)
    return None


def _scatter_operands(t: torch.Tensor, idx: tuple, value, mask, space: tuple):
    """(index tensors, values) of a scatter into `t`, broadcast over the iteration space and the mask's
    iterations kept."""
    parts = [k if V.is_tensor(k) else torch.tensor(k) for k in idx]
    val = value if V.is_tensor(value) else torch.tensor(value, dtype=t.dtype)
    if val.dim() > 0 and val.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
        val = val.clone()  # `S[n - 1 - i] = S[i]`: a view of the target is read in full before the scatter
    shape = torch.broadcast_shapes(*(p.shape for p in parts), val.shape, space,
                                   *(() if mask is None else (mask.shape,)))
    parts = [p.expand(shape) for p in parts]
    val = val.to(t.dtype).expand(shape)
    if mask is not None:
        m = mask.expand(shape)
        parts = [p[m] for p in parts]
        val = val[m]
    return tuple(p.long() for p in parts), val


def _flat_index(index: tuple, shape) -> torch.Tensor:
    """Row-major element numbers of the elements `index` names in a tensor of `shape`."""
    flat = torch.zeros_like(index[0])
    for k, size in zip(index, shape, strict=True):
        flat = flat * int(size) + k
    return flat


def _clash(shape, index: tuple, val: torch.Tensor):
    """(an element, two different values) where `index` names one element twice with different values."""
    flat = _flat_index(index, shape) if index else torch.zeros(val.shape, dtype=torch.long)
    flat, v = flat.reshape(-1), val.reshape(-1)
    order = torch.argsort(flat, stable=True)
    flat, v = flat[order], v[order]
    same = flat[1:] == flat[:-1]
    if not bool(same.any()):
        return None
    differ = same & (v[1:] != v[:-1]) & ~(torch.isnan(v[1:]) & torch.isnan(v[:-1])) \
        if v.dtype.is_floating_point else same & (v[1:] != v[:-1])
    if not bool(differ.any()):
        return None
    at = int(torch.nonzero(differ)[0])
    element = [int(x) for x in torch.unravel_index(flat[at], tuple(shape))]
    return element, (v[at].item(), v[at + 1].item())


def _store_overlay(f, slot: int, t: torch.Tensor, idx: tuple, value):
    """A per-thread buffer written inside parallel loops: keep one copy per iteration (an overlay)."""
    overlay = f.overlays.get(slot)
    if overlay is None or overlay.dim() - t.dim() < len(f.par_shape):
        base = t if overlay is None else overlay
        extra = len(f.par_shape) - (base.dim() - t.dim())
        base = base.reshape(t.shape + (1,) * extra + base.shape[t.dim():])
        overlay = base.expand(t.shape + f.par_shape).clone()
        f.overlays[slot] = overlay
    value = value if V.is_tensor(value) else torch.tensor(value, dtype=t.dtype)
    if f.mask is not None:
        value = torch.where(f.mask, value.to(t.dtype), overlay[idx])
    overlay[idx] = value


def write_back_overlays(f, comp: Compiler):
    """After the outermost parallel loop: a per-thread buffer keeps the value of the last iteration."""
    for slot, overlay in f.overlays.items():
        t = f.vals[slot]
        t.copy_(overlay[(...,) + (-1,) * (overlay.dim() - t.dim())])


# ---- extern calls: atomics ---------------------------------------------------------------------------------

def compile_extern(comp: Compiler, node):
    name = str(node.args[0].value)
    from .debug import EXTERN_RULES  # T.print / T.device_assert (debug.py imports this module's neighbours)
    if name in EXTERN_RULES:
        return EXTERN_RULES[name](comp, node)
    if name in ("atomicAdd", "AtomicAdd", "atomic_add"):
        return _compile_atomic_add(comp, node)
    if name in ("atomicMax", "atomicMin"):  # a max / min reducer's update (language/reducers.py)
        return _compile_atomic_extreme(comp, node, "amax" if name == "atomicMax" else "amin")
    if name in ("__syncthreads", "__syncwarp"):
        return lambda f: 0  # block-level code runs as one sequential program: barriers are no-ops
    raise InterpreterError(
        f"T.call_extern('{name}'): the CPU interpreter cannot run '{name}': it runs the tile IR, and an "
        "extern function is CUDA C (T.import_source) or a library function it has no rule for", comp.location,
        hint="run this kernel on a GPU (tile_nb's CUDA lowering pastes T.import_source's code and calls it), "
             "or write the function's work in tile code for the interpreter")


def _atomic_element(node):
    """The element load an atomic extern call updates (`atomicAdd(T.address_of(buf[...]), v)`)."""
    ptr = node.args[1]
    if isinstance(ptr, ir.Call) and op_short_name(ptr.op) == "address_of":
        ptr = ptr.args[0]
    if not isinstance(ptr, ir.TensorLoad):
        raise NotImplementedError(f"{node.args[0].value} needs T.address_of(buffer[...]) as its address, "
                                  f"got {ptr}")
    return ptr


def _compile_atomic_add(comp: Compiler, node):
    ptr = _atomic_element(node)
    slot = comp.buffer_slot(ptr.source)
    index = comp.exprs(ptr.indices)
    value_fn = comp.expr(node.args[2])
    location = comp.location
    loops = tuple(comp.par_vars.values())
    glob = ptr.source.scope() == "global"
    sliced = compile_slice_access(comp, ptr.indices)

    def atomic_add(f):
        t = f.vals[slot]
        if glob and f.access is not None:
            access.record_element(f, slot, t, access.READ, None, index)
            access.record_element(f, slot, t, access.WRITE, None, index)
        if sliced is not None and f.access is None and not (f.overlays and slot in f.overlays) and (
                f.written is None or written.mask_of(f.written, slot, t) is None):
            # `dQ[.., k * 32 + i, ..] += dq[i, ..]` over a T.Parallel: one add per element of a strided
            # view (the scatter's boolean-mask gathers and index_put_ cost ~1 ms a call)
            view = sliced.view(f, t)
            if view is not None and tuple(view.shape) == f.par_shape and add_into(view, value_fn(f), f.mask):
                return 0
        idx = tuple(i(f) for i in index)
        value = value_fn(f)
        idx = _check_index(comp, f, slot, t, idx, location, loops)
        m = written.mask_of(f.written, slot, t)
        if m is not None:
            _check_written(comp, f, slot, m, idx, location, loops)  # an atomic add reads the old value
        if not f.par_shape and not any(V.is_tensor(k) for k in idx) and not (
                V.is_tensor(value) and value.dim() > 0):
            t[idx] += value
        else:
            _scatter(t, idx, value, f.mask, accumulate=True, space=f.par_shape)
        return 0
    return atomic_add


def _compile_atomic_extreme(comp: Compiler, node, reduce: str):
    """`atomicMax(&r[i], v)` / `atomicMin` (a reducer's update, T.atomic_max / T.atomic_min): the element
    becomes the max (min) of itself and every iteration's value (NaN wins, as T.max / T.min: docs/IR.md)."""
    ptr = _atomic_element(node)
    slot = comp.buffer_slot(ptr.source)
    index = comp.exprs(ptr.indices)
    value_fn = comp.expr(node.args[2])
    location, loops = comp.location, tuple(comp.par_vars.values())
    pick = torch.maximum if reduce == "amax" else torch.minimum
    glob = ptr.source.scope() == "global"  # T.atomic_max / T.atomic_min (a reducer's updates are local)

    def atomic_extreme(f):
        t = f.vals[slot]
        if glob and f.access is not None:  # as an atomic add: it reads and writes the element
            access.record_element(f, slot, t, access.READ, None, index)
            access.record_element(f, slot, t, access.WRITE, None, index)
        idx = _check_index(comp, f, slot, t, tuple(i(f) for i in index), location, loops)
        m = written.mask_of(f.written, slot, t)
        if m is not None:
            _check_written(comp, f, slot, m, idx, location, loops)  # the update reads the old value
        value = value_fn(f)
        if not f.par_shape and not any(V.is_tensor(k) for k in idx) and not (
                V.is_tensor(value) and value.dim() > 0):
            t[idx] = pick(t[idx], torch.as_tensor(value, dtype=t.dtype))
            return 0
        elements, val = _scatter_operands(t, idx, value, f.mask, f.par_shape)
        flat = _flat_index(elements, t.shape).reshape(-1)
        if t.dtype == torch.uint64:
            raise InterpreterError("an atomic max / min of uint64 elements is not supported by the "
                                   "interpreter (torch cannot order them)", location)
        if t.dtype in _NO_SCATTER_REDUCE:  # torch has no max / min scatter for these: in int64, exactly
            wide = t.view(-1).to(torch.int64)
            wide.scatter_reduce_(0, flat, val.reshape(-1).to(torch.int64), reduce=reduce, include_self=True)
            t.view(-1).copy_(wide.to(t.dtype))
        else:
            t.view(-1).scatter_reduce_(0, flat, val.reshape(-1), reduce=reduce, include_self=True)
        return 0
    return atomic_extreme


_NO_SCATTER_REDUCE = (torch.uint16, torch.uint32)


# ---- tile regions ------------------------------------------------------------------------------------------

class Region:
    """A compiled `TensorRegion`: `resolve(f)` gives the tensor, start and extent per dim."""

    def __init__(self, comp: Compiler, region, location, op: str = "a tile op"):
        self.op = op  # "T.copy", ...: names the reader in UninitializedReadError
        self.buffer = region.source
        self.slot = comp.buffer_slot(self.buffer)
        self.name = self.buffer.name
        self.guarded = self.buffer.scope() == "global"
        self.dtype = V.torch_dtype(self.buffer.dtype)
        self._saturates = self.dtype in V.SATURATING
        self._mins = comp.exprs([r.min for r in region.region])
        self._exts = comp.exprs([r.extent for r in region.region])
        self.location = location
        self.comp = comp
        # A constant region of a fixed-shape buffer (the shared/fragment side of
        # most tile ops) is resolved once:
        # its view is a fixed slice, or the whole tensor, and its bounds are
        # checked once per call, not per dim.
        # Constant extents (also those of a region at a moving start, the global side of a copy): not
        # evaluated per call.
        self._const_exts = (
            [int(r.extent.value) for r in region.region]
            if all(isinstance(r.extent, tirx.IntImm) for r in region.region) else None
        )
        self._fixed = None
        ints = [r.min for r in region.region] + [r.extent for r in region.region] + list(self.buffer.shape)
        if all(isinstance(x, tirx.IntImm) for x in ints):
            rank = len(region.region)
            starts = [int(r.min.value) for r in region.region]
            exts = [int(r.extent.value) for r in region.region]
            shape = [int(d.value) for d in self.buffer.shape]
            if len(shape) == rank and all(
                0 <= s and s + e <= n for s, e, n in zip(starts, exts, shape, strict=True)
            ):
                whole = starts == [0] * rank and exts == shape
                self._fixed = (
                    starts,
                    exts,
                    None if whole else tuple(slice(s, s + e) for s, e in zip(starts, exts, strict=True)),
                )

    def resolve(self, f):
        if self._fixed is not None:
            return f.vals[self.slot], self._fixed[0], self._fixed[1]
        starts = [int(m(f)) for m in self._mins]
        exts = list(self._const_exts) if self._const_exts is not None else [int(e(f)) for e in self._exts]
        return f.vals[self.slot], starts, exts

    def view(self, f):
        """The region as a view of the buffer when it is a fixed in-bounds region, else None."""
        if self._fixed is None:
            return None
        index = self._fixed[2]
        t = f.vals[self.slot]
        return t if index is None else t[index]

    def mark_view(self, f) -> None:
        """After writing through `view(f)`: the region counts as written."""
        self.mark(f, self._fixed[2])

    @staticmethod
    def _slices(t, starts, exts) -> tuple | None:
        """The region's index into `t` when it lies inside it, else None (one pass: this runs per tile op)."""
        index = []
        for s, e, n in zip(starts, exts, t.shape, strict=True):
            if s < 0 or s + e > n:
                return None
            index.append(slice(s, s + e))
        return tuple(index)

    def _oob(self, f, t, starts, exts):
        index = tuple(f"{s}:{s + e}" for s, e in zip(starts, exts, strict=True))
        raise OutOfBoundsError(self.name, index, tuple(t.shape), self.location, f.block_ids(), what="region")

    def unwritten_possible(self, f) -> bool:
        """False when no element of the buffer can be unwritten (untracked, or
        all written): the cheap test."""
        w = f.written
        return not self.guarded and w is not None and w[self.slot] is not None and w[self.slot] is not True

    def check(self, f, need: torch.Tensor | None = None) -> None:
        """Raise UninitializedReadError when the region holds elements this block never wrote (only those
        where `need`, shaped as the region, is true, when given). Global buffers are not tracked."""
        if not self.unwritten_possible(f):
            return
        m = written.mask_of(f.written, self.slot, f.vals[self.slot])
        if m is None:
            return
        if self._fixed is not None:
            starts, exts, index = self._fixed
        else:
            _, starts, exts = self.resolve(f)
            index = tuple(slice(s, s + e) for s, e in zip(starts, exts, strict=True))
        found = written.region_unwritten(m, index, need)
        if found is not None:
            written.raise_region(
                self.buffer, starts, exts, m.shape, found, self.op, self.location, f.block_ids()
            )

    def mark(self, f, index) -> None:
        """Elements `index` (slices; None: the whole buffer) written in this block."""
        w = f.written
        if w is None:
            return
        m = w[self.slot]
        if m is None or m is True:
            return
        if index is None:
            w[self.slot] = True  # the whole buffer: no more checks for it in this block
        else:
            written.mask_of(w, self.slot, f.vals[self.slot])[index] = True

    def _record(self, f, kind: int) -> None:
        """The in-range part of this global region, for access_map's block."""
        t, starts, exts = self.resolve(f)
        src, _ = clip(t.shape, starts, exts)
        if src is not None:
            access.record_region(f, self.slot, t, kind, src)

    def read(self, f, check: bool = True) -> torch.Tensor:
        """The region as a tensor of its extents (a view when in bounds; zeros past a global buffer's edge).
        `check`: raise for elements never written (see `check`)."""
        if self.guarded and f.access is not None:
            self._record(f, access.READ)
        check = check and self.unwritten_possible(f)
        if self._fixed is not None:
            if check:
                self.check(f)
            return self.view(f)
        t, starts, exts = self.resolve(f)
        index = self._slices(t, starts, exts)
        if index is not None:
            if check:
                self.check(f)
            return t[index]
        if not self.guarded:
            self._oob(f, t, starts, exts)
        out = torch.zeros(exts, dtype=t.dtype)
        src, dst = clip(t.shape, starts, exts)
        if src is not None:
            out[dst] = t[src]
        return out

    def write(self, f, value) -> None:
        """Store `value` (broadcastable to the extents) into the region; only the
        in-range part of a global one."""
        if self._saturates:
            value = V.saturate(value, self.dtype)
        if self.guarded and f.access is not None:
            self._record(f, access.WRITE)
        if self._fixed is not None:
            target = self.view(f)
            if V.is_tensor(value):
                target.copy_(value)
            else:
                target.fill_(value)
            if not self.guarded:
                self.mark(f, self._fixed[2])
            return
        t, starts, exts = self.resolve(f)
        index = self._slices(t, starts, exts)
        if index is not None:
            t[index] = value
            if not self.guarded:
                self.mark(f, None if list(exts) == list(t.shape) else index)
            return
        if not self.guarded:
            self._oob(f, t, starts, exts)
        src, dst = clip(t.shape, starts, exts)
        if src is None:
            return
        if V.is_tensor(value) and value.dim() > 0:
            value = value.expand(exts)[dst]
        t[src] = value


def clip(shape, starts, exts):
    """Slices of the in-range part: (in the buffer, in the region), or (None,
    None) when nothing is in range."""
    src, dst = [], []
    for s, e, n in zip(starts, exts, shape, strict=True):
        lo, hi = max(s, 0), min(s + e, n)
        if lo >= hi:
            return None, None
        src.append(slice(lo, hi))
        dst.append(slice(lo - s, hi - s))
    return tuple(src), tuple(dst)


def compile_region(comp: Compiler, region, op: str = "a tile op") -> Region:
    if not (hasattr(region, "source") and hasattr(region, "region")):
        raise NotImplementedError(f"expected a buffer region, got {type(region).__name__}: {region}")
    return Region(comp, region, comp.location, op)

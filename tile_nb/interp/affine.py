"""Fast path for loads and stores in `T.parallel` loops whose indices are `loop_var + offset`.

The general path gathers and scatters with index tensors and checks every index. But most accesses in parallel
loops (`S[i, j]`, `X[bx * 128 + i]`, `row_max[i]`) index each dim by at most one parallel loop var plus a
block-level offset: such an access is a strided *slice* of the buffer. The slice is taken as a view, its
bounds checked once per dim, and its dims permuted into the parallel iteration layout (`Frame.par_shape`: the
var at depth d on dim -(d + 1)). When anything does not fit (an index out of range, a mask that does not
broadcast, a racy store), the caller falls back to the general path, which also produces the error messages.
"""
from __future__ import annotations

import torch
from tvm import ir, tirx
from tvm.tirx.analysis import undefined_vars

from . import values as V
from .compiler import Compiler

__all__ = ["compile_slice_access"]


def _affine(expr, par: dict):
    """`expr` as (parallel var key or None, [(sign, offset expr)]), or None when not `var + offset` form."""
    if isinstance(expr, ir.Var) and expr.__chandle__() in par:
        return expr.__chandle__(), []
    if not any(v.__chandle__() in par for v in undefined_vars(expr)):
        return None, [(1, expr)]
    if isinstance(expr, (tirx.Add, tirx.Sub)):
        a, b = _affine(expr.a, par), _affine(expr.b, par)
        if a is None or b is None or (a[0] is not None and b[0] is not None):
            return None
        if isinstance(expr, tirx.Sub):
            if b[0] is not None:
                return None  # `offset - var` runs backwards: leave it to the general path
            b = (None, [(-s, e) for s, e in b[1]])
        return (a[0] if a[0] is not None else b[0]), a[1] + b[1]
    return None


class SliceAccess:
    """The compiled plan of one access: per dim, a parallel var (by slot and depth) or a block-level index."""

    def __init__(self, comp: Compiler, dims, cache: bool = False):
        self.dims = []   # (slot or None, offset closures with signs)
        # `cache`: remember the last views (per tensor) by their index: a tile's `S[i, j]` in a loop body
        # asks for the same view on every iteration, and torch's slicing + unsqueeze cost several us.
        # Only for block-local buffers: a cached view must not keep a caller's global tensor alive.
        self._views: dict | None = {} if cache else None
        depths = []
        for key, offsets in dims:
            closures = [(s, comp.expr(e)) for s, e in offsets]
            if key is None:
                self.dims.append((None, closures))
            else:
                slot, depth, _ = comp.par_vars[key]
                self.dims.append((slot, closures))
                depths.append(depth)
        # the sliced view keeps the parallel dims in buffer order: order them by decreasing depth, then place
        # each on dim -(depth + 1) of a tensor with one dim per enclosing parallel loop (unit where unused)
        self.order = sorted(range(len(depths)), key=lambda k: -depths[k])
        self.permute = self.order != list(range(len(depths)))
        ndim = len(comp.par_vars)
        used = {ndim - 1 - d for d in depths}
        self.unit_dims = [pos for pos in range(ndim) if pos not in used]

    def view(self, f, t: torch.Tensor):
        """The accessed elements as a view in parallel layout, or None if some index is out of range."""
        index = []
        for (slot, offsets), size in zip(self.dims, t.shape, strict=True):
            off = 0
            for sign, fn in offsets:
                v = fn(f)
                if V.is_tensor(v):
                    if v.dim() > 0:
                        return None
                    v = int(v)
                off = off + v if sign > 0 else off - v
            if slot is None:
                if not 0 <= off < size:
                    return None
                index.append(off)
                continue
            lo, n, inc = f.ranges[slot]
            start = lo + off
            last = start + (n - 1) * inc
            if start < 0 or last >= size:
                return None
            index.append(slice(start, last + 1, inc))
        key = tuple(index)
        views = self._views
        if views is not None:
            hit = views.get(id(t))
            if hit is not None and hit[0] is t and hit[1] == key:
                return hit[2]  # a view of the same tensor: it sees every write made since
        v = t[key]
        if self.permute:
            v = v.permute(self.order)
        for pos in self.unit_dims:  # parallel depths this access does not use: unit dims, no copy
            v = v.unsqueeze(pos)
        if views is not None:
            if len(views) >= 4:  # the buffer and its written-mask; a new block's buffers replace them
                views.clear()
            views[id(t)] = (t, key, v)
        return v


def compile_slice_access(comp: Compiler, indices, cache: bool = False) -> SliceAccess | None:
    """A slice plan for these indices inside the current parallel loops, or None if they are not all of the
    form `var + offset` with each parallel var used at most once (and at least one used). `cache`: keep
    the last views (for block-local buffers only)."""
    if not comp.par_vars:
        return None
    dims, used = [], set()
    for e in indices:
        a = _affine(e, comp.par_vars)
        if a is None:
            return None
        if a[0] is not None:
            if a[0] in used:
                return None
            used.add(a[0])
        dims.append(a)
    if not used:
        return None
    return SliceAccess(comp, dims, cache)


def store_into(view: torch.Tensor, value, mask) -> bool:
    """Write `value` through the view (under `mask`); False when shapes do not fit (the caller falls back)."""
    view, value = V.signed_target(view, value)  # uint16/32/64: the same bits through a signed view
    shape = view.shape
    if V.is_tensor(value) and not _fits(value.shape, shape):
        return False
    if mask is not None and not _fits(mask.shape, shape):
        return False
    if mask is not None:
        value = torch.where(
            mask, value if V.is_tensor(value) else torch.tensor(value, dtype=view.dtype), view
        )
    elif V.is_tensor(value) and value.dim() > 0 and _overlaps(value, view):
        value = value.clone()  # `S[i, j] = S[j, i]`: read everything before writing, as the gather path does
    if V.is_tensor(value):
        view.copy_(value)
    else:
        view.fill_(value)
    return True


def add_into(view: torch.Tensor, value, mask) -> bool:
    """An atomic add through the view, where each active iteration owns one element (the caller checks that
    the view has the iteration space's shape): `view += value` under `mask`, rounded as index_put_'s
    accumulate rounds (value first converted to the buffer's dtype). False when it does not apply (the
    caller falls back to the scatter)."""
    view, value = V.signed_target(view, value)  # uint16/32/64: the same bits through a signed view
    shape = view.shape
    if not _distinct(view):  # distinct iterations must land on distinct elements
        return False
    if V.is_tensor(value):
        if not _fits(value.shape, shape):
            return False
        value = value.to(view.dtype)
    else:
        value = torch.tensor(value, dtype=view.dtype)
    if mask is not None and not _fits(mask.shape, shape):
        return False
    total = view + value   # a new tensor: a value that aliases the buffer is read in full first
    if mask is not None:
        total = torch.where(mask, total, view)  # masked-off elements keep their bits (no `+ 0` on -0.0)
    view.copy_(total)
    return True


def _distinct(view: torch.Tensor) -> bool:
    """Whether no two elements of `view` share memory (sufficient test: by increasing stride, each dim's
    stride steps past everything the smaller dims reach)."""
    if view.is_contiguous():
        return True
    reach = 0
    for stride, n in sorted((s, n) for s, n in zip(view.stride(), view.shape, strict=True) if n > 1):
        if stride <= reach:
            return False
        reach += stride * (n - 1)
    return True


def _fits(small, shape) -> bool:
    """Whether `small` broadcasts to exactly `shape` (torch.broadcast_shapes is slow for this hot path)."""
    if len(small) > len(shape):
        return False
    return all(a == 1 or a == b for a, b in zip(reversed(small), reversed(shape), strict=False))


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


"""Which elements of each shared / fragment / local buffer the running CTA has written (docs/debugging.md).

The GPU's shared memory and registers start with whatever they held; the interpreter's buffers start at 0. A
kernel that reads an element before writing it (a `T.gemm` into an accumulator never cleared, a reduction with
`clear=False` into a fresh fragment, a tile copied out before it was filled) could therefore pass on
the CPU and fail on the GPU. So each buffer allocated in the kernel gets a bool mask of written
elements (fresh with the buffer and at the start of every CTA), stores and tile ops set it, and reads
check it: `UninitializedReadError`.

`Frame.written[slot]` is None (not tracked: global tensors, or the check is off), `False` (nothing written
yet; the mask is made on the first partial write or read, so a buffer first written whole costs no mask),
`True` (every element written: the common case after `T.clear` / a whole-tile `T.copy`, which then costs no
more checking), or the mask.
`TILE_NB_CHECK_UNINIT=0` turns the check off (read per run).
"""
from __future__ import annotations

import os

import torch

from . import values as V
from .errors import UNINIT_ENV, UninitializedReadError

__all__ = ["enabled", "first_bad", "mark_index", "mark_view", "mask_of", "raise_region", "region_unwritten"]

TRACKED = ("shared", "shared.dyn", "local.fragment", "local", "local.var")


def enabled() -> bool:
    return os.environ.get(UNINIT_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def mask_of(w: list | None, slot: int, t: torch.Tensor) -> torch.Tensor | None:
    """The mask of buffer `slot` (tensor `t`), made now if nothing was written yet; None when the buffer is
    not tracked or fully written (nothing to check)."""
    if w is None:
        return None
    m = w[slot]
    if m is False:
        m = w[slot] = torch.zeros(t.shape, dtype=torch.bool)
    elif m is True:
        return None
    return m


def mark_index(w: list, slot: int, m: torch.Tensor, idx: tuple) -> None:
    """Element(s) `idx` (block-level ints) written."""
    if m.numel() == 1:
        w[slot] = True
    else:
        m[idx] = True


def mark_view(w: list, slot: int, m: torch.Tensor, mv: torch.Tensor, mask) -> None:
    """The elements of `mv` (a view of mask `m` in parallel layout) written, under the active `mask`."""
    if mask is None:
        if mv.numel() == m.numel():
            w[slot] = True
        else:
            mv.fill_(True)
    else:
        mv.logical_or_(mask)


def all_written(mv: torch.Tensor, mask) -> bool:
    """Whether every element of `mv` that an active iteration reads was written."""
    if mask is None:
        return bool(mv.all())
    return bool((mv | ~mask).all())


def first_bad(bad: torch.Tensor, idx: tuple) -> tuple[list, list[int]]:
    """(position in the broadcast iteration space, element index) of the first true entry of `bad`."""
    full = torch.broadcast_shapes(bad.shape, *[k.shape for k in idx if V.is_tensor(k)])
    first = [int(c) for c in torch.nonzero(bad.expand(full))[0]] if len(full) else []
    point = []
    for k in idx:
        if V.is_tensor(k) and k.dim():
            point.append(int(k.expand(full)[tuple(first)]))
        else:
            point.append(int(k))
    return first, point


def region_unwritten(m, index, need: torch.Tensor | None = None) -> tuple[int, tuple] | None:
    """(count, first element relative to the region) of the unwritten elements of `m[index]` (only those where
    `need` is true, when given), or None if all were written. `index`: a tuple of slices (None: the whole
    buffer)."""
    if m is None or m is True:
        return None
    sub = m if index is None else m[index]
    if bool(sub.all()):
        return None
    bad = ~sub if need is None else ~sub & need
    if not bool(bad.any()):
        return None
    return int(bad.sum()), tuple(int(c) for c in torch.nonzero(bad)[0])


def raise_region(buf, starts, exts, shape, found, op: str, location, block):
    """Raise for a tile op that reads a region of `buf` (starts/extents) with
    `found` = region_unwritten(...)."""
    count, rel = found
    region = tuple(f"{s}:{s + e}" for s, e in zip(starts, exts, strict=True))
    element = tuple(s + r for s, r in zip(starts, rel, strict=True))
    raise UninitializedReadError(buf.name, element, tuple(shape), buf.scope(), location, block, op=op,
                                 region=region, count=count)

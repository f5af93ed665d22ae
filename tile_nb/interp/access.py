"""Recording which elements of each global tensor one block reads and writes (for `access_map`, in
footprint.py, which runs the kernel).

The kernel runs as with `run` (every block, in place); while the chosen block runs, loads, stores, atomics and
tile-op regions of global tensors also set bool masks, one pair (read, written) per tensor. Only the active
iterations of a `T.Parallel` count, and only the in-range part of a guarded `T.copy`. The masks show a block's
footprint, the way triton-viz draws it: the rows of A and columns of B a GEMM
tile reads, the tile of C it writes.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from . import values as V

__all__ = ["AccessMap", "READ", "WRITE", "Trace", "record_element", "record_region"]

READ, WRITE = 0, 1


class AccessMap(NamedTuple):
    """Bool masks shaped as the tensor: elements the block read, and elements it wrote."""
    read: torch.Tensor
    written: torch.Tensor


def _mask(f, slot: int, t: torch.Tensor, kind: int) -> torch.Tensor:
    pair = f.access.get(slot)
    if pair is None:
        pair = f.access[slot] = (
            torch.zeros(t.shape, dtype=torch.bool),
            torch.zeros(t.shape, dtype=torch.bool),
        )
    return pair[kind]


def record_element(f, slot: int, t: torch.Tensor, kind: int, sliced, index) -> None:
    """A load or store `t[index]` (index closures; `sliced`: its slice plan or
    None) by the active iterations."""
    m = _mask(f, slot, t, kind)
    if sliced is not None:
        mv = sliced.view(f, m)
        if mv is not None:
            if f.mask is None:
                mv.fill_(True)
                return
            if torch.broadcast_shapes(mv.shape, f.mask.shape) == mv.shape:
                mv.logical_or_(f.mask)
                return
    idx = tuple(i(f) for i in index)
    # out-of-range indices of masked-off iterations are clamped (not counted);
    # an active one is an error anyway
    idx = tuple(
        k.clamp(0, n - 1) if V.is_tensor(k) else min(max(int(k), 0), n - 1)
        for k, n in zip(idx, t.shape, strict=True)
    )
    parts = [k if V.is_tensor(k) else torch.tensor(k) for k in idx]
    shape = torch.broadcast_shapes(*(p.shape for p in parts), *(() if f.mask is None else (f.mask.shape,)))
    parts = [p.expand(shape) for p in parts]
    if f.mask is not None:
        active = f.mask.expand(shape)
        parts = [p[active] for p in parts]
    m[tuple(p.long() for p in parts)] = True


def record_region(f, slot: int, t: torch.Tensor, kind: int, index) -> None:
    """A tile op's region of `t` (slices: its in-range part)."""
    _mask(f, slot, t, kind)[index] = True


class Trace:
    """The block to record, and the masks recorded so far (slot -> (read, written))."""

    def __init__(self, block: tuple):
        # strict=False: a block index of 1 to 3 dims
        self.block = dict(zip("xyz", block, strict=False))
        self.masks: dict = {}

    def active(self, current: dict) -> dict | None:
        ok = all(current.get(axis, 0) == b for axis, b in self.block.items())
        return self.masks if ok else None

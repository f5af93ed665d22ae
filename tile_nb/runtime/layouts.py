"""Hand layouts of kernel parameters, honored around a call: one mechanism for the GPU launch and the CPU
interpreter, so both see the same logical tensor.

`T.annotate_layout({dQ: T.Layout(dQ.shape, fn)})` says that element `dQ[idx]` sits at memory position
`linear(fn(*idx))`: the row-major order of fn's outputs over their ranges (each output's range over the
logical indices; the ranges' product must be the tensor's size). So a call evaluates the outputs on index
grids of the tensor's shape (expression trees of lower/analysis/global_layouts.py), checks that the positions
permute the elements, and keeps that permutation per shape and device. The kernel then runs on
`logical = t.reshape(-1)[perm].view(shape)` (indexed as written), and the tensor gets
`t.view(-1)[perm] = logical` back afterwards: its memory holds the values in the layout's order, which the
next kernel with the same layout reads back. Two extra passes over the tensor per call; the plan says so.
A CUDA kernel whose plan marks a layout `in_kernel` addresses the tensor through it itself
(lower/emit/hand_layouts.py): the call only checks, once per shape, that the layout permutes its elements.
"""
from __future__ import annotations

import threading

from ..errors import ArgumentError, NotContiguousError

__all__ = ["HandLayouts", "LayoutError", "permutation"]

_MAX_SHAPES = 32  # permutations kept per layout (a T.dynamic dim can take many values)


class LayoutError(ArgumentError, ValueError):
    """A hand layout (T.Layout on a kernel parameter) that does not permute the tensor's elements at the
    call's shape."""


def permutation(layout, shape: tuple, device=None):
    """`perm` (int64, on `device`): `perm[i]` is the memory position of the element whose row-major logical
    index is i, under `layout` (a GlobalLayout) at `shape`. LayoutError when the positions are not a
    permutation of range(numel)."""
    import math

    import torch

    numel = math.prod(shape)
    if numel == 0:
        return torch.zeros(0, dtype=torch.int64, device=device)
    outputs = layout.outputs_on(shape, device)
    extents = []
    for k, out in enumerate(outputs):  # an output's range over the indices is that of its broadcast form
        low = int(out.min())
        if low < 0:
            raise _error(layout, shape, f"its output {k} takes the negative value {low}")
        extents.append(int(out.max()) + 1)
    span = math.prod(extents)
    if span != numel:
        raise _error(layout, shape, f"its outputs range over {tuple(extents)}, {span} positions, for "
                                    f"{numel} elements (wrong size)")
    perm = torch.zeros((), dtype=torch.int64, device=device)
    for out, extent in zip(outputs, extents, strict=True):
        perm = perm * extent + out
    perm = perm.expand(shape).reshape(-1)
    hit = torch.zeros(numel, dtype=torch.bool, device=device)
    hit[perm] = True
    if not bool(hit.all()):  # numel positions in range(numel), one missed: two elements share one
        pos = int(torch.nonzero(torch.bincount(perm, minlength=numel) > 1)[0])
        first, second = (int(i) for i in torch.nonzero(perm == pos)[:2, 0])
        raise _error(layout, shape, f"it is not a bijection: the elements {_unravel(first, shape)} and "
                                    f"{_unravel(second, shape)} both land at position {pos}")
    return perm


def _unravel(i: int, shape: tuple) -> tuple:
    out = []
    for n in reversed(shape):
        out.append(i % n)
        i //= n
    return tuple(reversed(out))


def _error(layout, shape: tuple, why: str) -> LayoutError:
    return LayoutError(
        f"the hand layout of '{layout.name}' ({layout.text}) does not permute its {tuple(shape)} elements: "
        f"{why}", filename=layout.filename, lineno=layout.line,
        hint="a T.Layout on a kernel parameter must map the tensor's indices one to one onto positions "
             "0 .. numel-1 (for tilelang's dQ layout: sizes that are multiples of 8 along the permuted dims)")


class HandLayouts:
    """The hand layouts of one kernel's parameters, applied around its calls: `hand(launch, args)` runs
    `launch(*args)` with each annotated tensor in logical order, and writes it back in the layout's order."""

    def __init__(self, kernel: str, params: tuple, layouts: tuple):
        self.kernel, self.params = kernel, tuple(params)
        self.positions = [(list(params).index(g.name), g) for g in layouts]
        self._perms: dict = {}  # (name, shape, device) -> permutation
        self._checked: set = set()  # (name, shape, device) of in-kernel layouts found to permute
        self._lock = threading.Lock()

    @classmethod
    def of_func(cls, func) -> HandLayouts | None:
        """Those of a phase-2 PrimFunc (the interpreter's), or None when it has none."""
        from ..lower.analysis.global_layouts import global_layouts

        layouts = global_layouts(func)
        if not layouts:
            return None
        name = str((func.attrs or {}).get("global_symbol", "kernel"))
        return cls(name, tuple(p.name for p in func.params), layouts)

    @classmethod
    def of_plan(cls, kernel: str, params: tuple, plan: dict | None) -> HandLayouts | None:
        """Those a compiled kernel's plan lists (kept by the disk cache), or None when it lists none."""
        from ..lower.analysis.global_layouts import GlobalLayout

        listed = (plan or {}).get("global_layouts") or []
        if not listed:
            return None
        return cls(kernel, params, tuple(GlobalLayout.from_dict(d) for d in listed))

    def permutation(self, layout, t):
        key = (layout.name, tuple(t.shape), t.device)
        perm = self._perms.get(key)
        if perm is None:
            perm = permutation(layout, tuple(int(n) for n in t.shape), t.device)
            with self._lock:
                if len(self._perms) >= _MAX_SHAPES * len(self.positions):
                    self._perms.clear()
                self._perms[key] = perm
        return perm

    def check(self, layout, t) -> None:
        """Refuse (LayoutError) a layout that does not permute t's elements, once per shape and device; the
        permutation itself is not kept."""
        key = (layout.name, tuple(t.shape), t.device)
        if key not in self._checked:
            permutation(layout, tuple(int(n) for n in t.shape), t.device)
            with self._lock:
                self._checked.add(key)

    def __call__(self, launch, args):
        args = list(args)
        back = []
        for i, layout in self.positions:
            t = args[i]
            if getattr(t, "is_contiguous", None) is None:
                continue  # not a tensor: the launch says what it expected
            if not t.is_contiguous():
                raise NotContiguousError(
                    f"{self.kernel}() argument '{layout.name}' has a hand layout (T.Layout), which is "
                    f"applied to a contiguous tensor; got strides {tuple(t.stride())} for shape "
                    f"{tuple(t.shape)}", filename=layout.filename, lineno=layout.line,
                    hint=f"pass {layout.name}.contiguous() (and read the result from that tensor)")
            other = next((k for k, a in enumerate(args) if a is t and k != i), None)
            if other is not None:
                raise ArgumentError(
                    f"{self.kernel}() argument '{layout.name}' has a hand layout (T.Layout), and the same "
                    f"tensor is also argument '{self.params[other]}': the kernel would see it in two orders",
                    filename=layout.filename, lineno=layout.line, hint="pass separate tensors")
            if layout.in_kernel:  # the CUDA kernel addresses t through it (lower/emit/hand_layouts.py)
                self.check(layout, t)
                continue
            perm = self.permutation(layout, t)
            logical = t.detach().reshape(-1)[perm].view(t.shape)  # gather: the kernel indexes it as written
            args[i] = logical
            back.append((t, perm, logical))
        out = launch(*args)
        if back:
            import torch

            with torch.no_grad():  # as the kernel's own writes: not recorded by autograd
                for t, perm, logical in back:
                    t.view(-1)[perm] = logical.reshape(-1)  # scatter: memory in the layout's order
        return out

    def wrap(self, launch):
        """`launch` with the permutations around it (what a compiled kernel launches through)."""
        def permuted(*args):
            return self(launch, args)

        permuted.hand_layouts = self
        return permuted

"""Hand layouts of kernel parameters (`T.annotate_layout({dQ: T.Layout(dQ.shape, fn)})`), read from the
PrimFunc's `tile_nb.global_layouts` attribute (language/layouts.py) into plain data: what the plan keeps (so
the disk cache keeps it) and what the runtime evaluates around every call, on the GPU and on the interpreter
(tile_nb/runtime/layouts.py).

An output index is a tree of plain values: an int, `["i", k]` (logical index k), `["dim", k]` (the tensor's
size along dim k, for T.dynamic dims), or `[op, a, b]` with op one of + - * // % min max div mod (div and mod
truncate, as TIR's Div and Mod do; // and % floor).
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import ir, tirx

from ..errors import LoweringError

__all__ = ["GlobalLayout", "evaluate", "global_layouts"]

_OPS = {tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "//", tirx.FloorMod: "%",
        tirx.Min: "min", tirx.Max: "max", tirx.Div: "div", tirx.Mod: "mod"}


@dataclass(frozen=True)
class GlobalLayout:
    """The hand layout of tensor parameter `name`: logical index (`indices`) -> memory position, the row-major
    order of `outputs` over their ranges."""

    name: str
    indices: tuple  # the index names of the layout's function (for messages)
    outputs: tuple  # one expression tree per output (the module's docstring)
    text: str  # the layout as TIR prints it: "lambda b, h, l, d: (b, h, l // 8, ...)"
    line: int | None = None  # the T.annotate_layout line
    filename: str | None = None
    # the CUDA kernel addresses the tensor through the layout itself (emit/hand_layouts.py); else the call
    # permutes it around the launch, as the interpreter always does
    in_kernel: bool = False

    @property
    def note(self) -> str:
        """What the plan says of it, for people."""
        if self.in_kernel:
            return f"{self.name}: hand layout honored in the kernel (each access at the layout's position)"
        return (f"{self.name}: hand layout honored by a permuted copy around the launch (two extra passes "
                f"over {self.name})")

    def to_dict(self) -> dict:
        return {"name": self.name, "indices": list(self.indices), "outputs": list(self.outputs),
                "text": self.text, "line": self.line, "filename": self.filename, "in_kernel": self.in_kernel}

    @classmethod
    def from_dict(cls, d: dict) -> GlobalLayout:
        return cls(str(d["name"]), tuple(d["indices"]), tuple(d["outputs"]), str(d.get("text", "")),
                   d.get("line"), d.get("filename"), bool(d.get("in_kernel", False)))

    def outputs_on(self, shape: tuple, device=None) -> list:
        """Each output's values (int64, on `device`) over the tensor's indices at `shape`, in their broadcast
        form: each index is a broadcastable arange, so nothing is of the tensor's size until the positions
        themselves are combined (runtime/layouts.permutation)."""
        import torch

        rank = len(shape)
        grids = [torch.arange(n, dtype=torch.int64, device=device).view([1] * j + [n] + [1] * (rank - j - 1))
                 for j, n in enumerate(shape)]
        return [torch.as_tensor(evaluate(tree, grids, shape), dtype=torch.int64, device=device)
                for tree in self.outputs]

    def extents(self, shape: tuple) -> tuple | None:
        """The range of each output over the tensor's indices at `shape` (each output's values are
        0 .. extent-1), or None when an output takes a negative value (refused at the call)."""
        values = self.outputs_on(shape)
        if any(int(v.min()) < 0 for v in values):
            return None
        return tuple(int(v.max()) + 1 for v in values)


def _torch_op(op: str):
    import torch

    return {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
            "//": lambda a, b: a // b, "%": lambda a, b: a % b,
            "min": lambda a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b)),
            "max": lambda a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)),
            "div": lambda a, b: torch.div(torch.as_tensor(a), b, rounding_mode="trunc"),
            "mod": lambda a, b: torch.fmod(torch.as_tensor(a), b)}[op]


def evaluate(tree, leaves: list, shape: tuple, op=_torch_op):
    """An output's expression tree with `leaves[k]` for logical index k and `op(name)` for each operator:
    by default torch's, on int64 index grids (ints stay ints); the CUDA lowering passes TIR's."""
    if isinstance(tree, int):
        return tree
    kind = tree[0]
    if kind == "i":
        return leaves[tree[1]]
    if kind == "dim":
        return int(shape[tree[1]])
    return op(kind)(evaluate(tree[1], leaves, shape, op), evaluate(tree[2], leaves, shape, op))


def global_layouts(func: tirx.PrimFunc) -> tuple[GlobalLayout, ...]:
    """The hand layouts of `func`'s parameters, in parameter order (none: an empty tuple)."""
    attrs = func.attrs or {}
    maps = attrs.get("tile_nb.global_layouts", None)
    if not maps:
        return ()
    lines = {str(n): int(line) for n, line in attrs.get("tile_nb.layout_lines", None) or []}
    span = getattr(func, "span", None)
    filename = str(span.source_name.name) if span is not None and span.source_name is not None else None
    out = []
    for p in func.params:
        imap = maps.get(p.name, None) if hasattr(p, "shape") else None
        if imap is None:
            continue
        index = list(imap.initial_indices)
        dims = list(p.shape)
        trees = tuple(_tree(e, index, dims, p.name) for e in imap.final_indices)
        text = str(imap)
        text = text[len("T.index_map("):-1] if text.startswith("T.index_map(") else text
        names = tuple(v.name for v in index)
        out.append(GlobalLayout(p.name, names, trees, text, lines.get(p.name), filename))
    missing = set(maps) - {g.name for g in out}
    if missing:
        raise LoweringError(f"tile_nb.global_layouts names {', '.join(sorted(missing))}, which are no tensor "
                            "parameters of the kernel")
    return tuple(out)


def _tree(e, index: list, dims: list, name: str):
    """`e` as plain data (the module's docstring)."""
    if isinstance(e, int):
        return int(e)
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    if isinstance(e, tirx.Cast):
        return _tree(e.value, index, dims, name)
    if isinstance(e, ir.Var):
        for k, v in enumerate(index):
            if e.same_as(v):
                return ["i", k]
        for k, d in enumerate(dims):
            if e.same_as(d):
                return ["dim", k]
        raise LoweringError(f"the hand layout of '{name}' uses '{e.name}', which is neither an index nor a "
                            "dim of the tensor")
    op = _OPS.get(type(e))
    if op is None:
        raise LoweringError(f"the hand layout of '{name}' uses {type(e).__name__} ({e}); tile_nb honors "
                            "+ - * // % min max of the indices")
    return [op, _tree(e.a, index, dims, name), _tree(e.b, index, dims, name)]

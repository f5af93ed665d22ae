"""The interpreter's core: rule tables, the `Compiler` that turns IR nodes into
Python closures, and the `Frame`.

Each IR node is translated once into a closure `fn(frame)` by a small rule looked up in a dict (one per node
type, one per call op name, one per tile primitive), as JAX Pallas registers one interpreter rule per
primitive. Running a kernel is then calling closures: no tree walk and no dict dispatch per element or per
CTA. A node without a rule raises `NotImplementedError` naming the node, so unsupported IR fails loudly.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tvm import tirx

from .errors import SourceLocation, location_of

__all__ = [
    "CALL_RULES",
    "EXPR_RULES",
    "STMT_RULES",
    "TILE_RULES",
    "Compiler",
    "Frame",
    "call_rule",
    "expr_rule",
    "op_short_name",
    "stmt_rule",
    "tile_rule",
]

Closure = Callable[["Frame"], Any]

EXPR_RULES: dict[type, Callable] = {}   # node type -> rule(compiler, node) -> closure returning a value
CALL_RULES: dict[str, Callable] = {}    # short op name ("exp", "if_then_else") -> rule(compiler, call)
STMT_RULES: dict[type, Callable] = {}   # statement type -> rule(compiler, stmt) -> closure returning None
TILE_RULES: dict[str, Callable] = {}    # tile primitive ("copy", "gemm") -> rule(compiler, call)


def _register(table: dict, keys):
    def deco(fn):
        for key in keys:
            table[key] = fn
        return fn
    return deco


def expr_rule(*types):
    return _register(EXPR_RULES, types)


def call_rule(*names):
    return _register(CALL_RULES, names)


def stmt_rule(*types):
    return _register(STMT_RULES, types)


def tile_rule(*names):
    return _register(TILE_RULES, names)


def op_short_name(op) -> str:
    """`tirx.exp` / `prim.log2` / `tirx.tile.copy` -> `exp` / `log2` / `copy`."""
    return str(op.name).rsplit(".", 1)[-1]


class Frame:
    """The mutable state of one kernel execution.

    vals: every variable and buffer, by slot number (loop vars, block ids, buffers as torch tensors).
    par_shape: the broadcast shape of the enclosing `T.parallel` loops, innermost loop first (empty at block
      level). The loop var at parallel depth d has shape (extent,) + (1,) * d, so broadcasting aligns every
      loop var to its own dim without reshaping outer ones when an inner loop opens.
    mask: inside parallel loops, the bool tensor of iterations that are active (under `if` on a loop var).
    overlays: per-iteration copies of `local`/`local.var` buffers written inside parallel loops (per thread on
      the GPU), by buffer slot; written back when the outermost parallel loop ends.
    block: the blockIdx values of the running CTA, for error messages.
    written: per buffer slot, which elements the CTA has written (written.py), or None when the check is off.
    trace / access: recording of one block's global accesses (access.py); None otherwise.
    warp / members: in a block run as warp groups (warps.py), this frame's group and the statement's groups.
    grid: in a grid run as coroutines (T.sync_grid, grid.py), (its scheduler, this block).
    """

    __slots__ = ("access", "block", "grid", "mask", "members", "overlays", "par_shape", "ranges", "trace",
                 "vals", "warp", "written")

    def __init__(self, nslots: int):
        self.vals: list = [None] * nslots
        self.par_shape: tuple = ()
        self.mask: torch.Tensor | None = None
        self.overlays: dict | None = None
        self.block: dict = {}
        self.ranges: dict = {}  # parallel loop var slot -> (start, extent, step), for slice accesses
        self.written: list | None = None
        self.trace = None    # access.py's Trace when a block's accesses are recorded
        self.access: dict | None = None  # its masks while that block runs, else None
        self.warp = None     # in a warp-specialized block (warps.py): the warp group running this frame
        self.members: tuple | None = None  # the groups running the current statement together
        self.grid = None  # (GridScheduler, its block) when the grid runs as coroutines (grid.py)

    def block_ids(self) -> tuple | None:
        if not self.block:
            return None
        return tuple(self.block[k] for k in sorted(self.block))


class Compiler:
    """Translates a PrimFunc body into closures; owns the slot numbering of variables and buffers."""

    def __init__(
        self, tile_lines: list[int] | None = None, filename: str | None = None, name: str = "kernel"
    ):
        self.name = name  # the kernel's, for the frame T.breakpoint stops in
        # Tile-op calls have no span: the frontend lists their lines in program order
        # (`tile_nb.tile_op_lines`), which is the order they are compiled in here.
        self._tile_lines = tile_lines
        self._filename = filename
        self._tile_count = 0
        self._slots: dict[int, int] = {}
        self.buffers: dict[int, Any] = {}   # slot -> buffer Var, for names, scopes and dtypes
        self.location = SourceLocation()     # of the statement being compiled, for error messages
        self.par_vars: dict[int, tuple] = {}  # enclosing parallel loop vars: key -> (slot, depth, name)
        # For T.breakpoint: each slot's variable (first seen in program order), and the slots out of scope at
        # the statement being compiled (loop vars of loops already closed, thread indices).
        self.vars: dict[int, Any] = {}
        self.closed: set[int] = set()
        self.tracked: list[int] = []  # slots of buffers whose written elements are tracked (written.py)
        self.warps = None  # warps.WarpInfo when the function has T.ws regions or mbarriers
        self.grid_sync = False  # the function calls T.sync_grid: its blocks run as coroutines (grid.py)

    @property
    def nslots(self) -> int:
        return len(self._slots)

    def slot(self, var) -> int:
        key = var.__chandle__()
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = len(self._slots)
            self.vars[slot] = var
        if self.warps is not None:
            self.warps.touched.add(slot)  # which buffers each block-level statement uses (warps.py)
        return slot

    def buffer_slot(self, buf) -> int:
        slot = self.slot(buf)
        self.buffers[slot] = buf
        return slot

    def tile_location(self) -> SourceLocation:
        """The location of the tile-op call being compiled (the next one in program order)."""
        n = self._tile_count
        self._tile_count += 1
        if self.location.line is None and self._tile_lines is not None and n < len(self._tile_lines):
            return SourceLocation(self._filename, self._tile_lines[n])
        return self.location

    def expr(self, node) -> Closure:
        rule = _lookup(EXPR_RULES, type(node))
        if rule is None:
            raise NotImplementedError(
                f"the CPU interpreter has no rule for expression node {type(node).__name__}: {node}")
        return rule(self, node)

    def exprs(self, nodes) -> list[Closure]:
        return [self.expr(n) for n in nodes]

    def stmt(self, node) -> Closure:
        rule = _lookup(STMT_RULES, type(node))
        if rule is None:
            raise NotImplementedError(
                f"the CPU interpreter has no rule for statement {type(node).__name__}:\n{_short(node)}")
        saved = self.location
        if not isinstance(node, _SEQ):
            self.location = location_of(node) if getattr(node, "span", None) is not None else \
                _fallback_location(node, saved)
        if self.warps is None:
            try:
                return rule(self, node)
            finally:
                self.location = saved
        outer, self.warps.touched = self.warps.touched, set()
        try:
            return self.warps.wrap(self, node, rule(self, node))
        finally:
            self.location = saved
            outer |= self.warps.touched
            self.warps.touched = outer


_SEQ = tirx.SeqStmt


def _lookup(table: dict, cls: type):
    """The rule for a node type or, failing that, for its nearest registered base class (tile primitive
    subclasses such as `Copy` share the `TilePrimitiveCall` rule)."""
    rule = table.get(cls)
    if rule is None:
        for base in cls.__mro__[1:]:
            rule = table.get(base)
            if rule is not None:
                table[cls] = rule
                break
    return rule


def _fallback_location(node, enclosing: SourceLocation) -> SourceLocation:
    """A statement without a span inherits its parent's source line; else it is described by its own text."""
    if enclosing.line is not None:
        return enclosing
    return location_of(node)


def _short(node) -> str:
    try:
        text = node.script()
    except Exception:  # noqa: BLE001 - printing is best effort
        return repr(node)
    lines = text.strip().splitlines()
    return "\n".join(lines[:5]) + ("\n..." if len(lines) > 5 else "")

"""Interpreter rules of `T.print` and `T.device_assert` (language/debug.py gives
the IR, docs/debugging.md the text).

Block-level code runs once per CTA here, so a print runs once per block: the block filter is applied, the
thread filter only names the thread in the text (every thread of the CTA holds the same block-level
values). The text is the GPU's, character for character (lower/emit/debug.py builds the same lines with
device printf): floats as C's `%g`, integers as `%d`. Lines go to Python's `sys.stdout`, so pytest's
capsys and the notebook cell see them.
"""
from __future__ import annotations

import sys

import torch
from tvm import ir, tirx

from ..errors import DeviceAssertError
from ..language.debug import ASSERT, ASSUME, BREAKPOINT, PRINT, PRINT_TILE, ROW_CHUNK
from . import values as V
from . import written
from .breakpoint import compile_breakpoint
from .compiler import Compiler, op_short_name
from .errors import InterpreterError

__all__ = ["EXTERN_RULES", "format_value", "prefix"]


def prefix(line: int, block: tuple, thread: int | None) -> str:
    """`[line 12, block (0, 1)] ` (`, thread 5` when the print filters on a thread)."""
    text = f"[line {line}, block ({', '.join(str(int(b)) for b in block)})"
    return text + (f", thread {thread}] " if thread is not None else "] ")


def format_value(value, dtype: str) -> str:
    """C printf's text of one value: `%g` for floats (16-bit floats widened), `%d` for integers and bools."""
    if V.is_tensor(value):
        value = value.item()
    if dtype.startswith(("float", "bfloat")):
        return f"{float(value):g}"
    return f"{int(value):d}"


def _ints(args) -> list[int]:
    return [int(a.value) for a in args]


def _filtered(comp: Compiler, node):
    """(label, line, thread or None, block filter) of a print call; refused
    inside `T.Parallel` (per-thread code:
    the GPU would print from every thread)."""
    label = str(node.args[1].value)
    line, thread, show, *block = _ints(node.args[2:8])
    if comp.par_vars:
        raise InterpreterError("T.print inside a T.Parallel loop is not supported: the loop's iterations are "
                               "spread over the threads. Print the tile after the loop, or a value at block "
                               "level", comp.location)
    return label, line, thread if show else None, block


def _block_of(f) -> tuple:
    return f.block_ids() or (0,)


def _selected(block: tuple, wanted: list[int]) -> bool:
    return all(w < 0 or (block[i] if i < len(block) else 0) == w for i, w in enumerate(wanted))


def _print(comp: Compiler, node):
    label, line, thread, wanted = _filtered(comp, node)
    value = node.args[8] if len(node.args) > 8 else None
    value_fn = comp.expr(value) if value is not None else None
    dtype = str(value.ty.dtype) if value is not None else ""

    def run(f):
        block = _block_of(f)
        if _selected(block, wanted):
            text = prefix(line, block, thread) + label
            if value_fn is not None:
                text += " = " + format_value(value_fn(f), dtype)
            sys.stdout.write(text + "\n")
        return 0
    return run


def _print_tile(comp: Compiler, node):
    label, line, thread, wanted = _filtered(comp, node)
    start = node.args[8]
    if isinstance(start, ir.Call) and op_short_name(start.op) == "address_of":
        start = start.args[0]
    buf = start.source
    slot = comp.buffer_slot(buf)
    index = comp.exprs(start.indices)
    extents = comp.exprs(node.args[9:])
    dtype = str(buf.dtype)
    location = comp.location

    def run(f):
        block = _block_of(f)
        if not _selected(block, wanted):
            return 0
        t = f.vals[slot]
        lo = [int(i(f)) for i in index]
        ext = [int(e(f)) for e in extents]
        if any(a < 0 or a + n > d for a, n, d in zip(lo, ext, t.shape, strict=True)):
            raise InterpreterError(
                f"T.print of '{buf.name}' region starting at {lo} with extents {ext} is out of "
                f"the buffer's shape {tuple(t.shape)}",
                location,
            )
        m = written.mask_of(f.written, slot, t)
        found = written.region_unwritten(m, tuple(slice(a, a + n) for a, n in zip(lo, ext, strict=True)))
        if found is not None:  # the GPU would print garbage
            written.raise_region(buf, lo, ext, t.shape, found, "T.print", location, f.block_ids())
        sys.stdout.write("".join(tile_lines(prefix(line, block, thread), label, buf.name, dtype, lo,
                                            t[tuple(slice(a, a + n) for a, n in zip(lo, ext, strict=True))])))
        return 0
    return run


def tile_lines(head: str, label: str, name: str, dtype: str, lo: list[int], tile: torch.Tensor):
    """The header and the rows of a printed tile (rows split every ROW_CHUNK
    values), each ending in a newline."""
    region = ", ".join(f"{a}:{a + n}" for a, n in zip(lo, tile.shape, strict=True))
    yield f"{head}{label + ': ' if label else ''}{name}[{region}] {dtype}\n"
    width = tile.shape[-1]
    rows = tile.reshape(-1, width) if tile.numel() else tile.reshape(0, width)
    for r, row in enumerate(rows.tolist()):
        lead = []
        rest = r
        for d in reversed(tile.shape[:-1]):
            lead.insert(0, rest % d)
            rest //= d
        for c0 in range(0, width, ROW_CHUNK):
            c1 = min(c0 + ROW_CHUNK, width)
            cols = ":" if c1 - c0 == width else f"{c0}:{c1}"
            where = ", ".join([str(i) for i in lead] + [cols])
            yield f"{head}{name}[{where}] = {' '.join(format_value(v, dtype) for v in row[c0:c1])}\n"


def _cond_values(cond) -> list:
    """The loads and variables `cond` reads, in order, once each: the values an assert's message shows."""
    found: list = []
    seen: set[str] = set()

    def visit(e):
        if isinstance(e, (ir.TensorLoad, tirx.Var)):
            if str(e) not in seen:
                seen.add(str(e))
                found.append(e)
            return
        for field in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(e, field, None)
            if isinstance(child, ir.Expr):
                visit(child)
        if isinstance(e, ir.Call):
            for arg in e.args:
                if isinstance(arg, ir.Expr) and not isinstance(arg, ir.StringImm):
                    visit(arg)
    visit(cond)
    return found


def _assert(comp: Compiler, node, what: str = "T.device_assert"):
    cond, message = node.args[1], str(node.args[2].value)
    cond_fn = comp.expr(cond)
    shown = [(str(e), comp.expr(e), str(e.ty.dtype)) for e in _cond_values(cond)]
    loops = [(name, slot) for slot, _, name in comp.par_vars.values()]
    location = comp.location

    def run(f):
        ok = cond_fn(f)
        at = ()
        if V.is_tensor(ok) and ok.dim() > 0:
            ok = ok.to(torch.bool).expand(f.par_shape) if f.par_shape else ok.to(torch.bool)
            bad = ~ok if f.mask is None else ~ok & f.mask.expand(ok.shape)
            if not bool(bad.any()):
                return 0
            at = tuple(int(i) for i in torch.nonzero(bad)[0])
        elif bool(ok):
            return 0

        def pick(value):
            if V.is_tensor(value) and value.dim() > 0:
                return value.expand(f.par_shape)[at]
            return value

        where = [f"block ({', '.join(str(b) for b in _block_of(f))})"]
        where += [f"{name} = {int(pick(f.vals[slot]))}" for name, slot in loops]
        values = ", ".join(f"{text} = {format_value(pick(fn(f)), dtype)}" for text, fn, dtype in shown)
        raise DeviceAssertError(f"{what} failed{': ' + message if message else ''} "
                                f"({'; '.join(where)}{'; ' + values if values else ''})", **location.fields())
    return run


def _assume(comp: Compiler, node):
    """T.assume: what the GPU's compiler may rely on is checked here, as an assert (a false fact is undefined
    behaviour there)."""
    return _assert(comp, node, "T.assume")


EXTERN_RULES = {PRINT: _print, PRINT_TILE: _print_tile, ASSERT: _assert, ASSUME: _assume,
                BREAKPOINT: compile_breakpoint}

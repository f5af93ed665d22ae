"""`run(func, args)`: bind the arguments of a phase-2 PrimFunc to CPU tensors and execute it.

Parameters are buffer vars (bound by `T.match_buffer`: their shape and strides may hold `T.dynamic` vars, read
here from the tensors) or scalar vars (Python numbers). The body is compiled to closures once per PrimFunc
(cached by object identity, so a kernel the JIT keeps is compiled once) and run on a fresh `Frame`.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict

import torch
from tvm import ir, tirx
from tvm.tirx.buffer import is_buffer_var
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..errors import TileNBError
from . import exprs, grid, memory, stmts, tileops, warps, written  # noqa: F401 - importing registers the rules
from . import values as V
from .compiler import Compiler, Frame
from .errors import InterpreterError

__all__ = ["Program", "compile_func", "run", "run_program"]

_CACHE_SIZE = 64
_cache: OrderedDict[int, tuple] = OrderedDict()
# threads may interpret at once: an eviction must not race a lookup's move_to_end
_cache_lock = threading.Lock()


class Program:
    """A PrimFunc translated to closures: parameter bindings, slot count and the body."""

    def __init__(self, func: tirx.PrimFunc):
        self.name = (
            str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else "kernel"
        )
        comp = Compiler(*_tile_lines(func), name=self.name)
        if warps.uses_warp_groups(func):
            comp.warps = warps.WarpInfo()
        if grid.uses_grid_sync(func):
            if comp.warps is not None:
                raise InterpreterError(f"{self.name}: T.sync_grid in a kernel with warp-specialized regions "
                                       "or mbarriers is not interpreted yet")
            comp.grid_sync = True
        self.params = []
        for p in func.params:
            if is_buffer_var(p):
                self.params.append(BufferParam(comp, p))
            else:
                self.params.append(_ScalarParam(comp, p))
        self.body = comp.stmt(func.body)
        self.nslots = comp.nslots
        from ..runtime.layouts import HandLayouts

        # T.Layout on a parameter: permuted around the run as around a GPU launch (runtime/layouts.py)
        self.layouts = HandLayouts.of_func(func)

    def __call__(self, args, check_uninit: bool = True, trace=None) -> None:
        if len(args) != len(self.params):
            raise InterpreterError(f"{self.name}() takes {len(self.params)} arguments "
                                   f"({', '.join(p.name for p in self.params)}); got {len(args)}")
        f = Frame(self.nslots)
        if check_uninit:
            f.written = [None] * self.nslots
        f.trace = trace
        for p, a in zip(self.params, args, strict=True):
            p.bind(f, a, self.name)
        for p in self.params:
            p.check(f, self.name)
        self.body(f)


def _tile_lines(func: tirx.PrimFunc) -> tuple[list[int] | None, str | None]:
    """The user's lines of the tile-op calls, in program order, and the kernel's file (None when unknown or
    when their number does not match the calls, e.g. IR changed after elaboration)."""
    attrs = func.attrs or {}
    if "tile_nb.tile_op_lines" not in attrs:
        return None, None
    lines = [int(x) for x in attrs["tile_nb.tile_op_lines"]]
    span = getattr(func, "span", None)
    if _count_tile_calls(func.body) != len(lines) or span is None or span.source_name is None:
        return None, None
    return lines, str(span.source_name.name)


def _count_tile_calls(stmt) -> int:
    if isinstance(stmt, TilePrimitiveCall):
        return 1
    if isinstance(stmt, tirx.SeqStmt):
        return sum(_count_tile_calls(s) for s in stmt.seq)
    if isinstance(stmt, tirx.IfThenElse):
        return _count_tile_calls(stmt.then_case) + (
            _count_tile_calls(stmt.else_case) if stmt.else_case is not None else 0)
    body = getattr(stmt, "body", None)
    return _count_tile_calls(body) if isinstance(body, tirx.Stmt) else 0


class _ScalarParam:
    def __init__(self, comp: Compiler, var):
        self.name = var.name
        self.slot = comp.slot(var)
        self.dtype = str(var.ty.dtype) if hasattr(var.ty, "dtype") else None

    def bind(self, f: Frame, value, fname: str):
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise InterpreterError(f"{fname}() argument '{self.name}' is a scalar ({self.dtype}); got a "
                                       f"tensor of shape {tuple(value.shape)}")
            value = value.item()
        f.vals[self.slot] = V.cast(value, self.dtype) if self.dtype in ("int32", "int64", "bool") else value

    def check(self, f: Frame, fname: str):
        pass


class BufferParam:
    """A tensor parameter: dtype and rank are checked, symbolic dims and
    strides bound, static ones compared."""

    def __init__(self, comp: Compiler, buf):
        self.name = buf.name
        self.slot = comp.buffer_slot(buf)
        self.dtype = V.torch_dtype(buf.dtype)
        self.shape = list(buf.shape)
        self.strides = list(buf.strides) if buf.strides else []
        self.comp = comp
        self._shape_fns = comp.exprs(self.shape)
        self._stride_fns = comp.exprs(self.strides)
        # dims that are plain vars bind them; anything else (ints, expressions) is checked after binding
        self._binders = [(i, comp.slot(d)) for i, d in enumerate(self.shape) if isinstance(d, ir.Var)]
        self._stride_binders = [
            (i, comp.slot(s)) for i, s in enumerate(self.strides) if isinstance(s, ir.Var)
        ]

    def bind(self, f: Frame, t, fname: str):
        if not isinstance(t, torch.Tensor):
            raise InterpreterError(f"{fname}() argument '{self.name}' must be a torch tensor; got "
                                   f"{type(t).__name__}")
        if t.device.type != "cpu":
            raise InterpreterError(f"{fname}() argument '{self.name}' is on {t.device}; the CPU interpreter "
                                   f"needs CPU tensors")
        if t.dtype != self.dtype:
            raise InterpreterError(
                f"{fname}() argument '{self.name}' must have dtype {self.dtype}; got {t.dtype}"
            )
        if t.dim() != len(self.shape):
            raise InterpreterError(f"{fname}() argument '{self.name}' must have rank {len(self.shape)}; got "
                                   f"shape {tuple(t.shape)}")
        for i, slot in self._binders:
            if f.vals[slot] is None:
                f.vals[slot] = int(t.shape[i])
        for i, slot in self._stride_binders:
            if f.vals[slot] is None:
                f.vals[slot] = int(t.stride(i))
        f.vals[self.slot] = t

    def check(self, f: Frame, fname: str):
        t = f.vals[self.slot]
        expected = tuple(int(fn(f)) for fn in self._shape_fns)
        if tuple(t.shape) != expected:
            raise InterpreterError(f"{fname}() argument '{self.name}' must have shape {expected}; got "
                                   f"{tuple(t.shape)}")
        if self._stride_fns:
            strides = tuple(int(fn(f)) for fn in self._stride_fns)
            if tuple(t.stride()) != strides and t.numel() > 1:
                raise InterpreterError(f"{fname}() argument '{self.name}' must have strides {strides}; got "
                                       f"{tuple(t.stride())}")


def compile_func(func: tirx.PrimFunc) -> Program:
    """The closures of `func`, from the cache when this PrimFunc object was run before."""
    key = func.__chandle__()
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and hit[0].same_as(func):
            _cache.move_to_end(key)
            return hit[1]
    program = Program(func)  # built outside the lock: two threads may both build one, either result is right
    with _cache_lock:
        _cache[key] = (func, program)  # holding func keeps its handle from being reused by another object
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return program


def run(func: tirx.PrimFunc, args: list, *, threads: int | None = 1) -> None:
    """Execute the phase-2 tile IR `func` on CPU torch tensors, in place.

    `args` follow `func.params`: tensors for buffer parameters (outputs included, already allocated), Python
    numbers for scalar parameters. `T.dynamic` dims and symbolic strides are read from the tensors.

    Example::

        C = torch.zeros(M, N)
        tile_nb.interp.run(gemm_func, [A, B, C])   # C now holds A @ B

    Raises `OutOfBoundsError` for an access the GPU would perform out of bounds, `InterpreterError` for
    arguments that do not match the function, `NotImplementedError` for IR without an interpreter rule,
    `UninitializedReadError` for a read of shared / fragment / local memory that the block never wrote (the
    GPU would read garbage there; `TILE_NB_CHECK_UNINIT=0` turns that check off).

    A parameter with a hand layout (`T.annotate_layout` with `T.Layout`) is gathered into logical order before
    the run and scattered back after it, as on the GPU (tile_nb/runtime/layouts.py).

    Errors are raised without the interpreter's own frames (set `TILE_NB_DEBUG=1` to keep them).

    `threads`: torch intra-op threads while the kernel runs (restored afterwards; None keeps torch's setting).
    Tile-sized ops gain nothing from more threads, and on a busy machine OpenMP's waiting between thousands of
    small ops makes them much slower (benchmarks/results/interp.md).
    """
    program = compile_func(func)
    if program.layouts is None:
        run_program(program, list(args), threads)
    else:
        program.layouts(lambda *logical: run_program(program, list(logical), threads), args)


def run_program(program: Program, args: list, threads: int | None = 1, trace=None) -> None:
    """`run` of a compiled program; `trace` (access.py) records one block's global accesses."""
    saved = torch.get_num_threads()
    if threads is not None and threads != saved:
        torch.set_num_threads(threads)
    try:
        program(args, written.enabled(), trace)
    except TileNBError as err:
        if os.environ.get("TILE_NB_DEBUG"):
            raise
        # The message already points at the user's line; the interpreter's closures are noise in a traceback.
        raise err.with_traceback(None) from None
    finally:
        if threads is not None and threads != saved:
            torch.set_num_threads(saved)

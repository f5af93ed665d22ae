"""The elaboration state the `T.*` builders read: set by `tile_nb.frontend` while it runs a kernel body.

The tile language only builds IR; which phase is running, the values of the consts, and the user's current
source line live here so that every builder can attach the line to what it emits, and so that IR frames are
closed cleanly when phase 1 has to stop early.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import DSLError

__all__ = ["State", "active", "current", "frame", "StopTemplate"]


class StopTemplate(Exception):
    """Phase 1 met Python code that needs a concrete const: the template ends at this statement."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class State:
    """What one elaboration (phase 1 or phase 2) knows while the body runs."""

    filename: str
    symbolic: bool  # phase 1: consts are tvm Vars
    const_values: dict[str, Any]  # name -> int (phase 2) or tvm Var (phase 1)
    # phase-1 Vars, to tell const-dependent conditions
    const_vars: dict[str, Any] = field(default_factory=dict)
    dynamic_vars: dict[str, Any] = field(default_factory=dict)
    lineno: int = 0
    col: int = 0
    end_col: int | None = None
    kernel_open: bool = False
    threads: int | None = None
    thread_dims: tuple = ()  # T.Kernel(threads=(x, y)): the block's thread shape (threads is x * y)
    loops: list[str] = field(default_factory=list)  # "ir" or "python", innermost last
    ws_ids: tuple | None = None  # the warp groups of the enclosing `with T.ws(...)` (language/sync.py)
    # Hooks the front end installs (runtime buffers, outputs, pointers).
    on_empty: Callable[..., Any] | None = None
    # T.alloc_global: (shape, dtype) -> a scratch buffer parameter
    on_global: Callable[..., Any] | None = None
    on_make_tensor: Callable[..., Any] | None = None
    on_macro: Callable[..., Any] | None = None  # (macro, args, kwargs) -> its return value
    consts_used: list[str] = field(default_factory=list)
    tile_op_lines: list[int] = field(default_factory=list)  # TilePrimitiveCalls carry no span: lines in order
    # (buffer, line) of each T.alloc_*: budget errors point there
    allocations: list = field(default_factory=list)
    extern_sources: list[str] = field(default_factory=list)  # T.import_source's code (language/extern.py)
    hints: list[str] = field(default_factory=list)  # hints accepted, not applied (T.use_swizzle, gemm policy)
    tf32: list = field(default_factory=list)  # buffers allocated as T.tfloat32 (float32 storage, TF32 T.gemm)
    block_vars: tuple = ()  # the open T.Kernel's block indices (blockIdx.x, .y, .z), for T.get_block_binding
    thread_var: Any = None  # the open T.Kernel's threadIdx.x, read by per-thread code (frontend/per_thread)
    thread_indices: list = field(default_factory=list)  # (T.get_thread_binding value, stride, extent)
    reducer: Any = None  # the T.comm_reducer of the open `with T.attr(..., "reduce_scope", ...)`
    reducers: dict = field(default_factory=dict)  # T.alloc_reducer buffer -> its op, "sum" / "max" / "min"
    # reducers.reducer_update, set by the first T.alloc_reducer: `r[i] += v` on a reducer becomes its update
    on_reducer_store: Callable[..., bool] | None = None
    views: list = field(default_factory=list)  # (view, global buffer) of each T.Tensor(shape, dtype, A.data)
    pointer_tables: list = field(default_factory=list)  # the T.Tensor(shape, T.ptr) parameters' buffers
    # (tensor, its table, its address var) of each T.make_tensor(table[i], shape, dtype) (pointers.py)
    pointer_tensors: list = field(default_factory=list)
    # buffer name -> (buffer, tirx.IndexMap, line) of each T.Layout annotated on a global buffer (layouts.py)
    global_layouts: dict = field(default_factory=dict)

    def record_tile_op(self) -> None:
        self.tile_op_lines.append(self.lineno)

    def record_alloc(self, buffer) -> None:
        self.allocations.append((buffer, self.lineno))

    def span(self):
        from tvm import ir

        if not self.lineno:
            return None
        end = self.end_col if self.end_col is not None else self.col
        return ir.Span(ir.SourceName(self.filename), self.lineno, self.lineno, self.col, end)

    def bind_here(self, name: str, value, dtype: str):
        """A var `name` bound to `value` here, at the user's line: a Bind, evaluated once where it stands (the
        interpreter's errors about it point at that line)."""
        from tvm import tirx
        from tvm.script.ir_builder import tirx as T

        var = tirx.Var(name, dtype)
        T.add_to_parent(tirx.Bind(var, value, self.span()))
        return var

    def error(self, message: str, hint: str | None = None) -> DSLError:
        return DSLError(message, filename=self.filename, lineno=self.lineno or None, col=self.col,
                        end_col=self.end_col, hint=hint)


# Per thread (and per asyncio task): several threads may elaborate kernels at once, each with its own State,
# as TVM's IRBuilder stack is thread-local too.
_active: contextvars.ContextVar[State | None] = contextvars.ContextVar("tile_nb_elaboration", default=None)


def current() -> State | None:
    """The elaboration running in this thread, if any."""
    return _active.get()


def active(what: str = "this T.* call") -> State:
    st = _active.get()
    if st is None:
        raise DSLError(
            f"{what} can only run inside the body of a @tile_nb.jit kernel while it is elaborated",
            hint="call the decorated function (or its .specialize / .template) instead of the body",
        )
    return st


@contextlib.contextmanager
def activated(state: State):
    token = _active.set(state)
    try:
        yield state
    finally:
        _active.reset(token)


@contextlib.contextmanager
def frame(builder_frame):
    """Enter an IR builder frame; on a phase-1 stop, close it anyway so the template keeps what was built.

    TVM's frames are dropped when their `with` block raises; the template must instead show the kernel up to
    the statement that stopped it, so a `StopTemplate` closes the frames it passes through (the innermost
    first gets a no-op statement, since a frame cannot be empty).
    """
    from tvm.script.ir_builder import tirx as T

    entered = builder_frame.__enter__()
    try:
        yield entered
    except Exception as err:
        st = _active.get()
        stopping = isinstance(err, StopTemplate) or (st is not None and st.symbolic)
        if stopping:  # phase 1 keeps the IR built so far; phase 2 errors propagate and discard it
            if not getattr(err, "_closed_inner", False):
                T.evaluate(0)
                _mark_closed(err)
            builder_frame.__exit__(None, None, None)
        raise
    else:
        builder_frame.__exit__(None, None, None)


def _mark_closed(err: BaseException) -> None:
    try:
        err._closed_inner = True
    except AttributeError:  # exceptions of C types without a __dict__
        pass

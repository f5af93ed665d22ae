"""Kernel launch and loops: `T.Kernel`, `T.Pipelined`, `T.Parallel`, `T.serial`, `T.unroll` (and `range`).

Each loop form is a `LoopSpec`; the front end rewrites `for i in <spec>:` so that the spec opens its IR
frames, binds the loop variables under the user's names, and runs the body once to trace it.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any

from . import state as _state
from .irutil import dtype_of, is_expr

__all__ = ["Kernel", "Pipelined", "Parallel", "serial", "unroll", "LoopSpec", "RangeLoop"]

_BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")


def _is_intlike(x) -> bool:
    if isinstance(x, bool):
        return False
    return isinstance(x, int) or is_expr(x) and dtype_of(x).startswith(("int", "uint"))


def _constant(x) -> int | None:
    """The value of an int or an integer constant expression; None for anything symbolic."""
    if isinstance(x, int):
        return x
    from tvm import tirx

    return int(x) if isinstance(x, tirx.IntImm) else None


def _thread_dims(st, threads) -> tuple:
    """`threads=N` or tilelang's `threads=(x, y[, z])`: the block's thread shape. Kernel bodies are
    block-level code, so only the total `x * y * z` matters (a multiple of 32 up to 1024);
    T.get_thread_binding(dim) still tells the dims apart, as CUDA numbers threads (x fastest)."""
    dims = tuple(threads) if isinstance(threads, (tuple, list)) else (threads,)
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise st.error(f"T.Kernel(threads=...): expected a positive int or a tuple of 1 to 3 positive ints; "
                       f"got {threads!r}")
    total = math.prod(dims)
    if total > 1024 or total % 32:
        shown = f"{threads!r}" if len(dims) == 1 else f"{threads!r} ({total} threads in all)"
        raise st.error(f"T.Kernel(threads=...) must be a multiple of 32 between 32 and 1024; got {shown}")
    return dims


class Kernel:
    """`with T.Kernel(gx, gy, threads=128) as (bx, by):` launches a grid of CTAs of `threads` threads each
    (`T.Kernel(threads=128)`, no grid: one CTA)."""

    def __init__(self, *grid, threads: int | tuple = 128):
        st = _state.active("T.Kernel")
        if not grid:  # tilelang's `T.Kernel(threads=128)`: one CTA
            grid = (1,)
        if not 1 <= len(grid) <= 3:
            raise st.error(f"T.Kernel takes 1 to 3 grid extents; got {len(grid)}")
        for i, extent in enumerate(grid):
            if not _is_intlike(extent):
                raise st.error(f"T.Kernel grid extent {i} must be an integer expression; got {extent!r}")
            if _constant(extent) is not None and _constant(extent) < 0:
                consts = ", ".join(f"{k}={v}" for k, v in st.const_values.items()) if not st.symbolic else ""
                raise st.error(f"T.Kernel grid extent {i} is {_constant(extent)}; a grid extent must be >= 0",
                               hint=f"the consts of this call: {consts}" if consts else None)
        self.thread_dims = _thread_dims(st, threads)
        self.grid = grid
        self.threads = math.prod(self.thread_dims)
        self.names = ["bx", "by", "bz"][: len(grid)]
        self._stack: contextlib.ExitStack | None = None

    def with_names(self, names) -> Kernel:
        """Called by the front end with the `as (...)` target names, so the IR uses them."""
        if names and len(names) == len(self.grid):
            self.names = list(names)
        return self

    def __enter__(self):
        from tvm.script.ir_builder import IRBuilder
        from tvm.script.ir_builder import tirx as T

        st = _state.active("T.Kernel")
        if st.kernel_open:
            raise st.error("T.Kernel cannot be nested: a kernel body has exactly one T.Kernel")
        st.kernel_open = True
        st.threads = self.threads
        st.thread_dims = self.thread_dims
        if len(self.thread_dims) > 1:  # visible in the plan: the CTA is 1-d on tile_nb
            from .hints import record_hint

            record_hint(st, f"threads={self.thread_dims!r}: one block of {self.threads} threads "
                            "(tile_nb's kernel bodies are block-level code)")
        self._stack = contextlib.ExitStack()
        block_vars = []
        # strict=False: a grid of 1 to 3 dims takes that many of the three block tags
        for tag, extent, name in zip(_BLOCK_TAGS, self.grid, self.names, strict=False):
            var = self._stack.enter_context(_state.frame(T.launch_thread(tag, extent)))
            IRBuilder.name(name, var)
            block_vars.append(var)
        tx = self._stack.enter_context(_state.frame(T.launch_thread("threadIdx.x", self.threads)))
        IRBuilder.name("tx", tx)
        st.block_vars = tuple(block_vars)
        st.thread_var = tx
        return block_vars[0] if len(block_vars) == 1 else tuple(block_vars)

    def __exit__(self, exc_type, exc, tb):
        st = _state.active("T.Kernel")
        st.kernel_open = False
        st.block_vars = ()
        st.thread_var = None
        return self._stack.__exit__(exc_type, exc, tb)


def get_block_binding(dim: int = 0):
    """`T.get_block_binding(dim)`: the open T.Kernel's block index along grid dim `dim` (0: x, the first value
    `with T.Kernel(...) as (bx, by)` gives; 1: y; 2: z), for helpers and macros that do not receive it. (Block
    indices are block-level values; thread indices are not: T.get_thread_binding stays refused.)"""
    st = _state.active("T.get_block_binding")
    if not st.kernel_open:
        raise st.error("T.get_block_binding must be called inside `with T.Kernel(...)`")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < len(st.block_vars):
        raise st.error(
            f"T.get_block_binding(dim): dim must be an int from 0 to {len(st.block_vars) - 1} (the kernel's "
            f"grid has {len(st.block_vars)} dim{'s' if len(st.block_vars) != 1 else ''}); got {dim!r}"
        )
    return st.block_vars[dim]


class LoopSpec:
    """A loop of the tile language; `open(names)` is a context manager yielding the loop variable(s)."""

    kind = "serial"
    n_vars = 1

    def __init__(self, *extents, annotations: dict | None = None):
        self.extents = extents
        self.annotations = annotations

    def _frame(self, start, stop):
        from tvm.script.ir_builder import tirx as T

        make = {"serial": T.serial, "unroll": T.unroll, "parallel": T.parallel}[self.kind]
        return make(start, stop, annotations=self.annotations)

    @contextlib.contextmanager
    def open(self, names):
        from tvm.script.ir_builder import IRBuilder

        bounds = [(0, e) if not isinstance(e, tuple) else e for e in self.extents]
        with contextlib.ExitStack() as stack:
            loop_vars = []
            for i, (start, stop) in enumerate(bounds):
                var = stack.enter_context(_state.frame(self._frame(start, stop)))
                if names and i < len(names):
                    IRBuilder.name(names[i], var)
                loop_vars.append(var)
            yield loop_vars[0] if len(loop_vars) == 1 else tuple(loop_vars)


class _Serial(LoopSpec):
    def __init__(self, start, stop=None, annotations=None):
        super().__init__((0, start) if stop is None else (start, stop), annotations=annotations)


def serial(start, stop=None) -> LoopSpec:
    """`for i in T.serial(n)` or `T.serial(start, stop)`: a sequential loop in the kernel."""
    return _Serial(start, stop)


def unroll(start, stop=None) -> LoopSpec:
    """`for i in T.unroll(n)`: a loop the compiler fully unrolls."""
    spec = _Serial(start, stop)
    spec.kind = "unroll"
    return spec


def vectorized(start, stop=None) -> LoopSpec:
    """`for i in T.vectorized(n)` (tilelang's spelling): each thread runs the loop in order, as `T.serial`;
    tile_nb builds it as a T.serial loop (same results; the CUDA compiler may still vectorize it)."""
    return _Serial(start, stop)


# tilelang's capitalized aliases of the per-thread loops
Serial, Unroll, Vectorized = serial, unroll, vectorized  # noqa: N816 - the DSL's names


_TILELANG_PIPELINE_OPTIONS = ("order", "stage", "sync", "group")


def Pipelined(*bounds, start=None, stop=None, num_stages: int = 2, **options) -> LoopSpec:  # noqa: N802
    """`for k in T.Pipelined(n, num_stages=3)`: a sequential loop whose copies overlap the compute of earlier
    iterations (a `num_stages`-deep software pipeline on the GPU; iterations run in order on the interpreter).

    As in tilelang, one bound is the trip count (k runs 0..n-1) and two are `start, stop` (k runs
    start..stop-1, none when stop <= start), given by position or as `start=` / `stop=` keywords;
    `num_stages` is a keyword. 0 and 1 stages issue no copy ahead (tilelang's default 0).

    >>> for k in T.Pipelined(1, T.ceildiv(K, block_K), num_stages=3):   # doctest: +SKIP
    ...     T.copy(A[bx * block_M, k * block_K], A_shared)
    """
    st = _state.active("T.Pipelined")
    named = {name: value for name, value in (("start", start), ("stop", stop)) if value is not None}
    if named and bounds:
        raise st.error(f"T.Pipelined got bounds both by position ({len(bounds)}) and by keyword "
                       f"({', '.join(named)})",
                       hint="give T.Pipelined(start, stop) or T.Pipelined(start=, stop=)")
    if named:
        if "stop" not in named:
            raise st.error("T.Pipelined(start=...) needs stop= as well",
                           hint="T.Pipelined(start=s, stop=e) runs s..e-1; T.Pipelined(n) runs 0..n-1")
        bounds = (named.get("start", 0), named["stop"])
    if not 1 <= len(bounds) <= 2:
        raise st.error(f"T.Pipelined takes a trip count, or a start and a stop; got {len(bounds)} positional "
                       "arguments", hint="num_stages is a keyword: T.Pipelined(start, stop, num_stages=3)")
    for name, value in options.items():
        if name not in _TILELANG_PIPELINE_OPTIONS:
            raise st.error(
                f"T.Pipelined got an unexpected keyword argument '{name}'",
                hint="it takes T.Pipelined(n, num_stages=...) or T.Pipelined(start, stop, num_stages=...)",
            )
        if value is not None:
            raise st.error(
                f"T.Pipelined({name}=...) (tilelang's hand-written pipeline schedule) is not supported "
                f"yet; got {name}={value!r}",
                hint=f"drop {name}=: tile_nb schedules the copies itself",
            )
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 0:
        raise st.error(f"T.Pipelined(num_stages=...) must be an int >= 0; got {num_stages!r}")
    for value in bounds:
        if not _is_intlike(value):
            raise st.error(f"T.Pipelined bounds must be integer expressions; got {value!r} "
                           f"({type(value).__name__})")
    start, stop = (0, bounds[0]) if len(bounds) == 1 else bounds
    return _ShiftedSerial(start, stop, annotations={"num_stages": num_stages})


class _ShiftedSerial(_Serial):
    """A serial loop over start..stop-1 built as a loop from 0 whose variable is offset by `start`: the
    lowering's pipelines (cp.async, TMA, stream-K) then only ever see zero-based loops."""

    def __init__(self, start, stop, annotations=None):
        self.start = start
        if isinstance(start, int) and start == 0:
            super().__init__(stop, annotations=annotations)
        else:
            super().__init__(_span(start, stop), annotations=annotations)

    @contextlib.contextmanager
    def open(self, names):
        with super().open(names) as var:
            yield var if isinstance(self.start, int) and self.start == 0 else self.start + var


def _span(start, stop):
    """max(stop - start, 0): the trip count of start..stop-1; start and stop may be IR expressions."""
    if isinstance(start, int) and isinstance(stop, int):
        return max(stop - start, 0)
    from tvm import tirx

    return tirx.max(stop - start, 0)


class _Parallel(LoopSpec):
    kind = "parallel"


# tilelang's T.Parallel annotation that leaves the loop's copies in flight until the kernel's own
# T.ptx_wait_group: a different program, refused; its other keywords say how threads share the loop
_ASYNC_WITHOUT_WAIT = "parallel_async_without_async_commit_wait"


def Parallel(*extents, coalesced_width=None, loop_layout=None, prefer_async=None,  # noqa: N802 - the DSL's name
             annotations=None) -> LoopSpec:
    """`for i, j in T.Parallel(M, N)`: an elementwise loop nest whose iterations the block's threads share.
    tilelang's keywords choose how threads share it, never what it computes: `coalesced_width` (an int),
    `loop_layout` (a `T.Fragment` of as many dims as extents) and `prefer_async` (cp.async for its copies,
    which complete by the loop's end either way) are checked and recorded in the kernel's `tile_nb.hints`, not
    applied (tile_nb maps loops to threads itself). `annotations` may hold none of tilelang's keys but
    `parallel_async_without_async_commit_wait: False`: with True the copies stay in flight until the kernel's
    `T.ptx_wait_group`, which tile_nb does not have; that is refused."""
    from .hints import record_hint
    from .layouts import Fragment

    st = _state.active("T.Parallel")
    if not extents:
        raise st.error("T.Parallel needs at least one extent")
    if coalesced_width is not None:
        if isinstance(coalesced_width, bool) or not isinstance(coalesced_width, int) or coalesced_width < 1:
            raise st.error(f"T.Parallel(coalesced_width=...): expected a positive int; got "
                           f"{coalesced_width!r}")
        record_hint(st, f"T.Parallel(coalesced_width={coalesced_width}) (not applied: tile_nb picks the "
                        "vector width itself)")
    if loop_layout is not None:
        if not isinstance(loop_layout, Fragment) or len(loop_layout.shape) != len(extents):
            raise st.error(f"T.Parallel(loop_layout=...): expected a T.Fragment of {len(extents)} dims (one "
                           f"per extent); got {loop_layout!r}")
        record_hint(st, f"T.Parallel(loop_layout={loop_layout!r}) (not applied: tile_nb maps a loop's "
                        "iterations to threads itself)")
    if prefer_async is not None and not isinstance(prefer_async, bool):
        raise st.error(f"T.Parallel(prefer_async=...): expected True or False; got {prefer_async!r}")
    if prefer_async:
        record_hint(st, "T.Parallel(prefer_async=True) (not applied: tile_nb decides where copies use "
                        "cp.async; they complete by the loop's end either way)")
    for key, value in (annotations or {}).items():
        if key != _ASYNC_WITHOUT_WAIT:
            raise st.error(f"T.Parallel(annotations=...): tile_nb knows no loop annotation {key!r}",
                           hint=f"tilelang's {_ASYNC_WITHOUT_WAIT!r} is the one read here")
        if value:
            raise st.error(
                f"T.Parallel(annotations={{{key!r}: True}}): copies that stay in flight until the kernel's "
                "T.ptx_commit_group / T.ptx_wait_group are not supported yet",
                hint="drop the annotation: the loop's copies then complete by its end, the same values")
    return _Parallel(*extents)


def _trip_count(start, stop, step: int):
    """len(range(start, stop, step)) for a nonzero int step; start and stop may be IR expressions."""
    span, stride = (stop - start, step) if step > 0 else (start - stop, -step)
    count = (span + stride - 1) // stride
    if isinstance(count, int):
        return max(count, 0)
    from tvm import tirx

    return tirx.max(count, 0)


class RangeLoop(_Serial):
    """Python's `range(...)` inside a kernel: a serial loop (steps other than 1
    are scaled from a unit loop)."""

    def __init__(self, *args: Any):
        st = _state.active("range")
        if not 1 <= len(args) <= 3:
            raise st.error(f"range expected 1 to 3 arguments, got {len(args)}")
        start, stop, step = (
            (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        )
        if isinstance(step, bool) or not isinstance(step, int) or step == 0:
            raise st.error(
                f"range() step must be a nonzero compile-time int (its sign decides the trip count); "
                f"got {step!r}"
            )
        self.step = step
        self.start = start
        if step == 1:
            super().__init__(start, stop)
        else:
            super().__init__(0, _trip_count(start, stop, step))

    @contextlib.contextmanager
    def open(self, names):
        with super().open(names) as var:
            yield var if self.step == 1 else self.start + var * self.step

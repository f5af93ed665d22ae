"""Debugging in a kernel: `T.print`, `T.device_assert` and `T.assume` (docs/debugging.md).

Both build one `T.evaluate(T.call_extern("int32", ...))` statement that the interpreter (`interp/debug.py`)
and the lowering (`lower/emit/debug.py`) give the same meaning:

- `tile_nb_print(label, line, thread, show_thread, block_x, block_y, block_z, value)`: one line of text;
- `tile_nb_print_tile(label, line, thread, show_thread, block_x, block_y, block_z, address_of(buf[start]),
  extent_0, ...)`: a header line, then one line per row of the tile (rows wider than `ROW_CHUNK` are split);
- `tile_nb_assert(cond, message, line)`: stop the kernel, naming the line, when `cond` is false;
- `tile_nb_assume(cond, "", line)`: a fact the GPU's compiler may rely on (`__builtin_assume`), which the
  interpreter checks as an assert (a false one is undefined behaviour on the GPU);
- `tile_nb_breakpoint(line, block_x, block_y, block_z)`: the interpreter stops there (in the debugger) for
  that block; the GPU lowering refuses it.

`block_*` is -1 for "every block"; `thread` is the thread (threadIdx.x) that prints on the GPU.
"""
from __future__ import annotations

from . import state as _state
from .irutil import is_buffer, is_expr, is_load, is_region

__all__ = ["print", "device_assert", "assume", "breakpoint", "ROW_CHUNK", "PRINT", "PRINT_TILE", "ASSERT",
           "ASSUME", "BREAKPOINT"]

PRINT = "tile_nb_print"
PRINT_TILE = "tile_nb_print_tile"
ASSERT = "tile_nb_assert"
ASSUME = "tile_nb_assume"
BREAKPOINT = "tile_nb_breakpoint"
ROW_CHUNK = 16  # values per printed line: device printf takes at most 32 arguments

_WARP_GROUP = 128
_WARP = 32


def _thread_filter(st, thread, warp_group_id, warp_id):
    """The thread that prints: `thread=`, or tilelang's `warp_group_id * 128 + warp_id * 32`."""
    if thread is not None and (warp_group_id or warp_id):
        raise st.error("T.print takes either thread= or tilelang's warp_group_id= / warp_id=, not both")
    for name, value in (("thread", thread), ("warp_group_id", warp_group_id), ("warp_id", warp_id)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise st.error(f"T.print({name}=...) must be a compile-time int >= 0; got {value!r}")
    show = thread is not None or bool(warp_group_id) or bool(warp_id)
    tid = thread if thread is not None else (warp_group_id or 0) * _WARP_GROUP + (warp_id or 0) * _WARP
    if st.threads is not None and tid >= st.threads:
        raise st.error(f"T.print filters on thread {tid}, but the kernel has {st.threads} threads per block",
                       hint=f"give a thread below {st.threads}")
    return tid, show


def _block_filter(st, block, op: str = "T.print", none: str = "every block"):
    """(x, y, z) block ids, -1 for any: None prints in every block; an int or a tuple names one block (dims
    left out are 0)."""
    if block is None:
        return (-1, -1, -1)
    ids = (block,) if isinstance(block, int) else tuple(block) if isinstance(block, (tuple, list)) else None
    if ids is None or not 1 <= len(ids) <= 3 or any(isinstance(b, bool) or not isinstance(b, int) or b < 0
                                                    for b in ids):
        raise st.error(f"{op}(block=...) must be None ({none}), a block index or a tuple of up to 3 "
                       f"compile-time ints >= 0; got {block!r}")
    return ids + (0,) * (3 - len(ids))


def print(value=None, msg: str = "", block=None, thread=None, *, warp_group_id=None, warp_id=None):  # noqa: A001
    """`T.print(x, msg="x")`: print a value from inside a kernel; it names the line and the block.

    `value`: a scalar expression (`bx * 4`), one element (`A_shared[i, 0]`), a whole tile (`A_shared`, a
    fragment, a global region `A[0:4, 0:8]`; a fragment is first copied to a shared tile `<name>_print`), or
    nothing (only `msg`). Block-level code: call it outside `T.Parallel`.
    By default every block prints once, from thread 0; `block=(0, 1)` prints from that block only, `thread=t`
    (or tilelang's `warp_group_id=` / `warp_id=`) from thread t. On the interpreter the lines come in
    execution order; on the GPU through device printf (the notebook cell shows them after the launch), in any
    order between blocks.

    >>> T.print(acc[0], msg="acc", block=(0, 0))        # doctest: +SKIP
    [line 9, block (0, 0)] acc = 3.5
    """
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    st = _state.active("T.print")
    if not st.kernel_open:
        raise st.error("T.print must be called inside `with T.Kernel(...)`")
    if not isinstance(msg, str):
        raise st.error(f"T.print(msg=...) must be a str; got {msg!r}")
    tid, show = _thread_filter(st, thread, warp_group_id, warp_id)
    head = [st.lineno, tid, int(show), *_block_filter(st, block)]
    from tvm.tirx.buffer import is_buffer_var

    if (is_buffer(value) and is_buffer_var(value)) or is_region(value):
        region = value[tuple(slice(0, d) for d in value.shape)] if is_buffer(value) else value
        if region.source.scope() == "local.fragment":
            region = _staged(st, region)
        buf = region.source
        start = buf[tuple(r.min for r in region.region)]
        extents = [r.extent for r in region.region]
        call = tirx.call_extern("int32", PRINT_TILE, msg, *head, tirx.address_of(start), *extents)
    elif value is None or is_expr(value) or is_load(value) or isinstance(value, (bool, int, float)):
        if value is None:
            label, args = msg, []
        else:
            label = msg or (str(value) if not isinstance(value, bool) else repr(value))
            args = [tirx.const(value) if isinstance(value, (bool, int, float)) else value]
        call = tirx.call_extern("int32", PRINT, label, *head, *args)
    else:
        raise st.error(f"T.print prints a scalar expression, an element `A[i, j]`, a tile or a region "
                       f"`A[a:b, c:d]`; got {value!r} ({type(value).__name__})")
    T.add_to_parent(tirx.Evaluate(call, st.span()))


def _staged(st, region):
    """A fragment's elements live in many threads' registers, and one thread prints: the fragment (region) is
    first copied into a shared tile named `<fragment>_print`, on both sides (so the interpreter's text is the
    GPU's). That tile counts against the block's shared memory like any other."""
    from tvm.script.ir_builder import IRBuilder

    from . import memory

    extents = [r.extent for r in region.region]
    staged = memory.alloc_shared(tuple(extents), str(region.source.dtype))
    IRBuilder.name(f"{region.source.name}_print", staged)
    memory.copy(region, staged)
    return staged[tuple(slice(0, e) for e in extents)]


def device_assert(cond, msg: str = "", no_stack_info: bool = False):
    """`T.device_assert(x >= 0, "x must be >= 0")`: stop the kernel with an error naming this line when `cond`
    is false, in any block or thread (and inside `T.Parallel`, for any element).

    On the interpreter it raises `DeviceAssertError` at this line with the block, the loop indices and the
    values read by `cond`. On the GPU a failing assert traps (CUDA's device-side assert): the launch raises
    `DeviceAssertError` naming the kernel and this line, and the process's CUDA context is unusable afterwards
    (restart the Jupyter kernel). A compile-time `cond` (a Python bool) is checked now, at elaboration.
    `no_stack_info` (tilelang's keyword) is accepted; the message always names the line.
    """
    st = _state.active("T.device_assert")
    if not isinstance(msg, str):
        raise st.error(f"T.device_assert(msg=...) must be a str; got {msg!r}")
    _checked_condition(st, "T.device_assert", ASSERT, cond, msg)


def assume(cond):
    """`T.assume(i < n)`: a fact about the kernel's values (tilelang's), for the GPU's compiler to rely on
    (`__builtin_assume`: nvcc may drop a bounds check or vectorize with it). A false fact is undefined
    behaviour on the GPU, so the interpreter checks it as `T.device_assert` does and raises
    `DeviceAssertError` naming this line, the block, the loop indices and the values read. A compile-time
    `cond` is checked now."""
    _checked_condition(_state.active("T.assume"), "T.assume", ASSUME, cond, "")


def _checked_condition(st, what: str, name: str, cond, msg: str) -> None:
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    from ..errors import DeviceAssertError
    from .irutil import unwrap_comparison

    cond = unwrap_comparison(cond)
    if isinstance(cond, (bool, int)):
        if not cond:
            raise DeviceAssertError(f"{what} failed at elaboration (the condition is a compile-time "
                                    f"{cond!r}){': ' + msg if msg else ''}", filename=st.filename,
                                    lineno=st.lineno or None, col=st.col, end_col=st.end_col)
        return
    if is_buffer(cond) or not is_expr(cond) or str(cond.ty.dtype) == "handle":
        got = f"the buffer {cond.name}" if is_buffer(cond) else f"{cond!r} ({type(cond).__name__})"
        raise st.error(f"{what} takes a condition (an expression such as `x < n`); got {got}")
    if str(cond.ty.dtype) != "bool":
        cond = cond != tirx.const(0, str(cond.ty.dtype))
    call = tirx.call_extern("int32", name, cond, msg, st.lineno)
    T.add_to_parent(tirx.Evaluate(call, st.span()))


def breakpoint(block=0):  # noqa: A001 - the DSL's name
    """`T.breakpoint()`: on the CPU interpreter, stop in the debugger at this line, in the block `block` (the
    first block by default; a tuple such as `(1, 0)` names another, dims left out are 0; `None` stops in every
    block), with the kernel's tiles and scalars as local variables of the frame, named as in the kernel.

    It calls Python's `breakpoint()`, so `PYTHONBREAKPOINT=0` turns it off and `sys.breakpointhook` decides
    what happens (pdb by default; Jupyter's debugger when it is on). Call it in block-level code (outside
    `T.Parallel`). The GPU lowering refuses a kernel that contains it (a `LoweringError` at this line): it is
    an interpreter-only aid, so remove it before running on the GPU.
    """
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    st = _state.active("T.breakpoint")
    if not st.kernel_open:
        raise st.error("T.breakpoint must be called inside `with T.Kernel(...)`")
    wanted = _block_filter(st, block, "T.breakpoint", "every block")
    call = tirx.call_extern("int32", BREAKPOINT, st.lineno, *wanted)
    T.add_to_parent(tirx.Evaluate(call, st.span()))

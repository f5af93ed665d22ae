"""`T.tile.cumsum(dst, src, dim, reverse)`: the inclusive prefix sum of a tile along one dim.

A tile is a set of lines along `dim` (n elements each). Two forms, both reading and writing memory, with the
barriers before and after from `Emitter.emit_seq` (dst is written, src read, in shared memory):
- serial: the threads take the lines round-robin (`threads.distribute`) and each scans its lines in order, a
  running sum in a register: a line is n dependent steps (a shared load, an
  add, a store: some 30 cycles each);
- by warps: the warps take the lines round-robin; a warp walks its line 32 elements at a time, lane l taking
  element 32 c + l: a warp-shuffle scan of the 32 values (5 `shfl.up` steps), plus the carry of the elements
  before, then the carry grows by lane 31's sum. A line is ceil(n / 32) rounds of about 7 dependent steps.
The cheaper one by that count is taken: ceil(lines / threads) * n steps serially against
ceil(lines / warps) * ceil(n / 32) * 7 by warps, so a 1-d tile of 64 (tilelang's chunk-local cumsum) is 14
steps by one warp instead of 64 by one thread, and many short lines stay serial. A per-thread (`local`)
destination is scanned whole by every thread, serially, as `T.reduce_*` does. Bank conflicts: the serial
form's threads read lines one line apart (along dim 1 of a [M, N] tile with N a multiple of 32 words, one
bank); the warp form's lanes read consecutive elements of the line.

Fragments: layout inference (infer.py) keeps a fragment that T.cumsum reads or writes in shared memory, so the
scan always reads and writes memory; a T.gemm accumulator, which stays in registers, is refused with the fix.
docs/IR.md's rule: sums accumulate in `accumulation_dtype(dst.dtype)` (float32 for 16-bit floats, wrapping
integers), and each element is rounded to dst's dtype once, as the interpreter does (the warp form adds floats
in another order than torch's sequential cumsum: a float32 rounding difference, as between any two sums).
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..errors import LoweringError
from ..irwalk import region_of, scope_of
from . import intrin
from .reduce import accumulation_dtype
from .threads import distribute, serial_nest

__all__ = ["lower_cumsum"]


def _cast(value, dtype):
    return value if str(value.ty) == str(dtype) else tirx.Cast(str(dtype), value)


def lower_cumsum(em, call):
    dst, drng = region_of(call.args[0])
    src, srng = region_of(call.args[1])
    dim, reverse = int(call.args[2]), bool(call.args[3])
    for buf in (src, dst):
        if buf in em.registers:
            raise LoweringError(
                f"T.cumsum of fragment {buf.name}, which is held in registers (a T.gemm accumulator), is not "
                "supported", hint=f"T.copy {buf.name} into a T.alloc_shared tile and scan that tile")
    if em.scope.thread_code:
        raise LoweringError(
            "T.cumsum inside a T.Parallel loop is not supported: it is a whole-tile operation",
            hint="call T.cumsum at block level, outside the loop",
        )
    try:
        extents = [int(e) for _, e in srng]
    except (TypeError, ValueError):
        raise LoweringError(
            f"T.cumsum: the region of {src.name} has extents "
            f"{[str(e) for _, e in srng]}; the scan needs them known at compile time"
        ) from None
    smins = [em.expr(m) for m, _ in srng]
    dmins = [em.expr(m) for m, _ in drng]
    acc = accumulation_dtype(str(dst.dtype))
    n = extents[dim]
    line_ext = [e for d, e in enumerate(extents) if d != dim]
    lines = 1
    for e in line_ext:
        lines *= e

    def point(line_idx, i):
        idx = list(line_idx)
        idx.insert(dim, (n - 1 - i) if reverse else i)
        return [m + j for m, j in zip(smins, idx, strict=True)], [
            m + j for m, j in zip(dmins, idx, strict=True)
        ]

    per_thread = scope_of(dst) in ("local", "local.var")
    warps = em.threads // 32
    if (
        not per_thread
        and em.threads % 32 == 0
        and _warp_steps(lines, n, warps) < _serial_steps(lines, n, em.threads)
    ):
        _scan_by_warps(em, src, dst, acc, n, line_ext, lines, warps, point)
        return
    running = T.alloc_buffer((1,), acc, scope="local")
    IRBuilder.name(f"{dst.name}_prefix", running)

    def scan_line(line_idx):
        T.buffer_store(running, tirx.const(0, acc), [0])
        with T.serial(0, n) as k:
            s_idx, d_idx = point(line_idx, k)
            value = _cast(em.load(src, s_idx), acc)
            T.buffer_store(running, tirx.BufferLoad(running, [0]) + value, [0])
            em.store(dst, d_idx, _cast(tirx.BufferLoad(running, [0]), dst.dtype))

    if per_thread:
        serial_nest(line_ext or [1], lambda idx: scan_line(idx if line_ext else []))
    else:
        distribute(em, line_ext or [1], lambda idx: scan_line(idx if line_ext else []))


def _serial_steps(lines: int, n: int, threads: int) -> int:
    return -(-lines // threads) * n


def _warp_steps(lines: int, n: int, warps: int) -> int:
    return -(-lines // warps) * -(-n // 32) * 7


def _unravel(flat, extents) -> list:
    idx = []
    for e in reversed(extents):
        idx.append(tirx.floormod(flat, e))
        flat = tirx.floordiv(flat, e)
    return idx[::-1]


def _scan_by_warps(em, src, dst, acc, n, line_ext, lines, warps, point):
    """Warp w scans lines w, w + warps, ...; every lane runs every shuffle (the
    guards sit around memory only)."""
    lane, warp = tirx.floormod(em.tx, 32), tirx.floordiv(em.tx, 32)
    carry = T.alloc_buffer((1,), acc, scope="local")
    value = T.alloc_buffer((1,), acc, scope="local")
    other = T.alloc_buffer((1,), acc, scope="local")
    for buf, name in ((carry, "carry"), (value, "scan"), (other, "shfl")):
        IRBuilder.name(f"{dst.name}_{name}", buf)
    rounds = -(-n // 32)

    def line_body(line):
        line_idx = _unravel(line, line_ext)
        T.buffer_store(carry, tirx.const(0, acc), [0])
        with T.serial(0, rounds) as c:
            k = c * 32 + lane
            s_idx, d_idx = point(line_idx, k)
            T.buffer_store(value, tirx.const(0, acc), [0])
            with T.If(k < n), T.Then():
                T.buffer_store(value, _cast(em.load(src, s_idx), acc), [0])
            mine = tirx.BufferLoad(value, [0])
            for delta in (1, 2, 4, 8, 16):
                T.buffer_store(other, intrin.shfl_up(mine, delta, acc), [0])
                T.buffer_store(
                    value, tirx.Select(lane >= delta, mine + tirx.BufferLoad(other, [0]), mine), [0]
                )
            with T.If(k < n), T.Then():
                em.store(dst, d_idx, _cast(tirx.BufferLoad(carry, [0]) + mine, dst.dtype))
            T.buffer_store(other, intrin.shfl_idx(mine, 31, acc), [0])
            T.buffer_store(carry, tirx.BufferLoad(carry, [0]) + tirx.BufferLoad(other, [0]), [0])

    with T.serial(0, -(-lines // warps)) as it:
        line = it * warps + warp
        if lines % warps:
            with T.If(line < lines), T.Then():  # warp-uniform: whole warps skip
                line_body(line)
        else:
            line_body(line)

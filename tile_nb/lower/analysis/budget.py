"""Resource budgets checked at compile time: shared memory per block and registers per thread.

A kernel over budget fails here, with every buffer and its size, instead of at launch (TVM's "Failed to set
the allowed dynamic shared memory size") or as silent spills.
"""
from __future__ import annotations

from dataclasses import replace

import tvm

from ..errors import LoweringError
from .arch import SHARED_PER_BLOCK

__all__ = ["MAX_REGISTERS_PER_THREAD", "SHARED_PER_SM", "SPILL_ALLOWANCE", "WGMMA_HEADROOM",
           "check_registers", "check_shared", "ctas_per_sm", "layout_pool", "max_shared_bytes",
           "packed_registers", "spill_note"]

MAX_REGISTERS_PER_THREAD = 255
# Registers' worth of fragments past a thread's 255 that the lowering leaves to ptxas to spill to local memory
# in a wgmma kernel rather than refuse it, as tilelang does: DeepSeek's fp8 GEMM with two 128-register
# accumulators (256; ptxas spills 88 bytes) and FlashAttention at 128x128 tiles over 128 threads, head dim 128
# (256; 512 bytes). The plan says so (spill_note) and ptxas's count is in kernel.resources; tile_nb's
# autotuner prunes spilling configurations unless asked not to (max_spill_bytes).
SPILL_ALLOWANCE = 32
REGISTERS_PER_SM = 65536
SHARED_PER_SM = 228 * 1024  # sm_90 (1 KiB of it reserved per CTA)
# Registers a consumer needs besides its largest accumulator (addresses, descriptors, loop state), while a
# wgmma instruction holds that accumulator live with its operands: ptxas gives the 128x256x64 GEMM 154
# registers for 128 accumulator registers, and refuses (C7602) to build it under a cap of 128. Besides, the
# fragments must fit: FlashAttention at head dim 128 (128x128 tiles, two consumer warpgroups) gets 167
# registers for 170 counted (ptxas reuses some), with three (192x64) 128 of 128 for 122 counted and a spill of
# 24 bytes: the count is an estimate, ptxas has the last word (`kernel.resources`).
WGMMA_HEADROOM = 32


def ctas_per_sm(threads: int, registers: int, pool_bytes: int) -> int:
    """CTAs of `threads` threads using about `registers` registers each and a `pool_bytes` shared pool that
    fit one SM of sm_90 together (at least 1): registers go by the 8 per thread, shared memory has 1 KiB per
    CTA reserved."""
    by_registers = REGISTERS_PER_SM // (-(-threads // 32) * 32 * (-(-registers // 8) * 8))
    return max(1, min(by_registers, SHARED_PER_SM // (pool_bytes + 1024)))


def max_shared_bytes(arch: str) -> int:
    """`sm_90a` -> 232448: arch.SHARED_PER_BLOCK's entry (the one table of it)."""
    digits = int("".join(ch for ch in arch[3:] if ch.isdigit()))
    known = [cc for cc in SHARED_PER_BLOCK if cc <= digits]
    return SHARED_PER_BLOCK[max(known)] if known else 48 * 1024


def layout_pool(tiles) -> tuple[list, int]:
    """Place the tiles one after another in the block's one shared pool: (the tiles with their byte offsets,
    the end of the last). Tiles read by the tensor cores through swizzled descriptors need 1 KiB alignment,
    the others 128 bytes."""
    offset, placed = 0, []
    for tile in tiles:
        align = _alignment(tile)
        offset = (offset + align - 1) // align * align
        placed.append(replace(tile, byte_offset=offset))
        offset += tile.nbytes
    return placed, offset


def _alignment(tile) -> int:
    """Bytes a tile's offset must be a multiple of: 1 KiB for tiles the tensor cores read through swizzled
    descriptors, else 128."""
    return 1024 if tile.swizzle or tile.panel else 128


def layout_pool_reusing(tiles, lives: dict) -> tuple[list, int]:
    """As `layout_pool`, but a tile whose live span (first, last top-level statement using it, from `lives`
    by buffer) does not meet another's may take the same bytes; a tile with no span is live throughout. Each
    tile, largest first, goes to the lowest offset that overlaps no tile live at the same time. Returns the
    tiles in their given order."""
    whole = (float("-inf"), float("inf"))
    span = [lives.get(t.buffer, whole) for t in tiles]
    placed: dict = {}
    for i in sorted(range(len(tiles)), key=lambda i: -tiles[i].nbytes):
        tile = tiles[i]
        align = _alignment(tile)
        busy = sorted(
            (placed[j].byte_offset, placed[j].byte_offset + placed[j].nbytes)
            for j in placed
            if span[j][0] <= span[i][1] and span[i][0] <= span[j][1]
        )
        offset = 0
        for start, end in busy:
            if offset + tile.nbytes <= start:
                break
            offset = max(offset, (end + align - 1) // align * align)
        placed[i] = replace(tile, byte_offset=offset)
    ordered = [placed[i] for i in range(len(tiles))]
    return ordered, max((t.byte_offset + t.nbytes for t in ordered), default=0)


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


def check_shared(tiles, total: int, arch: str, lines, what: str = "shared memory"):
    """LoweringError listing every tile when `total` bytes exceed what a block of `arch` may use."""
    limit = max_shared_bytes(arch)
    if total <= limit:
        return
    tiles = sorted(tiles, key=lambda t: -t.nbytes)
    listing = "\n".join(f"  {t.name or t.buffer.name}: {t.describe()} = {_kib(t.nbytes)}" for t in tiles)
    err = LoweringError(
        f"the kernel needs {_kib(total)} of {what} per block; {arch} allows {_kib(limit)}:\n{listing}",
        hint="use smaller tiles (block sizes) or fewer pipeline stages; the kernel's plan says why a "
             "fragment is in "
        "shared memory rather than registers",
    )
    raise lines.locate(err, buffer_name=tiles[0].buffer.name)


def packed_registers(buf, layout, packed=frozenset()) -> int:
    """A fragment's 32-bit registers per thread: its layout's count, doubled for 64-bit elements (a float64
    accumulator of the FMA path), halved for the 16-bit fragments in `packed` (held two to a 32-bit register:
    wgmma's register A operands)."""
    if buf in packed:
        return (layout.regs + 1) // 2
    return layout.regs * (2 if tvm.DataType(str(buf.dtype)).bits > 32 else 1)


def check_registers(fragments: dict, lines, packed=frozenset(), spill: bool = False):
    """LoweringError when the register fragments alone exceed what one thread can hold (`packed`: see
    `packed_registers`); with `spill` (wgmma kernels: their operands stay in shared memory), past
    SPILL_ALLOWANCE more. Not on the FMA path, where ptxas spilled 9.7 KB for a float64 accumulator of 256."""
    cost = {buf: packed_registers(buf, lay, packed) for buf, lay in fragments.items()}
    total = sum(cost.values())
    allowance = SPILL_ALLOWANCE if spill else 0
    if total <= MAX_REGISTERS_PER_THREAD + allowance:
        return
    ordered = sorted(fragments, key=lambda buf: -cost[buf])
    listing = "\n".join(f"  {buf.name}: {cost[buf]} registers per thread" for buf in ordered)
    spills = f" (and the lowering leaves at most {allowance} more to spill to local memory)" if spill else ""
    err = LoweringError(
        f"the kernel's register fragments need {total} 32-bit registers per thread; a thread has at most "
        f"{MAX_REGISTERS_PER_THREAD}{spills}:\n{listing}",
        hint="use smaller tiles or more threads per block (T.Kernel(..., threads=...))")
    raise lines.locate(err, buffer_name=ordered[0].name)


def spill_note(registers: int) -> str | None:
    """The plan's note where the register fragments (`registers` per thread) leave a thread no registers
    for anything else: ptxas spills."""
    if registers <= MAX_REGISTERS_PER_THREAD:
        return None
    return (f"the register fragments take {registers} 32-bit registers per thread, a thread has "
            f"{MAX_REGISTERS_PER_THREAD}: ptxas spills to local memory (kernel.resources says how much)")

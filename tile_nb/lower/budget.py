"""Resource budgets checked at compile time: shared memory per block and registers per thread.

A kernel over budget fails here, with every buffer and its size, instead of at launch (TVM's "Failed to set the
allowed dynamic shared memory size") or as silent spills.
"""
from __future__ import annotations

from dataclasses import replace

from .errors import LoweringError

__all__ = ["MAX_REGISTERS_PER_THREAD", "check_registers", "check_shared", "layout_pool", "max_shared_bytes",
           "packed_registers"]

# Dynamic shared memory a block may opt into, by compute capability (CUDA C Programming Guide, "Features and
# Technical Specifications").
_SHARED_PER_BLOCK = {70: 96 * 1024, 72: 48 * 1024, 75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024,
                     89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024, 103: 227 * 1024, 120: 99 * 1024}
MAX_REGISTERS_PER_THREAD = 255
REGISTERS_PER_SM = 65536


def max_shared_bytes(arch: str) -> int:
    """`sm_90a` -> 232448."""
    digits = int("".join(ch for ch in arch[3:] if ch.isdigit()))
    known = [cc for cc in _SHARED_PER_BLOCK if cc <= digits]
    return _SHARED_PER_BLOCK[max(known)] if known else 48 * 1024


def layout_pool(tiles) -> tuple[list, int]:
    """Place the tiles one after another in the block's one shared pool: (the tiles with their byte offsets, the
    end of the last). Tiles read by the tensor cores through swizzled descriptors need 1 KiB alignment, the
    others 128 bytes."""
    offset, placed = 0, []
    for tile in tiles:
        align = 1024 if tile.swizzle or tile.panel else 128
        offset = (offset + align - 1) // align * align
        placed.append(replace(tile, byte_offset=offset))
        offset += tile.nbytes
    return placed, offset


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
        hint="use smaller tiles (block sizes) or fewer pipeline stages; the kernel's plan says why a fragment is in "
             "shared memory rather than registers")
    raise lines.locate(err, buffer_name=tiles[0].buffer.name)


def packed_registers(buf, layout, packed=frozenset()) -> int:
    """A fragment's registers per thread as its layout counts them, halved for the 16-bit fragments in `packed`
    (held two to a 32-bit register: wgmma's register A operands)."""
    return (layout.regs + 1) // 2 if buf in packed else layout.regs


def check_registers(fragments: dict, lines, packed=frozenset()):
    """LoweringError when the register fragments alone exceed what one thread can hold (`packed`: see
    `packed_registers`)."""
    cost = {buf: packed_registers(buf, lay, packed) for buf, lay in fragments.items()}
    total = sum(cost.values())
    if total <= MAX_REGISTERS_PER_THREAD:
        return
    ordered = sorted(fragments, key=lambda buf: -cost[buf])
    listing = "\n".join(f"  {buf.name}: {cost[buf]} registers per thread" for buf in ordered)
    err = LoweringError(
        f"the kernel's register fragments need {total} 32-bit registers per thread; a thread has at most "
        f"{MAX_REGISTERS_PER_THREAD}:\n{listing}",
        hint="use smaller tiles or more threads per block (T.Kernel(..., threads=...))")
    raise lines.locate(err, buffer_name=ordered[0].name)

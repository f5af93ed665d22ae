"""Layouts chosen by the lowering: shared tiles (swizzled or plain) and tensor-core register fragments.

The tile IR leaves layouts open: a `shared.dyn` buffer is just a tile, a `local.fragment` buffer is a tile
spread over the CTA's registers "somehow". Lowering decides:

- `SharedTile`: where element (i, j) of a shared tile lives in the CTA's one dynamic shared-memory pool.
  Tiles read by `T.gemm` get an XOR swizzle on 16-byte chunks, so the 8 row addresses of an ldmatrix (or of
  the 8 row groups of the FMA and TF32 paths' loads, 32- and 64-bit tiles) and the 16-byte cp.async writes hit
  8 different bank groups. Tiles written by a pipelined copy get
  one copy per stage (`stages`).
- `MmaAccLayout`: the accumulator of `T.gemm` as mma.sync m16n8 fragments. The CTA tile is cut into a grid of
  warps; each warp owns a `WM x WN` block, and lane l holds rows l//4 (+8) and columns 2*(l%4) (+1) of each
  16x8 atom (PTX ISA, "Matrix Fragments for mma.m16n8k16").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import tirx

from ..errors import LoweringError

__all__ = ["MmaAccLayout", "SharedTile", "WgmmaAccLayout", "accumulator_register_dtype", "choose_warp_grid"]


def _prod(xs):
    out = 1
    for x in xs:
        out *= int(x)
    return out


@dataclass(frozen=True)
class SharedTile:
    """A shared tile as a 2-D (rows x cols) view inside the pool; leading dims fold into rows."""

    buffer: tirx.Buffer  # the tile IR's buffer (or, for a reduction's workspace, the reduction's source)
    shape: tuple
    dtype: str
    swizzle: bool = False
    stages: int = 1
    panel: bool = False  # 128-byte panels, each a [rows, panel_cols] 128-byte-swizzled tile (wgmma MN-major
    # operand, the TMA-store epilogue's staging tile)
    byte_offset: int = 0  # in the pool (budget.layout_pool)
    name: str = ""  # of the pool view; the buffer's name when empty

    @property
    def cols(self) -> int:
        return int(self.shape[-1])

    @property
    def rows(self) -> int:
        return _prod(self.shape[:-1]) if len(self.shape) > 1 else 1

    @property
    def elems(self) -> int:
        return self.rows * self.cols

    @property
    def nbytes(self) -> int:
        return self.elems * self.stages * tirx_bits(self.dtype) // 8

    def describe(self) -> str:
        stages = f" x {self.stages} stages" if self.stages > 1 else ""
        what = "reduction workspace" if self.name else self.buffer.scope()
        return f"{what} {tuple(int(x) for x in self.shape)} {self.dtype}{stages}"

    @property
    def chunk_elems(self) -> int:
        """Elements per 16-byte chunk, the unit the swizzle permutes (8 of 2-byte, 16 of 1-byte elements)."""
        return 128 // tirx_bits(self.dtype)

    @property
    def panel_cols(self) -> int:
        """Columns of a 128-byte panel (64 of 2-byte, 128 of 1-byte elements)."""
        return 1024 // tirx_bits(self.dtype)

    @property
    def swizzle_group(self) -> int:
        """Chunks of a row the swizzle permutes among themselves: the largest power of two (at most 8) that
        divides the row's chunks."""
        chunks = self.cols // self.chunk_elems
        return math.gcd(chunks, 8) if chunks else 1

    def can_swizzle(self) -> bool:
        """8- and 16-bit tiles for the tensor cores; 32- and 64-bit ones for the FMA and TF32 paths, whose 8
        lanes of a row group read 8 rows at one column (conflict-free only when those rows' chunks differ)."""
        return tirx_bits(self.dtype) in (8, 16, 32, 64) and self.cols % self.chunk_elems == 0

    def offset2(self, row, col, stage=None):
        """Element offset of (row, col) in the flat view."""
        if self.panel:
            # [cols/P][rows][P], P columns of 128 bytes: the canonical 128B-swizzle layout wgmma reads for an
            # MN-major operand and a SWIZZLE_128B TMA box holds (8 rows of 128 bytes per 1024-byte atom,
            # 16-byte chunk index XOR row % 8).
            fd, fm = tirx.floordiv, tirx.floormod
            per, panel = self.chunk_elems, self.panel_cols
            chunk = tirx.bitwise_xor(fd(fm(col, panel), per), fm(row, 8))
            off = fd(col, panel) * (self.rows * panel) + row * panel + chunk * per + fm(col, per)
        elif self.swizzle:
            per = self.chunk_elems
            chunks = self.cols // per
            # Rows per 128-byte bank line; consecutive rows of one line share a phase.
            rows_per_line = max(1, 8 // chunks)
            # The XOR permutes the chunks inside aligned groups of `group` (a power of two dividing `chunks`):
            # with 6 or 12 chunks a row (48 or 96 half columns) an XOR over 8 would leave the row and land two
            # chunks on one place.
            phase = tirx.floormod(tirx.floordiv(row, rows_per_line), self.swizzle_group)
            chunk = tirx.bitwise_xor(tirx.floordiv(col, per), phase)
            off = row * self.cols + chunk * per + tirx.floormod(col, per)
        else:
            off = row * self.cols + col
        if self.stages > 1 and stage is not None:
            off = off + stage * self.elems
        return off

    def offset(self, indices, stage=None):
        """Element offset of a full index tuple of the tile IR's buffer."""
        indices = list(indices)
        row = 0
        for dim, idx in zip(self.shape[:-1], indices[:-1], strict=True):
            row = row * int(dim) + idx
        return self.offset2(row, indices[-1], stage)


def accumulator_register_dtype(buf) -> str:
    """The registers a T.gemm accumulator lives in: int32 for an integer accumulator (int8 products), float64
    for a float64 one (only the CUDA-core path, fma_gemm.py, writes those), else float32 whatever its declared
    float dtype."""
    dtype = str(buf.dtype)
    return "int32" if "int" in dtype else "float64" if dtype == "float64" else "float32"


def tirx_bits(dtype) -> int:
    import tvm

    return tvm.DataType(str(dtype)).bits


def choose_warp_grid(bm: int, bn: int, warps: int) -> tuple[int, int]:
    """Pick (warps along M, warps along N): warp tiles multiples of 16x16, as square as possible.

    Square warp tiles minimise ldmatrix traffic per mma (a WMxWN warp tile loads WM+WN rows per k-step).
    Ties go to more warps along N, so a warp's A rows are shared by fewer warps.
    """
    best = None
    for wm in range(1, warps + 1):
        if warps % wm:
            continue
        wn = warps // wm
        if bm % (16 * wm) or bn % (16 * wn):
            continue
        tm, tn = bm // wm, bn // wn
        score = (abs(tm - tn), -wn)
        if best is None or score < best[0]:
            best = (score, (wm, wn))
    if best is None:
        raise LoweringError(
            f"T.gemm: a {bm}x{bn} accumulator cannot be split over {warps} warps in 16x16 warp tiles; "
            f"use block sizes that are multiples of 16 per warp (e.g. 128x128 with 128 threads)"
        )
    return best[1]


def common_warps_along_m(shapes: list[tuple[int, int]], warps: int) -> int | None:
    """The one number of warps along M that splits every [bm, bn] in `shapes` (one bm) into warp tiles of
    multiples of 16x16, with the squarest warp tiles over all of them; None where no number does. Accumulators
    whose rows meet one row statistic must share it: a row's registers then sit in the same threads in
    each."""
    best = None
    for wm in range(1, warps + 1):
        wn = warps // wm
        if warps % wm or any(bm % (16 * wm) or bn % (16 * wn) for bm, bn in shapes):
            continue
        score = (sum(abs(bm // wm - bn // wn) for bm, bn in shapes), -wn)
        if best is None or score < best[0]:
            best = (score, wm)
    return None if best is None else best[1]


@dataclass(frozen=True)
class MmaAccLayout:
    """Register layout of a [BM, BN] accumulator over a wm x wn grid of warps of m16n8 atoms."""

    bm: int
    bn: int
    wm: int
    wn: int
    wgmma_rows: bool = False  # m16 blocks dealt to warps as wgmma does (see `row_base`), not contiguously
    fma: bool = False  # computed on the CUDA cores by FMAs in this layout (fma_gemm.py), not by mma.sync
    tf32: bool = False  # by mma.sync m16n8k8 .tf32 (tf32_gemm.py): the same C fragment as m16n8k16

    @staticmethod
    def choose(bm: int, bn: int, warps: int, rows_per_warp: bool = False, fma: bool = False,
               tf32: bool = False) -> MmaAccLayout:
        """The grid of `choose_warp_grid`; with `rows_per_warp` (a row-wise reduction or row statistic uses
        the accumulator) all warps along M when the rows allow, so a row never spans two warps, and, where the
        shape allows, with the row order of a wgmma accumulator: the row statistics of an mma.sync and a wgmma
        accumulator (FlashAttention's scores and output) then share one register layout."""
        if rows_per_warp and bm % (16 * warps) == 0 and bn % 16 == 0:
            wgmma_rows = warps % 4 == 0 and bm % (64 * (warps // 4)) == 0
            return MmaAccLayout(bm, bn, warps, 1, wgmma_rows, fma, tf32)
        return MmaAccLayout(bm, bn, *choose_warp_grid(bm, bn, warps), fma=fma, tf32=tf32)

    def row_base(self, wy, mi):
        """First row of m16 block `mi` of the warps' row `wy`: contiguous (wy * warp_m + 16 mi), or as wgmma
        deals rows (warpgroup g = wy / 4 owns m64 blocks, warp wy % 4 of it rows 16 (wy % 4) of each)."""
        if not self.wgmma_rows:
            return wy * self.warp_m + mi * 16
        return (tirx.floordiv(wy, 4) * self.mi + mi) * 64 + tirx.floormod(wy, 4) * 16

    @property
    def warps(self) -> int:
        return self.wm * self.wn

    def linear(self):
        from .fragments import mma_accumulator, wgmma_accumulator

        if self.wgmma_rows:  # wn == 1: exactly a wgmma accumulator's registers over warps // 4 warpgroups
            return wgmma_accumulator(self.bm, self.bn, self.wm // 4)
        return mma_accumulator(self.bm, self.bn, self.wm, self.wn)

    @property
    def warp_m(self) -> int:
        return self.bm // self.wm

    @property
    def warp_n(self) -> int:
        return self.bn // self.wn

    @property
    def mi(self) -> int:
        return self.warp_m // 16

    @property
    def ni(self) -> int:
        return self.warp_n // 8

    @property
    def regs(self) -> int:
        return self.mi * self.ni * 4

    def warp_coords(self, tx):
        warp = tirx.floordiv(tx, 32)
        return tirx.floordiv(warp, self.wn), tirx.floormod(warp, self.wn)

    def element(self, tx, r: int):
        """(row, col) of register `r` (a Python int) of thread `tx`."""
        wy, wx = self.warp_coords(tx)
        lane = tirx.floormod(tx, 32)
        fd, fm = tirx.floordiv, tirx.floormod
        mi, ni, h, e = fd(r, self.ni * 4), fm(fd(r, 4), self.ni), fm(fd(r, 2), 2), fm(r, 2)
        row = self.row_base(wy, mi) + h * 8 + tirx.floordiv(lane, 4)
        col = wx * self.warp_n + ni * 8 + tirx.floormod(lane, 4) * 2 + e
        return row, col


@dataclass(frozen=True)
class WgmmaAccLayout:
    """The accumulator of a Hopper wgmma `T.gemm` (wgmma.py). The warpgroups split the tile `row_groups` ways
    along the rows (each owns m-blocks of 64 rows), then `col_groups` ways along the columns (each issues
    wgmma of N = `group_n` on its slice of B: tilelang's FullCol policy, for 64 rows over two warpgroups),
    then hold `replicas` copies (the register A operand of a column-split T.gemm, which every column group
    reads whole). Per n8 block i, registers 4i..4i+3 hold rows l/4 (+8) and columns 8i + 2(l%4) (+1); warp w
    of a group rows 16w..16w+15 of each m-block."""

    bm: int
    bn: int
    row_groups: int
    col_groups: int = 1
    replicas: int = 1

    @property
    def warpgroups(self) -> int:
        return self.row_groups * self.col_groups * self.replicas

    @property
    def mblocks(self) -> int:  # m64 blocks per warpgroup
        return self.bm // 64 // self.row_groups

    @property
    def group_n(self) -> int:  # the N of each warpgroup's wgmma
        return self.bn // self.col_groups

    @property
    def regs(self) -> int:
        return self.mblocks * self.group_n // 2

    def group_coords(self, g):
        """(row group, column group) of warpgroup `g` (an expression)."""
        if self.col_groups == 1 and self.replicas == 1:
            return g, 0
        g_row = tirx.floormod(g, self.row_groups) if self.row_groups > 1 else 0
        g_col = tirx.floormod(tirx.floordiv(g, self.row_groups), self.col_groups) if self.col_groups > 1 \
            else 0
        return g_row, g_col

    def element(self, tx, r):
        fd, fm = tirx.floordiv, tirx.floormod
        per = self.group_n // 2
        mb, rr = fd(r, per), fm(r, per)
        g_row, g_col = self.group_coords(fd(tx, 128))
        w, lane = fm(fd(tx, 32), 4), fm(tx, 32)
        row = (g_row * self.mblocks + mb) * 64 + w * 16 + fd(lane, 4) + fm(fd(rr, 2), 2) * 8
        col = g_col * self.group_n + fd(rr, 4) * 8 + fm(lane, 4) * 2 + fm(rr, 2)
        return row, col

    def linear(self):
        from .fragments import wgmma_accumulator

        return wgmma_accumulator(self.bm, self.bn, self.row_groups, self.col_groups, self.replicas)

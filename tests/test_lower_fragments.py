"""Register layouts (tile_nb/lower/fragments.py): every element of a tile is held by exactly one
(thread, register) up to replicas, slices hold the reduced rows, and the accumulator layouts
match the GEMM lowering's own maps."""
import itertools

import pytest

from tile_nb.lower.analysis.fragments import blocked, mma_accumulator, wgmma_accumulator
from tile_nb.lower.analysis.layout import MmaAccLayout, WgmmaAccLayout


def owners(layout, threads):
    """{coords: [(tx, r), ...]} over every thread and register holding a valid element."""
    out = {}
    for tx, r in itertools.product(range(threads), range(layout.regs)):
        valid = layout.valid(tx, r)
        if valid is None or valid:
            out.setdefault(tuple(layout.element(tx, r)), []).append((tx, r))
    return out


@pytest.mark.parametrize(
    "shape, threads, vec",
    [
        ((4, 1024), 128, 4),
        ((1, 8192), 128, 8),
        ((37, 100), 128, 4),
        ((64,), 128, 4),
        ((8, 16), 256, 8),
        ((128, 128), 128, 4),
        ((3, 5), 64, 4),
    ],
)
def test_blocked_layout_holds_every_element_once(shape, threads, vec):
    layout = blocked(shape, threads, vec)
    held = owners(layout, threads)
    full = set(itertools.product(*[range(n) for n in shape]))
    assert set(held) == full
    replicas = 1
    for d in layout.digits:
        if d.dim is None:
            replicas *= d.extent
    assert all(len(v) == replicas for v in held.values())


def test_blocked_layout_is_vectorized_and_coalesced():
    layout = blocked((4, 1024), 128, 4)
    assert layout.vector() == 4 and layout.regs == 32 and not layout.padded
    # lane l of warp 0 holds columns 4l..4l+3 of row 0 in its first registers
    assert [layout.element(5, r) for r in range(4)] == [[0, 20], [0, 21], [0, 22], [0, 23]]


@pytest.mark.parametrize("bm, bn, warps", [(128, 128, 4), (64, 64, 4), (64, 128, 4), (128, 256, 8)])
def test_mma_layout_matches_the_gemm_lowering(bm, bn, warps):
    acc = MmaAccLayout.choose(bm, bn, warps)
    layout = acc.linear()
    assert layout == mma_accumulator(bm, bn, acc.wm, acc.wn)
    assert layout.regs == acc.regs
    for tx in range(0, warps * 32, 7):
        for r in range(acc.regs):
            assert layout.element(tx, r) == list(acc.element(tx, r))


@pytest.mark.parametrize("bm, bn, wgs", [(64, 64, 1), (128, 256, 2), (128, 128, 1)])
def test_wgmma_layout_matches_the_gemm_lowering(bm, bn, wgs):
    acc = WgmmaAccLayout(bm, bn, wgs)
    layout = wgmma_accumulator(bm, bn, wgs)
    assert layout.regs == acc.regs
    for tx in range(0, wgs * 128, 5):
        for r in range(0, acc.regs, 3):
            assert layout.element(tx, r) == [int(x) for x in acc.element(tx, r)]


@pytest.mark.parametrize(
    "layout, threads",
    [
        (blocked((4, 1024), 128, 4), 128),
        (blocked((1, 512), 128, 4), 128),
        (blocked((37, 100), 128, 4), 128),
        (mma_accumulator(64, 64, 4, 1), 128),
        (wgmma_accumulator(128, 128, 2), 256),
    ],
)
def test_row_slice_holds_the_row_of_every_register(layout, threads):
    rows = layout.slice(1)
    for tx in range(threads):
        for r in range(layout.regs):
            o = layout.slice_register(1, r)
            assert rows.element(tx, o) == layout.element(tx, r)[:1]
    count, kept, reduced = layout.reduced_registers(1)
    assert count * rows.regs == layout.regs
    for o in range(rows.regs):
        for k in range(count):
            assert layout.slice_register(1, layout.register_of(o, k, 1)) == o


def test_slices_of_the_two_accumulator_families_agree():
    # FlashAttention: a row statistic shared between a wgmma and an mma.sync accumulator of the same rows.
    assert mma_accumulator(64, 32, 4, 1).slice(1) == wgmma_accumulator(64, 64, 1).slice(1)


def test_lane_masks_and_warp_slots():
    layout = blocked((1, 8192), 128, 8)
    assert layout.lane_masks(1) == [16, 8, 4, 2, 1]
    assert layout.warp_slots(1, 70)[0] == 4
    rows = blocked((4, 1024), 128, 4)
    assert rows.warp_slots(1, 70)[0] == 1  # a warp per row: no shared-memory step


@pytest.mark.parametrize("bm, bn, warps", [(128, 64, 4), (64, 32, 4), (128, 128, 8)])
def test_row_coupled_mma_accumulator_takes_the_wgmma_row_order(bm, bn, warps):
    """FlashAttention at head dim 128: Q K^T on mma.sync, P V on wgmma; their row
    statistics must share a layout."""
    acc = MmaAccLayout.choose(bm, bn, warps, rows_per_warp=True)
    assert acc.wgmma_rows
    layout = acc.linear()
    for tx in range(0, warps * 32, 3):
        for r in range(acc.regs):
            assert layout.element(tx, r) == [int(x) for x in acc.element(tx, r)]
    assert layout.slice(1) == wgmma_accumulator(bm, 128, warps // 4).slice(1)

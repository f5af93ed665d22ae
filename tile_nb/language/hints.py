"""Scheduling hints of tilelang that cannot change a kernel's results: accepted, and recorded so the kernel's
plan shows them (`func.attrs["tile_nb.hints"]`: one line per hint, "<hint> at line <n>").

- `T.use_swizzle(panel_size, order="row", enable=True)`: tilelang's block rasterization (the order in which
  CTAs walk the output, for L2 reuse). tile_nb's lowering does not rasterize yet; every block still computes
  the same tile, so results are unchanged.
- `T.GemmWarpPolicy` (`Square`, `FullRow`, `FullCol`), given as `T.gemm(..., policy=...)`: how tilelang splits
  a GEMM tile among warps. tile_nb chooses its own warp layout; the product is the same.
- `T.disable_warp_group_reg_alloc()` (tilelang's alias `T.no_set_max_nreg()`): do not move registers between
  warp groups with `setmaxnreg`. tile_nb's lowering decides that itself (lower/analysis/tma.py); registers
  never change a value.
- `T.set_max_nreg(reg_count, is_inc)`: tilelang's explicit `setmaxnreg` of the running warp group (a count
  the PTX ISA allows: 24 to 256, a multiple of 8). Checked and recorded, not applied, for the same reason.
"""
from __future__ import annotations

import enum

from . import state as _state

__all__ = ["use_swizzle", "GemmWarpPolicy", "record_hint", "disable_warp_group_reg_alloc", "no_set_max_nreg",
           "set_max_nreg"]

_ORDERS = ("row", "column", "mlx")


class GemmWarpPolicy(enum.IntEnum):
    """tilelang's warp partition policies for `T.gemm(..., policy=...)` (a hint on tile_nb)."""

    Square = 0
    FullRow = 1
    FullCol = 2


def record_hint(st, text: str) -> None:
    """Add a hint to the kernel being elaborated (kept in the PrimFunc's `tile_nb.hints` attribute)."""
    st.hints.append(f"{text} at line {st.lineno}")


def use_swizzle(panel_size: int, order: str = "row", enable: bool = True) -> None:
    """`T.use_swizzle(panel_size, order="row", enable=True)` (inside a kernel): tilelang's block rasterization
    hint. Recorded, not applied: it changes the order blocks run in, never what they compute."""
    st = _state.active("T.use_swizzle")
    if order not in _ORDERS:
        raise st.error(
            f"T.use_swizzle(order=...): expected one of {', '.join(map(repr, _ORDERS))}, got {order!r}"
        )
    if isinstance(panel_size, bool) or not isinstance(panel_size, int) or panel_size < 1:
        raise st.error(f"T.use_swizzle(panel_size=...): expected a positive int, got {panel_size!r}")
    if enable:
        record_hint(
            st, f"use_swizzle(panel_size={panel_size}, order={order!r}) (not applied: rasterization only)"
        )


def disable_warp_group_reg_alloc() -> None:
    """`T.disable_warp_group_reg_alloc()` (inside a kernel): tilelang's request not to rebalance registers
    between warp groups (`setmaxnreg`). Recorded, not applied: tile_nb's lowering decides where registers go,
    and that changes speed only."""
    st = _state.active("T.disable_warp_group_reg_alloc")
    if not st.kernel_open:
        raise st.error("T.disable_warp_group_reg_alloc() must be called inside `with T.Kernel(...)`")
    record_hint(st, "disable_warp_group_reg_alloc() (not applied: tile_nb decides setmaxnreg itself)")


def no_set_max_nreg() -> None:
    """`T.no_set_max_nreg()`: tilelang's other name of `T.disable_warp_group_reg_alloc()`."""
    disable_warp_group_reg_alloc()


def set_max_nreg(reg_count: int, is_inc: int) -> None:
    """`T.set_max_nreg(reg_count, is_inc)` (inside a kernel, usually in a warp group's branch): tilelang's
    `setmaxnreg.inc` (is_inc=1) / `.dec` (0) to `reg_count` registers per thread. Checked against the PTX
    ISA's rule and recorded, not applied: tile_nb's lowering decides where registers go (speed only)."""
    st = _register_request("T.set_max_nreg", reg_count)
    if isinstance(is_inc, bool) or is_inc not in (0, 1):
        raise st.error(f"T.set_max_nreg(is_inc=...): expected 1 (increase) or 0 (decrease); got {is_inc!r}")
    _record_register_request(st, f"set_max_nreg({reg_count}, {is_inc})")


def annotate_producer_reg_dealloc(reg_count: int = 24) -> None:
    """`T.annotate_producer_reg_dealloc(reg_count=24)` (tilelang's, in a producer warp group's branch): give
    registers back (`setmaxnreg.dec`) down to `reg_count`. Checked and recorded as `T.set_max_nreg` is, not
    applied."""
    st = _register_request("T.annotate_producer_reg_dealloc", reg_count)
    _record_register_request(st, f"annotate_producer_reg_dealloc({reg_count})")


def annotate_consumer_reg_alloc(reg_count: int = 240) -> None:
    """`T.annotate_consumer_reg_alloc(reg_count=240)` (tilelang's, in a consumer warp group's branch): take
    registers (`setmaxnreg.inc`) up to `reg_count`. Checked and recorded as `T.set_max_nreg` is, not
    applied."""
    st = _register_request("T.annotate_consumer_reg_alloc", reg_count)
    _record_register_request(st, f"annotate_consumer_reg_alloc({reg_count})")


def _register_request(what: str, reg_count):
    """The active state, after checking that `what` sits in a kernel and `reg_count` obeys setmaxnreg."""
    st = _state.active(what)
    if not st.kernel_open:
        raise st.error(f"{what}() must be called inside `with T.Kernel(...)`")
    if isinstance(reg_count, bool) or not isinstance(reg_count, int) or not 24 <= reg_count <= 256 \
            or reg_count % 8:
        raise st.error(f"{what}(reg_count=...): expected an int from 24 to 256, a multiple of 8 "
                       f"(setmaxnreg's rule); got {reg_count!r}")
    return st


def _record_register_request(st, call: str) -> None:
    where = f" in warp group(s) {', '.join(map(str, st.ws_ids))}" if st.ws_ids is not None else ""
    record_hint(st, f"{call}{where} (not applied: tile_nb decides setmaxnreg itself)")


def gemm_policy(st, policy) -> None:
    """Check `T.gemm(..., policy=...)` and record it as a hint."""
    if policy is None:
        return
    if isinstance(policy, bool) or not isinstance(policy, int) or policy not in tuple(GemmWarpPolicy):
        raise st.error(
            f"T.gemm(policy=...): expected a T.GemmWarpPolicy (Square, FullRow, FullCol), got {policy!r}"
        )
    record_hint(
        st, f"gemm policy=GemmWarpPolicy.{GemmWarpPolicy(policy).name} (tile_nb chooses its own warp layout)"
    )

"""Progress of sweeps and tuning: a reporter gets every point as it arrives.

    reporter = make_reporter("auto", total=24, name="gemm")   # notebook bar, tqdm, or a printed line each
    reporter.update(result, point, phase="compile")
    reporter.close(result)

"auto" picks, in order: the reporter `tile_nb.notebook` registered (an ipywidgets bar with a table and plot
that fill in) when running in a Jupyter kernel; tqdm when it is installed and stderr is a terminal; else one
printed line per point. tqdm and ipywidgets are optional: nothing here imports them unless chosen. The
notebook layer registers itself (`register_reporter`), so this module never imports upward.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol

from .results import first_line, fmt_ms, fmt_rate, label

__all__ = ["PrintReporter", "Reporter", "TqdmReporter", "make_reporter", "point_status", "register_reporter"]


class Reporter(Protocol):
    """`begin(phase, total)` (optional) starts a phase ("compile", "time"); `update` gets each point as it
    arrives; `close` the final result."""

    def update(self, result: Any, point: Any, phase: str) -> None: ...

    def close(self, result: Any) -> None: ...


_registered: dict[str, Callable[..., Reporter]] = {}


def register_reporter(name: str, factory: Callable[..., Reporter]) -> None:
    """Make `factory(total=, name=)` available as progress mode `name` ("notebook" is the one "auto" prefers
    in a Jupyter kernel)."""
    _registered[name] = factory


def point_status(point, phase: str = "time") -> str:
    """`1.23 ms, 456 TFLOP/s` / `compiled: 154 regs, 144 KiB smem` /
    `pruned: ...` / `failed at compile: ...`."""
    if point.error is not None:
        return f"failed at {point.stage}: {first_line(point.error)}"
    if point.pruned is not None:
        return f"pruned: {point.pruned}"
    if point.timing is not None:
        status = fmt_ms(point.ranking_ms)
        if point.tflops:
            status += f", {fmt_rate(point.tflops)} TFLOP/s"
        elif point.gbps:
            status += f", {fmt_rate(point.gbps)} GB/s"
        if point.ratio is not None:
            status += f", {point.ratio:.2f}x the baseline"
        return status
    r = point.resources or {}
    shared = int(r.get("shared_bytes", 0)) + int(r.get("dynamic_shared_bytes") or 0)
    return f"compiled: {r.get('registers', '?')} regs, {shared // 1024} KiB smem"


class PrintReporter:
    """One line per point: `[3/24 compile] block_M=128 block_N=256: compiled: 154 regs, 144 KiB smem`."""

    def __init__(self, total: int, name: str = "", stream=None):
        self.total, self.name, self.done = total, name, 0
        self.stream = stream

    def begin(self, phase: str, total: int) -> None:
        self.total, self.done = total, 0

    def update(self, result, point, phase: str = "time") -> None:
        self.done += 1
        tag = f"{self.done}/{self.total}" + (f" {phase}" if phase not in ("time", "") else "")
        print(f"[{tag}] {label(point.config)}: {point_status(point, phase)}", file=self.stream or sys.stdout,
              flush=True)

    def close(self, result) -> None:
        pass


class TqdmReporter:
    """A tqdm bar on stderr, the last point's status as its postfix."""

    def __init__(self, total: int, name: str = ""):
        from tqdm import tqdm

        self.name = name or "tile_nb"
        self.bar = tqdm(total=total, desc=self.name, unit="cfg", leave=True)

    def begin(self, phase: str, total: int) -> None:
        self.bar.reset(total=total)
        self.bar.set_description(f"{self.name} {phase}")

    def update(self, result, point, phase: str = "time") -> None:
        self.bar.set_postfix_str(
            f"{phase}: {label(point.config)}: {point_status(point, phase)}"[:80], refresh=False
        )
        self.bar.update(1)

    def close(self, result) -> None:
        self.bar.close()


class _Silent:
    def update(self, result, point, phase: str = "time") -> None:
        pass

    def close(self, result) -> None:
        pass


def in_jupyter() -> bool:
    """True inside a Jupyter kernel (IPython already imported by it; never imported here)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _tqdm_available() -> bool:
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


def make_reporter(mode: Any, total: int, name: str = "") -> Reporter:
    """`mode`: "auto", "notebook" / "bar", "tqdm", "print", None (silent), or an
    object with `update`/`close`."""
    if mode is None or mode is False:
        return _Silent()
    if hasattr(mode, "update") and hasattr(mode, "close"):
        return mode
    if mode == "auto":
        if in_jupyter() and "notebook" in _registered:
            mode = "notebook"
        elif _tqdm_available() and sys.stderr.isatty():
            mode = "tqdm"
        else:
            mode = "print"
    if mode == "bar":
        mode = "notebook"
    if mode == "print":
        return PrintReporter(total, name)
    if mode == "tqdm":
        return TqdmReporter(total, name)
    if mode in _registered:
        return _registered[mode](total=total, name=name)
    known = ["auto", "print", "tqdm", None] + sorted(_registered)
    if mode == "notebook":
        raise ValueError("progress='notebook' needs the notebook layer: run `%load_ext tile_nb` (or import "
                         "tile_nb inside a Jupyter kernel) first")
    raise ValueError(f"progress must be one of {known} or a reporter object; got {mode!r}")

"""Sweeps: time one workload under a list of configurations and tabulate every result, failures included.

    def make(cfg):                      # returns the zero-argument closure to time
        kernel = gemm.compile(A, B, C, block_M=cfg["block_M"])
        return lambda: kernel(A, B, C)

    result = sweep(make, [{"block_M": 64}, {"block_M": 128}], flops=gemm_flops(M, N, K))
    print(result.table())               # plain text; the notebook layer draws plots from result.rows
    result.best().config
"""
from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .counts import gbps, tflops
from .timing import Timing, do_bench

__all__ = ["SweepResult", "SweepRow", "sweep"]


@dataclass
class SweepRow:
    config: dict[str, Any]
    timing: Timing | None = None
    tflops: float | None = None
    gbps: float | None = None
    error: str | None = None          # "ExceptionType: message" when the config failed to build or run

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class SweepResult:
    rows: list[SweepRow] = field(default_factory=list)

    def best(self) -> SweepRow | None:
        """The fastest successful row (by median)."""
        good = [r for r in self.rows if r.ok and r.timing is not None]
        return min(good, key=lambda r: r.timing.median_ms) if good else None

    def table(self) -> str:
        """A fixed-width text table: config columns, median/p20/p80 ms, TFLOP/s and GB/s when known, errors."""
        keys: list[str] = []
        for r in self.rows:
            keys += [k for k in r.config if k not in keys]
        headers = keys + ["median ms", "p20", "p80", "TFLOP/s", "GB/s", "note"]
        lines = []
        for r in self.rows:
            cells = [str(r.config.get(k, "")) for k in keys]
            if r.timing is not None:
                cells += [f"{r.timing.median_ms:.4f}", f"{r.timing.p20:.4f}", f"{r.timing.p80:.4f}"]
            else:
                cells += ["-", "-", "-"]
            cells += [f"{r.tflops:.1f}" if r.tflops is not None else "-",
                      f"{r.gbps:.1f}" if r.gbps is not None else "-",
                      (r.error or "").splitlines()[0][:60] if r.error else ""]
            lines.append(cells)
        widths = [max(len(h), *(len(c[i]) for c in lines)) if lines else len(h) for i, h in enumerate(headers)]
        fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
        return "\n".join([fmt(headers), fmt(["-" * w for w in widths]), *(fmt(c) for c in lines)])

    def __str__(self) -> str:
        return self.table()


def sweep(make: Callable[[dict[str, Any]], Callable[[], object]], configs: Iterable[dict[str, Any]], *,
          flops: float | Callable[[dict], float] | None = None,
          nbytes: float | Callable[[dict], float] | None = None,
          bench: Callable[..., Timing] = do_bench, on_row: Callable[[SweepRow], None] | None = None,
          **bench_kwargs) -> SweepResult:
    """Build and time each config; a config that raises is recorded with its error and the sweep goes on.

    `flops` / `nbytes` may be numbers or functions of the config. `on_row` is called after each row (progress).
    """
    result = SweepResult()
    for config in configs:
        config = dict(config)
        row = SweepRow(config=config)
        try:
            fn = make(config)
            row.timing = bench(fn, **bench_kwargs)
            f = flops(config) if callable(flops) else flops
            b = nbytes(config) if callable(nbytes) else nbytes
            row.tflops = tflops(f, row.timing) if f else None
            row.gbps = gbps(b, row.timing) if b else None
        except Exception as err:  # noqa: BLE001 - a failing config is a result, not the end of the sweep
            last = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
            where = f" ({last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
            row.error = f"{type(err).__name__}: {err}{where}"
        result.rows.append(row)
        if on_row is not None:
            on_row(row)
    return result

"""The result model of benchmarks, sweeps and tuning: plain data, JSON files, and text.

    BenchResult   one call timed (and a baseline): `gemm.bench(...)`
    SweepPoint    one configuration: its timing, or where it failed, or why it was pruned
    SweepResult   every configuration of a sweep: `gemm.sweep(...)`
    TuneResult    a SweepResult with the search's mode, timings and the chosen configuration: `gemm.tune(...)`

Two texts: `repr()` (IPython's text/plain) says what was measured and which configurations worked, never a
number that varies from run to run, so notebook regression tests can compare it; `str()` / `.table()` give the
numbers. HTML, plots and widgets are in `tile_nb.notebook`; nothing here imports them.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .timing import Timing

__all__ = [
    "BenchResult",
    "SweepPoint",
    "SweepResult",
    "TuneResult",
    "first_line",
    "fmt_ms",
    "fmt_rate",
    "label",
]

CPU_NOTE = "timed on the CPU interpreter with the host clock: interpreter speed, not GPU performance"
COMPILE_ONLY_NOTE = (
    "compile-only: no GPU timed these configurations; they were compiled and pruned by static "
    "resources (shared memory, registers, spills) and compile failures only"
)


# ------------------------------------------------------------------------------------------------ formatting
def fmt_ms(ms: float | None) -> str:
    """A latency with a unit that keeps 3-4 significant digits: `12.3 us`, `1.234 ms`, `2.10 s`."""
    if ms is None or math.isnan(ms):
        return "-"
    if ms < 1.0:
        return f"{ms * 1e3:.3g} us" if ms * 1e3 < 100 else f"{ms * 1e3:.1f} us"
    if ms < 1000.0:
        return f"{ms:.4g} ms"
    return f"{ms / 1e3:.3g} s"


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def first_line(message: str | None) -> str:
    """The first line of an error, without a trailing `(file.py:123)`; when that line only introduces a
    compiler's log (it ends with a colon), the log's first error line is added
    (`... sm_90a: ptxas fatal: Insufficient ...`)."""
    lines = message.strip().splitlines() if message and message.strip() else [""]
    line = re.sub(r" \([^()\s]+\.py:\d+\)$", "", lines[0])
    if line.endswith(":"):
        detail = next(
            (x.strip() for x in lines[1:] if re.search(r"\b(fatal|error)\b", x, re.IGNORECASE)), None
        )
        if detail:
            line = line + " " + " ".join(detail.split())
    return line


def label(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def timing_dict(t: Timing | None) -> dict | None:
    if t is None:
        return None
    return {"median_ms": t.median_ms, "p20": t.p20, "p80": t.p80, "min_ms": t.min_ms, "max_ms": t.max_ms,
            "n": t.n, "device": t.device}


def timing_from(d: dict | None) -> Timing | None:
    return None if d is None else Timing(**d)


def _save_json(path: str | os.PathLike, data: dict) -> None:
    """Write through a temporary file and a rename, so a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)


def _text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
    return "\n".join([fmt(headers), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])


# ----------------------------------------------------------------------------------------------------- bench
@dataclass(repr=False)
class BenchResult:
    """One kernel call timed with `tile_nb.bench.do_bench` (and a baseline, when given).

    `timing` (median_ms, p20, p80, min_ms, max_ms, n), `tflops`, `gbps`, `ratio`
    (baseline median / kernel median:
    above 1, the kernel is faster), `baseline_timing`, `first_call_s` (elaboration and compilation included).
    """

    name: str
    arguments: str
    gpu: bool
    device_name: str
    timing: Timing
    flops: float | None = None
    nbytes: float | None = None
    bytes_from_arguments: bool = False
    baseline_timing: Timing | None = None
    baseline_name: str | None = None
    first_call_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return "the GPU" if self.gpu else "the CPU interpreter"

    @property
    def tflops(self) -> float | None:
        return (
            self.flops / (self.timing.median_ms * 1e-3) / 1e12
            if self.flops and self.timing.median_ms
            else None
        )

    @property
    def gbps(self) -> float | None:
        return (
            self.nbytes / (self.timing.median_ms * 1e-3) / 1e9
            if self.nbytes and self.timing.median_ms
            else None
        )

    @property
    def ratio(self) -> float | None:
        if self.baseline_timing is None or not self.timing.median_ms:
            return None
        return self.baseline_timing.median_ms / self.timing.median_ms

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "arguments": self.arguments,
            "gpu": self.gpu,
            "device_name": self.device_name,
            "timing": timing_dict(self.timing),
            "flops": self.flops,
            "bytes": self.nbytes,
            "tflops": self.tflops,
            "gbps": self.gbps,
            "baseline": self.baseline_name,
            "baseline_timing": timing_dict(self.baseline_timing),
            "ratio": self.ratio,
            "first_call_s": self.first_call_s,
        }

    def to_text(self) -> str:
        """What was measured and how (deterministic: no timings)."""
        lines = [f"BenchResult {self.name}({self.arguments})"]
        lines.append("  on the GPU: CUDA events, L2 flushed before each run" if self.gpu else "  " + CPU_NOTE)
        measured = ["median, p20, p80 latency"]
        if self.flops:
            measured.append(f"TFLOP/s of {int(self.flops):,} FLOPs")
        if self.nbytes:
            source = " (tensor arguments and outputs, each moved once)" if self.bytes_from_arguments else ""
            measured.append(f"GB/s of {int(self.nbytes):,} bytes{source}")
        lines.append("  reports: " + "; ".join(measured))
        if self.baseline_timing is not None:
            lines.append(f"  baseline: {self.baseline_name}; ratio = baseline median / kernel median "
                         "(above 1: the kernel is faster)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def summary(self) -> str:
        """One line with the numbers."""
        t = self.timing
        parts = [
            f"{self.name}: median {fmt_ms(t.median_ms)} (p20 {fmt_ms(t.p20)}, p80 {fmt_ms(t.p80)}, n={t.n})"
        ]
        if self.tflops:
            parts.append(f"{fmt_rate(self.tflops)} TFLOP/s")
        if self.gbps:
            parts.append(f"{fmt_rate(self.gbps)} GB/s")
        if self.ratio is not None:
            parts.append(f"{self.ratio:.2f}x the baseline ({fmt_ms(self.baseline_timing.median_ms)})")
        return ", ".join(parts) + ("" if self.gpu else " [CPU interpreter]")

    def __repr__(self) -> str:
        return self.to_text()

    def __str__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.to_text())


# ----------------------------------------------------------------------------------------------------- points
@dataclass
class SweepPoint:
    """One configuration: its timing; or the stage it failed at and the error; or why it was pruned.

    `stage`: "inputs", "elaborate", "compile", "run", "time" (failures) or "resources" (pruned). Tuning adds
    `resources` (ptxas figures and dynamic shared memory, as a dict) and `compile_s`.
    """

    config: dict[str, Any]
    timing: Timing | None = None
    tflops: float | None = None
    gbps: float | None = None
    stage: str | None = None
    error: str | None = None
    baseline_timing: Timing | None = None
    baseline_error: str | None = None
    pruned: str | None = None
    resources: dict | None = None
    compile_s: float | None = None
    rounds_ms: list[float] | None = None   # tuning: the re-timed medians of the best few, one per round
    compiled_by: str | None = None         # tuning: "pid 123 on host" of the process that compiled it

    @property
    def ok(self) -> bool:
        return self.error is None and self.pruned is None and self.timing is not None

    @property
    def compiled(self) -> bool:
        """Built and within the resource limits (in a compile-only search, the survivors)."""
        return self.error is None and self.pruned is None and self.resources is not None

    @property
    def status(self) -> str:
        if self.error is not None:
            return f"failed at {self.stage}: {first_line(self.error)}"
        if self.pruned is not None:
            return f"pruned: {self.pruned}"
        if self.timing is not None:
            return "ok"
        return "compiled" if self.resources is not None else "pending"

    @property
    def ratio(self) -> float | None:
        if not self.ok or self.baseline_timing is None:
            return None
        return self.baseline_timing.median_ms / self.timing.median_ms

    @property
    def ranking_ms(self) -> float | None:
        """What ranks the point: the median of its re-timed rounds when it has them, else its median."""
        if self.rounds_ms:
            ordered = sorted(self.rounds_ms)
            return ordered[len(ordered) // 2] if len(ordered) % 2 else sum(ordered[len(ordered) // 2 - 1:
                                                                                   len(ordered) // 2 + 1]) / 2
        return self.timing.median_ms if self.timing is not None else None

    def set_rates(self, flops, nbytes, call_args) -> None:
        """TFLOP/s and GB/s from the ranking time: `flops` / `nbytes` are numbers or functions of the config
        (None: no FLOP count; the bytes of the call's tensors)."""
        from .counts import gbps, tflops
        from .inputs import nbytes_of

        work = lambda amount: amount(self.config) if callable(amount) else amount  # noqa: E731
        ms = self.ranking_ms
        f = work(flops) if flops is not None else None
        b = work(nbytes) if nbytes is not None else nbytes_of(call_args)
        self.tflops = tflops(f, ms) if f else None
        self.gbps = gbps(b, ms) if b else None

    def to_dict(self) -> dict:
        return {
            "config": self.config,
            "timing": timing_dict(self.timing),
            "tflops": self.tflops,
            "gbps": self.gbps,
            "stage": self.stage,
            "error": self.error,
            "baseline_timing": timing_dict(self.baseline_timing),
            "baseline_error": self.baseline_error,
            "ratio": self.ratio,
            "pruned": self.pruned,
            "resources": self.resources,
            "compile_s": self.compile_s,
            "rounds_ms": self.rounds_ms,
            "compiled_by": self.compiled_by,
        }

    @classmethod
    def from_dict(cls, d: dict) -> SweepPoint:
        return cls(
            config=dict(d["config"]),
            timing=timing_from(d.get("timing")),
            tflops=d.get("tflops"),
            gbps=d.get("gbps"),
            stage=d.get("stage"),
            error=d.get("error"),
            baseline_timing=timing_from(d.get("baseline_timing")),
            baseline_error=d.get("baseline_error"),
            pruned=d.get("pruned"),
            resources=d.get("resources"),
            compile_s=d.get("compile_s"),
            rounds_ms=d.get("rounds_ms"),
            compiled_by=d.get("compiled_by"),
        )


def retime_best(result, points: list[SweepPoint], candidates, *, confirm: int, rounds: int, time_one, args_of,
                flops, nbytes) -> list[int]:
    """Re-time the `confirm` fastest of `candidates` in `rounds` interleaved rounds (each point's `rounds_ms`;
    clock drift hits them alike), then recompute their rates. `time_one(i)` gives a median in ms, or None if
    it failed; `args_of(i)` the call's arguments. The time spent goes to `result.timings["confirm"]`."""
    t0 = time.perf_counter()
    top = sorted((i for i in candidates if points[i].ok), key=lambda i: points[i].timing.median_ms)[:confirm]
    if len(top) > 1 and rounds > 0:
        for i in top:
            points[i].rounds_ms = []
        for _ in range(rounds):
            for i in top:
                ms = time_one(i)
                if ms is not None:
                    points[i].rounds_ms.append(ms)
        for i in top:
            points[i].set_rates(flops, nbytes, args_of(i))
    result.timings["confirm"] = time.perf_counter() - t0
    return top


# ----------------------------------------------------------------------------------------------------- sweep
@dataclass(repr=False)
class SweepResult:
    """Every configuration of a sweep: timings, failures, a text table; `best()` is the fastest working point.

    `save(path)` / `SweepResult.load(path)` write and read JSON. In a notebook, `tile_nb.notebook` shows it as
    a table with a plot of latency and throughput against the swept parameter.
    """

    name: str
    params: dict[str, list]
    points: list[SweepPoint] = field(default_factory=list)
    gpu: bool = False
    device_name: str = ""
    baseline_name: str | None = None
    results: str | None = None
    x: str | None = None
    date: str = ""

    kind = "sweep"

    def best(self) -> SweepPoint | None:
        good = [p for p in self.points if p.ok]
        return min(good, key=lambda p: p.ranking_ms) if good else None

    @property
    def failures(self) -> list[SweepPoint]:
        return [p for p in self.points if p.error is not None]

    @property
    def pruned(self) -> list[SweepPoint]:
        return [p for p in self.points if p.pruned is not None]

    def keys(self) -> list[str]:
        """The configuration's names, in order (the params, else every name any point has)."""
        keys = list(self.params)
        for p in self.points:
            keys += [k for k in p.config if k not in keys]
        return keys

    def to_dict(self) -> dict:
        best = self.best()
        return {"version": 1, "kind": self.kind, "kernel": self.name, "params": self.params, "gpu": self.gpu,
                "device_name": self.device_name, "date": self.date, "baseline": self.baseline_name,
                "best": best.config if best else None, "points": [p.to_dict() for p in self.points]}

    def save(self, path: str | os.PathLike) -> None:
        """Write `to_dict()` as JSON (atomically)."""
        _save_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, d: dict, results: str | None = None) -> SweepResult:
        return cls(d["kernel"], {k: list(v) for k, v in d["params"].items()},
                   [SweepPoint.from_dict(p) for p in d["points"]], gpu=d.get("gpu", False),
                   device_name=d.get("device_name", ""), baseline_name=d.get("baseline"), results=results,
                   date=d.get("date", ""))

    @classmethod
    def load(cls, path: str | os.PathLike) -> SweepResult:
        return cls.from_dict(json.loads(Path(path).read_text()), results=str(path))

    # ------------------------------------------------------------------------------------------------ text
    def _where(self) -> str:
        return "GPU" if self.gpu else "CPU interpreter, host clock"

    def to_text(self) -> str:
        """Which configurations ran and which failed (deterministic: no timings)."""
        over = ", ".join(self.params) or "nothing"
        head = f"{type(self).__name__} {self.name}: {len(self.points)} configs over {over} ({self._where()})"
        if self.failures:
            head += f", {len(self.failures)} failed"
        if self.pruned:
            head += f", {len(self.pruned)} pruned"
        lines = [head] + [f"  {label(p.config)}: {p.status}" for p in self.points]
        if self.baseline_name:
            lines.append(f"  baseline: {self.baseline_name}")
        if self.results:
            lines.append(f"  results: {self.results}")
        return "\n".join(lines)

    def table(self) -> str:
        """A fixed-width table with the numbers: configuration, median/p20/p80, throughput, status."""
        keys = self.keys()
        rate = self.rate_name()
        headers = keys + ["median", "p20", "p80"] + ([rate] if rate else [])
        if self.baseline_name:
            headers += ["ratio"]
        headers.append("status")
        best = self.best()
        rows = []
        for p in self.points:
            t = p.timing
            cells = [str(p.config.get(k, "")) for k in keys]
            cells += [fmt_ms(t.median_ms), fmt_ms(t.p20), fmt_ms(t.p80)] if t is not None else ["-", "-", "-"]
            if rate:
                cells.append(fmt_rate(p.tflops if rate == "TFLOP/s" else p.gbps))
            if self.baseline_name:
                cells.append(f"{p.ratio:.2f}x" if p.ratio is not None else "-")
            cells.append("best" if p is best else p.status[:70])
            rows.append(cells)
        return _text_table(headers, rows)

    def rate_name(self) -> str | None:
        if any(p.tflops for p in self.points):
            return "TFLOP/s"
        return "GB/s" if any(p.gbps for p in self.points) else None

    def __repr__(self) -> str:
        return self.to_text()

    def __str__(self) -> str:
        return self.table()

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.to_text())


# ------------------------------------------------------------------------------------------------------ tune
@dataclass(repr=False)
class TuneResult(SweepResult):
    """The search of `gemm.tune(...)` / `@tile_nb.autotune`: every configuration (timed, pruned or failed),
    the chosen one, and where the time went.

    - `mode`: "gpu" (compiled, pruned, timed one at a time on the GPU) or "compile-only" (no GPU: compiled and
      pruned only; `best()` is None and nothing is persisted as a choice).
    - `key`: the values the result is stored under (consts such as M, N, K, and fixed compile-time arguments).
    - `timings`: seconds: `elaborate`, `compile_wall` (first job sent to last result back),
      `compile_busy` (sum of the workers' compile times), `bench` (timing on the GPU), `confirm`
      (re-timing the best few), `total`.
    - `pool`: where candidates compiled ("process" workers, "ray", or "inline"), `workers`: how many.
    - `from_cache`: True when the result was read from the tuning store instead of searched.
    """

    mode: str = "gpu"
    key: dict = field(default_factory=dict)
    best_config: dict | None = None
    timings: dict = field(default_factory=dict)
    pool: str = ""
    workers: int = 0
    from_cache: bool = False
    notes: list[str] = field(default_factory=list)

    kind = "tune"

    def best(self) -> SweepPoint | None:
        if self.best_config is not None:
            for p in self.points:
                if p.config == self.best_config and p.ok:
                    return p
        return super().best()

    @property
    def compile_only(self) -> bool:
        return self.mode == "compile-only"

    def _where(self) -> str:
        return {
            "compile-only": "compile-only, no GPU timing",
            "interpreter": "CPU interpreter on Ray actors, host clock: not GPU performance",
        }.get(self.mode, "GPU")

    def to_dict(self) -> dict:
        d = super().to_dict()
        d.update(mode=self.mode, key=self.key, best=self.best_config, timings=self.timings, pool=self.pool,
                 workers=self.workers, notes=list(self.notes))
        return d

    @classmethod
    def from_dict(cls, d: dict, results: str | None = None) -> TuneResult:
        base = SweepResult.from_dict(d, results)
        return cls(
            base.name,
            base.params,
            base.points,
            gpu=base.gpu,
            device_name=base.device_name,
            baseline_name=base.baseline_name,
            results=results,
            date=base.date,
            mode=d.get("mode", "gpu"),
            key=dict(d.get("key") or {}),
            best_config=d.get("best"),
            timings=dict(d.get("timings") or {}),
            pool=d.get("pool", ""),
            workers=d.get("workers", 0),
            notes=list(d.get("notes") or []),
        )

    def to_text(self) -> str:
        head = (
            f"TuneResult {self.name}: {len(self.points)} configs over {', '.join(self.params) or 'nothing'} "
            f"({self._where()})"
        )
        if self.key:
            head += f" for {label(self.key)}"
        counts = [f"{sum(p.ok for p in self.points)} timed" if not self.compile_only else
                  f"{sum(p.compiled for p in self.points)} compiled",
                  f"{len(self.pruned)} pruned", f"{len(self.failures)} failed"]
        lines = [head, "  " + ", ".join(counts)]
        if self.compile_only:
            lines.append("  " + COMPILE_ONLY_NOTE)
        lines += [f"  {label(p.config)}: {p.status}" for p in self.points if not p.ok and not p.compiled]
        best = self.best()
        if best is not None:
            lines.append(f"  best: {label(best.config)}")
        if self.from_cache:
            lines.append("  read from the tuning store (not searched again)")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def resource_cells(self, p: SweepPoint) -> list[str]:
        r = p.resources or {}
        if not r:
            return ["-", "-", "-"]
        shared = int(r.get("shared_bytes", 0)) + int(r.get("dynamic_shared_bytes") or 0)
        spills = int(r.get("spill_stores", 0)) + int(r.get("spill_loads", 0))
        return [str(r.get("registers", "-")), f"{shared // 1024} KiB" if shared >= 1024 else f"{shared} B",
                f"{spills} B"]

    def table(self) -> str:
        keys = self.keys()
        rate = self.rate_name()
        timed = not self.compile_only
        headers = keys + (["median"] + ([rate] if rate else []) if timed else []) + ["regs", "smem", "spills",
                                                                                      "compile", "status"]
        best = self.best()
        order = sorted(self.points, key=lambda p: (p.ranking_ms is None, p.ranking_ms or 0.0))
        rows = []
        for p in order:
            cells = [str(p.config.get(k, "")) for k in keys]
            if timed:
                cells.append(fmt_ms(p.ranking_ms) if p.ok else "-")
                if rate:
                    cells.append(fmt_rate(p.tflops if rate == "TFLOP/s" else p.gbps) if p.ok else "-")
            cells += self.resource_cells(p)
            cells.append(f"{p.compile_s:.2f} s" if p.compile_s is not None else "-")
            cells.append("best" if p is best else p.status[:70])
            rows.append(cells)
        lines = [_text_table(headers, rows)]
        if self.timings:
            lines.append(self.timing_line())
        return "\n".join(lines)

    def timing_line(self) -> str:
        t = self.timings
        parts = [
            f"{name} {t[name]:.1f} s"
            for name in ("setup", "elaborate", "compile_wall", "bench", "confirm", "total")
            if name in t
        ]
        where = f"{self.pool}, {self.workers} workers" if self.pool else ""
        busy = f"; compile busy {t['compile_busy']:.1f} s over the workers" if "compile_busy" in t else ""
        return f"time: {', '.join(parts)}{busy}" + (f" ({where})" if where else "")

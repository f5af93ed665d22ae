"""Benchmarks in the notebook: `bench(f, ...)` (one timed call) and `sweep(f, params, ...)` (every configuration).

    view = bench(gemm, A, B, C, flops=2 * M * N * K, baseline=lambda: torch.matmul(A, B))   # gemm.bench(...)
    table = sweep(gemm, {"block_M": [64, 128], "block_N": [64, 128]}, args=(A, B, C), results="gemm.json")
    shapes = sweep(gemm, {"M": [256, 512], "N": [256, 512]}, make_args={"K": 256},     # inputs built for you
                   baseline=lambda A, B: torch.matmul(A, B))

Timing is `tile_nb.bench.do_bench` (GPU: warm-up, L2 flush, CUDA events; CPU: the host clock), so the numbers are the
ones the Python API gives. Both results are display objects: their `text/plain` is deterministic (no timings: nbval
compares it), their `text/html` holds the numbers, and a sweep adds a PNG plot (latency and throughput against the
swept parameter). A sweep records a configuration that fails (compile error, out of resources, interpreter error) with
its message and goes on; it shows progress (an ipywidgets bar in a notebook, a printed line per configuration
elsewhere) and can write its results to a JSON file after every configuration.
"""
from __future__ import annotations

import datetime
import inspect
import itertools
import json
import math
import os
import platform
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tile_nb.notebook.highlight import escape

__all__ = ["BenchView", "SweepPoint", "SweepView", "bench", "make_inputs", "parse_sweep", "sweep"]

_BOX = ("font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;font-size:13px;line-height:1.45;"
        "color:#1f2328;max-width:100%")
_TABLE = "border-collapse:collapse;border:1px solid #d0d7de;margin:4px 0"
_TH = "text-align:left;padding:3px 8px;border-bottom:1px solid #d0d7de;background:#f6f8fa;font-weight:600"
_TD = "text-align:left;padding:2px 8px;border:none;background:#ffffff;font-variant-numeric:tabular-nums"
_NOTE = "margin:4px 0;padding:4px 8px;border-left:3px solid #9a6700;background:#fff8c5"
_MUTED = "color:#57606a"
_FAIL = "color:#cf222e"
_CPU_NOTE = "timed on the CPU interpreter with the host clock: interpreter speed, not GPU performance"


# ------------------------------------------------------------------------------------------------------ helpers
def _is_tensor(x) -> bool:
    return hasattr(x, "data_ptr") and hasattr(x, "shape")


def _tensors(values: Iterable) -> list:
    out = []
    for v in values:
        if _is_tensor(v):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            out += _tensors(v)
    return out


def _nbytes(values: Iterable) -> int:
    return sum(int(t.numel()) * int(t.element_size()) for t in _tensors(values))


def _describe(args: Iterable) -> str:
    """`X float32[256], 2.0`: tensors by dtype and shape, other values by repr (short)."""
    parts = []
    for a in args:
        if _is_tensor(a):
            parts.append(f"{str(a.dtype).replace('torch.', '')}[{', '.join(str(int(d)) for d in a.shape)}]")
        else:
            text = repr(a)
            parts.append(text if len(text) <= 20 else text[:17] + "...")
    return ", ".join(parts)


def _device_of(values: Iterable) -> str:
    for t in _tensors(values):
        return str(t.device)
    return "cpu"


def _device_name(gpu: bool) -> str:
    if gpu:
        try:
            import torch

            return torch.cuda.get_device_name()
        except Exception:  # noqa: BLE001 - a name is decoration; never fail a benchmark for it
            return "CUDA device"
    return f"CPU ({platform.machine() or 'unknown'})"


def _sync(gpu: bool) -> None:
    if gpu:
        import torch

        torch.cuda.synchronize()


def _fmt_ms(ms: float | None) -> str:
    """A latency with a unit that keeps 3-4 significant digits: `12.3 us`, `1.234 ms`, `2.10 s`."""
    if ms is None or math.isnan(ms):
        return "-"
    if ms < 1.0:
        return f"{ms * 1e3:.3g} us" if ms * 1e3 < 100 else f"{ms * 1e3:.1f} us"
    if ms < 1000.0:
        return f"{ms:.4g} ms"
    return f"{ms / 1e3:.3g} s"


def _fmt_rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _timing_dict(t) -> dict | None:
    if t is None:
        return None
    return {"median_ms": t.median_ms, "p20": t.p20, "p80": t.p80, "min_ms": t.min_ms, "max_ms": t.max_ms,
            "n": t.n, "device": t.device}


def _timing_from(d: dict | None):
    if d is None:
        return None
    from tile_nb.bench import Timing

    return Timing(**d)


def _first_line(message: str) -> str:
    """The first line of an error, without the `(file.py:123)` that `tile_nb.bench.sweep` appends."""
    line = (message or "").strip().splitlines()[0] if message and message.strip() else ""
    return re.sub(r" \([^()\s]+\.py:\d+\)$", "", line)


def _positional_arity(fn: Callable) -> int | None:
    """How many positional parameters `fn` takes (None: *args, or not introspectable)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


def _call_baseline(baseline: Callable, args: tuple) -> Callable[[], object]:
    """A zero-argument baseline as is; one that takes arguments gets the kernel's arguments (`lambda A, B, C: ...`)."""
    arity = _positional_arity(baseline)
    if arity == 0:
        return baseline
    tensors_first = args if arity is None else args[:arity]
    return lambda: baseline(*tensors_first)


def _html_notes(notes: list[str]) -> str:
    return "".join(f'<div style="{_NOTE}">{escape(n)}</div>' for n in notes)


# --------------------------------------------------------------------------------------------------- bench
@dataclass
class BenchView:
    """One kernel call timed with `tile_nb.bench.do_bench` (and a baseline, when given).

    `text/plain` says what was measured and how, never the numbers (they vary); `text/html` shows them. Attributes:
    `timing` (median_ms, p20, p80, min_ms, max_ms, n), `tflops`, `gbps`, `ratio` (baseline median / kernel median:
    above 1, the kernel is faster), `baseline_timing`.
    """

    name: str
    arguments: str
    gpu: bool
    device_name: str
    timing: Any
    flops: float | None = None
    nbytes: float | None = None
    bytes_from_arguments: bool = False
    baseline_timing: Any = None
    baseline_name: str | None = None
    first_call_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return "the GPU" if self.gpu else "the CPU interpreter"

    @property
    def tflops(self) -> float | None:
        return self.flops / (self.timing.median_ms * 1e-3) / 1e12 if self.flops and self.timing.median_ms else None

    @property
    def gbps(self) -> float | None:
        return self.nbytes / (self.timing.median_ms * 1e-3) / 1e9 if self.nbytes and self.timing.median_ms else None

    @property
    def ratio(self) -> float | None:
        if self.baseline_timing is None or not self.timing.median_ms:
            return None
        return self.baseline_timing.median_ms / self.timing.median_ms

    def to_dict(self) -> dict:
        return {"name": self.name, "arguments": self.arguments, "gpu": self.gpu, "device_name": self.device_name,
                "timing": _timing_dict(self.timing), "flops": self.flops, "bytes": self.nbytes,
                "tflops": self.tflops, "gbps": self.gbps, "baseline": self.baseline_name,
                "baseline_timing": _timing_dict(self.baseline_timing), "ratio": self.ratio,
                "first_call_s": self.first_call_s}

    def to_text(self) -> str:
        lines = [f"BenchView {self.name}({self.arguments})"]
        if self.gpu:
            lines.append("  on the GPU: CUDA events, L2 flushed before each run")
        else:
            lines.append("  " + _CPU_NOTE)
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

    def to_html(self) -> str:
        t, b = self.timing, self.baseline_timing
        cols = ["", escape(self.name)] + ([escape(self.baseline_name or "baseline")] if b is not None else [])
        head = "".join(f'<th style="{_TH}">{c}</th>' for c in cols)

        def row(label: str, mine: str, theirs: str | None = None) -> str:
            cells = [label, mine] + ([theirs or "-"] if b is not None else [])
            return "<tr>" + "".join(f'<td style="{_TD}">{c}</td>' for c in cells) + "</tr>"

        rows = [row("median", f"<b>{_fmt_ms(t.median_ms)}</b>", b and f"<b>{_fmt_ms(b.median_ms)}</b>"),
                row("p20 / p80", f"{_fmt_ms(t.p20)} / {_fmt_ms(t.p80)}", b and f"{_fmt_ms(b.p20)} / {_fmt_ms(b.p80)}"),
                row("min / max", f"{_fmt_ms(t.min_ms)} / {_fmt_ms(t.max_ms)}",
                    b and f"{_fmt_ms(b.min_ms)} / {_fmt_ms(b.max_ms)}"),
                row("spread (p80-p20)/median", f"{t.spread:.1%}", b and f"{b.spread:.1%}"),
                row("runs", str(t.n), b and str(b.n))]
        if self.flops:
            rows.append(row("TFLOP/s", _fmt_rate(self.tflops),
                            b and _fmt_rate(self.flops / (b.median_ms * 1e-3) / 1e12)))
        if self.nbytes:
            rows.append(row("GB/s", _fmt_rate(self.gbps), b and _fmt_rate(self.nbytes / (b.median_ms * 1e-3) / 1e9)))
        if self.ratio is not None:
            word = "faster" if self.ratio >= 1 else "slower"
            rows.append(row("ratio", f"<b>{self.ratio:.2f}x</b> ({word} than the baseline)", ""))
        notes = []
        if not self.gpu:
            notes.append(_CPU_NOTE + ".")
        elif t.short:
            notes.append("under 10 us: the figure is dominated by launch overhead and event resolution.")
        notes += self.notes
        meta = [f"{self.where}, {self.device_name}", f"arguments: {self.arguments}"]
        if self.first_call_s is not None:
            meta.append(f"first call (elaboration and compilation included): {self.first_call_s:.3g} s")
        if self.nbytes:
            meta.append(f"{int(self.nbytes):,} bytes" + (" (tensor arguments and outputs)"
                                                         if self.bytes_from_arguments else ""))
        if self.flops:
            meta.append(f"{int(self.flops):,} FLOPs")
        return (f'<div style="{_BOX}"><div><b>{escape(self.name)}</b> benchmark '
                f'<span style="{_MUTED}">({escape("; ".join(meta))})</span></div>{_html_notes(notes)}'
                f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')

    def _repr_mimebundle_(self, include=None, exclude=None):
        return _filter({"text/plain": self.to_text(), "text/html": self.to_html()}, include, exclude)

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.to_text())


def _filter(bundle: dict, include, exclude) -> dict:
    if include:
        bundle = {k: v for k, v in bundle.items() if k in include}
    if exclude:
        bundle = {k: v for k, v in bundle.items() if k not in exclude}
    return bundle


def bench(kernel, *args, flops: float | None = None, bytes: float | None = None,
          baseline: Callable | None = None, baseline_name: str | None = None, backend: str | None = None,
          name: str | None = None, warmup_ms: float = 25.0, rep_ms: float = 100.0, flush_l2: bool = True, **kwargs) -> BenchView:
    """Time `kernel(*args, **kwargs)` and return a `BenchView` (`gemm.bench(A, B, C, ...)` is this).

    - `flops` / `bytes`: the work of one call, for TFLOP/s and GB/s; `bytes` defaults to the tensor arguments and
      outputs, each counted once (the least traffic a kernel can have).
    - `baseline`: a callable to time the same way, e.g. `lambda: torch.matmul(A, B)`; one that takes arguments
      gets the kernel's arguments. The view gives baseline median / kernel median; `baseline_name` labels it
      (default: the function's name, or the lambda's body).
    - `backend="cpu"`: the CPU interpreter even for CUDA tensors. On CPU tensors the interpreter runs and the host
      clock times it: that measures the interpreter, and the view says so.
    - `warmup_ms`, `rep_ms`, `flush_l2`: passed to `tile_nb.bench.do_bench`.

    >>> view = scale_add.bench(X, Y, baseline=lambda: X * 2 + 1)      # doctest: +SKIP
    >>> view.timing.median_ms, view.ratio                              # doctest: +SKIP
    """
    from tile_nb.bench import do_bench

    gpu = _device_of(list(args) + list(kwargs.values())).startswith("cuda") and backend != "cpu"
    call_kwargs = {**kwargs, "backend": backend} if backend is not None else kwargs
    fn = lambda: kernel(*args, **call_kwargs)
    start = time.perf_counter()
    out = fn()
    _sync(gpu)
    first = time.perf_counter() - start
    timing = do_bench(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_l2, device="cuda" if gpu else "cpu")
    base_timing = base_name = None
    if baseline is not None:
        base_gpu = _device_of(args).startswith("cuda")
        base_timing = do_bench(_call_baseline(baseline, args), warmup_ms=warmup_ms, rep_ms=rep_ms,
                               flush_l2=flush_l2, device="cuda" if base_gpu else "cpu")
        base_name = baseline_name or _callable_name(baseline)
    from_arguments = bytes is None
    nbytes = (_nbytes(args) + _nbytes([out])) if from_arguments else bytes
    notes = []
    if baseline is not None and not gpu and _device_of(args).startswith("cuda"):
        notes.append("the kernel ran on the CPU interpreter and the baseline on the GPU: the ratio compares the two")
    return BenchView(name or getattr(kernel, "__name__", "kernel"), _describe(args), gpu, _device_name(gpu), timing,
                     flops=flops, nbytes=nbytes or None, bytes_from_arguments=from_arguments,
                     baseline_timing=base_timing, baseline_name=base_name, first_call_s=first, notes=notes)


def _callable_name(fn: Callable) -> str:
    """A function's name, or a lambda's body as written (`torch.matmul(A, B)`), for labels."""
    name = getattr(fn, "__name__", None)
    if name and name != "<lambda>":
        return name
    try:
        import ast
        import textwrap

        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)).strip())
    except (OSError, TypeError, SyntaxError, IndentationError):
        return "baseline"
    code = fn.__code__
    arg_names = list(code.co_varnames[: code.co_argcount])
    lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and [a.arg for a in n.args.args] == arg_names]
    if len(lambdas) != 1:
        return "baseline"
    return ast.unparse(lambdas[0].body)[:60]


# --------------------------------------------------------------------------------------------------- inputs
def make_inputs(kernel, *, device: str | None = None, seed: int = 0, **values) -> tuple:
    """Random input tensors for `kernel` specialized with `values` (consts and compile-time parameters).

    The shapes and dtypes come from the kernel's own annotations (phase 2), so `make_inputs(gemm, M=256, N=256,
    K=128)` gives `(A, B, C)`. Floating tensors are `randn`, integer tensors small integers; outputs the kernel
    returns are not made. `device` defaults to "cuda" when torch sees a GPU, else "cpu".
    """
    import torch

    from tile_nb.language.dtypes import torch_dtype

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    func = kernel.specialize(**values)
    outputs = {str(o) for o in func.attrs.get("tile_nb.outputs", []) or []} if func.attrs is not None else set()
    params = {str(p.name): p for p in func.params}
    names = [p.name for p in kernel.signature.runtime]
    gen = torch.Generator().manual_seed(seed)
    made = []
    for n in names:
        if n in outputs:
            continue
        p = params.get(n)
        shape = getattr(p, "shape", None)
        if p is None or shape is None:
            raise ValueError(f"make_inputs(): '{n}' of {kernel.__name__}() is not a tensor with a static shape; "
                             "give make_args=callable(config) -> arguments")
        try:
            dims = [int(d) for d in shape]
        except (TypeError, ValueError):
            raise ValueError(f"make_inputs(): '{n}' has a dynamic shape {tuple(str(d) for d in shape)}; give "
                             "make_args=callable(config) -> arguments") from None
        dtype = torch_dtype(str(p.dtype))
        if dtype.is_floating_point:
            t = torch.randn(dims, generator=gen, dtype=torch.float32).to(dtype)
        elif dtype == torch.bool:
            t = torch.zeros(dims, dtype=dtype)
        else:
            t = torch.randint(-4, 5, dims, generator=gen).to(dtype)
        made.append(t.to(device))
    return tuple(made)


# --------------------------------------------------------------------------------------------------- sweep
@dataclass
class SweepPoint:
    """One configuration of a sweep: its timing, or the stage it failed at and the error."""

    config: dict[str, Any]
    timing: Any = None
    tflops: float | None = None
    gbps: float | None = None
    stage: str | None = None  # where it failed: "inputs", "elaborate", "compile", "run" or "time"
    error: str | None = None
    baseline_timing: Any = None
    baseline_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.timing is not None

    @property
    def ratio(self) -> float | None:
        if not self.ok or self.baseline_timing is None:
            return None
        return self.baseline_timing.median_ms / self.timing.median_ms

    def to_dict(self) -> dict:
        return {"config": self.config, "timing": _timing_dict(self.timing), "tflops": self.tflops, "gbps": self.gbps,
                "stage": self.stage, "error": self.error, "baseline_timing": _timing_dict(self.baseline_timing),
                "baseline_error": self.baseline_error, "ratio": self.ratio}

    @classmethod
    def from_dict(cls, d: dict) -> SweepPoint:
        return cls(config=dict(d["config"]), timing=_timing_from(d.get("timing")), tflops=d.get("tflops"),
                   gbps=d.get("gbps"), stage=d.get("stage"), error=d.get("error"),
                   baseline_timing=_timing_from(d.get("baseline_timing")), baseline_error=d.get("baseline_error"))


def _label(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


@dataclass
class SweepView:
    """The result of `sweep`: every configuration's timing or failure, a table and a plot.

    `text/plain` lists the configurations and which failed (deterministic); `text/html` has the table of times and
    the plot (a PNG inlined as base64), also given as `image/png`. `best()` is the fastest working point;
    `SweepView.load(path)` reads a results file written by `sweep(..., results=path)`.
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
    _png: bytes | None = field(default=None, repr=False, compare=False)

    def best(self) -> SweepPoint | None:
        good = [p for p in self.points if p.ok]
        return min(good, key=lambda p: p.timing.median_ms) if good else None

    @property
    def failures(self) -> list[SweepPoint]:
        return [p for p in self.points if not p.ok]

    def to_dict(self) -> dict:
        best = self.best()
        return {"version": 1, "kernel": self.name, "params": self.params, "gpu": self.gpu,
                "device_name": self.device_name, "date": self.date, "baseline": self.baseline_name,
                "best": best.config if best else None, "points": [p.to_dict() for p in self.points]}

    def save(self, path: str | os.PathLike) -> None:
        """Write `to_dict()` as JSON (through a temporary file, so a reader never sees half a file)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, default=str) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SweepView:
        d = json.loads(Path(path).read_text())
        return cls(d["kernel"], {k: list(v) for k, v in d["params"].items()},
                   [SweepPoint.from_dict(p) for p in d["points"]], gpu=d.get("gpu", False),
                   device_name=d.get("device_name", ""), baseline_name=d.get("baseline"), results=str(path),
                   date=d.get("date", ""))

    # ----------------------------------------------------------------------------------------- renderings
    def to_text(self) -> str:
        n_fail = len(self.failures)
        over = ", ".join(self.params) or "nothing"
        where = "GPU" if self.gpu else "CPU interpreter, host clock"
        head = f"SweepView {self.name}: {len(self.points)} configs over {over} ({where})"
        if n_fail:
            head += f", {n_fail} failed"
        lines = [head]
        for p in self.points:
            status = "ok" if p.ok else f"failed at {p.stage}: {_first_line(p.error or '')}"
            lines.append(f"  {_label(p.config)}: {status}")
        if self.baseline_name:
            lines.append(f"  baseline: {self.baseline_name}")
        if self.results:
            lines.append(f"  results: {self.results}")
        return "\n".join(lines)

    def png(self) -> bytes | None:
        """The plot as PNG bytes (None when no configuration worked or matplotlib is missing)."""
        if self._png is None and any(p.ok for p in self.points):
            try:
                from tile_nb.notebook.plots import sweep_png
            except ImportError:
                return None
            self._png = sweep_png(self)
        return self._png

    def to_html(self) -> str:
        import base64

        keys = list(self.params) or sorted({k for p in self.points for k in p.config})
        rate = "TFLOP/s" if any(p.tflops for p in self.points) else "GB/s" if any(p.gbps for p in self.points) else None
        cols = keys + ["median", "p20", "p80"] + ([rate] if rate else [])
        if self.baseline_name:
            cols += ["baseline", "ratio"]
        cols.append("status")
        best = self.best()
        rows = []
        for p in self.points:
            bold = p is best
            cells = [escape(str(p.config.get(k, ""))) for k in keys]
            if p.ok:
                t = p.timing
                cells += [f"<b>{_fmt_ms(t.median_ms)}</b>" if bold else _fmt_ms(t.median_ms), _fmt_ms(t.p20),
                          _fmt_ms(t.p80)]
            else:
                cells += ["-", "-", "-"]
            if rate:
                cells.append(_fmt_rate(p.tflops if rate == "TFLOP/s" else p.gbps))
            if self.baseline_name:
                cells.append(_fmt_ms(p.baseline_timing.median_ms) if p.baseline_timing else
                             (f'<span style="{_FAIL}">{escape(_first_line(p.baseline_error))}</span>'
                              if p.baseline_error else "-"))
                cells.append(f"{p.ratio:.2f}x" if p.ratio is not None else "-")
            if p.ok:
                cells.append("best" if bold else "ok")
            else:
                cells.append(f'<span style="{_FAIL}" title="{escape(p.error or "")}">failed at {escape(p.stage or "")}'
                             f": {escape(_first_line(p.error or ''))}</span>")
            rows.append("<tr>" + "".join(f'<td style="{_TD}">{c}</td>' for c in cells) + "</tr>")
        head = "".join(f'<th style="{_TH}">{escape(c)}</th>' for c in cols)
        meta = [f"{len(self.points)} configs", "the GPU, " + self.device_name if self.gpu else
                "the CPU interpreter, host clock"]
        if self.date:
            meta.append(self.date)
        if self.results:
            meta.append(f"results in {self.results}")
        notes = [] if self.gpu else [_CPU_NOTE + "."]
        png = self.png()
        img = (f'<div><img alt="latency and throughput of {escape(self.name)}" style="max-width:100%" '
               f'src="data:image/png;base64,{base64.b64encode(png).decode()}"/></div>' if png else "")
        return (f'<div style="{_BOX}"><div><b>{escape(self.name)}</b> sweep <span style="{_MUTED}">'
                f'({escape("; ".join(meta))})</span></div>{_html_notes(notes)}{img}'
                f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')

    def _repr_mimebundle_(self, include=None, exclude=None):
        import base64

        bundle = {"text/plain": self.to_text(), "text/html": self.to_html()}
        png = self.png()
        if png:
            bundle["image/png"] = base64.b64encode(png).decode()
        return _filter(bundle, include, exclude)

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.to_text())


class _Progress:
    """An ipywidgets bar in a Jupyter kernel; a printed line per configuration elsewhere; or nothing."""

    def __init__(self, mode, total: int, name: str):
        if mode == "auto":
            mode = "bar" if _in_jupyter() else "print"
        self.mode, self.total, self.done = (mode or None), total, 0
        self.bar = None
        if self.mode == "bar":
            try:
                import ipywidgets as widgets
                from IPython.display import display
            except ImportError:
                self.mode = "print"
            else:
                self.bar = widgets.IntProgress(value=0, min=0, max=max(total, 1), description=name[:16])
                self.label = widgets.Label(value=f"0/{total}")
                self.box = widgets.HBox([self.bar, self.label])
                display(self.box)
        elif self.mode not in (None, "print"):
            raise ValueError(f"progress must be 'auto', 'bar', 'print' or None; got {mode!r}")

    def update(self, point: SweepPoint) -> None:
        self.done += 1
        if point.ok:
            status = _fmt_ms(point.timing.median_ms)
            if point.tflops:
                status += f", {_fmt_rate(point.tflops)} TFLOP/s"
            elif point.gbps:
                status += f", {_fmt_rate(point.gbps)} GB/s"
            if point.ratio is not None:
                status += f", {point.ratio:.2f}x the baseline"
        else:
            status = f"failed at {point.stage}: {_first_line(point.error or '')}"
        if self.mode == "print":
            print(f"[{self.done}/{self.total}] {_label(point.config)}: {status}", flush=True)
        elif self.bar is not None:
            self.bar.value = self.done
            self.label.value = f"{self.done}/{self.total} {_label(point.config)}: {status}"

    def close(self, failed: int) -> None:
        if self.bar is not None:
            self.bar.bar_style = "warning" if failed else "success"
            self.label.value = f"{self.done}/{self.total} done" + (f", {failed} failed" if failed else "")


def _in_jupyter() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def parse_sweep(text: str, namespace: dict | None = None) -> dict[str, list]:
    """`"block_M=64,128 block_N=64,128"` -> {"block_M": [64, 128], "block_N": [64, 128]}.

    Values are Python expressions (evaluated in `namespace`); a name with one value is swept over that one value.
    """
    params: dict[str, list] = {}
    for item in text.split():
        name, sep, values = item.partition("=")
        if not sep or not name.isidentifier() or not values:
            raise ValueError(f"--sweep takes NAME=V1,V2,... items separated by spaces, such as "
                             f"\"block_M=64,128 block_N=64,128\"; got {item!r}")
        try:
            evaluated = eval(f"({values},)", dict(namespace or {}))
        except Exception as err:  # noqa: BLE001
            raise ValueError(f"--sweep {item!r}: {values!r} is not a comma-separated list of Python values "
                             f"({type(err).__name__}: {err})") from None
        params[name] = list(evaluated)
    if not params:
        raise ValueError("--sweep needs at least one NAME=V1,V2,... item")
    return params


def _compile_time_names(kernel) -> set[str]:
    declared = getattr(getattr(kernel, "signature", None), "compile_time", None)
    if declared is not None:
        return {getattr(p, "name", p) for p in declared}
    return set()


def _normalize_args(made) -> tuple[tuple, dict]:
    if isinstance(made, dict):
        return (), dict(made)
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], (tuple, list)) and isinstance(made[1], dict):
        return tuple(made[0]), dict(made[1])
    if isinstance(made, (tuple, list)):
        return tuple(made), {}
    return (made,), {}


def sweep(kernel, params: dict[str, Iterable], make_args: Callable | dict | None = None, *,
          args: tuple | None = None, kwargs: dict | None = None, flops: float | Callable | None = None,
          bytes: float | Callable | None = None, baseline: Callable | None = None,
          baseline_name: str | None = None, results: str | os.PathLike | None = None, progress: str | None = "auto", backend: str | None = None,
          device: str | None = None, compile: bool | None = None, x: str | None = None,
          name: str | None = None, warmup_ms: float = 10.0, rep_ms: float = 50.0, flush_l2: bool = True) -> SweepView:
    """Time `kernel` under every combination of `params` (name -> list of values) and return a `SweepView`.

    Names that are compile-time parameters of the kernel (`block_M`) are passed to each call; the others are for
    the inputs: consts of the kernel (`M`, `N`, `K`) or keys your `make_args` reads. Inputs, per configuration:

    - `make_args=callable(config) -> arguments` (a tuple, a dict of keywords, or `(args, kwargs)`);
    - `args=(A, B, C)`: the same tensors for every configuration (sweep compile-time parameters only);
    - neither (or `make_args={"K": 256}`, fixed values): random tensors shaped by the kernel's annotations
      (`make_inputs`), on `device` (default: "cuda" when torch sees a GPU).

    `flops` / `bytes`: numbers or functions of the config (default bytes: tensor arguments and outputs, once each).
    `baseline`: timed on each configuration's inputs (`lambda A, B, C: torch.matmul(A, B)`, or zero-argument).
    `results`: a JSON file rewritten after every configuration. `progress`: "auto" (a widget bar in a Jupyter
    kernel, else a printed line per configuration), "bar", "print" or None. `compile`: compile each configuration
    before running it, so compile errors and out-of-resources are recorded as such (default: on the GPU).
    `x`: the parameter on the plot's x axis (default: the one that varies, else configuration labels).
    A configuration that raises is recorded with the stage and message, and the sweep goes on.
    """
    from tile_nb.bench import do_bench
    from tile_nb.bench import sweep as run_sweep

    params = {k: list(v) for k, v in params.items()}
    compile_names = _compile_time_names(kernel)
    fixed_values = dict(make_args) if isinstance(make_args, dict) else {}
    fixed_kwargs = dict(kwargs or {})
    maker = make_args if callable(make_args) else None
    if device is None:
        device = _device_of(args or ()) if args else None
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = device.startswith("cuda") and backend != "cpu"
    do_compile = gpu if compile is None else compile
    configs = [dict(zip(params, combo)) for combo in itertools.product(*params.values())]
    name = name or getattr(kernel, "__name__", "kernel")
    view = SweepView(name, params, gpu=gpu, device_name=_device_name(gpu),
                     baseline_name=(baseline_name or _callable_name(baseline)) if baseline is not None else None,
                     results=str(results) if results is not None else None, x=x,
                     date=datetime.datetime.now().isoformat(timespec="seconds"))
    inputs_cache: dict = {}
    state: dict = {}

    def inputs_for(config: dict) -> tuple[tuple, dict, tuple]:
        values = {**fixed_values, **config}
        compile_part = {k: v for k, v in values.items() if k in compile_names}
        other = {k: v for k, v in values.items() if k not in compile_names}
        key = tuple(sorted((k, repr(v)) for k, v in other.items()))
        if maker is not None:
            if key not in inputs_cache:
                inputs_cache[key] = _normalize_args(maker(dict(values)))
            a, kw = inputs_cache[key]
            return a, {**fixed_kwargs, **kw, **compile_part}, key
        if args is not None:
            return tuple(args), {**fixed_kwargs, **compile_part}, key
        if key not in inputs_cache:
            inputs_cache[key] = make_inputs(kernel, device=device, **values)
        # consts go with the call too: a const no tensor dim carries needs them, and they match the tensors
        return inputs_cache[key], {**fixed_kwargs, **other, **compile_part}, key

    def make(config: dict) -> Callable[[], object]:
        state.update(stage="inputs", config=config)
        a, kw, key = inputs_for(config)
        state.update(args=a, key=key)
        state["stage"] = "compile" if do_compile else "elaborate"
        if do_compile:
            kernel.compile(*a, **kw)
        elif hasattr(kernel, "specialize"):
            kernel.specialize(*a, **kw)
        state["stage"] = "run"
        call_kw = {**kw, "backend": backend} if backend is not None else kw
        out = kernel(*a, **call_kw)
        _sync(gpu)
        state["out_bytes"] = _nbytes([out])
        state["stage"] = "time"
        return lambda: kernel(*a, **call_kw)

    def work(amount, config: dict) -> float | None:
        return amount(config) if callable(amount) else amount

    def nbytes_of(config: dict) -> float | None:
        if bytes is not None:
            return work(bytes, config)
        return _nbytes(state.get("args", ())) + state.get("out_bytes", 0)

    bar = _Progress(progress, len(configs), name)
    baseline_cache: dict = {}

    def on_row(row) -> None:
        point = SweepPoint(config=row.config, timing=row.timing, tflops=row.tflops, gbps=row.gbps)
        if row.error is not None:
            point.error, point.stage = row.error, state.get("stage")
        elif baseline is not None:
            key = state.get("key")
            if key not in baseline_cache:
                try:
                    fn = _call_baseline(baseline, state.get("args", ()))
                    baseline_cache[key] = (do_bench(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_l2,
                                                    device="cuda" if device.startswith("cuda") else "cpu"), None)
                except Exception as err:  # noqa: BLE001 - a failing baseline is shown, not raised
                    baseline_cache[key] = (None, f"{type(err).__name__}: {err}")
            point.baseline_timing, point.baseline_error = baseline_cache[key]
        view.points.append(point)
        view._png = None
        if results is not None:
            view.save(results)
        bar.update(point)

    def timed(fn, **kw):
        return do_bench(fn, device="cuda" if gpu else "cpu", **kw)

    run_sweep(make, configs, flops=(lambda c: work(flops, c)) if flops is not None else None, nbytes=nbytes_of,
              bench=timed, on_row=on_row, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_l2)
    bar.close(len(view.failures))
    return view

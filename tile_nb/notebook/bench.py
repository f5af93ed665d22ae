"""Views of benchmark results: static HTML tables (and PNG plots) of
`BenchResult`, `SweepResult`, `TuneResult`.

The results themselves, and the timing, sweeping and tuning that make them, are `tile_nb.bench`; this module
only draws them. `tile_nb.notebook.hooks` registers these functions with IPython's display formatters, so a
result that is a cell's value shows as a table; `view(result)` wraps one for any front end that calls
`_repr_mimebundle_`. `text/plain` is the result's own deterministic text (what nbval compares); the HTML holds
the numbers and renders on GitHub, nbconvert and Sphinx (inline styles only, no script).
"""
from __future__ import annotations

import base64
from typing import Any

from tile_nb.bench.results import COMPILE_ONLY_NOTE, CPU_NOTE, first_line, fmt_ms, fmt_rate
from tile_nb.notebook.bundle import select
from tile_nb.notebook.highlight import escape

__all__ = ["ResultView", "bench_html", "html_of", "png_of", "sweep_html", "tune_html", "view"]

_BOX = ("font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;font-size:13px;line-height:1.45;"
        "color:#1f2328;max-width:100%")
_TABLE = "border-collapse:collapse;border:1px solid #d0d7de;margin:4px 0"
_TH = "text-align:left;padding:3px 8px;border-bottom:1px solid #d0d7de;background:#f6f8fa;font-weight:600"
_TD = "text-align:left;padding:2px 8px;border:none;background:#ffffff;font-variant-numeric:tabular-nums"
_NOTE = "margin:4px 0;padding:4px 8px;border-left:3px solid #9a6700;background:#fff8c5"
_MUTED = "color:#57606a"
_FAIL = "color:#cf222e"
_PRUNED = "color:#9a6700"


def _notes(notes: list[str]) -> str:
    return "".join(f'<div style="{_NOTE}">{escape(n)}</div>' for n in notes)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f'<th style="{_TH}">{escape(h)}</th>' for h in headers)
    body = "".join("<tr>" + "".join(f'<td style="{_TD}">{c}</td>' for c in row) + "</tr>" for row in rows)
    return f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _img(png: bytes | None, alt: str) -> str:
    if not png:
        return ""
    return (f'<div><img alt="{escape(alt)}" style="max-width:100%" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode()}"/></div>')


def _status_html(p, best) -> str:
    if p is best:
        return "<b>best</b>"
    if p.error is not None:
        return (f'<span style="{_FAIL}" title="{escape(p.error)}">failed at {escape(p.stage or "")}: '
                f"{escape(first_line(p.error))}</span>")
    if p.pruned is not None:
        return f'<span style="{_PRUNED}">pruned: {escape(p.pruned)}</span>'
    return escape(p.status)


# ----------------------------------------------------------------------------------------------------- bench
def bench_html(r) -> str:
    t, b = r.timing, r.baseline_timing
    headers = ["", r.name] + ([r.baseline_name or "baseline"] if b is not None else [])

    def row(label: str, mine: str, theirs: str | None = None) -> list[str]:
        return [label, mine] + ([theirs or "-"] if b is not None else [])

    rows = [
        row("median", f"<b>{fmt_ms(t.median_ms)}</b>", b and f"<b>{fmt_ms(b.median_ms)}</b>"),
        row("p20 / p80", f"{fmt_ms(t.p20)} / {fmt_ms(t.p80)}", b and f"{fmt_ms(b.p20)} / {fmt_ms(b.p80)}"),
        row(
            "min / max",
            f"{fmt_ms(t.min_ms)} / {fmt_ms(t.max_ms)}",
            b and f"{fmt_ms(b.min_ms)} / {fmt_ms(b.max_ms)}",
        ),
        row("spread (p80-p20)/median", f"{t.spread:.1%}", b and f"{b.spread:.1%}"),
        row("runs", str(t.n), b and str(b.n)),
    ]
    if r.flops:
        rows.append(row("TFLOP/s", fmt_rate(r.tflops), b and fmt_rate(r.flops / (b.median_ms * 1e-3) / 1e12)))
    if r.nbytes:
        rows.append(row("GB/s", fmt_rate(r.gbps), b and fmt_rate(r.nbytes / (b.median_ms * 1e-3) / 1e9)))
    if r.ratio is not None:
        word = "faster" if r.ratio >= 1 else "slower"
        rows.append(row("ratio", f"<b>{r.ratio:.2f}x</b> ({word} than the baseline)", ""))
    notes = []
    if not r.gpu:
        notes.append(CPU_NOTE + ".")
    elif t.short:
        notes.append("under 10 us: the figure is dominated by launch overhead and event resolution.")
    notes += r.notes
    meta = [f"{r.where}, {r.device_name}", f"arguments: {r.arguments}"]
    if r.first_call_s is not None:
        meta.append(f"first call (elaboration and compilation included): {r.first_call_s:.3g} s")
    if r.nbytes:
        meta.append(
            f"{int(r.nbytes):,} bytes" + (" (tensor arguments and outputs)" if r.bytes_from_arguments else "")
        )
    if r.flops:
        meta.append(f"{int(r.flops):,} FLOPs")
    return (f'<div style="{_BOX}"><div><b>{escape(r.name)}</b> benchmark '
            f'<span style="{_MUTED}">({escape("; ".join(meta))})</span></div>{_notes(notes)}'
            f"{_table(headers, [[c if i else escape(c) for i, c in enumerate(x)] for x in rows])}</div>")


# ----------------------------------------------------------------------------------------------------- sweep
def sweep_html(r) -> str:
    keys = r.keys()
    rate = r.rate_name()
    headers = keys + ["median", "p20", "p80"] + ([rate] if rate else [])
    if r.baseline_name:
        headers += ["baseline", "ratio"]
    headers.append("status")
    best = r.best()
    rows = []
    for p in r.points:
        cells = [escape(str(p.config.get(k, ""))) for k in keys]
        if p.ok:
            t = p.timing
            cells += [f"<b>{fmt_ms(t.median_ms)}</b>" if p is best else fmt_ms(t.median_ms), fmt_ms(t.p20),
                      fmt_ms(t.p80)]
        else:
            cells += ["-", "-", "-"]
        if rate:
            cells.append(fmt_rate(p.tflops if rate == "TFLOP/s" else p.gbps))
        if r.baseline_name:
            cells.append(fmt_ms(p.baseline_timing.median_ms) if p.baseline_timing else
                         (f'<span style="{_FAIL}">{escape(first_line(p.baseline_error))}</span>'
                          if p.baseline_error else "-"))
            cells.append(f"{p.ratio:.2f}x" if p.ratio is not None else "-")
        cells.append("best" if p is best else ("ok" if p.ok else _status_html(p, best)))
        rows.append(cells)
    meta = [
        f"{len(r.points)} configs",
        "the GPU, " + r.device_name if r.gpu else "the CPU interpreter, host clock",
    ]
    if r.date:
        meta.append(r.date)
    if r.results:
        meta.append(f"results in {r.results}")
    notes = [] if r.gpu else [CPU_NOTE + "."]
    return (f'<div style="{_BOX}"><div><b>{escape(r.name)}</b> sweep <span style="{_MUTED}">'
            f'({escape("; ".join(meta))})</span></div>{_notes(notes)}'
            f'{_img(png_of(r), f"latency and throughput of {r.name}")}{_table(headers, rows)}</div>')


# ------------------------------------------------------------------------------------------------------ tune
def tune_html(r, *, plot: bool = True) -> str:
    """The search: a line of where the time went, notes, the plot, and every configuration sorted by time
    (then the compiled-only, pruned and failed ones)."""
    keys = r.keys()
    rate = r.rate_name()
    timed = not r.compile_only
    headers = keys + (["median"] + ([rate] if rate else []) if timed else []) + ["regs", "smem", "spills",
                                                                                  "compile", "status"]
    best = r.best()
    order = sorted(r.points, key=lambda p: (p.ranking_ms is None, p.ranking_ms or 0.0,
                                            p.error is not None, p.pruned is not None))
    rows = []
    for p in order:
        cells = [escape(str(p.config.get(k, ""))) for k in keys]
        if timed:
            ms = fmt_ms(p.ranking_ms) if p.ok else "-"
            cells.append(f"<b>{ms}</b>" if p is best else ms)
            if rate:
                cells.append(fmt_rate(p.tflops if rate == "TFLOP/s" else p.gbps) if p.ok else "-")
        cells += r.resource_cells(p)
        cells.append(f"{p.compile_s:.2f} s" if p.compile_s is not None else "-")
        cells.append(_status_html(p, best))
        rows.append(cells)
    where = {"gpu": f"the GPU, {r.device_name}", "compile-only": f"compile-only ({r.device_name})",
             "interpreter": "the CPU interpreter on Ray actors"}.get(r.mode, r.mode)
    counts = (
        f"{sum(p.ok for p in r.points)} timed" if timed else f"{sum(p.compiled for p in r.points)} compiled"
    )
    meta = [where, f"{len(r.points)} configs: {counts}, {len(r.pruned)} pruned, {len(r.failures)} failed"]
    if r.key:
        meta.append(" ".join(f"{k}={v}" for k, v in r.key.items()))
    if r.date:
        meta.append(r.date)
    notes = []
    if r.compile_only:
        notes.append(COMPILE_ONLY_NOTE + ".")
    if r.mode == "interpreter":
        notes.append(CPU_NOTE + ".")
    if r.from_cache:
        notes.append(
            "Read from the tuning store: this search ran before (same kernel source, shapes, device and "
            "versions); pass force=True to search again."
        )
    notes += r.notes
    timing = f'<div style="{_MUTED}">{escape(r.timing_line())}</div>' if r.timings else ""
    best_line = (f"<div>best: <b>{escape(' '.join(f'{k}={v}' for k, v in best.config.items()))}</b>"
                 f"{' (' + fmt_rate(best.tflops) + ' TFLOP/s)' if best.tflops else ''}</div>" if best else "")
    img = _img(png_of(r), f"throughput of each configuration of {r.name}") if plot else ""
    return (f'<div style="{_BOX}"><div><b>{escape(r.name)}</b> tuning <span style="{_MUTED}">'
            f'({escape("; ".join(meta))})</span></div>{best_line}{timing}{_notes(notes)}{img}'
            f"{_table(headers, rows)}</div>")


# ------------------------------------------------------------------------------------------------- dispatch
def html_of(result) -> str:
    kind = getattr(result, "kind", None)
    if kind == "tune":
        return tune_html(result)
    if kind == "sweep":
        return sweep_html(result)
    return bench_html(result)


def png_of(result) -> bytes | None:
    """The plot of a sweep or tuning result as PNG bytes (None without a timed
    point, or without matplotlib)."""
    if getattr(result, "kind", None) not in ("sweep", "tune") or not any(p.ok for p in result.points):
        return None
    try:
        from tile_nb.notebook.plots import sweep_png, tune_png
    except ImportError:
        return None
    return tune_png(result) if result.kind == "tune" else sweep_png(result)


class ResultView:
    """A result with `_repr_mimebundle_`: text/plain (deterministic), text/html, and image/png for plots."""

    def __init__(self, result: Any):
        self.result = result

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": self.result.to_text(), "text/html": html_of(self.result)}
        png = png_of(self.result)
        if png:
            bundle["image/png"] = base64.b64encode(png).decode()
        return select(bundle, include, exclude)

    def __repr__(self) -> str:
        return self.result.to_text()


def view(result) -> ResultView:
    """`view(gemm.sweep(...))`: the result as a display object (what a notebook shows for it)."""
    return ResultView(result)

"""Plots of benchmark results: latency and throughput against the swept parameter, as a small PNG.

matplotlib is imported here only, and through its object API (`Figure` + the Agg canvas), so making a plot
never touches pyplot's global state or the notebook's backend. Figures are sized to stay well under 60 KB.
"""
from __future__ import annotations

import io
from typing import Any

__all__ = ["sweep_png", "tune_png"]

_KERNEL = "#0969da"
_BASELINE = "#8c959f"


def _numeric(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _series(view, x: str | None) -> tuple[str | None, list[tuple[str, list]]]:
    """(x parameter or None for labels, [(series label, points)]): one series per
    value of the other parameters."""
    varying = [k for k, v in view.params.items() if len(v) > 1]
    if x is None and len(varying) == 1:
        x = varying[0]
    if x is None or x not in view.params:
        return None, [("", list(view.points))]
    groups: dict[str, list] = {}
    for p in view.points:
        rest = " ".join(f"{k}={v}" for k, v in p.config.items() if k != x and k in varying)
        groups.setdefault(rest, []).append(p)
    return x, list(groups.items())


def sweep_png(view, x: str | None = None) -> bytes:
    """Latency (median, p20-p80 band) and throughput of a `SweepView` against its swept parameter.

    The baseline, when the sweep has one, is drawn in grey. Failed configurations are marked with an x on the
    latency axis' floor, so they are visible in the plot too.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x = x or view.x
    x_name, series = _series(view, x)
    rate = (
        "TFLOP/s"
        if any(p.tflops for p in view.points)
        else "GB/s"
        if any(p.gbps for p in view.points)
        else None
    )
    fig = Figure(figsize=(7.5, 2.7), dpi=72)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2 if rate else 1, squeeze=False)[0]
    lat, thr = axes[0], (axes[1] if rate else None)

    labels: list[str] = []
    if x_name is None:
        labels = [" ".join(str(v) for v in p.config.values()) for p in view.points]

    def xs(points) -> list[Any]:
        if x_name is None:
            return [labels.index(" ".join(str(v) for v in p.config.values())) for p in points]
        return [p.config[x_name] for p in points]

    numeric_x = x_name is not None and _numeric(view.params[x_name])
    drawn_baselines: set = set()
    for label, points in series:
        good = [p for p in points if p.ok]
        suffix = f" {label}" if label else ""
        if good:
            gx = xs(good)
            med = [p.timing.median_ms for p in good]
            lat.plot(
                gx, med, "o-", color=None if len(series) > 1 else _KERNEL, label=view.name + suffix, ms=4
            )
            lat.fill_between(gx, [p.timing.p20 for p in good], [p.timing.p80 for p in good], alpha=0.2)
            if thr is not None:
                values = [(p.tflops if rate == "TFLOP/s" else p.gbps) or 0 for p in good]
                thr.plot(
                    gx,
                    values,
                    "o-",
                    color=None if len(series) > 1 else _KERNEL,
                    label=view.name + suffix,
                    ms=4,
                )
        based = [p for p in good if p.baseline_timing is not None]
        drawn = tuple((x_, p.baseline_timing.median_ms) for x_, p in zip(xs(based), based, strict=True))
        if based and drawn not in drawn_baselines:  # a baseline independent of the series is drawn once
            drawn_baselines.add(drawn)
            suffix = suffix if len(drawn_baselines) > 1 or len(series) == 1 else ""
            bx = xs(based)
            lat.plot(bx, [p.baseline_timing.median_ms for p in based], "s--", color=_BASELINE, ms=3,
                     label=(view.baseline_name or "baseline")[:30] + suffix)
            if thr is not None:
                # Same work in the baseline's time: its rate is the kernel's
                # scaled by kernel ms / baseline ms.
                rates = [((p.tflops if rate == "TFLOP/s" else p.gbps) or 0) * p.timing.median_ms
                         / p.baseline_timing.median_ms for p in based]
                thr.plot(
                    bx,
                    rates,
                    "s--",
                    color=_BASELINE,
                    ms=3,
                    label=(view.baseline_name or "baseline")[:30] + suffix,
                )
        failed = [p for p in points if not p.ok]
        if failed:
            lat.plot(xs(failed), [0] * len(failed), "x", color="#cf222e", ms=7,
                     label="failed" if label == series[0][0] else None)

    lat.set_ylabel("latency (ms)")
    lat.set_ylim(bottom=0)
    lat.set_title("latency (median, p20-p80)" + ("" if view.gpu else ", CPU interpreter"), fontsize=9)
    for ax in axes:
        if x_name is None:
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, rotation=30 if len(labels) > 4 else 0, fontsize=7, ha="right"
                               if len(labels) > 4 else "center")
            ax.set_xlabel(" ".join(view.params), fontsize=8)
        else:
            if numeric_x and all(v > 0 for v in view.params[x_name]) and max(view.params[x_name]) / min(
                    view.params[x_name]) >= 8:
                ax.set_xscale("log", base=2)
            if numeric_x:
                ax.set_xticks(view.params[x_name])
                ax.set_xticklabels([str(v) for v in view.params[x_name]], fontsize=7)
            ax.set_xlabel(x_name, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    if thr is not None:
        thr.set_ylabel(rate)
        thr.set_ylim(bottom=0)
        thr.set_title(f"throughput ({rate})", fontsize=9)
    lat.legend(fontsize=7, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)
    return _small_png(buf.getvalue())


def _small_png(png: bytes) -> bytes:
    """The same image with a 64-colour palette: about a third of the size (notebooks
    store it twice: HTML and PNG)."""
    try:
        from PIL import Image
    except ImportError:  # Pillow comes with matplotlib; without it, the full-colour PNG
        return png
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=64)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue() if out.tell() < len(png) else png


def tune_png(result) -> bytes:
    """Throughput (else latency) of every timed configuration of a `TuneResult`, fastest first; the chosen one
    in the accent colour, pruned and failed ones counted in the title."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    timed = sorted((p for p in result.points if p.ok), key=lambda p: p.ranking_ms)
    rate = result.rate_name()
    varying = [k for k, v in result.params.items() if len(v) > 1] or list(result.params)
    labels = ["/".join(str(p.config.get(k, "")) for k in varying) for p in timed]
    values = [((p.tflops if rate == "TFLOP/s" else p.gbps) or 0) if rate else p.ranking_ms for p in timed]
    best = result.best()
    width = min(11.0, max(5.0, 0.22 * len(timed) + 2.0))
    fig = Figure(figsize=(width, 2.9), dpi=72)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    colors = [_KERNEL if p is best else "#8c959f" for p in timed]
    ax.bar(range(len(timed)), values, color=colors)
    ax.set_xticks(range(len(timed)))
    ax.set_xticklabels(labels, rotation=60 if len(timed) > 6 else 0, fontsize=6, ha="right" if len(timed) > 6
                       else "center")
    ax.set_xlabel("/".join(varying), fontsize=8)
    ax.set_ylabel(rate or "median latency (ms)", fontsize=8)
    dropped = len(result.points) - len(timed)
    ax.set_title(f"{result.name}: {len(timed)} timed" + (f", {dropped} pruned or failed" if dropped else "")
                 + ("" if result.gpu else " (CPU interpreter)"), fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)
    return _small_png(buf.getvalue())

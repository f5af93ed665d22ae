"""Progress of sweeps and tuning in a notebook: an ipywidgets bar, and the result's table (with its plot) that
fills in as configurations arrive.

`tile_nb.bench.progress.make_reporter("auto", ...)` returns this reporter inside a Jupyter kernel once the
notebook layer is connected (`%load_ext tile_nb`, or importing tile_nb inside IPython). The table is redrawn
after every configuration; the plot at most once a second (drawing it takes tens of milliseconds). The cell's
final value is the result itself (its table as HTML, its plot as PNG), so nbval compares that.

The bar is displayed as one bundle with the widget view and static forms (`text/plain`, `text/html`), and
under a display id: on `close` the static forms are replaced by the final state ("tuned 8 of 8
configurations in 3.4 s, 2 pruned"), so a stored notebook read where widgets are not drawn (GitHub,
nbconvert without widget state, an untrusted notebook in JupyterLab) shows that line instead of the widget's
`VBox(children=(...` repr. Renderers that draw widgets show the bar (from the kernel, or from the widget
state saved in the notebook). docs/notebooks.md.
"""
from __future__ import annotations

import time

from tile_nb.bench.progress import point_status
from tile_nb.bench.results import label

__all__ = ["NotebookReporter", "static_bundle"]


def static_bundle(widget, text: str, html: str | None = None) -> dict:
    """`widget`'s display bundle with `text` as its `text/plain` (in place of ipywidgets' constructor repr)
    and an HTML form (`html`, or `text` escaped): what renderers without the widget's state show."""
    from html import escape

    data = dict(widget._repr_mimebundle_())
    data["text/plain"] = text
    data["text/html"] = html if html is not None else f"<pre>{escape(text)}</pre>"
    return data


class NotebookReporter:
    def __init__(self, total: int, name: str = ""):
        import ipywidgets as widgets
        from IPython.display import display

        self.name = name or "tile_nb"
        self.total, self.done, self.phase = total, 0, ""
        self.started = time.monotonic()
        self.bar = widgets.IntProgress(
            value=0, min=0, max=max(total, 1), description=(name or "tile_nb")[:16]
        )
        self.label = widgets.Label(value=f"0/{total}")
        self.table = widgets.HTML(value="")
        self.box = widgets.VBox([widgets.HBox([self.bar, self.label]), self.table])
        self._plotted_at = 0.0
        self.static_text = (
            f"{self.name}: {total} configuration{'s' if total != 1 else ''} to run (not finished)"
        )
        self.handle = display(self.bundle(), raw=True, display_id=True)

    def bundle(self) -> dict:
        """The widget view with its current static form (the final line once closed)."""
        return static_bundle(self.box, self.static_text)

    def begin(self, phase: str, total: int) -> None:
        self.phase, self.total, self.done = phase, total, 0
        self.bar.max, self.bar.value = max(total, 1), 0
        self.bar.description = {"compile": "compiling", "time": "timing"}.get(phase, phase)[:16]

    def update(self, result, point, phase: str = "time") -> None:
        self.done += 1
        self.bar.value = self.done
        self.label.value = f"{self.done}/{self.total} {label(point.config)}: {point_status(point, phase)}"[
            :160
        ]
        self._draw(result, plot=time.monotonic() - self._plotted_at > 1.0)

    def _draw(self, result, plot: bool) -> None:
        from tile_nb.notebook.bench import sweep_html, tune_html

        if getattr(result, "kind", None) == "tune":
            self.table.value = tune_html(result, plot=plot)
        else:
            self.table.value = sweep_html(result) if plot else self.table.value
        if plot:
            self._plotted_at = time.monotonic()

    def close(self, result) -> None:
        failed = len(result.failures)
        self.bar.bar_style = "warning" if failed else "success"
        self.label.value = f"{self.done}/{self.total} done" + (f", {failed} failed" if failed else "")
        self.table.value = ""   # the result itself is the cell's output: no second copy of the table
        self.static_text = self.final_text(result)
        if self.handle is not None:
            self.handle.update(self.bundle(), raw=True)

    def final_text(self, result, elapsed_s: float | None = None) -> str:
        """`tuned_gemm: tuned 8 of 8 configurations in 3.4 s, 2 pruned, 1 failed`."""
        points = list(getattr(result, "points", ()))
        total = max(len(points), self.total)
        verb = "tuned" if getattr(result, "kind", None) == "tune" else "swept"
        finished = sum(
            1
            for p in points
            if p.error is not None or p.pruned is not None or p.timing is not None or p.resources is not None
        )
        elapsed = time.monotonic() - self.started if elapsed_s is None else elapsed_s
        plural = "s" if total != 1 else ""
        text = f"{self.name}: {verb} {finished} of {total} configuration{plural} in {elapsed:.1f} s"
        pruned = sum(1 for p in points if p.pruned is not None)
        failed = len(getattr(result, "failures", ()))
        return text + (f", {pruned} pruned" if pruned else "") + (f", {failed} failed" if failed else "")

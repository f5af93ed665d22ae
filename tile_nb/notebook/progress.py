"""Progress of sweeps and tuning in a notebook: an ipywidgets bar, and the result's table (with its plot) that
fills in as configurations arrive.

`tile_nb.bench.progress.make_reporter("auto", ...)` returns this reporter inside a Jupyter kernel once the notebook
layer is connected (`%load_ext tile_nb`, or importing tile_nb inside IPython). The table is redrawn after every
configuration; the plot at most once a second (drawing it takes tens of milliseconds). The widget's own text is
stable (`IntProgress` and `HTML` reprs), and the cell's final value is the result itself, so nbval compares that.
"""
from __future__ import annotations

import time

from tile_nb.bench.progress import point_status
from tile_nb.bench.results import label

__all__ = ["NotebookReporter"]


class NotebookReporter:
    def __init__(self, total: int, name: str = ""):
        import ipywidgets as widgets
        from IPython.display import display

        self.total, self.done, self.phase = total, 0, ""
        self.bar = widgets.IntProgress(value=0, min=0, max=max(total, 1), description=(name or "tile_nb")[:16])
        self.label = widgets.Label(value=f"0/{total}")
        self.table = widgets.HTML(value="")
        self.box = widgets.VBox([widgets.HBox([self.bar, self.label]), self.table])
        self._plotted_at = 0.0
        display(self.box)

    def begin(self, phase: str, total: int) -> None:
        self.phase, self.total, self.done = phase, total, 0
        self.bar.max, self.bar.value = max(total, 1), 0
        self.bar.description = {"compile": "compiling", "time": "timing"}.get(phase, phase)[:16]

    def update(self, result, point, phase: str = "time") -> None:
        self.done += 1
        self.bar.value = self.done
        self.label.value = f"{self.done}/{self.total} {label(point.config)}: {point_status(point, phase)}"[:160]
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

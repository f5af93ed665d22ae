"""Connect tile_nb's results to a running IPython: display formatters and the progress reporter.

`connect(shell)` registers, by type name (so nothing is imported until a result is shown):
- text/html and image/png formatters for `tile_nb.bench.results.BenchResult`, `SweepResult` and `TuneResult`;
- the "notebook" progress reporter of `tile_nb.bench.progress` (an ipywidgets bar with a table and plot that
  fill in), which "auto" progress picks inside a Jupyter kernel.
It runs on `%load_ext tile_nb`, and when `tile_nb` is imported inside IPython.
"""
from __future__ import annotations

__all__ = ["connect"]

_RESULTS = "tile_nb.bench.results"


def _html(result) -> str:
    from tile_nb.notebook.bench import html_of

    return html_of(result)


def _png(result):
    from tile_nb.notebook.bench import png_of

    return png_of(result)


def _reporter(**kwargs):
    from tile_nb.notebook.progress import NotebookReporter

    return NotebookReporter(**kwargs)


def connect(shell) -> None:
    from tile_nb.bench.progress import register_reporter

    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if formatters:
        for name in ("BenchResult", "SweepResult", "TuneResult"):
            formatters["text/html"].for_type_by_name(_RESULTS, name, _html)
            if name != "BenchResult":
                formatters["image/png"].for_type_by_name(_RESULTS, name, _png)
    register_reporter("notebook", _reporter)

"""`explore`: sliders for a kernel's consts and compile-time parameters, re-rendering its view on each change.

    from tile_nb.notebook.widgets import explore
    explore(gemm, M=[256, 512, 1024], N=[256, 512], K=[128, 256], block_M=[64, 128])

Each keyword with a list (or range) of values becomes a selection slider; a single value is passed as is. The
view below the sliders is the `KernelView` of `kernel_view(kernel, kwargs=current values)`, so it shows the
template and the specialized IR side by side, with the lines that the current choice changes marked.
ipywidgets is imported only here, when `explore` is called.

Displayed, the explorer is one bundle: the widget view, and static forms of the current choice
(`text/plain`: the choice and the view's text; `text/html`: the choice and the view's HTML) that renderers
without the widget's state show (GitHub, nbconvert without widget state, an untrusted notebook in
JupyterLab) in place of `VBox(children=(HBox(...`. The bundle is shown under a display id, and moving a
slider updates those static forms with the new choice.
"""
from __future__ import annotations

from html import escape
from typing import Any

from tile_nb.notebook.api import kernel_view
from tile_nb.notebook.bundle import LiveBundle

__all__ = ["Explorer", "explore"]


class Explorer(LiveBundle):
    """The widget `explore` returns: `.controls` (name -> slider), `.output`,
    `.widget` (what is displayed)."""

    def __init__(self, kernel, choices: dict[str, list], fixed: dict[str, Any], **view_options):
        import ipywidgets as widgets

        self.kernel = kernel
        self.fixed = fixed
        self.view_options = view_options
        self.controls = {
            name: widgets.SelectionSlider(options=[(str(v), v) for v in values], value=values[0],
                                          description=name, continuous_update=False)
            for name, values in choices.items()}
        self.output = widgets.Output()
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.widget = widgets.VBox([widgets.HBox(list(self.controls.values())), self.output])
        self.view = None
        self.error: str | None = None  # why the current choice has no view (shown in place of it)
        self._init_display("tile-nb-explore")
        self.render()

    def values(self) -> dict[str, Any]:
        """The keyword arguments of the current choice (fixed values included)."""
        return {**self.fixed, **{name: c.value for name, c in self.controls.items()}}

    def render(self) -> None:
        """Rebuild the view for the current values; an error is shown in place of the view."""
        # The output's `outputs` are set rather than written through `with self.output:`, which sends iopub
        # messages that only a browser turns into widget state (nbval and a slider moved from code would see
        # them as the cell's own outputs).
        self.output.outputs = ()
        try:
            self.view = kernel_view(self.kernel, (), self.values(), **self.view_options)
        except Exception as err:  # noqa: BLE001 - a bad combination must not break the widget
            self.view = None
            self.error = f"{type(err).__name__}: {getattr(err, 'message', None) or err}"
            self.output.append_stdout(self.error + "\n")
        else:
            self.error = None
            self.output.append_display_data(self.view)

    def _changed(self, _change) -> None:
        self.render()
        self._refresh()

    def choice_text(self) -> str:
        """`explore(gemm): block_M=64 of [64, 128]; num_stages=2 of [2, 3, 4]` (the sliders, as text)."""
        name = getattr(self.kernel, "__name__", "kernel")
        parts = [f"{n}={c.value} of [{', '.join(label for label, _ in c.options)}]"
                 for n, c in self.controls.items()]
        return f"explore({name}): " + "; ".join(parts)

    def bundle(self) -> dict:
        """The widget view and the static forms of the current choice."""
        data = dict(self.widget._repr_mimebundle_())
        shown = self.view._repr_mimebundle_() if self.view is not None else {}
        body_text = shown.get("text/plain") or (self.error or "")
        body_html = shown.get("text/html") or f"<pre>{escape(self.error or '')}</pre>"
        data["text/plain"] = self.choice_text() + "\n" + body_text
        data["text/html"] = (f'<div><p style="font-family:monospace">{escape(self.choice_text())}</p>'
                             f"{body_html}</div>")
        return data

    def __repr__(self) -> str:
        name = getattr(self.kernel, "__name__", "kernel")
        return f"Explorer({name}: {', '.join(self.controls)})"


def explore(kernel, *, cuda: bool = False, lowered: bool = False, **choices) -> Explorer:
    """Sliders over `choices` (name -> list of values, or one value) and the
    kernel's view for the current choice.

    `cuda` / `lowered` compile every choice and add those sections (slower: one compile per new combination).
    """
    sliders = {k: list(v) for k, v in choices.items() if isinstance(v, (list, tuple, range))}
    for name, values in sliders.items():
        if not values:
            raise ValueError(f"explore(): '{name}' has no values to choose from")
    fixed = {k: v for k, v in choices.items() if k not in sliders}
    return Explorer(kernel, sliders, fixed, cuda=cuda, lowered=lowered)

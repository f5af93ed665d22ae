"""A picture of one block's memory access: `show_access(kernel, *args, block=(1, 0))`.

`tile_nb.interp.access_map` gives, per tensor, bool masks of the elements a block read and wrote; this draws
them as heat maps (one panel per tensor: not touched / read / written / both), the way triton-viz shows a
program's loads and stores. The view's `text/plain` is a summary of the same masks (counts and bounding
boxes), so a stored notebook compares it under nbval; the `image/png` is the picture.

`explore_access(kernel, *args)` is the same picture as a widget: a slider per grid dimension picks the
block, and the heat map follows. Displayed, it is one bundle of the widget view and the static forms
of the chosen block (its summary as text, its heat map as PNG), which renderers without widget state
show instead (GitHub, nbconvert).
"""
from __future__ import annotations

import io
from html import escape

import torch

from .bundle import LiveBundle

__all__ = ["AccessExplorer", "AccessView", "access_png", "explore_access", "show_access"]

_COLORS = ["#eaeef2", "#0969da", "#fb8500", "#8250df"]   # none, read, written, both
_LABELS = ["not accessed", "read", "written", "read and written"]


def _box(mask: torch.Tensor) -> str:
    """`[32:50, 0:40]`: the bounding box of the true elements."""
    idx = mask.nonzero()
    lo, hi = idx.min(0).values.tolist(), idx.max(0).values.tolist()
    return "[" + ", ".join(f"{a}:{b + 1}" for a, b in zip(lo, hi, strict=True)) + "]"


def _as_2d(t: torch.Tensor) -> torch.Tensor:
    if t.dim() == 0:
        return t.reshape(1, 1)
    if t.dim() == 1:
        return t.reshape(1, -1)
    # leading dims stacked: rows of the last two dims, one block after another
    return t.reshape(-1, t.shape[-1])


def access_png(maps: dict, title: str = "") -> bytes:
    """The heat maps of `maps` (name -> AccessMap) as a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from .plots import _small_png

    names = list(maps)
    fig = Figure(figsize=(2.6 * max(len(names), 1) + 0.4, 3.0), dpi=72)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, max(len(names), 1), squeeze=False)[0]
    cmap = ListedColormap(_COLORS)
    # strict=False: one (empty) axis is drawn when there is no buffer
    for ax, name in zip(axes, names, strict=False):
        m = maps[name]
        code = _as_2d(m.read.to(torch.int8) + 2 * m.written.to(torch.int8))
        ax.imshow(code.numpy(), cmap=cmap, vmin=0, vmax=3, interpolation="nearest", aspect="auto")
        shape = "x".join(str(d) for d in m.read.shape)
        ax.set_title(f"{name} [{shape}]", fontsize=9)
        ax.tick_params(labelsize=7)
    fig.legend(
        handles=[Patch(color=c, label=label) for c, label in zip(_COLORS, _LABELS, strict=True)],
        loc="lower center",
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)
    return _small_png(buf.getvalue())


class AccessView:
    """One block's access masks: text summary and heat-map PNG. `.maps` holds the masks."""

    def __init__(self, maps: dict, title: str):
        self.maps = maps
        self.title = title

    def text(self) -> str:
        lines = [self.title]
        for name, m in self.maps.items():
            parts = []
            for what, mask in (("read", m.read), ("written", m.written)):
                n = int(mask.sum())
                parts.append(f"{what} {n}" + (f" in {_box(mask)}" if n else ""))
            lines.append(f"  {name} {list(m.read.shape)}: " + ", ".join(parts))
        return "\n".join(lines)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text(), "image/png": access_png(self.maps, self.title)}

    def __repr__(self) -> str:
        return self.text()


def show_access(kernel, *args, block=0, **kwargs) -> AccessView:
    """Run `kernel` (a `tile_nb.jit` kernel) on CPU tensors `args` on the interpreter,
    recording which elements of each tensor block `block` read and wrote; returns the view
    (heat maps in a notebook, a summary as text).

    The arguments are those of a call (tensors are updated in place, as by a call); kernels that return
    `T.empty` outputs are not supported here: pass the outputs as arguments, or use
    `tile_nb.interp.access_map(kernel.specialize(*args), args + outputs, block=...)`.
    """
    from ..interp import access_map

    func = kernel.specialize(*args, **kwargs)
    if len(func.params) != len(args):
        raise TypeError(
            f"show_access: {kernel.__name__}() takes {len(func.params)} arguments after specialization "
            f"(T.empty outputs included); got {len(args)}"
        )
    ids = (block,) if isinstance(block, int) else tuple(block)
    maps = access_map(func, list(args), block=ids)
    name = getattr(kernel, "__name__", "kernel")
    return AccessView(maps, f"{name}: block ({', '.join(str(b) for b in ids)})")


def _grid_extents(func, args) -> dict[str, int]:
    """blockIdx axis ("x", "y", "z") -> number of blocks, for this call's shapes
    (T.dynamic dims from `args`)."""
    from tvm import tirx
    from tvm.tirx.buffer import is_buffer_var

    from ..frontend.checks import launch_grid
    from ..frontend.shapes import evaluate

    dims = {}
    for param, value in zip(func.params, args, strict=True):
        if is_buffer_var(param) and isinstance(value, torch.Tensor):  # a tensor parameter is its buffer
            dims.update(
                {
                    d.name: int(n)
                    for d, n in zip(param.shape, value.shape, strict=True)
                    if isinstance(d, tirx.Var)
                }
            )
    return {tag.split(".")[1]: int(evaluate(extent, dims)) for tag, extent in launch_grid(func).items()}


class AccessExplorer(LiveBundle):
    """The widget `explore_access` returns: `.controls` (axis -> slider), `.image`, `.view` (the chosen
    block's AccessView), `.widget` (what is displayed)."""

    def __init__(self, kernel, func, args: list, extents: dict[str, int]):
        import ipywidgets as widgets

        self.kernel, self.func, self.extents = kernel, func, extents
        # Each block's picture is a run of the whole kernel; every run starts from the call's inputs (the
        # kernel writes in place), so moving the slider back shows the same picture.
        self.inputs = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        self.controls = {
            axis: widgets.IntSlider(
                value=0, min=0, max=max(n - 1, 0), description=f"block {axis}", continuous_update=False
            )
            for axis, n in extents.items()
        }
        self.image = widgets.Image(format="png")
        self.summary = widgets.HTML()
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.widget = widgets.VBox([widgets.HBox(list(self.controls.values())), self.image, self.summary])
        self._init_display("tile-nb-access")
        self.view: AccessView | None = None
        self.render()

    def block(self) -> tuple[int, ...]:
        return tuple(c.value for c in self.controls.values()) or (0,)

    def render(self) -> None:
        from ..interp import access_map

        ids = self.block()
        args = [a.clone() if isinstance(a, torch.Tensor) else a for a in self.inputs]
        name = getattr(self.kernel, "__name__", "kernel")
        self.view = AccessView(access_map(self.func, args, block=ids),
                               f"{name}: block ({', '.join(str(b) for b in ids)})")
        self.image.value = access_png(self.view.maps, self.view.title)
        self.summary.value = f"<pre>{escape(self.view.text())}</pre>"

    def _changed(self, _change) -> None:
        self.render()
        self._refresh()

    def bundle(self) -> dict:
        """The widget view and the static forms (summary text, heat-map PNG) of the chosen block."""
        data = dict(self.widget._repr_mimebundle_())
        data.update(self.view._repr_mimebundle_())
        return data

    def __repr__(self) -> str:
        return self.view.text()


def explore_access(kernel, *args, **kwargs) -> AccessExplorer:
    """`show_access` with a slider per grid dimension: the heat map of the block the sliders pick. The inputs
    are copied once; each block's picture runs the kernel on the interpreter from those copies (`args` are not
    changed). Kernels that return `T.empty` outputs: pass the outputs as arguments, as for `show_access`."""
    func = kernel.specialize(*args, **kwargs)
    if len(func.params) != len(args):
        raise TypeError(f"explore_access: {kernel.__name__}() takes {len(func.params)} arguments after "
                        f"specialization (T.empty outputs included); got {len(args)}")
    return AccessExplorer(kernel, func, list(args), _grid_extents(func, args))

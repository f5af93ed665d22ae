"""tile_nb.notebook: the `%%tilekernel` magic and the kernel views.

    %load_ext tile_nb                      # registers %%tilekernel and the short error display

    %%tilekernel --shapes M=256 N=256 K=128
    @tile_nb.jit
    def gemm(A, B, C, ...):
        ...

From Python: `tile_nb.notebook.show(gemm, M=256, N=256, K=128)` (`gemm.show(...)`) returns a `KernelView`
(displayed when it is the cell's result); `kernel_view(gemm, args, kwargs, cuda=True, run=True, ...)` has
every option of the magic; `explore(gemm, M=[256, 512], block_M=[64, 128])` puts sliders over a kernel's view.

Modules: `views` (KernelView and its plain-text and JSON forms), `render` (static HTML), `highlight`, `diff`
(template/specialized line alignment), `build` (views from kernel objects), `api` (show, kernel_view), `magic`
(%%tilekernel), `tracebacks` (short errors), `widgets` (explore), `bench` (tables and plots of
`tile_nb.bench` results), `progress` (the tuning/sweep progress widget), `access` (heat maps of a block's
memory access), `hooks` (registers both with IPython). This is the only package that imports IPython,
ipywidgets or matplotlib, and only when the magic is loaded or a widget is made.
"""
from __future__ import annotations

__all__ = [
    "MIME_TYPE",
    "KernelView",
    "kernel_view",
    "load_ipython_extension",
    "show",
    "unload_ipython_extension",
]


def load_ipython_extension(ip) -> None:
    """Register `%%tilekernel` and the short display of `TileNBError`s in the IPython shell `ip`."""
    from tile_nb.notebook.hooks import connect
    from tile_nb.notebook.magic import TileKernelMagics
    from tile_nb.notebook.tracebacks import install

    ip.register_magics(TileKernelMagics)
    from tile_nb.notebook.tilelang_magic import TilelangMagics  # %tilelang_on_tile_nb (docs/tilelang.md)

    ip.register_magics(TilelangMagics)
    install(ip)
    connect(ip)   # bench/sweep/tune results display as tables; tuning progress as a widget


def unload_ipython_extension(ip) -> None:
    """Restore IPython's default exception display (the magic stays registered,
    as IPython has no unregister)."""
    from tile_nb.notebook.tracebacks import uninstall

    uninstall(ip)


def __getattr__(name: str):
    # Lazy: importing tile_nb.notebook must not import TVM, torch or IPython.
    if name in ("show", "kernel_view"):
        from tile_nb.notebook import api

        return getattr(api, name)
    if name == "explore":
        from tile_nb.notebook.widgets import explore

        return explore
    if name in ("KernelView", "MIME_TYPE"):
        from tile_nb.notebook import views

        return getattr(views, name)
    raise AttributeError(f"module 'tile_nb.notebook' has no attribute {name!r}")

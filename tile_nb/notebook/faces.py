"""The notebook face of a kernel: `gemm.show(...)`.

A method of `tile_nb.JITFunction` that this layer provides (jit.py sits below
notebook and imports none of it):
`tile_nb/__init__.py` attaches it to the class, importing this module on its first use. Importing this module
imports no IPython, widget or plotting package.
"""
from __future__ import annotations

from .api import show as _show

__all__ = ["FACES", "show"]


def show(self, *args, **kwargs):
    """The notebook view of this kernel (phase 1 and 2 side by side, CUDA, resources, timings); see
    `tile_nb.notebook.show`."""
    return _show(self, *args, **kwargs)


FACES = {"show": show}

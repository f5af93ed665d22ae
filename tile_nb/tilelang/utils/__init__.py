"""`tilelang.utils` on tile_nb: only `tilelang.utils.tensor` (tensor supplies and `torch_assert_close`)."""
from __future__ import annotations

import importlib

from .._support import forwarding_getattr

__getattr__ = forwarding_getattr(__name__, "tilelang.utils", {
    "tensor": lambda: importlib.import_module(f"{__name__}.tensor"),
}, package=True)

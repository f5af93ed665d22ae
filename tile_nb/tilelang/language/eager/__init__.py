"""`tilelang.language.eager` on tile_nb: the `ast` submodule (tilelang's builder protocol, `mutate` and
`BaseBuilder`, as tile_nb's own code), and every other name as `tilelang.language` maps it (tilelang's eager
package re-exports the language's kernel decorators)."""
from __future__ import annotations

import importlib


def __getattr__(name: str):
    if name == "ast":
        return importlib.import_module(f"{__name__}.ast")
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("tile_nb.tilelang.language"), name)

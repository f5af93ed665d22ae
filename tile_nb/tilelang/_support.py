"""What the `tilelang` stand-in shares: the error for an API tile_nb does not offer yet, and stand-in modules for
tilelang submodules tile_nb has no counterpart of."""
from __future__ import annotations

import importlib
import importlib.util
import re
import types

from ..errors import TileNBError

__all__ = ["UnsupportedTilelangAPI", "unsupported", "missing_feature", "forwarding_getattr", "stub_module"]

_PATTERN = re.compile(r"tile_nb does not support (.+?) yet\b")


class UnsupportedTilelangAPI(TileNBError, NotImplementedError):
    """A tilelang API that tile_nb does not offer yet. `api` is its dotted name (`tilelang.language.use_swizzle`).

    Not an AttributeError on purpose: `from tilelang.language import use_swizzle` then shows this message instead
    of Python's "cannot import name"."""

    def __init__(self, message: str, *, api: str | None = None, **where):
        super().__init__(message, **where)
        found = _PATTERN.search(message)
        self.api = api or (found.group(1) if found else None)


def unsupported(api: str, detail: str | None = None) -> UnsupportedTilelangAPI:
    """The error for `api` (a dotted tilelang name): "tile_nb does not support <api> yet"."""
    message = f"tile_nb does not support {api} yet"
    if detail:
        message += f" ({detail})"
    return UnsupportedTilelangAPI(message, api=api, hint="docs/tilelang.md lists what the tilelang stand-in maps")


def missing_feature(text: str) -> str | None:
    """The tilelang API an error text names as unsupported, if any (the conformance runner ranks these)."""
    found = _PATTERN.search(text or "")
    return found.group(1) if found else None


def forwarding_getattr(module_name: str, tilelang_name: str, known: dict, package: bool = False):
    """A module `__getattr__`: names in `known` (name -> zero-argument loader) load lazily, and so do the real
    submodules of a `package`; dunder names are plain AttributeErrors (Python's import machinery, pytest
    and inspect probe for those); anything else is an UnsupportedTilelangAPI naming `tilelang_name.<name>`."""

    def __getattr__(name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        loader = known.get(name)
        if loader is not None:
            return loader()
        if package and importlib.util.find_spec(f"{module_name}.{name}") is not None:
            return importlib.import_module(f"{module_name}.{name}")
        raise unsupported(f"{tilelang_name}.{name}")

    return __getattr__


def _stub_getattr(name: str, tilelang_name: str):
    plain = forwarding_getattr(name, tilelang_name, {})

    def __getattr__(attr: str):
        if attr == "__all__":  # `from tilelang.autotuner import *` names the module, not a NameError later
            raise unsupported(tilelang_name, "imported with *")
        return plain(attr)

    return __getattr__


def stub_module(name: str, tilelang_name: str) -> types.ModuleType:
    """A stand-in for a tilelang submodule tile_nb has no counterpart of: importing it works (so an import at the top
    of a script that never uses it costs nothing), and using any name in it raises UnsupportedTilelangAPI."""
    module = types.ModuleType(name, f"tile_nb has no counterpart of {tilelang_name} yet.")
    module.__path__ = []  # a package: its own submodules are stubs too
    module.__getattr__ = _stub_getattr(name, tilelang_name)
    module.__tile_nb_stub__ = True
    return module

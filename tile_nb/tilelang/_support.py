"""What the `tilelang` stand-in shares: the error for an API tile_nb does not offer yet, and stand-in modules
for tilelang submodules tile_nb has no counterpart of."""
from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types

from ..errors import TileNBError

__all__ = ["UnsupportedTilelangAPI", "unsupported", "missing_feature", "forwarding_getattr", "stub_module"]

_PATTERN = re.compile(r"tile_nb does not support (.+?) yet\b")


class UnsupportedTilelangAPI(TileNBError, NotImplementedError):
    """A tilelang API that tile_nb does not offer yet. `api` is its dotted name
    (`tilelang.language.use_swizzle`)."""

    def __init__(self, message: str, *, api: str | None = None, **where):
        super().__init__(message, **where)
        found = _PATTERN.search(message)
        self.api = api or (found.group(1) if found else None)


class UnsupportedTilelangName(UnsupportedTilelangAPI, AttributeError):
    """A name looked up in one of the stand-in's modules that tile_nb does not offer. Also an AttributeError:
    code that probes modules for a name expects one where it is absent (pickle's whichmodule walks every
    module in sys.modules, and torch.compile's inductor pickles graphs that way). So `from tilelang.language
    import use_swizzle` shows Python's "cannot import name ... from 'tile_nb.tilelang.language'", which
    `missing_feature` reads as well."""


def unsupported(
    api: str, detail: str | None = None, kind: type = UnsupportedTilelangAPI
) -> UnsupportedTilelangAPI:
    """The error for `api` (a dotted tilelang name): "tile_nb does not support <api> yet"."""
    message = f"tile_nb does not support {api} yet"
    if detail:
        message += f" ({detail})"
    return kind(message, api=api, hint="docs/tilelang.md lists what the tilelang stand-in maps")


def missing_feature(text: str) -> str | None:
    """The tilelang API an error text names as unsupported, if any (the conformance runner ranks
    these): "tile_nb does not support tilelang.X yet", or the ImportError of
    `from tilelang.M import X` on the stand-in."""
    found = _PATTERN.search(text or "")
    if found:
        return found.group(1)
    found = _IMPORT_PATTERN.search(text or "")
    return f"tilelang{found.group(2) or ''}.{found.group(1)}" if found else None


_IMPORT_PATTERN = re.compile(r"cannot import name '(\w+)' from '(?:tile_nb\.)?tilelang((?:\.\w+)*)'")


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
        raise unsupported(f"{tilelang_name}.{name}", kind=UnsupportedTilelangName)

    return __getattr__


def _stub_getattr(name: str, tilelang_name: str):
    plain = forwarding_getattr(name, tilelang_name, {})

    def __getattr__(attr: str):
        if attr == "__all__":  # `from tilelang.autotuner import *` names the module, not a NameError later
            raise unsupported(tilelang_name, "imported with *")
        return plain(attr)

    return __getattr__


def stub_module(name: str, tilelang_name: str) -> types.ModuleType:
    """A stand-in for a tilelang submodule tile_nb has no counterpart of: importing it works (so an
    import at the top of a script that never uses it costs nothing), and using any name in it
    raises UnsupportedTilelangAPI."""
    module = types.ModuleType(name, f"tile_nb has no counterpart of {tilelang_name} yet.")
    module.__path__ = []  # a package: its own submodules are stubs too
    module.__getattr__ = _stub_getattr(name, tilelang_name)
    module.__tile_nb_stub__ = True
    # Under its own name too: `from tilelang.x import Name` looks for a submodule `<name>.Name`
    # before it reports the missing name, and that search must find this parent (else: "No
    # module named 'tile_nb.tilelang.x'").
    sys.modules.setdefault(name, module)
    return module

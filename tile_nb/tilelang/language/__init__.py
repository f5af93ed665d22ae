"""`tilelang.language` on tile_nb: every name of tile_nb.language (looked up when used, so what
tile_nb.language gains shows here at once), tilelang's dtype aliases (`T.float`, `T.half`, `T.int`, ...), and
for any other name an UnsupportedTilelangAPI naming `tilelang.language.<name>`."""
from __future__ import annotations

import importlib

from .._support import UnsupportedTilelangName, unsupported

_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "uint": "uint32",
            "bfloat": "bfloat16", "symbolic": "dynamic", "match_buffer": "make_tensor"}
_SUBMODULES = {"fp8", "dtypes"}


def _language():
    return importlib.import_module("tile_nb.language")


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    language = _language()
    value = getattr(language, _ALIASES.get(name, name), _MISSING)
    if value is _MISSING:
        raise unsupported(f"tilelang.language.{name}", kind=UnsupportedTilelangName)
    return value


def __dir__():
    return sorted(set(dir(_language())) | set(_ALIASES) | _SUBMODULES)


_MISSING = object()

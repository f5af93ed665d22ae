"""`tilelang.env` on tile_nb: the names of tilelang's environment object that mean something here, mapped onto
tile_nb's settings; reading one reads tile_nb's value now, setting one sets tile_nb's environment variable.

    TILELANG_CACHE_DIR       tile_nb's kernel cache folder ($TILE_NB_CACHE_DIR, else ~/.cache/tile_nb)
    TILELANG_TMP_DIR         $TILELANG_TMP_DIR, else <cache folder>/tmp (tilelang's default)
    TILELANG_DISABLE_CACHE   "1" while tile_nb's disk cache is off ($TILE_NB_DISABLE_CACHE), else "0"
    CUDA_HOME                the CUDA toolkit tile_nb builds with (None without one)
    enable_cache(), disable_cache(), is_cache_enabled()   tilelang.enable_cache & co.

`tilelang.env` is this module, and `tilelang.env.env` the same object's names (tilelang's `from tilelang.env
import env`). Any other name (tilelang's lowering switches, ROCm, autotuning knobs) raises
UnsupportedTilelangAPI naming it.
"""
from __future__ import annotations

import os
import sys
import types

from ._support import UnsupportedTilelangName, unsupported

# (the variables are read through the module's type, below)
__all__ = ["enable_cache", "disable_cache", "is_cache_enabled"]

_TRUE = ("1", "true", "yes", "on")


def _cache_dir() -> str:
    from ..runtime.cache import cache_dir

    return str(cache_dir())


def _cuda_home() -> str | None:
    from ..backend.toolchain import cuda_home

    return cuda_home()


def _tmp_dir() -> str:
    return os.environ.get("TILELANG_TMP_DIR") or os.path.join(_cache_dir(), "tmp")


def _cache_disabled() -> str:
    from ..runtime.cache import cache_enabled

    return "0" if cache_enabled() else "1"


def _set_env(name: str):
    def set_it(value) -> None:
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)

    return set_it


def _set_disable_cache(value) -> None:
    _set_env("TILE_NB_DISABLE_CACHE")("1" if str(value).lower() in _TRUE else None)


# name -> (read, write or None for read-only)
_NAMES = {
    "TILELANG_CACHE_DIR": (_cache_dir, _set_env("TILE_NB_CACHE_DIR")),
    "TILELANG_TMP_DIR": (_tmp_dir, _set_env("TILELANG_TMP_DIR")),
    "TILELANG_DISABLE_CACHE": (_cache_disabled, _set_disable_cache),
    "CUDA_HOME": (_cuda_home, None),
}


def enable_cache() -> None:
    from . import enable_cache as enable

    enable()


def disable_cache() -> None:
    from . import disable_cache as disable

    disable()


def is_cache_enabled() -> bool:
    from . import is_cache_enabled as enabled

    return enabled()


class _Environment(types.ModuleType):
    """This module's type: the mapped names are read (and set) through tile_nb's settings each time."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        if name in _NAMES:
            return _NAMES[name][0]()
        if name == "env":
            return self
        raise unsupported(f"tilelang.env.{name}", "tile_nb maps TILELANG_CACHE_DIR, TILELANG_TMP_DIR, "
                          "TILELANG_DISABLE_CACHE, CUDA_HOME and the cache switches",
                          kind=UnsupportedTilelangName)

    def __setattr__(self, name: str, value) -> None:
        if name in _NAMES:
            write = _NAMES[name][1]
            if write is None:
                raise AttributeError(f"tilelang.env.{name} is read-only on tile_nb")
            write(value)
        elif name.isupper() and name.startswith(("TILELANG_", "TL_", "TVM_")):
            raise unsupported(f"tilelang.env.{name}", "setting it would change nothing on tile_nb")
        else:
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Environment

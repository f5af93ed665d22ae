"""Lowering choices a kernel can set: a function attribute (`func.with_attr("tile_nb.tma", 0)`), else the process-wide
environment variable of `ENV_SWITCHES` (tile_nb/lower/__init__.py; part of compile-cache keys), else a default."""
from __future__ import annotations

import os

__all__ = ["setting", "switch"]


def setting(func, name: str, env: str | None = None, default=None):
    """The attribute `name` of `func` as it is, else the environment variable `env`, else `default`."""
    value = (func.attrs or {}).get(name, None)
    if value is not None:
        return value
    if env is not None and env in os.environ:
        return os.environ[env]
    return default


def switch(func, name: str, env: str, default: str) -> str:
    """A switch as a string: the integer attribute `name` ("0", "1", ...), else `env`'s value, else `default`."""
    value = (func.attrs or {}).get(name, None)
    return str(int(value)) if value is not None else os.environ.get(env, default)

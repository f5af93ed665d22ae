"""`tilelang.engine.callback` on tile_nb: `register_cuda_postproc(f)` and the decorator
`@register_cuda_postproc_callback` register `f(code: str, target) -> str`, which tile_nb applies to each
kernel's generated CUDA source before compiling it (tile_nb/backend/postproc.py: the kernel caches key on it,
and `get_kernel_source()` shows its result). The CPU interpreter runs the tile IR, not CUDA, so a kernel
called on it while a callback is registered raises an error rather than ignore the callback.

HIP (AMD), C host and Metal callbacks are refused when registered (importing them works): tile_nb builds
CUDA with TVM's LLVM host.
"""
from __future__ import annotations

from collections.abc import Callable

from ...backend import postproc
from .._support import forwarding_getattr, unsupported

__all__ = ["register_c_postproc", "register_cuda_postproc", "register_cuda_postproc_callback",
           "register_hip_postproc", "register_hip_postproc_callback", "register_metal_postproc"]


def register_cuda_postproc(func: Callable[[str, object], str], override: bool = True) -> None:
    """Apply `func(code, target) -> code` to the CUDA source of every kernel compiled from now on. With
    `override=False`, a callback already registered is not replaced (ValueError)."""
    postproc.set_cuda_postproc(func, override=override)


def _decorator(register, name: str):
    """tilelang's decorator forms: `@name`, `@name()`, `@name(override=False)`, `@name(False)`."""

    def decorator(func: Callable | bool | None = None, override: bool = True):
        if callable(func):
            register(func, override)
            return func
        if func is None or isinstance(func, bool):
            keep = func if isinstance(func, bool) else override

            def register_it(fn):
                register(fn, keep)
                return fn

            return register_it
        raise TypeError(f"{name}: use it as @{name}, @{name}() or @{name}(override=...); got {func!r}")

    decorator.__name__ = decorator.__qualname__ = name
    return decorator


def _refused(api: str, why: str):
    def register(func, override: bool = True):
        raise unsupported(f"tilelang.engine.callback.{api}", why)

    register.__name__ = api
    return register


register_hip_postproc = _refused("register_hip_postproc", "HIP is AMD's; tile_nb builds CUDA only")
register_c_postproc = _refused("register_c_postproc", "tile_nb's host code is TVM's LLVM host, not C source")
register_metal_postproc = _refused("register_metal_postproc", "tile_nb builds CUDA only")
register_cuda_postproc_callback = _decorator(register_cuda_postproc, "register_cuda_postproc_callback")
register_hip_postproc_callback = _decorator(register_hip_postproc, "register_hip_postproc_callback")

__getattr__ = forwarding_getattr(__name__, "tilelang.engine.callback", {})

"""A process-wide post-processing callback for the generated CUDA source (tilelang's
`register_cuda_postproc`): `f(code: str, target) -> str` is applied to each kernel's CUDA source after TVM
generates it and before NVRTC/nvcc compile it, so the compiled kernel and its `cuda_source` are what `f`
returned.

It can change results, so:
- the kernel caches key on it: `key()` names the callback and the registration it came from (the memory
  caches), and the disk cache is bypassed while one is registered (a function has no text that stays the same
  across processes);
- kernels that kept a launch from before a registration forget it (`on_change`);
- the CPU interpreter runs the tile IR, not CUDA, so it cannot apply one: jit.py refuses to interpret a kernel
  while a callback is registered (`interpreter_refusal`).
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

__all__ = ["apply", "clear_cuda_postproc", "cuda_postproc", "interpreter_refusal", "key", "on_change",
           "set_cuda_postproc"]

_lock = threading.Lock()
_callback: Callable | None = None
_generation = 0        # counts registrations: the same function registered again still gets a new key
_watchers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _name(func) -> str:
    return f"{getattr(func, '__module__', None) or '?'}.{getattr(func, '__qualname__', type(func).__name__)}"


def set_cuda_postproc(func: Callable, *, override: bool = True) -> None:
    """Register `func(code, target) -> code` for every CUDA build from now on. `override=False` refuses to
    replace a callback already registered (as TVM's global function registry does)."""
    global _callback, _generation
    if not callable(func):
        raise TypeError(f"a CUDA post-processing callback must be callable as f(code, target) -> str; got "
                        f"{func!r}")
    with _lock:
        if _callback is not None and not override:
            raise ValueError(f"a CUDA post-processing callback is already registered ({_name(_callback)}); "
                             "pass override=True to replace it")
        _callback, _generation = func, _generation + 1
    _notify()


def clear_cuda_postproc() -> None:
    """Unregister the callback: builds from now on compile TVM's source as generated."""
    global _callback, _generation
    with _lock:
        if _callback is None:
            return
        _callback, _generation = None, _generation + 1
    _notify()


def cuda_postproc() -> Callable | None:
    return _callback


def key() -> str | None:
    """What the kernel caches key on while a callback is registered (None: none is)."""
    func = _callback
    return None if func is None else f"{_name(func)}#{_generation}"


def on_change(holder, forget) -> None:
    """Call `forget(holder)` after every registration or removal, for as long as `holder` lives."""
    with _lock:
        _watchers[holder] = forget


def _notify() -> None:
    with _lock:
        watchers = list(_watchers.items())
    for holder, forget in watchers:
        forget(holder)


def apply(code: str, target, func: Callable | None = None) -> str:
    """`code` after `func` (default: the registered callback; unchanged without one); a callback that returns
    anything but a str is an error naming it."""
    func = func or _callback
    if func is None:
        return code
    result = func(code, target)
    if not isinstance(result, str):
        raise TypeError(f"the CUDA post-processing callback {_name(func)} must return the CUDA source as a "
                        f"str; it returned {type(result).__name__}")
    return result


def after_marks(take_marks, target):
    """`take_marks` (the build's removal of the lowering's source marks) followed by the callback: the
    callback sees the source as users read it."""
    func = _callback    # the one registered when the build began, whatever happens meanwhile
    if func is None:
        return take_marks

    def take_marks_then_postproc(code: str):
        code, regions = take_marks(code)
        return apply(code, target, func), regions

    return take_marks_then_postproc


def interpreter_refusal() -> str | None:
    """Why the CPU interpreter must not run a kernel now (a callback is registered), or None."""
    func = _callback
    if func is None:
        return None
    return (f"a CUDA source post-processing callback ({_name(func)}) is registered, and the CPU interpreter "
            "runs the kernel's tile IR, not its CUDA source, so it cannot apply the callback (its result "
            "could differ from the GPU's)")

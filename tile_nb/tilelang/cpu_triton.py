"""Triton's interpreter (TRITON_INTERPRET=1) under `--cpu`: the reference kernels of tilelang's examples are
often Triton kernels, run by Triton's interpreter on the CPU.

cpu_device.py makes `torch.cuda.is_available()` True, so Triton takes its NVIDIA driver for the active one,
and that driver builds a C helper against libcuda.so the first time it is used ("libcuda.so cannot found!").
Triton's interpreter itself never uses the driver, but its autotuner times each configuration through
`driver.active.get_benchmarker()` even when interpreting, and `triton.testing.do_bench` asks the driver for
the device interface and an L2-flush buffer. So while TRITON_INTERPRET is set, the active driver is
`InterpreterDriver`: the device interface is (cpu_device's) `torch.cuda`, whose events time on the host
clock; the autotuner runs each configuration once on the host clock (the interpreter's timings say nothing
of a GPU's, and every configuration computes the same result up to rounding, so any choice serves as the
reference), and do_bench stays Triton's own.

The driver is set when Triton's `triton.runtime.driver` module is first imported (an import hook: Triton is
not imported for scripts that never use it).
"""
from __future__ import annotations

import importlib.abc
import os
import sys
import time

__all__ = ["InterpreterDriver", "install"]

_MODULE = "triton.runtime.driver"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "yes", "on")


def _time_once(kernel_call, quantiles=None, return_mode: str = "mean", **_unused):
    """One run of `kernel_call`, in ms on the host clock, shaped as Triton's do_bench returns it."""
    start = time.perf_counter()
    kernel_call()
    ms = (time.perf_counter() - start) * 1e3
    if quantiles is not None:
        return [ms] * len(quantiles)
    return [ms] if return_mode == "all" else ms


class InterpreterDriver:
    """Triton's active driver while its interpreter runs on the CPU (see the module's text)."""

    def is_active(self) -> bool:
        return True

    def get_benchmarker(self):
        return _time_once

    def get_device_interface(self):
        import torch

        return torch.cuda        # cpu_device's: Event on the host clock, synchronize does nothing

    def get_empty_cache_for_benchmark(self):
        import torch

        return torch.empty(1 << 20, dtype=torch.int8)   # no L2 to flush: a small buffer to clear

    def clear_cache(self, cache) -> None:
        cache.zero_()

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")


def _use_interpreter_driver(module) -> None:
    if _interpreting():
        module.driver.set_active(InterpreterDriver())


class _DriverHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `triton.runtime.driver` is imported, it wraps that module's loader so the
    interpreter driver is set right after the module runs."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _use_interpreter_driver(module)

            spec.loader.exec_module = exec_module   # this spec's own loader object
        return spec


def install() -> None:
    """Set the interpreter driver now if Triton's driver module is loaded, else when it is."""
    if _MODULE in sys.modules:
        _use_interpreter_driver(sys.modules[_MODULE])
    elif not any(isinstance(f, _DriverHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _DriverHook())

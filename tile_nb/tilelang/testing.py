"""`tilelang.testing` on tile_nb: `main()` (pytest on the calling file), the `requires_cuda*` skips
(read from torch, so under `tile_nb.run --cpu` the interpreter counts as CUDA with compute
capability 9.0), `requires_package` (also `tvm.testing.requires_package` while the mapping is installed:
tilelang's TVM has it, Apache TVM 0.27 does not), `set_random_seed`, and the performance-regression pair
`process_func` / `regression` that tilelang's examples' `regression_*.py` files call."""
from __future__ import annotations

import inspect
import random
import sys
import time

from ._support import forwarding_getattr

__all__ = [
    "main",
    "requires_cuda",
    "requires_cuda_compute_version",
    "requires_cuda_compute_version_ge",
    "requires_cuda_compute_version_gt",
    "requires_cuda_compute_version_eq",
    "requires_cuda_compute_version_lt",
    "requires_cuda_compute_version_le",
    "requires_package",
    "set_random_seed",
    "process_func",
    "regression",
]


def main():
    import pytest

    caller = inspect.stack()[1].filename
    sys.exit(pytest.main([caller, *sys.argv[1:]]))


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _capability():
    import torch

    return torch.cuda.get_device_capability() if torch.cuda.is_available() else None


def _skipif(condition: bool, reason: str):
    import pytest

    return pytest.mark.skipif(condition, reason=reason)


def requires_cuda(func=None):
    mark = _skipif(not _cuda(), "needs CUDA")
    return mark if func is None else mark(func)


def requires_cuda_compute_version(major_version: int, minor_version: int = 0, mode: str = "ge"):
    ops = {"ge": lambda a, b: a >= b, "gt": lambda a, b: a > b, "eq": lambda a, b: a == b,
           "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}
    capability = _capability()
    wanted = (major_version, minor_version)
    ok = capability is not None and ops[mode](tuple(capability), wanted)
    return _skipif(not ok, f"needs CUDA compute capability {mode} {major_version}.{minor_version}")


def requires_cuda_compute_version_ge(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, "ge")


def requires_cuda_compute_version_gt(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, "gt")


def requires_cuda_compute_version_eq(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, "eq")


def requires_cuda_compute_version_lt(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, "lt")


def requires_cuda_compute_version_le(major_version: int, minor_version: int = 0):
    return requires_cuda_compute_version(major_version, minor_version, "le")


def _importable(package: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a dotted name whose parent is missing
        return False


def requires_package(*packages: str):
    """`@requires_package("bitblas")`: a pytest skip for each package that cannot be imported, as in
    tilelang's TVM. Like there, it only marks the test: a direct call of the function (an example's `main()`
    calling its tests) still runs it."""
    marks = [_skipif(not _importable(p), f"Cannot import '{p}'") for p in packages]

    def decorate(func):
        for mark in marks:
            func = mark(func)
        return func

    return decorate


def set_random_seed(seed: int = 42) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


_LATENCIES: list = []  # (case, latency) recorded by process_func during one regression()


def process_func(func, name=None, /, **kwargs) -> None:
    """One step of a performance regression: `func(**kwargs)` (an example's `run_regression_perf`, which
    returns its kernel's latency in ms) is called and its latency recorded under `name` (default: the module
    `func` comes from). A latency that is not a positive number is an error naming the function (tilelang
    warns and drops it)."""
    latency = func(**kwargs)
    case = name if name is not None else getattr(func, "__module__", "<unknown>")
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not latency > 0:
        raise ValueError(f"{getattr(func, '__qualname__', func)!r} returned {latency!r} as its latency; "
                         "process_func expects a positive number of milliseconds")
    _LATENCIES.append((case.removeprefix("regression_"), float(latency)))


def regression(prefixes=("regression_",), verbose: bool = True) -> None:
    """Run the calling module's functions whose names start with one of `prefixes`, in name order, then print
    a markdown table of the latencies their `process_func` calls recorded (on the interpreter a latency is the
    wall time of one run: tilelang.profiler.do_bench)."""
    caller = inspect.currentframe().f_back.f_globals
    functions = sorted((name, fn) for name, fn in caller.items()
                       if callable(fn) and any(name.startswith(p) for p in prefixes))
    _LATENCIES.clear()
    for i, (name, fn) in enumerate(functions, 1):
        start = time.perf_counter()
        fn()
        if verbose:
            print(f"[{i}/{len(functions)}] {name.removeprefix('regression_')} "
                  f"({time.perf_counter() - start:.2f} s)", flush=True)
    rows = ["| case | latency (ms) |", "| --- | ---: |"]
    rows += [f"| {case} | {latency:.4f} |" for case, latency in _LATENCIES]
    print("\n".join(rows), flush=True)


__getattr__ = forwarding_getattr(__name__, "tilelang.testing", {})

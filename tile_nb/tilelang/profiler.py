"""`tilelang.profiler` on tile_nb: `do_bench` and the profiler of a compiled kernel (`kernel.get_profiler()`).

On CUDA it is tile_nb.bench.do_bench (warm-up, L2 flush, CUDA events, median). On the CPU interpreter (tensors
on the CPU) timing means nothing, so `do_bench` runs the function once and returns that wall time in
milliseconds: scripts that benchmark after their check still run, quickly."""
from __future__ import annotations

import time

from ._support import forwarding_getattr, unsupported
from .utils.tensor import TensorSupplyType, get_tensor_supply

__all__ = ["do_bench", "Profiler", "TensorSupplyType"]


def _gpu() -> bool:
    import torch

    from .cpu_device import active

    return not active() and torch.cuda.is_available()


_RETURN_MODES = ("min", "max", "mean", "median")


def do_bench(fn, warmup: float = 25, rep: float = 100, _n_warmup: int = 0, _n_repeat: int = 0,
             quantiles=None, fast_flush: bool = True, backend=None, return_mode: str = "mean", device=None,
             cache_size: int = 256, early_stop_baseline=None) -> float:
    """Milliseconds per call of `fn()` (tilelang's signature): on CUDA tile_nb.bench.do_bench's timing (its
    own warm-up, L2 flush and CUDA events whatever `backend`, `fast_flush`, `cache_size` say), reported as
    `return_mode` asks, except that "mean" (tilelang's default) gives the median, which tile_nb reports as
    robust to outliers; on the interpreter, one run's wall time."""
    if quantiles is not None:
        raise unsupported("tilelang.profiler.do_bench(quantiles=)")
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"do_bench(return_mode={return_mode!r}): expected one of {', '.join(_RETURN_MODES)}")
    if not _gpu():
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    from ..bench import do_bench as bench

    timing = bench(fn, warmup_ms=float(warmup), rep_ms=float(rep))
    return {"min": timing.min_ms, "max": timing.max_ms}.get(return_mode, timing.median_ms)


class Profiler:
    """`kernel.get_profiler()`: `do_bench()` times the kernel on inputs tile_nb makes for it (or
    `do_bench(func)`); `assert_allclose(reference)` checks it against a reference program on such inputs."""

    def __init__(self, kernel, supply_type=None):
        self.kernel = kernel
        self.supply_type = supply_type

    def _inputs(self):
        """Inputs for the kernel: shapes and dtypes from its annotations
        (tile_nb.bench.make_inputs), filled as the supply type says
        (tilelang.utils.tensor.get_tensor_supply) when one was given, else tile_nb's randn."""
        from ..bench import make_inputs

        device = "cuda" if _gpu() else "cpu"
        made = make_inputs(self.kernel.tile_nb_kernel, device=device, **self.kernel._kwargs)
        if self.supply_type is None:
            return made
        supply = get_tensor_supply(self.supply_type)
        return tuple(supply(t).to(t.device) for t in made)

    def do_bench(self, func=None, warmup: float = 25, rep: float = 100, n_warmup: int = 0, n_repeat: int = 0,
                 input_tensors=None, backend=None, quantiles=None, return_mode: str = "mean",
                 dynamic_symbolic_constraints=None, device=None, early_stop_baseline=None) -> float:
        """tilelang's signature; times as the module's `do_bench`. `dynamic_symbolic_constraints` (sizes of
        T.dynamic dims for the inputs tile_nb makes) is not supported yet: pass `input_tensors` instead."""
        if dynamic_symbolic_constraints:
            raise unsupported("tilelang Profiler.do_bench(dynamic_symbolic_constraints=)")
        args = tuple(input_tensors) if input_tensors is not None else self._inputs()
        target = func if func is not None else self.kernel
        return do_bench(lambda: target(*args), warmup=warmup, rep=rep, quantiles=quantiles,
                        return_mode=return_mode)

    def assert_allclose(self, reference_program, input_tensors=None, atol: float = 1e-2, rtol: float = 1e-2,
                        max_mismatched_ratio: float = 0.01) -> None:
        """Run the kernel and `reference_program` on the same inputs (made by tile_nb, or `input_tensors`) and
        compare what they return: at most `max_mismatched_ratio` of the elements may lie outside
        `atol + rtol * |reference|`, else AssertionError."""
        import torch

        from .checks import record_error

        args = tuple(input_tensors) if input_tensors is not None else self._inputs()
        expected = reference_program(*args)
        actual = self.kernel(*args)

        def as_list(x):
            return [] if x is None else [x] if isinstance(x, torch.Tensor) else list(x)

        actual, expected = as_list(actual), as_list(expected)
        assert len(actual) == len(expected), \
            f"the kernel returned {len(actual)} outputs, the reference {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            a64, e64 = (
                a.detach().to("cpu", torch.float64),
                torch.as_tensor(e).detach().to("cpu", torch.float64),
            )
            record_error(a64, e64)
            bad = ~torch.isclose(a64, e64, rtol=rtol, atol=atol, equal_nan=True)
            ratio = bad.float().mean().item() if bad.numel() else 0.0
            assert ratio <= max_mismatched_ratio, (
                f"output {i}: {ratio:.2%} of elements differ (allowed {max_mismatched_ratio:.2%}; "
                f"atol={atol}, "
                f"rtol={rtol}; greatest absolute difference {(a64 - e64).abs().max().item():.4g})"
            )

    @property
    def func(self):
        """The kernel itself (tilelang's profiler calls its adapter through `func`)."""
        return self.kernel

    def __call__(self, *args, **kwargs):
        return self.kernel(*args, **kwargs)

    def run_once(self, func=None):
        """One call of `func` (default: the kernel) on the profiler's inputs; what it returns."""
        return (func or self.kernel)(*self._inputs())

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise unsupported(f"tilelang Profiler.{name}")


__getattr__ = forwarding_getattr(__name__, "tilelang.profiler", {})

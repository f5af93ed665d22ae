"""`bench(f, ...)` (one call timed) and `sweep(f, params, ...)` (every configuration timed) for tile kernels.

    # or gemm.bench(...)
    result = bench(gemm, A, B, C, flops=2 * M * N * K, baseline=lambda: torch.matmul(A, B))
    table = sweep(gemm, {"block_M": [64, 128], "block_N": [64, 128]}, args=(A, B, C), results="gemm.json")
    shapes = sweep(gemm, {"M": [256, 512], "N": [256, 512]}, make_args={"K": 256},     # inputs built for you
                   baseline=lambda A, B: torch.matmul(A, B))

Timing is `do_bench` (GPU: warm-up, L2 flush, CUDA events; CPU: the host clock). A sweep records
a configuration that fails (compile error, out of resources, interpreter error) with its stage
and message and goes on; it reports progress (`tile_nb.bench.progress`) and can rewrite a JSON
results file after every configuration.
"""
from __future__ import annotations

import datetime
import itertools
import os
import time
import traceback
from collections.abc import Callable, Iterable

from .counts import gbps as _gbps
from .counts import tflops as _tflops
from .inputs import (
    call_baseline,
    callable_name,
    compile_time_names,
    describe,
    device_name,
    device_of,
    make_inputs,
    nbytes_of,
    sync,
)
from .progress import make_reporter
from .results import BenchResult, SweepPoint, SweepResult
from .timing import do_bench

__all__ = ["bench", "sweep"]


def bench(kernel, *args, flops: float | None = None, bytes: float | None = None,
          baseline: Callable | None = None, baseline_name: str | None = None, backend: str | None = None,
          name: str | None = None, warmup_ms: float = 25.0, rep_ms: float = 100.0, flush_l2: bool = True,
          **kwargs) -> BenchResult:
    """Time `kernel(*args, **kwargs)` and return a `BenchResult` (`gemm.bench(A, B, C, ...)` is this).

    - `flops` / `bytes`: the work of one call, for TFLOP/s and GB/s; `bytes` defaults to the tensor arguments
      and outputs, each counted once (the least traffic a kernel can have).
    - `baseline`: a callable to time the same way, e.g. `lambda: torch.matmul(A, B)`; one that takes arguments
      gets the kernel's arguments. The result gives baseline median / kernel median; `baseline_name` labels it
      (default: the function's name, or the lambda's body).
    - `backend="cpu"`: the CPU interpreter even for CUDA tensors. On CPU tensors the interpreter runs and the
      host clock times it: that measures the interpreter, and the result says so.
    - `warmup_ms`, `rep_ms`, `flush_l2`: passed to `do_bench`.

    >>> result = scale_add.bench(X, Y, baseline=lambda: X * 2 + 1)      # doctest: +SKIP
    >>> result.timing.median_ms, result.ratio                            # doctest: +SKIP
    """
    gpu = device_of(list(args) + list(kwargs.values())).startswith("cuda") and backend != "cpu"
    call_kwargs = {**kwargs, "backend": backend} if backend is not None else kwargs
    fn = lambda: kernel(*args, **call_kwargs)
    start = time.perf_counter()
    out = fn()
    sync(gpu)
    first = time.perf_counter() - start
    timing = do_bench(
        fn, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=flush_l2, device="cuda" if gpu else "cpu"
    )
    base_timing = base_name = None
    if baseline is not None:
        base_gpu = device_of(args).startswith("cuda")
        base_timing = do_bench(call_baseline(baseline, args), warmup_ms=warmup_ms, rep_ms=rep_ms,
                               flush_l2=flush_l2, device="cuda" if base_gpu else "cpu")
        base_name = baseline_name or callable_name(baseline)
    from_arguments = bytes is None
    nbytes = (nbytes_of(args) + nbytes_of([out])) if from_arguments else bytes
    notes = []
    if baseline is not None and not gpu and device_of(args).startswith("cuda"):
        notes.append(
            "the kernel ran on the CPU interpreter and the baseline on the GPU: the ratio compares the two"
        )
    return BenchResult(
        name or getattr(kernel, "__name__", "kernel"),
        describe(args),
        gpu,
        device_name(gpu),
        timing,
        flops=flops,
        nbytes=nbytes or None,
        bytes_from_arguments=from_arguments,
        baseline_timing=base_timing,
        baseline_name=base_name,
        first_call_s=first,
        notes=notes,
    )


def normalize_args(made) -> tuple[tuple, dict]:
    """What a `make_args` callable returned, as (args, kwargs)."""
    if isinstance(made, dict):
        return (), dict(made)
    if (
        isinstance(made, tuple)
        and len(made) == 2
        and isinstance(made[0], (tuple, list))
        and isinstance(made[1], dict)
    ):
        return tuple(made[0]), dict(made[1])
    if isinstance(made, (tuple, list)):
        return tuple(made), {}
    return (made,), {}


def error_text(err: BaseException) -> str:
    """`Type: message (file.py:123)` of the innermost frame."""
    last = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
    where = f" ({last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
    return f"{type(err).__name__}: {getattr(err, 'message', None) or err}{where}"


def sweep(kernel, params: dict[str, Iterable], make_args: Callable | dict | None = None, *,
          args: tuple | None = None, kwargs: dict | None = None, flops: float | Callable | None = None,
          bytes: float | Callable | None = None, baseline: Callable | None = None,
          baseline_name: str | None = None, results: str | os.PathLike | None = None, progress="auto",
          backend: str | None = None, device: str | None = None, compile: bool | None = None,
          x: str | None = None, name: str | None = None, warmup_ms: float = 10.0, rep_ms: float = 50.0,
          flush_l2: bool = True) -> SweepResult:
    """Time `kernel` under every combination of `params` (name -> list of values) and return a `SweepResult`.

    Names that are compile-time parameters of the kernel (`block_M`) are passed to each call; the
    others are for the inputs: consts of the kernel (`M`, `N`, `K`) or keys your `make_args`
    reads. Inputs, per configuration:

    - `make_args=callable(config) -> arguments` (a tuple, a dict of keywords, or `(args, kwargs)`);
    - `args=(A, B, C)`: the same tensors for every configuration (sweep compile-time parameters only);
    - neither (or `make_args={"K": 256}`, fixed values): random tensors shaped by the kernel's annotations
      (`make_inputs`), on `device` (default: "cuda" when torch sees a GPU).

    `flops` / `bytes`: numbers or functions of the config (default bytes: tensor arguments and outputs,
    once each). `baseline`: timed on each configuration's inputs (`lambda A, B, C: torch.matmul(A, B)`,
    or zero-argument). `results`: a JSON file rewritten after every configuration. `progress`: "auto" (a
    widget bar in a Jupyter kernel with the notebook layer loaded, tqdm in a terminal, else a printed
    line per configuration), "print", "tqdm", None, or a reporter. `compile`: compile each configuration
    before running it, so compile errors and out-of-resources are recorded as such (default: on the
    GPU). `x`: the parameter on the plot's x axis. A configuration that raises is recorded with the
    stage and message, and the sweep goes on.
    """
    params = {k: list(v) for k, v in params.items()}
    compile_names = compile_time_names(kernel)
    fixed_values = dict(make_args) if isinstance(make_args, dict) else {}
    fixed_kwargs = dict(kwargs or {})
    maker = make_args if callable(make_args) else None
    if device is None:
        device = device_of(args or ()) if args else None
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = device.startswith("cuda") and backend != "cpu"
    do_compile = gpu if compile is None else compile
    configs = [dict(zip(params, combo, strict=True)) for combo in itertools.product(*params.values())]
    name = name or getattr(kernel, "__name__", "kernel")
    result = SweepResult(
        name,
        params,
        gpu=gpu,
        device_name=device_name(gpu),
        baseline_name=(baseline_name or callable_name(baseline)) if baseline is not None else None,
        results=str(results) if results is not None else None,
        x=x,
        date=datetime.datetime.now().isoformat(timespec="seconds"),
    )
    inputs_cache: dict = {}
    baseline_cache: dict = {}
    reporter = make_reporter(progress, len(configs), name)

    def inputs_for(config: dict) -> tuple[tuple, dict, tuple]:
        values = {**fixed_values, **config}
        compile_part = {k: v for k, v in values.items() if k in compile_names}
        other = {k: v for k, v in values.items() if k not in compile_names}
        key = tuple(sorted((k, repr(v)) for k, v in other.items()))
        if maker is not None:
            if key not in inputs_cache:
                inputs_cache[key] = normalize_args(maker(dict(values)))
            a, kw = inputs_cache[key]
            return a, {**fixed_kwargs, **kw, **compile_part}, key
        if args is not None:
            return tuple(args), {**fixed_kwargs, **compile_part}, key
        if key not in inputs_cache:
            inputs_cache[key] = make_inputs(kernel, device=device, **values)
        # consts go with the call too: a const no tensor dim carries needs them, and they match the tensors
        return inputs_cache[key], {**fixed_kwargs, **other, **compile_part}, key

    def work(amount, config: dict):
        return amount(config) if callable(amount) else amount

    for config in configs:
        point = SweepPoint(config=dict(config))
        stage = "inputs"
        try:
            a, kw, key = inputs_for(config)
            stage = "compile" if do_compile else "elaborate"
            if do_compile:
                kernel.compile(*a, **kw)
            elif hasattr(kernel, "specialize"):
                kernel.specialize(*a, **kw)
            stage = "run"
            call_kw = {**kw, "backend": backend} if backend is not None else kw
            out = kernel(*a, **call_kw)
            sync(gpu)
            stage = "time"
            point.timing = do_bench(
                lambda a=a, kw=call_kw: kernel(*a, **kw),
                warmup_ms=warmup_ms,
                rep_ms=rep_ms,
                flush_l2=flush_l2,
                device="cuda" if gpu else "cpu",
            )
            f = work(flops, config) if flops is not None else None
            b = work(bytes, config) if bytes is not None else nbytes_of(a) + nbytes_of([out])
            point.tflops = _tflops(f, point.timing) if f else None
            point.gbps = _gbps(b, point.timing) if b else None
        except Exception as err:  # noqa: BLE001 - a failing config is a result, not the end of the sweep
            point.error, point.stage = error_text(err), stage
            point.timing = None
        if point.ok and baseline is not None:
            if key not in baseline_cache:
                try:
                    fn = call_baseline(baseline, a)
                    baseline_cache[key] = (
                        do_bench(
                            fn,
                            warmup_ms=warmup_ms,
                            rep_ms=rep_ms,
                            flush_l2=flush_l2,
                            device="cuda" if device.startswith("cuda") else "cpu",
                        ),
                        None,
                    )
                except Exception as err:  # noqa: BLE001 - a failing baseline is shown, not raised
                    baseline_cache[key] = (None, f"{type(err).__name__}: {err}")
            point.baseline_timing, point.baseline_error = baseline_cache[key]
        result.points.append(point)
        if results is not None:
            result.save(results)
        reporter.update(result, point, "time")
    reporter.close(result)
    return result

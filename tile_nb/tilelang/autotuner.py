"""`tilelang.autotuner` / `tilelang.autotune` on tile_nb: tilelang's autotuner API with a real search.

- `@tilelang.autotune(configs=...)` over a `@tilelang.jit` kernel. A call that gives any tuned parameter (by
  keyword or position) skips the search and runs what it gives (tilelang's rule; the others keep their
  defaults). Otherwise the first call for these arguments searches: every configuration is built, run
  once (the warm-up, which also compiles), checked against `ref_prog` when one is given (`rtol`,
  `atol`, `max_mismatched_ratio`, or `manual_check_prog(outputs, reference_outputs)`), then timed; the
  fastest wins and is kept for later calls with the same arguments. An eager kernel (tensors annotated
  in its body or signature) then runs with it on the call's tensors; `.compile(...)` returns the chosen
  kernel, with `.config` and `.latency`.
- `AutoTuner.from_kernel(kernel=factory, configs=...).set_compile_args(...).set_profile_args(...).run(warmup=,
  rep=, timeout=)`: the same search over
  `tilelang.jit(out_idx=..., target=..., pass_configs=...)(factory)(**config)`; the result has
  `.latency`, `.config`, `.kernel`, `.ref_latency`, `.libcode`, `.func` and `.table` (every configuration
  with its latency or why it was dropped).
- `with set_autotune_inputs(*tensors):` the inputs the search runs on (else: clones of the call's tensors,
  else inputs tile_nb makes from the kernel's annotations, as `kernel.get_profiler()`).

Timing: on a GPU (CUDA input tensors), `tile_nb.bench.do_bench` (warm-up `warmup` ms, `rep` ms of runs,
CUDA events, median). On the CPU interpreter (`tile_nb.run --cpu`), one run on the host clock after the
warm-up run: the interpreter's time ranks configurations by how much work it simulates, not by GPU speed,
and the output says so. A configuration the GPU lowering refuses (the interpreter's first run lowers it
and warns: too much shared memory,
...) is dropped there too, as it would not compile on the GPU.
`timeout` is accepted and not enforced (a configuration is not interrupted). Results are kept in this process
only (tilelang's disk cache of tuning results is not mapped). Per-configuration `pass_configs` may hold only
lowering hints tile_nb ignores; any other key is refused.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from ._support import UnsupportedTilelangAPI, forwarding_getattr, unsupported
from .profiler import TensorSupplyType

__all__ = ["autotune", "AutoTuner", "AutotuneResult", "set_autotune_inputs", "get_autotune_inputs"]

_PASS_CONFIGS = "pass_configs"   # a reserved key of a configuration: its pass_configs

# -- set_autotune_inputs -------------------------------------------------------------------------------------
_capture = threading.local()


def _stack() -> list:
    if not hasattr(_capture, "stack"):
        _capture.stack = []
    return _capture.stack


class _AutotuneInputs:
    def __init__(self, tensors: list):
        self.tensors = tensors

    def __enter__(self):
        _stack().append(self.tensors)
        return self

    def __exit__(self, *exc):
        _stack().pop()
        return False


def set_autotune_inputs(*args) -> _AutotuneInputs:
    """`with set_autotune_inputs(a, b):` searches inside the block run on these inputs (one list or tuple
    argument is the list of inputs)."""
    tensors = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
    return _AutotuneInputs(tensors)


def get_autotune_inputs() -> list | None:
    stack = _stack()
    return stack[-1] if stack else None


# -- results -------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class AutotuneResult:
    """The search's outcome: the fastest configuration, its latency (ms) and kernel; `table` has every
    configuration as (config, latency in ms or None, why it was dropped or None)."""

    latency: float | None = None
    config: dict | None = None
    ref_latency: float | None = None
    libcode: str | None = None
    func: Any = None
    kernel: Any = None
    timer: str = ""
    table: list = dataclasses.field(default_factory=list)


def _is_tensor(x) -> bool:
    return hasattr(x, "data_ptr") and hasattr(x, "shape")


def _clone(x):
    return x.clone() if _is_tensor(x) else x


def _expand(configs) -> list[dict]:
    """A list of dicts, from a list of dicts or a grid {name: [values]}."""
    if isinstance(configs, dict):
        names = list(configs)
        return [
            dict(zip(names, values, strict=True))
            for values in itertools.product(*(configs[n] for n in names))
        ]
    configs = list(configs or [])
    for c in configs:
        if not isinstance(c, dict):
            raise TypeError(
                f"tilelang.autotune(configs=...): each configuration is a dict of parameter values; got {c!r}"
            )
    return configs


def _config_values(config: dict) -> dict:
    """The configuration's parameter values; its `pass_configs` may only hold hints tile_nb ignores."""
    hints = config.get(_PASS_CONFIGS)
    if hints:
        from . import _pass_configs

        # a key tile_nb honors (fast math) would need its own kernel per config
        build, lowering, _ = _pass_configs(hints)
        if build or lowering:
            raise unsupported("tilelang.autotune configs with pass_configs "
                              f"{sorted(str(getattr(k, 'value', k)) for k in hints)}",
                              "only lowering hints tile_nb ignores may vary per configuration")
    return {k: v for k, v in config.items() if k != _PASS_CONFIGS}


def _outputs(x) -> list:
    if x is None:
        return []
    if _is_tensor(x):
        return [x]
    return list(x)


def _check(outputs, reference, profile: dict) -> str | None:
    """Why `outputs` do not match `reference` (None when they do)."""
    from .utils.tensor import torch_assert_close

    got, want = _outputs(outputs), _outputs(reference)
    if profile.get("manual_check_prog") is not None:
        try:
            profile["manual_check_prog"](got, want)
        except AssertionError as e:
            return f"manual_check_prog: {str(e).splitlines()[0] if str(e) else 'AssertionError'}"
        return None
    if not got:
        return "the kernel returned no outputs to compare with ref_prog (return them, or use out_idx=)"
    if len(got) != len(want):
        return f"the kernel returned {len(got)} outputs, ref_prog {len(want)}"
    for i, (a, e) in enumerate(zip(got, want, strict=True)):
        try:
            torch_assert_close(a, e, rtol=profile["rtol"], atol=profile["atol"],
                               max_mismatched_ratio=profile["max_mismatched_ratio"], check_dtype=False,
                               check_device=False)
        except AssertionError as err:
            return f"output {i} differs from ref_prog: {str(err).splitlines()[0]}"
    return None


def _on_gpu(inputs) -> bool:
    tensors = [t for t in inputs if _is_tensor(t)]
    return bool(tensors) and tensors[0].device.type == "cuda"


def _time(call: Callable, gpu: bool, warmup: float, rep: float) -> float:
    if gpu:
        from ..bench import do_bench

        return do_bench(call, warmup_ms=float(warmup), rep_ms=float(rep)).median_ms
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


def _first_run(call: Callable):
    """Run `call()` once: (its outputs, why the CUDA lowering refuses the kernel or None). On the
    interpreter the first run of a specialization also lowers it for the GPU and warns
    (NotLowerableWarning) when the lowering refuses it (too much shared memory, ...): such a configuration
    would not compile on the GPU, so the search drops it, as tilelang drops configurations that fail to
    compile. Other warnings pass through."""
    import warnings

    from ..jit import NotLowerableWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = call()
    refused = None
    for w in caught:
        text = str(w.message)
        if issubclass(w.category, NotLowerableWarning) and "refuses it" in text:
            refused = next((line for line in text.splitlines()[1:] if line.strip()), text)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return outputs, refused


_DEFAULT_PROFILE = dict(warmup=25, rep=100, timeout=30, supply_type=TensorSupplyType.Auto, ref_prog=None,
                        supply_prog=None, rtol=1e-2, atol=1e-2, max_mismatched_ratio=0.01, skip_check=False,
                        manual_check_prog=None, cache_input_tensors=False, backend="event")


def _search(name: str, configs: list[dict], prepare: Callable, profile: dict, warmup: float, rep: float,
            ) -> AutotuneResult:
    """Try every configuration: `prepare(values) -> (call, inputs, kernel)` builds one (`call()` runs it on
    `inputs`); check it against ref_prog, time it, keep the fastest."""
    if not configs:
        raise ValueError(f"{name}: no configurations to tune")
    result = AutotuneResult()
    best_inputs: list = []
    ref_prog = None if profile["skip_check"] else profile["ref_prog"]
    for config in configs:
        values = _config_values(config)
        try:
            call, inputs, kernel = prepare(values)
            outputs, refused = _first_run(call)    # the warm-up run: compiles, and gives the outputs to check
            if refused is not None:
                result.table.append((config, None, f"the GPU lowering refuses it: {refused}"))
                continue
            if ref_prog is not None:
                reference = ref_prog(*[t for t in inputs if _is_tensor(t)] if inputs else [])
                why = _check(outputs, reference, profile)
                if why is not None:
                    result.table.append((config, None, why))
                    continue
            gpu = _on_gpu(inputs)
            latency = _time(call, gpu, warmup, rep)
        except UnsupportedTilelangAPI:
            raise                                  # the same for every configuration: the user must see it
        except Exception as e:  # noqa: BLE001 - a configuration that does not build or run is dropped, as tilelang
            result.table.append(
                (config, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            )
            continue
        result.timer = (
            "GPU (tile_nb.bench.do_bench, median)" if gpu else "host clock, one run (CPU interpreter)"
        )
        result.table.append((config, latency, None))
        if result.latency is None or latency < result.latency:
            result.latency, result.config, result.kernel = latency, config, kernel
            best_inputs = inputs
    if result.config is None:
        lines = "\n".join(f"  {c}: {why}" for c, _, why in result.table)
        raise RuntimeError(
            f"{name}: auto-tuning found no configuration that ran and passed its check:\n{lines}"
        )
    if ref_prog is not None:
        inputs = [t for t in best_inputs if _is_tensor(t)]
        result.ref_latency = _time(lambda: ref_prog(*inputs), _on_gpu(inputs), warmup, rep)
    print(f"tile_nb autotune {name}: {len(configs)} configurations, best {result.config} at "
          f"{result.latency:.4g} ms ({result.timer})", file=sys.stderr)
    return result


def _supplied_inputs(profile: dict, kernel) -> list:
    """The inputs a search runs a built kernel on: set_autotune_inputs, supply_prog, or tile_nb's own."""
    captured = get_autotune_inputs()
    if captured is not None:
        return [_clone(t) for t in captured]
    if profile["supply_prog"] is not None:
        raise unsupported(
            "tilelang.autotune(supply_prog=)",
            "tile_nb cannot hand it tilelang's kernel parameters; "
            "give the inputs with `with tilelang.autotuner.set_autotune_inputs(...)`",
        )
    profiler = getattr(kernel, "get_profiler", None)
    if profiler is None:
        raise TypeError(
            f"no inputs to tune {type(kernel).__name__} on: give set_autotune_inputs(...) or supply_prog"
        )
    return list(profiler(profile["supply_type"])._inputs())


def _with_result(kernel, result: AutotuneResult):
    """Note the search on the kernel, as tilelang does (`kernel.config`, `kernel.latency`)."""
    for attr, value in (
        ("config", result.config),
        ("latency", result.latency),
        ("ref_latency", result.ref_latency),
    ):
        try:
            object.__setattr__(kernel, attr, value)
        except (AttributeError, TypeError):
            pass
    return kernel


def _kernel_source(kernel) -> str | None:
    try:
        return kernel.get_kernel_source()
    except Exception:  # noqa: BLE001 - the source is extra information; compiling it may need what is missing
        return None


# -- AutoTuner (tilelang's API mode) -------------------------------------------------------------------------
class AutoTuner:
    """tilelang's `AutoTuner.from_kernel(kernel=..., configs=...)`: `kernel(**config)` builds a
    `@T.prim_func`; `run()` compiles each configuration with `tilelang.jit` and the compile args,
    and searches (module docstring)."""

    def __init__(self, fn: Callable, configs):
        self.fn = fn
        self.configs = configs
        self.compile_args: dict = {}
        self.profile_args: dict = dict(_DEFAULT_PROFILE)

    @classmethod
    def from_kernel(cls, kernel: Callable, configs) -> AutoTuner:
        return cls(kernel, configs)

    def set_compile_args(
        self,
        out_idx=None,
        target=None,
        execution_backend=None,
        target_host=None,
        verbose=None,
        pass_configs=None,
    ) -> AutoTuner:
        self.compile_args = {
            "out_idx": out_idx,
            "target": target,
            "verbose": verbose,
            "pass_configs": pass_configs,
        }
        return self

    def set_profile_args(self, warmup: int = 25, rep: int = 100, timeout: int = 30,
                         supply_type: TensorSupplyType = TensorSupplyType.Auto, ref_prog: Callable = None,
                         supply_prog: Callable = None, rtol: float = 1e-2, atol: float = 1e-2,
                         max_mismatched_ratio: float = 0.01, skip_check: bool = False,
                         manual_check_prog: Callable = None, cache_input_tensors: bool = False,
                         backend: str = "event") -> AutoTuner:
        self.profile_args = dict(
            warmup=warmup,
            rep=rep,
            timeout=timeout,
            supply_type=supply_type,
            ref_prog=ref_prog,
            supply_prog=supply_prog,
            rtol=rtol,
            atol=atol,
            max_mismatched_ratio=max_mismatched_ratio,
            skip_check=skip_check,
            manual_check_prog=manual_check_prog,
            cache_input_tensors=cache_input_tensors,
            backend=backend,
        )
        return self

    def run(self, warmup: int = 25, rep: int = 100, timeout: int = 180, **_options) -> AutotuneResult:
        """Search (the options of tilelang's run: grouped compile, multi-GPU, early stop, are accepted and not
        used: tile_nb compiles each configuration on its first run)."""
        from . import jit

        configs = self.configs() if callable(self.configs) else self.configs
        compiled = jit(**{k: v for k, v in self.compile_args.items() if v is not None})(self.fn)
        name = getattr(self.fn, "__name__", "kernel")

        def prepare(values):
            kernel = compiled(**values)
            inputs = _supplied_inputs(self.profile_args, kernel)
            return (lambda: kernel(*inputs)), inputs, kernel

        result = _search(name, _expand(configs), prepare, self.profile_args, warmup, rep)
        _with_result(result.kernel, result)
        result.libcode = _kernel_source(result.kernel)
        return result

    __call__ = run


# -- @tilelang.autotune (decorator mode) ---------------------------------------------------------------------
def _is_factory(fn) -> bool:
    """Whether `fn` builds a `@T.prim_func` (tilelang's lazy style: calling it
    gives a kernel to call later)."""
    todo = [getattr(fn, "__code__", None)]
    while todo:
        code = todo.pop()
        if code is None:
            continue
        if "prim_func" in code.co_names:
            return True
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return False


def _call_key(args, kwargs) -> tuple:
    def norm(x):
        if _is_tensor(x):
            return ("tensor", tuple(x.shape), str(x.dtype), x.device.type)
        if isinstance(x, (list, tuple)):
            return tuple(norm(y) for y in x)
        if isinstance(x, dict):
            return tuple(sorted((k, norm(v)) for k, v in x.items()))
        try:
            hash(x)
            return x
        except TypeError:
            return ("id", id(x))
    return norm(args), norm(kwargs)


class AutoTuneImpl:
    """What `@tilelang.autotune(configs=...)` makes of a `@tilelang.jit` kernel (module docstring)."""

    def __init__(self, jit_impl, configs, profile: dict):
        self._jit = jit_impl
        self._configs = configs
        self._profile = profile
        self._chosen: dict = {}          # call key -> (config values, AutotuneResult)
        self._lock = threading.Lock()
        functools.update_wrapper(self, getattr(jit_impl, "__wrapped__", jit_impl), updated=())

    @property
    def _fn(self):
        return getattr(self._jit, "__wrapped__", self._jit)

    def _given(self, args, kwargs, tuned: set) -> set:
        try:
            names = [p.name for p in inspect.signature(self._fn).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            names = []
        return tuned & (set(kwargs) | set(names[:len(args)]))

    def __call__(self, *args, **kwargs):
        return self._call(args, kwargs, return_kernel=False)

    def compile(self, *args, **kwargs):
        """The chosen kernel (searching first if needed), with `.config` and `.latency`."""
        return self._call(args, kwargs, return_kernel=True)

    def _call(self, args, kwargs, return_kernel: bool):
        configs = self._configs(*args, **kwargs) if callable(self._configs) else self._configs
        configs = _expand(configs)
        tuned = {k for c in configs for k in c if k != _PASS_CONFIGS}
        lazy = _is_factory(self._fn)
        if self._given(args, kwargs, tuned):         # tilelang: tuned parameters given, no search
            if lazy:
                return self._jit(*args, **kwargs)
            return self._jit.compile(*args, **kwargs) if return_kernel else self._jit(*args, **kwargs)
        key = _call_key(args, kwargs)
        with self._lock:
            chosen = self._chosen.get(key)
        if chosen is None:
            result = self._search(args, kwargs, configs, lazy)
            chosen = (_config_values(result.config), result)
            with self._lock:
                self._chosen[key] = chosen
        values, result = chosen
        if lazy:
            return _with_result(result.kernel, result)
        if return_kernel:
            kernel = _with_result(self._jit.compile(*args, **kwargs, **values), result)
            return kernel
        return self._jit(*args, **kwargs, **values)

    def _search(self, args, kwargs, configs, lazy: bool) -> AutotuneResult:
        profile = self._profile
        name = getattr(self, "__name__", "kernel")
        captured = get_autotune_inputs()
        has_tensors = any(_is_tensor(a) for a in args)

        def prepare(values):
            if lazy:
                kernel = self._jit(*args, **kwargs, **values)
                inputs = _supplied_inputs(profile, kernel)
                return (lambda: kernel(*inputs)), inputs, kernel
            if captured is not None or has_tensors:   # eager: the kernel called on these inputs
                inputs = [_clone(t) for t in (captured if captured is not None else args)]
                return (lambda: self._jit(*inputs, **kwargs, **values)), inputs, None
            kernel = self._jit.compile(*args, **kwargs, **values)
            inputs = _supplied_inputs(profile, kernel)
            return (lambda: kernel(*inputs)), inputs, kernel

        return _search(name, configs, prepare, profile, profile["warmup"], profile["rep"])

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._jit, name)


def autotune(
    func=None,
    *,
    configs,
    warmup: int = 25,
    rep: int = 100,
    timeout: int = 100,
    supply_type: TensorSupplyType = TensorSupplyType.Auto,
    ref_prog: Callable = None,
    supply_prog: Callable = None,
    rtol: float = 1e-2,
    atol: float = 1e-2,
    max_mismatched_ratio: float = 0.01,
    skip_check: bool = False,
    manual_check_prog: Callable = None,
    cache_input_tensors: bool = False,
    do_not_specialize=None,
    early_stop: bool = False,
    early_stop_factor: float = 2.0,
):
    """tilelang.autotune: decorate a `@tilelang.jit` kernel with a configuration space (module docstring)."""
    if func is not None:
        raise TypeError(
            "tilelang.autotune needs configs: write @tilelang.autotune(configs=...) above @tilelang.jit"
        )
    if do_not_specialize:
        raise unsupported("tilelang.autotune(do_not_specialize=)")
    profile = dict(_DEFAULT_PROFILE, warmup=warmup, rep=rep, timeout=timeout, supply_type=supply_type,
                   ref_prog=ref_prog, supply_prog=supply_prog, rtol=rtol, atol=atol,
                   max_mismatched_ratio=max_mismatched_ratio, skip_check=skip_check,
                   manual_check_prog=manual_check_prog, cache_input_tensors=cache_input_tensors)

    def decorate(impl):
        if not callable(impl):
            raise TypeError(f"tilelang.autotune decorates a @tilelang.jit kernel; got {type(impl).__name__} "
                            "(put @tilelang.jit below @tilelang.autotune)")
        return AutoTuneImpl(impl, configs, profile)

    return decorate


__getattr__ = forwarding_getattr(__name__, "tilelang.autotuner", {})

"""tile_nb's stand-in for `tilelang`: what tile_nb can honor of tilelang's Python API, under tilelang's names,
so an unchanged tilelang script or notebook runs on tile_nb when you ask for it:

    python -m tile_nb.run script.py [args]          # `import tilelang` resolves here for that run
    %tilelang_on_tile_nb                            # the same in a notebook (after `%load_ext tile_nb`)

It is never installed by importing tile_nb, and a real tilelang is not hidden unless you say so (`--shadow`).
Mapped today: `tilelang.jit` / `lazy_jit` (kernels whose tensors are annotated in the body or the
signature; the object keeps `.compile(**consts)`, whose kernel has `get_kernel_source()` and
`get_profiler()`), `tilelang.language` (tile_nb.language, with tilelang's dtype aliases),
`tilelang.language.fp8`, `tilelang.cdiv`, `tilelang.math`, `tilelang.next_power_of_2`, `tilelang.autotune`
and `tilelang.autotuner` (a search: autotuner.py), `tilelang.compile` (a TVM PrimFunc),
`tilelang.PassConfigKey` (fast math: the build's fast_math and the lowering's approx_math; lowering hints
tile_nb decides itself are accepted and ignored), `tilelang.profiler.do_bench`, `tilelang.testing` (main,
requires_cuda*, set_random_seed), `tilelang.utils.tensor`, `disable_cache` / `enable_cache` /
`is_cache_enabled`, `tilelang.DataType`, `tilelang.carver` (arch, driver, MatmulTemplate hints),
`tilelang.tools.Analyzer`, `tilelang.contrib.nvcc` and `tilelang.tvm` (Apache TVM). Every other name raises
UnsupportedTilelangAPI: "tile_nb does not support tilelang.<name> yet". docs/tilelang.md has the details.
"""
from __future__ import annotations

import importlib
import inspect

from ._support import UnsupportedTilelangAPI, forwarding_getattr, unsupported

__version__ = "0.0.0+tile_nb"

# pass_configs keys: those tile_nb honors, and lowering hints it accepts, records in the kernel's
# `tile_nb.hints` and does not apply (its own lowering decides warp specialization, TMA and barriers; such a
# hint changes speed, never results), each with the reason the record gives.
_FAST_MATH = "tl.enable_fast_math"
_DEVICE_FLAGS = "tl.device_compile_flags"   # nvcc flags for the device compile: mapped as compile_flags are
_IGNORED_HINTS = {
    "tl.disable_warp_specialized": "tile_nb decides producer warps itself (LoweringOptions.producer_warp)",
    "tl.disable_tma_lower": "tile_nb decides where copies use TMA itself (LoweringOptions.tma)",
    "tl.disable_thread_storage_sync": "tile_nb places the block's barriers itself",
    "tl.ptxas_register_usage_level": "tile_nb's build leaves ptxas's register heuristics at their default",
    "tl.disable_safe_memory_legalize": "tile_nb keeps its bounds guards (an in-bounds access reads the same)",
}
# tilelang host-side choices, no meaning here
_JIT_IGNORED = {"execution_backend", "debug_root_path", "target_host"}


class _PassConfigKeyMeta(type):
    def __getattr__(cls, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise unsupported(f"tilelang.PassConfigKey.{name}")


class PassConfigKey(metaclass=_PassConfigKeyMeta):
    """The pass_configs keys tile_nb understands (their values are tilelang's key strings)."""
    TL_ENABLE_FAST_MATH = _FAST_MATH
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    TL_DISABLE_THREAD_STORAGE_SYNC = "tl.disable_thread_storage_sync"
    TL_PTXAS_REGISTER_USAGE_LEVEL = "tl.ptxas_register_usage_level"
    TL_DISABLE_SAFE_MEMORY_ACCESS = "tl.disable_safe_memory_legalize"
    TL_DEVICE_COMPILE_FLAGS = _DEVICE_FLAGS


def _key_name(key) -> str:
    return str(getattr(key, "value", key))


def _pass_configs(pass_configs: dict | None) -> tuple[dict, dict, list]:
    """tilelang's pass_configs as tile_nb's (build options, lowering options, hints recorded, not applied).
    'tl.enable_fast_math' (tilelang:
    nvcc --use_fast_math, off by default) sets both the build's `fast_math` and the lowering's
    `approx_math` (T.tanh, T.exp, T.exp2 as the GPU's approximate instructions, whatever the
    toolkit: tile_nb.lower.options). 'tl.device_compile_flags' (nvcc flags, e.g. ['--fmad=false']) maps as
    `compile_flags=` does (flags.py)."""
    from .flags import compile_flag_options

    build, lowering, hints = {}, {}, []
    for key, value in (pass_configs or {}).items():
        name = _key_name(key)
        if name == _FAST_MATH:
            build["fast_math"] = lowering["approx_math"] = bool(value)
        elif name == _DEVICE_FLAGS:
            build.update(compile_flag_options(value, "pass_configs[TL_DEVICE_COMPILE_FLAGS]"))
        elif name in _IGNORED_HINTS:
            hints.append(f"pass_configs {name}={value!r}: recorded, not applied ({_IGNORED_HINTS[name]})")
        else:
            raise unsupported(f"tilelang.jit(pass_configs={{{name!r}: ...}})")
    return build, lowering, hints


def _build_options(pass_configs: dict | None, compile_flags, where: str) -> tuple[dict, dict, list]:
    """(build options, lowering options, hints) from `pass_configs` and nvcc `compile_flags` (flags.py:
    `--use_fast_math` is nvcc's, so it sets the build's fast_math only); the two must agree on fast math."""
    from .flags import compile_flag_options

    build, lowering, hints = _pass_configs(pass_configs)
    flagged = compile_flag_options(compile_flags, where)
    if "fast_math" in flagged and build.get("fast_math") is False:
        raise unsupported(f"{where}(compile_flags=['--use_fast_math']) with pass_configs fast math off",
                          "the two ask for different math; keep one")
    return {**build, **flagged}, lowering, hints


def _target(target):
    if target is None or target == "auto":
        return None
    text = str(target)
    if text.split()[0] != "cuda":
        raise unsupported(
            f"tilelang.jit(target={text!r})", "tile_nb compiles for CUDA and interprets on the CPU"
        )
    return text


def _runtime_placeholder(value) -> bool:
    from ..language.annotations import TensorAnnotation, ptr

    return value is ptr or isinstance(value, TensorAnnotation)


class JITKernel:
    """What tilelang's `f.compile(**consts)` returns: a kernel with its compile-time values bound. Calling it
    calls the tile_nb kernel (compiled on CUDA tensors, interpreted on CPU tensors)."""

    def __init__(self, fn, args: tuple, kwargs: dict):
        self._fn = fn
        # T.ptr() / T.Tensor(...) stand where a runtime argument goes (tilelang's
        # configuration lists): not bound
        self._kwargs = {k: v for k, v in kwargs.items() if not _runtime_placeholder(v)}
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        # strict=False: compile() may be given fewer arguments than the function has
        for name, value in zip(names, args, strict=False):
            if not hasattr(value, "data_ptr") and not _runtime_placeholder(value):
                self._kwargs.setdefault(name, value)
        # what compile() was given, for compiled(): tensors (they say the shapes) by position up to the first
        # value bound by name, the rest by name (`f.compile(x, 8).get_kernel_source()` with `def f(X, blk_m)`
        # passed blk_m twice)
        split = next((i for i, v in enumerate(args)
                      if not hasattr(v, "data_ptr") and not _runtime_placeholder(v)),
                     len(args))
        self._args = args[:split]
        self._compile_kwargs = dict(zip(names[split:], args[split:], strict=False)) | self._kwargs

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **{**self._kwargs, **kwargs})

    @property
    def tile_nb_kernel(self):
        return self._fn

    def compiled(self):
        """tile_nb's compiled kernel (CUDA source, PTX, resources): compiling needs no GPU."""
        return self._fn.compile(*self._args, **self._compile_kwargs)

    def get_kernel_source(self, *args, **kwargs) -> str:
        return self.compiled().cuda_source

    def get_profiler(self, tensor_supply_type=None):
        from .profiler import Profiler

        return Profiler(self, tensor_supply_type)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise unsupported(f"tilelang JITKernel.{name}")

    def __repr__(self) -> str:
        return f"<tilelang kernel on tile_nb: {self._fn!r}>"


class JITImpl:
    """What `@tilelang.jit` returns: calls go to the tile_nb kernel; `.compile(**consts)` binds
    compile-time values (tilelang's spelling); other tile_nb kernel attributes (`template`,
    `specialize`, `bench`, ...) pass through."""

    def __init__(self, fn, **options):
        from .. import jit as _jit
        from ..factory import KernelFactory

        self._tile_nb = _jit(fn, **options)
        self._factory = isinstance(self._tile_nb, KernelFactory)  # read once: calls run per forward pass
        # a factory's kernel -> its JITKernel, so a repeated call gives the same object
        self._wrappers: dict = {}
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args, **kwargs):
        if self._factory:  # a @T.prim_func factory: the call gives the kernel
            kernel = self._tile_nb(*args, **kwargs)   # the factory keeps one kernel per argument values
            wrapped = self._wrappers.get(kernel)
            if wrapped is None:
                wrapped = self._wrappers[kernel] = JITKernel(kernel, (), {})
            return wrapped
        return self._tile_nb(*args, **kwargs)

    def compile(self, *args, **kwargs) -> JITKernel:
        return JITKernel(self._tile_nb, args, kwargs)

    def par_compile(self, configs, num_workers=None, ignore_error: bool = False) -> list:
        """tilelang's warm-up of several configurations (dicts of keywords, or
        tuples of positional arguments):
        each becomes a kernel with those values bound. tile_nb compiles each on
        its first call (CUDA tensors)."""
        return [self.compile(**c) if isinstance(c, dict) else self.compile(*c) for c in configs]

    def get_kernel_source(self, *args, **kwargs) -> str:
        """The CUDA source of the kernel for these arguments (tensors or consts
        as keywords; no GPU needed)."""
        return self._tile_nb.compile(*args, **kwargs).cuda_source

    def parse_cache_key(self, *args, **kwargs) -> tuple:
        """The key a call with these arguments is cached under: its compile-time values and const values (the
        dims read from its tensors), as tile_nb's `call_values` gives them. Nothing is compiled."""
        compile_values, consts = self._tile_nb.call_values(*args, **kwargs)
        return tuple(sorted(compile_values.items(), key=lambda kv: kv[0])), tuple(sorted(consts.items()))

    def get_tir(self, *args, **kwargs):
        """The phase-2 IR (a TVM PrimFunc) for these arguments: tensors, or tensor annotations
        (`T.Tensor((128, 128))`) standing for tensors of that shape and dtype, and consts as keywords."""
        return self._tile_nb.specialize(*[_shape_only(a) for a in args],
                                        **{k: _shape_only(v) for k, v in kwargs.items()})

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._tile_nb, name)

    def __repr__(self):
        return f"<tilelang.jit on tile_nb: {self._tile_nb!r}>"


def _shape_only(value):
    """A tensor annotation given where a tensor goes: a tensor of that shape,
    strides and dtype without data."""
    from ..language.annotations import TensorAnnotation
    from ..language.dtypes import torch_dtype

    if not isinstance(value, TensorAnnotation):
        return value
    dims = tuple(value.shape) + tuple(value.strides or ())
    if not all(isinstance(d, int) for d in dims):
        raise TypeError(f"{value!r} stands for a tensor here, so its dims must be ints; got {dims}")
    import torch

    if value.strides is None:
        return torch.empty(value.shape, dtype=torch_dtype(value.dtype), device="meta")
    return torch.empty_strided(value.shape, value.strides, dtype=torch_dtype(value.dtype), device="meta")


def par_compile(funcs, num_workers: int | None = None, ignore_error: bool = False, target=None,
                pass_configs=None, **options) -> list:
    """tilelang.par_compile: `tilelang.compile` of each function (TVM PrimFuncs, such as `f.get_tir(...)`
    gives, or `@T.prim_func`s), several at once; with `ignore_error`, a function that fails gives None."""
    from concurrent.futures import ThreadPoolExecutor

    def one(func):
        try:
            return compile(func, target=target, pass_configs=pass_configs, **options)
        except Exception:  # noqa: BLE001 - tilelang's ignore_error: the caller asked to go on
            if ignore_error:
                return None
            raise

    funcs = list(funcs)
    with ThreadPoolExecutor(max_workers=max(1, min(num_workers or 4, len(funcs) or 1))) as pool:
        return list(pool.map(one, funcs))


def jit(
    func=None, *, out_idx=None, target=None, verbose=None, pass_configs=None, compile_flags=None, **options
):
    """tilelang.jit on tile_nb: kernels annotated in the body or the signature, and `@T.prim_func` kernel
    factories (tile_nb.jit makes both). Honored: `out_idx`, `verbose`, `target` (CUDA), `pass_configs` fast
    math (the lowering option approx_math and the build's fast_math; lowering hints that tile_nb decides
    itself are recorded in the kernel's `tile_nb.hints`, not applied), `compile_flags` that map onto tile_nb's
    build (flags.py). Refused with UnsupportedTilelangAPI: other compile flags, targets and pass_configs
    keys."""
    for key in options:
        if key not in _JIT_IGNORED:
            raise unsupported(f"tilelang.jit({key}=)")
    compile_options, lowering, hints = _build_options(pass_configs, compile_flags, "tilelang.jit")
    tile_nb_target = _target(target)

    def decorate(fn):
        from ..language.functions import PrimFuncDefinition

        if not (inspect.isfunction(fn) or isinstance(fn, PrimFuncDefinition)):
            raise unsupported(f"tilelang.jit of a {type(fn).__name__}")
        return JITImpl(
            fn,
            target=tile_nb_target,
            verbose=bool(verbose),
            compile_options=compile_options or None,
            options=lowering or None,
            out_idx=out_idx,
            hints=hints,
        )

    return decorate if func is None else decorate(func)


lazy_jit = jit


def compile(
    func,
    out_idx=None,
    target=None,
    pass_configs=None,
    compile_flags=None,  # noqa: A001 - tilelang's name
    **options,
):
    """tilelang.compile: of a `@T.prim_func` (sizes in its signature), a kernel with `out_idx` honored; of a
    TVM PrimFunc, `tile_nb.runtime.compile` for CUDA (no `out_idx`)."""
    import tvm

    from ..language.functions import PrimFuncDefinition

    for key in options:
        if key not in _JIT_IGNORED:
            raise unsupported(f"tilelang.compile({key}=)")
    compile_options, lowering, hints = _build_options(pass_configs, compile_flags, "tilelang.compile")
    if isinstance(func, PrimFuncDefinition):
        from .. import jit as _jit

        kernel = _jit(
            func,
            target=_target(target),
            compile_options=compile_options or None,
            options=lowering or None,
            out_idx=out_idx,
            hints=hints,
        )
        return JITKernel(kernel, (), {})
    if out_idx is not None:
        raise unsupported("tilelang.compile(out_idx=) of a TVM PrimFunc")
    if not isinstance(func, tvm.tirx.PrimFunc):
        raise unsupported(f"tilelang.compile of a {type(func).__name__}",
                          "it takes a @T.prim_func or a TVM PrimFunc")
    from .. import runtime

    return runtime.compile(func, _target(target), options=compile_options or None, lowering=lowering or None)


def cdiv(a, b):
    """ceil(a / b): Python ints on the host, T.ceildiv on IR expressions."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    from .. import language as T

    return T.ceildiv(a, b)


def next_power_of_2(x: int) -> int:
    return 1 if x <= 1 else 1 << (int(x) - 1).bit_length()


def _submodule(name):
    return lambda: importlib.import_module(f"{__name__}.{name}")


def _tvm():
    import tvm

    return tvm


def _autotune():
    from .autotuner import autotune

    return autotune


def _engine(name):
    """tilelang's `tilelang.register_cuda_postproc` & co. (engine/callback.py)"""
    return lambda: getattr(importlib.import_module(f"{__name__}.engine.callback"), name)


def _supply_type():
    from .profiler import TensorSupplyType

    return TensorSupplyType


__getattr__ = forwarding_getattr(__name__, "tilelang", {
    "language": _submodule("language"), "testing": _submodule("testing"), "profiler": _submodule("profiler"),
    "math": _submodule("math"), "tvm": _tvm, "TensorSupplyType": _supply_type,
    "autotune": _autotune, "autotuner": _submodule("autotuner"), "utils": _submodule("utils"),
    "carver": _submodule("carver"), "contrib": _submodule("contrib"), "DataType": lambda: _tvm().DataType,
    **{name: _engine(name) for name in ("register_cuda_postproc", "register_hip_postproc",
                                        "register_c_postproc")},
}, package=True)

__all__ = [
    "jit",
    "lazy_jit",
    "compile",
    "par_compile",
    "cdiv",
    "next_power_of_2",
    "PassConfigKey",
    "JITImpl",
    "JITKernel",
    "UnsupportedTilelangAPI",
]


# -- tilelang's kernel cache switches: tile_nb's disk cache of compiled kernels (tile_nb.runtime.cache) ------
def disable_cache() -> None:
    """tilelang.disable_cache: turn tile_nb's disk cache of compiled kernels off for this process and the
    processes it starts (it sets TILE_NB_DISABLE_CACHE=1, read at every compile). Kernels already compiled in
    this process stay in memory; the results of a kernel never depend on the cache."""
    import os

    os.environ["TILE_NB_DISABLE_CACHE"] = "1"


def enable_cache() -> None:
    """tilelang.enable_cache: turn tile_nb's disk cache back on (removes TILE_NB_DISABLE_CACHE)."""
    import os

    os.environ.pop("TILE_NB_DISABLE_CACHE", None)


def is_cache_enabled() -> bool:
    """Whether tile_nb's disk cache of compiled kernels is on
    (TILE_NB_DISABLE_CACHE is not set to a true value)."""
    from ..runtime.cache import cache_enabled

    return cache_enabled()

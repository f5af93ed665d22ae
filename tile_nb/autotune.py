"""`@tile_nb.autotune`: a kernel that picks its fastest configuration per shapes, searching only once.

```python
@tile_nb.autotune(
    configs={"block_M": [64, 128], "block_N": [128, 256], "num_stages": [2, 3]}, key=["M", "N", "K"]
)
@tile_nb.jit
def gemm(A, B, C, block_M: int = 128, block_N: int = 128, block_K: int = 32, num_stages: int = 3):
    ...

# first call for these shapes: searches (or reads the stored result), then runs the best
gemm(A, B, C)
gemm(A, B, C)           # later calls: the chosen configuration, no search
gemm.tune(A, B, C)      # the search itself, as a TuneResult (a table and plot in a notebook)
gemm.stored()           # stored results of this kernel; gemm.clear_stored() deletes them
```

On the first call for a tuning key (the consts named by `key`, default all of them, plus the compile-time
arguments that are not tuned) the kernel looks in this process's memory, then in the tuning store on disk (any
process, same kernel source, device and versions), and only then searches (`tile_nb.bench.tuning`). Calls on
CPU tensors run the CPU interpreter with the first configuration (tuning needs a GPU) and say so once.
Everything else (`template`, `specialize`, `compile`, `show`, `bench`, ...) is the wrapped `JITFunction`'s.
"""
from __future__ import annotations

import functools
import threading
import types
import warnings
from typing import Any

from ._locks import KeyedLocks, build_once
from .jit import JITFunction, jit

__all__ = ["Autotuner", "autotune"]

# `options` is a whole tile_nb.bench.TuneOptions; the other names replace its
# fields (tile_nb.bench.tuning.tune)
_TUNE_OPTIONS = {"options", "progress", "pool", "workers", "flops", "bytes", "warmup_ms", "rep_ms", "confirm",
                 "rounds", "max_spill_bytes", "compile_timeout_s", "restore", "store"}


class NoConfigurationError(RuntimeError):
    """Every configuration failed or was pruned; the message has the search's table."""


class Autotuner:
    """A `JITFunction` with a configuration space; see the module docstring.
    Build one with `tile_nb.autotune`."""

    def __init__(self, kernel: JITFunction, configs, key: list[str] | None = None, **tune_options):
        from .bench.tuning import check_config_names, expand_configs

        unknown = sorted(set(tune_options) - _TUNE_OPTIONS)
        if unknown:
            raise TypeError(f"autotune() got unknown option(s) {unknown}; options: {sorted(_TUNE_OPTIONS)}")
        self.kernel = kernel
        self.configs = expand_configs(configs)
        check_config_names(kernel, self.configs)
        self.tuned = {k for c in self.configs for k in c}
        self.key = list(key) if key is not None else None
        self.tune_options = tune_options
        self.results: dict[tuple, Any] = {}     # tuning key -> TuneResult (this process)
        self._chosen: dict[tuple, dict] = {}    # tuning key -> configuration
        self._fast: dict[tuple, dict] = {}      # call shapes -> configuration
        self._warned_cpu = False
        self.stats = {"searched": 0, "from_store": 0, "from_memory": 0}
        self._stats_lock = threading.Lock()
        self._searching = KeyedLocks()
        functools.update_wrapper(self, kernel.fn)

    def __getattr__(self, name: str):
        if name == "kernel":   # not set yet (during unpickling or a failed __init__)
            raise AttributeError(name)
        return getattr(self.kernel, name)

    def __repr__(self) -> str:
        return f"<tile_nb autotuned kernel {self.kernel.definition.name}: {len(self.configs)} configs>"

    # -- calls -----------------------------------------------------------------------------------------------
    def __call__(self, *args, backend: str | None = None, **kwargs):
        if backend is not None:
            kwargs["backend"] = backend
        fast = self._fast_key(args, kwargs)
        config = self._fast.get(fast) if fast is not None else None
        if config is None:
            config = self.config_for(*args, **{k: v for k, v in kwargs.items() if k != "backend"})
            if fast is not None:
                if len(self._fast) >= 256:   # many shapes (or tensors passed by keyword): start over
                    self._fast.clear()
                self._fast[fast] = config
        return self.kernel(*args, **kwargs, **config)

    def _fast_key(self, args, kwargs) -> tuple | None:
        """What decides the configuration of a call, cheaply: tensor shapes, dtypes and devices, other values,
        keywords (None when one is unhashable: then the full lookup runs)."""
        parts: list = [tuple(sorted(kwargs.items(), key=lambda kv: kv[0]))] if kwargs else []
        if kwargs:
            try:
                hash(parts[0])
            except TypeError:
                return None
        for a in args:
            if hasattr(a, "data_ptr") and hasattr(a, "shape"):
                parts.append((tuple(a.shape), a.dtype, a.device.type))
            else:
                try:
                    hash(a)
                except TypeError:
                    return None
                parts.append((type(a), a))
        if self.kernel._reads_environment:
            parts.append(self.kernel._environment_key())
        return tuple(parts)

    def config_for(self, *args, **kwargs) -> dict:
        """The configuration a call with these arguments runs: chosen before, stored, or searched now."""
        from .bench.tuning import ConfigError, tuning_key

        clash = sorted(self.tuned & set(kwargs))
        if clash:
            raise ConfigError(f"{self.__name__}(): {', '.join(clash)} is chosen by autotune; do not pass it "
                              f"(call {self.__name__}.kernel(...) to run a configuration of your own)")
        from .bench import tuning

        if not tuning.gpu_available(args)[0] or not any(hasattr(a, "data_ptr") for a in args):
            if not self._warned_cpu:
                warnings.warn(
                    f"{self.__name__}: CPU tensors run on the interpreter with the first configuration "
                    f"{self.configs[0]} (tuning needs CUDA tensors)",
                    stacklevel=3,
                )
                self._warned_cpu = True
            return dict(self.configs[0])
        key_values = tuning_key(self.kernel, args, {**kwargs, **self.configs[0]}, self.tuned, self.key)
        memo = tuple(sorted((k, repr(v)) for k, v in key_values.items()))
        config = self._chosen.get(memo)
        if config is not None:
            self._count("from_memory")
            return config
        # Threads calling with new shapes at once: one searches, the others wait for its choice.
        return build_once(
            self._chosen, memo, lambda: self._choose(memo, key_values, args, kwargs), self._searching
        )

    def _choose(self, memo: tuple, key_values: dict, args, kwargs) -> dict:
        result = self._search(args, kwargs, self.configs)
        if result.best_config is None:
            raise NoConfigurationError(f"{self.__name__}: no configuration of {len(self.configs)} ran for "
                                       f"{key_values}:\n{result.table()}")
        self._count("from_store" if result.from_cache else "searched")
        self.results[memo] = result
        return dict(result.best_config)

    def _count(self, what: str) -> None:
        with self._stats_lock:
            self.stats[what] += 1

    def _search(self, args, kwargs, configs, **overrides):
        from .bench.tuning import tune

        options = {**self.tune_options, **overrides}
        return tune(self.kernel, configs, *args, key=self.key, **options, **kwargs)

    def bench(self, *args, **kwargs):
        """Time a call with the configuration calls run (`tile_nb.bench.bench`): the
        chosen one for these shapes."""
        from .bench import bench

        return bench(self, *args, **kwargs)

    # -- the search and the store ----------------------------------------------------------------------------
    def tune(self, *args, configs=None, **kwargs):
        """Search now (or read the stored result) and return the `TuneResult`; `configs` defaults to the
        decorator's. Options as `tile_nb.bench.tuning` (`force=True` searches again
        even if a result is stored)."""
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in _TUNE_OPTIONS | {"force", "results"}}
        result = self._search(args, kwargs, self.configs if configs is None else configs, **options)
        if configs is None and result.best_config is not None:
            from .bench.tuning import tuning_key

            key_values = tuning_key(self.kernel, args, {**kwargs, **self.configs[0]}, self.tuned, self.key)
            memo = tuple(sorted((k, repr(v)) for k, v in key_values.items()))
            self.results[memo], self._chosen[memo] = result, dict(result.best_config)
            self._fast.clear()
        return result

    def stored(self) -> list:
        """Stored tuning results of this kernel (this source), oldest first."""
        from .bench.tune_store import TuneStore

        sha = self.kernel.identity()["source_sha256"]
        store = TuneStore()
        return [
            e
            for e in store.entries(self.kernel.definition.name)
            if ((store.load(e.key) or {}).get("material", {}).get("kernel", {}).get("source_sha256") == sha)
        ]

    def clear_stored(self) -> int:
        """Delete this kernel's stored results (this source) and forget the choices of this process."""
        from .bench.tune_store import TuneStore

        self._chosen.clear()
        self._fast.clear()
        self.results.clear()
        return TuneStore().clear(self.kernel.definition.name, self.kernel.identity()["source_sha256"])


def autotune(configs=None, key: list[str] | None = None, **options):
    """Decorate a kernel (a `@tile_nb.jit` function, or a plain function, which is jitted) with a
    configuration space to search per shapes.

    - `configs`: a list of dicts of compile-time values, or a grid `{"block_M": [64, 128], ...}`.
    - `key`: the consts whose values select a result (default: every const); compile-time arguments that are
      not tuned always do.
    - options for the search: `options=tile_nb.bench.TuneOptions(...)`, or these fields of it as keywords:
      `progress`, `pool`, `workers`, `flops`, `bytes`, `warmup_ms`, `rep_ms`, `confirm`, `rounds`,
      `max_spill_bytes`, `compile_timeout_s`, `restore`, `store`.
    """
    if configs is None:
        raise TypeError("autotune() needs configs=[{...}, ...] or a grid {'block_M': [64, 128], ...}")

    def wrap(fn):
        if isinstance(fn, Autotuner):
            fn = fn.kernel
        if isinstance(fn, types.FunctionType):
            fn = jit(fn)
        if not isinstance(fn, JITFunction):
            raise TypeError(
                f"tile_nb.autotune decorates a kernel or a Python function; got {type(fn).__name__}"
            )
        return Autotuner(fn, configs, key, **options)

    return wrap

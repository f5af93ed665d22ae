"""`compile(func, target)`: phase-2 PrimFunc -> CompiledKernel, through a memory cache and a disk cache.

    key  = sha256(specialized IR text, target, build options, tile_nb version + lower/backend sources,
                  TVM version)
    memory cache hit  -> the same CompiledKernel object
    disk cache hit    -> module.so loaded with TVM's runtime (no lowering, no nvcc)
    miss              -> tile_nb.lower.lower -> tile_nb.backend.build -> export -> publish to the disk cache

Timings (`kernel.timings`, seconds spent in this process): key, lower, codegen, cubin, export, cache_store on
a build; key, cache_load on a disk hit.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from .._locks import KeyedLocks
from ..backend import postproc
from ..backend.build import BuildOptions, build, cuda_runtime_loaded
from ..backend.cuda_host import build_launcher, cuda_host_source, load_launcher, refuse_ptx_target
from ..backend.resources import Resources
from ..backend.target import (
    device_arch,
    device_sm_count,
    launch_problem,
    resolve_target,
    target_arch,
    target_label,
)
from .cache import CacheWarning, CorruptEntry, DiskCache, cache_enabled, compute_key, key_material
from .kernel import CompiledKernel

__all__ = ["cache_key", "clear_cache", "clear_memory_cache", "compile", "with_device_facts"]

_memory: dict[str, CompiledKernel] = {}
_memory_lock = threading.Lock()
# one build per key at a time: a second thread asking for it waits and gets the same kernel
_building = KeyedLocks()


def clear_memory_cache() -> None:
    """Forget kernels held in this process (the disk cache stays)."""
    with _memory_lock:
        _memory.clear()


def clear_cache() -> None:
    """Forget kernels in memory and delete the disk cache folder's entries."""
    clear_memory_cache()
    DiskCache().clear()


def _entry_function(mod):
    """The PrimFunc of a module that the host calls, and its symbol: the one
    with a global_symbol, else main."""
    import tvm

    funcs = [(gv, f) for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    if not funcs:
        raise ValueError("the IRModule holds no PrimFunc to compile")
    for gv, f in funcs:
        if gv.name_hint == "main":
            return f, str(f.attrs["global_symbol"]) if f.attrs and "global_symbol" in f.attrs else "main"
    gv, f = funcs[0]
    return f, str(f.attrs["global_symbol"]) if f.attrs and "global_symbol" in f.attrs else gv.name_hint


def _param_names(func) -> tuple[str, ...]:
    """Parameter names in call order (TIRx names a tensor parameter after its buffer)."""
    return tuple(str(getattr(p, "name", None) or p.name_hint) for p in func.params)


def _lower(func, target, lowering=None):
    """Thread-level TIRx for tvm.compile and the lowering plan's summary: an IRModule is taken as already
    lowered (no plan); a PrimFunc goes through tile_nb.lower, under `lowering` (the kernel's options: see
    tile_nb.lower.options.resolve)."""
    import tvm

    if isinstance(func, tvm.IRModule):
        return func, None
    if not isinstance(func, tvm.tirx.PrimFunc):
        raise TypeError(f"compile() takes a tvm PrimFunc (phase-2 IR) or a lowered IRModule; got "
                        f"{type(func).__name__}")
    from ..lower import lower_with_plan, resolve

    name = str((func.attrs or {}).get("global_symbol", "main"))
    lowered, plan = lower_with_plan(func, target, options=resolve(func, lowering))
    return tvm.IRModule({name: lowered.with_attr("global_symbol", name)}), plan.summary()


def _lowering_key(func, lowering) -> dict[str, Any]:
    """The lowering options that differ from the defaults (the function's own attributes are in its IR text):
    part of the cache key when there are any."""
    import tvm

    if isinstance(func, tvm.IRModule) or lowering is None:
        return {}
    changed = lowering.changed()
    return {"lowering": changed} if changed else {}


def _postproc_key() -> dict[str, str]:
    """The registered CUDA post-processing callback (backend/postproc.py), when there is one: it changes the
    compiled code, so it is part of the key (which then holds for this process only: no disk cache)."""
    name = postproc.key()
    return {} if name is None else {"cuda_postproc": name}


def _key(func, target, build_options: BuildOptions, lowering=None) -> tuple[str, dict[str, Any]]:
    """The disk-cache key of `func` (device facts applied) for a resolved target and the kernel's lowering
    options (`current(...)`: without the function's attributes), and what it is made of."""
    material = key_material(_keyed_script(func), str(target),
                            dict(build_options.to_dict(), **_lowering_key(func, lowering), **_postproc_key()))
    return compute_key(material), material


def cache_key(func, target=None, options: dict[str, Any] | None = None, *, env: dict[str, str] | None = None,
              lowering=None) -> tuple[str, dict[str, Any]]:
    """The key `compile(func, target, options=options, lowering=lowering)` would use in this process, and its
    material; `env` stands for the environment (so a process can check a key another one computed)."""
    from ..lower.options import current

    options = dict(options or {})
    options.pop("cache", None)
    target = resolve_target(target)
    lowering = current(lowering, env)
    return _key(with_device_facts(func, target, lowering), target, BuildOptions.from_dict(options), lowering)


def with_device_facts(func, target=None, lowering=None):
    """The PrimFunc with what its lowering needs to know of this process's GPU, when it is built for it: the
    SM count (`tile_nb.sm_count`: the CTAs a persistent kernel launches), unless its options (`lowering`, the
    process's, the environment) set one or turn persistent CTAs off.
    Part of the IR text, so of the cache key: code that compiles elsewhere (tuning workers hide the GPU)
    applies it first."""
    import tvm

    from ..lower.options import resolve

    if not isinstance(func, tvm.tirx.PrimFunc):
        return func
    options = resolve(func, lowering)
    if options.sm_count is not None or options.persistent is False:
        return func
    if device_arch() != target_arch(resolve_target(target)):
        return func
    count = device_sm_count()
    return func if count is None else func.with_attr("tile_nb.sm_count", count)


def _keyed_script(func) -> str:
    """The IR text that keys the caches: without the source-line attributes, so moving a kernel down a few
    lines in its file or cell finds the kernel already built; with the metadata TVMScript would leave out (a
    long or multi-line string, such as T.import_source's code, is printed as `metadata[...][k]`)."""
    import tvm

    if isinstance(func, tvm.tirx.PrimFunc):
        from ..lower import LINE_ATTRS

        for name in LINE_ATTRS:
            func = func.without_attr(name)
    return func.script(show_meta=True)


def _launch_problem(target) -> str | None:
    """Why a kernel built for `target` cannot launch in this process, or None when it can."""
    if not cuda_runtime_loaded():
        return (
            "no CUDA driver in this process (TVM's CUDA runtime is not loaded); source, cubin and resources "
            "are available, launching needs a GPU"
        )
    return launch_problem(target, device_arch())  # a cubin of the device's arch, or PTX of an older one


def compile(func, target=None, *, options: dict[str, Any] | None = None, lowering=None) -> CompiledKernel:
    """Compile a phase-2 PrimFunc (or an already lowered IRModule) for CUDA and return a CompiledKernel.

    `target`: None (the GPU's arch, else sm_90a), "sm_80", "cuda -arch=sm_80", a dict or a tvm Target.
    `options`: build options (`compiler`: "auto" | "nvrtc" | "nvcc", `fast_math`, `ptxas_options`, `host`:
    "llvm" | "cuda_host", the leaner launch of backend/cuda_host.py, ~5 s more to build) and
    `cache` (default True; `TILE_NB_DISABLE_CACHE=1` turns the disk cache off everywhere).
    `lowering`: the kernel's lowering options (a `tile_nb.lower.LoweringOptions`, or a dict of its fields over
    the process's options and the environment); the function's `tile_nb.*` attributes override them.

    Example::

        kernel = compile(func, "sm_90a")
        kernel(a, b, c)
        kernel.cuda_source, kernel.resources, kernel.timings
    """
    start = time.perf_counter()
    options = dict(options or {})
    # a CUDA post-processing callback has no text that stays the same across processes: no disk cache with one
    use_disk = bool(options.pop("cache", True)) and cache_enabled() and postproc.key() is None
    build_options = BuildOptions.from_dict(options)
    if build_options.host == "cuda_host" and postproc.key() is not None:
        raise ValueError("build option host='cuda_host' builds TVM's host and device source in one unit, "
                         "which a CUDA post-processing callback is not applied to; unregister the callback "
                         "or use host='llvm' (the default)")
    target = resolve_target(target)
    arch = target_arch(target)
    if build_options.host == "cuda_host":  # before anything is built, also where no GPU is
        refuse_ptx_target(target_label(target))
    from ..lower.options import current

    lowering = current(lowering)  # resolved once: the key and the lowering read this value
    func = with_device_facts(func, target, lowering)
    key, _ = _key(func, target, build_options, lowering)
    problem = _launch_problem(target)
    timings = {"key": time.perf_counter() - start}

    with _memory_lock:
        kernel = _memory.get(key)
    if kernel is not None:
        return kernel
    with _building.hold(key):
        with _memory_lock:
            kernel = _memory.get(key)
        if kernel is not None:  # another thread built it while this one waited
            return kernel
        return _load_or_build(func, target, key, arch, problem, build_options, use_disk, timings, lowering)


def _load_or_build(func, target, key: str, arch: str, problem: str | None, build_options: BuildOptions,
                   use_disk: bool, timings: dict[str, float], lowering=None) -> CompiledKernel:
    """The kernel from the disk cache, else lowered and built (and published to the disk cache)."""
    import tvm

    disk = DiskCache()
    if use_disk:
        t = time.perf_counter()
        entry = disk.load(key, need_module=problem is None)
        if entry is not None:
            try:
                kernel = _kernel_from_entry(entry, target, load_module=problem is None)
            except Exception as err:  # noqa: BLE001 - an entry that verified but does not load: say so, rebuild
                warnings.warn(f"tile_nb: the cached kernel {entry.path} could not be loaded "
                              f"({type(err).__name__}: {err}); it is removed and rebuilt", CacheWarning,
                              stacklevel=2)
                disk.discard(entry.path)
                kernel = None
            if kernel is not None:
                kernel.not_launchable_reason = problem
                kernel.timings = dict(timings, cache_load=time.perf_counter() - t)
                return _remember(key, kernel)

    t = time.perf_counter()
    mod, plan = _lower(func, target, lowering)
    if isinstance(func, tvm.IRModule):
        entry_func, name = _entry_function(mod)
    else:
        entry_func, name = func, _symbol_of(func, mod)
    from ..lower.sourcemap import split_marks

    marked_ir = mod.script()
    lowered_ir, lowered_regions = split_marks(marked_ir)
    if not isinstance(func, tvm.IRModule):
        timings["lower"] = time.perf_counter() - t
    result = build(mod, target, build_options, take_marks=split_marks)
    timings.update(result.timings)
    kernel = CompiledKernel(
        name=name, target=target, arch=arch, params=_param_names(entry_func), cuda_source=result.cuda_source,
        lowered_ir=lowered_ir, cubin=result.cubin, compiler=result.compiler,
        resources_by_kernel=dict(result.resources), key=key, plan=plan, _ptx=result.ptx,
        source_regions={"lowered": lowered_regions, "cuda": result.source_regions})
    launcher = None
    if result.module is not None and problem is None:
        kernel._set_launch(result.module, result.module[name])
        if build_options.host == "cuda_host":
            t = time.perf_counter()
            folder = tempfile.mkdtemp(prefix="tile_nb_launcher_")
            try:
                launcher, _ = build_launcher(
                    cuda_host_source(mod, arch, split_marks, build_options), arch, folder
                )
                kernel._set_launch(*load_launcher(launcher, name))
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            timings["cuda_host"] = time.perf_counter() - t
    else:
        kernel.not_launchable_reason = problem or "TVM built no loadable module"

    if use_disk:
        _publish(
            disk,
            key,
            _key(func, target, build_options, lowering)[1],
            kernel,
            result,
            timings,
            launcher=launcher,
        )
    if launcher is not None:
        shutil.rmtree(launcher.parent, ignore_errors=True)   # loaded (and copied into the cache) already
    kernel.timings = timings
    kernel.build_timings = dict(timings)
    return _remember(key, kernel)


def _symbol_of(func, mod) -> str:
    if func.attrs is not None and "global_symbol" in func.attrs:
        return str(func.attrs["global_symbol"])
    return _entry_function(mod)[1]


def _remember(key: str, kernel: CompiledKernel) -> CompiledKernel:
    with _memory_lock:
        return _memory.setdefault(key, kernel)


# ------------------------------------------------------------------------------------------ disk entries

def _publish(disk: DiskCache, key: str, material: dict[str, Any], kernel: CompiledKernel, result,
             timings: dict[str, float], *, launcher: Path | None = None) -> None:
    """Write the entry. With a launchable module, export it as module.so (TVM links host code + cubin); a
    `cuda_host` launcher library is the entry's module.so instead."""
    files: dict[str, Any] = {"kernel.cu": kernel.cuda_source, "lowered.py": kernel.lowered_ir}
    if kernel.cubin is not None:
        files["kernel.cubin"] = kernel.cubin
    if kernel._ptx is not None:
        files["kernel.ptx"] = kernel._ptx
    with tempfile.TemporaryDirectory(prefix="tile_nb_export_") as tmp:
        # Export whenever TVM built a module, even one this process cannot launch (a tuning worker that keeps
        # off the GPU, or a build for another arch): the process that can launch it loads it from here.
        if launcher is not None:
            files["module.so"] = launcher
        elif result.module is not None:
            t = time.perf_counter()
            so_path = Path(tmp) / "module.so"
            try:   # links the host code with the system C++ compiler; without one, cache the artifacts only
                result.module.export_library(str(so_path))
                files["module.so"] = so_path
            except Exception as err:  # noqa: BLE001
                warnings.warn(
                    f"tile_nb: could not export the kernel module for the disk cache ({err}); a new "
                    f"process will rebuild it",
                    stacklevel=3,
                )
            timings["export"] = time.perf_counter() - t
        t = time.perf_counter()
        meta = {
            "name": kernel.name,
            "params": list(kernel.params),
            "arch": kernel.arch,
            "target": str(kernel.target),
            "compiler": kernel.compiler,
            "host": "cuda_host" if launcher is not None else "llvm",
            "resources": {k: r.to_dict() for k, r in kernel.resources_by_kernel.items()},
            "plan": kernel.plan,
            "source_regions": {
                text: {str(k): v for k, v in regions.items()}
                for text, regions in kernel.source_regions.items()
            },
            "build_timings": dict(timings),
            "material": material,  # so whoever receives the entry can recompute its key
        }
        try:
            path = disk.store(key, meta, files, replace="module.so" in files)
        except OSError as err:   # a read-only or full disk must not break compiling
            warnings.warn(f"tile_nb: could not write the kernel cache ({err}); continuing without it",
                          stacklevel=3)
            path = None
        timings["cache_store"] = time.perf_counter() - t
    kernel.cache_path = str(path or disk.entry_path(key))


_REQUIRED = {"name": str, "arch": str, "params": list, "key": str}


def _kernel_from_entry(entry, target, *, load_module: bool) -> CompiledKernel:
    meta = entry.meta
    wrong = [f"'{k}'" for k, kind in _REQUIRED.items() if not isinstance(meta.get(k), kind)]
    if wrong:
        raise CorruptEntry(f"meta.json lacks {', '.join(wrong)} (or has the wrong type)")
    kernel = CompiledKernel(
        name=meta["name"], target=target, arch=meta["arch"], params=tuple(meta["params"]),
        cuda_source=entry.text("kernel.cu") or "", lowered_ir=entry.text("lowered.py") or "",
        cubin=entry.files.get("kernel.cubin"), compiler=meta.get("compiler"),
        resources_by_kernel={k: Resources.from_dict(v) for k, v in meta.get("resources", {}).items()},
        build_timings=dict(meta.get("build_timings", {})), key=meta["key"], cache_path=str(entry.path),
        from_cache=True, plan=meta.get("plan"), _ptx=entry.text("kernel.ptx"),
        source_regions={text: {int(k): list(v) for k, v in regions.items()}
                        for text, regions in meta.get("source_regions", {}).items()},
        not_launchable_reason="the cached entry holds no loadable module")
    if load_module and entry.module_path is not None:
        if meta.get("host") == "cuda_host":
            kernel._set_launch(*load_launcher(entry.module_path, kernel.name))
        else:
            import tvm

            module = tvm.runtime.load_module(os.fspath(entry.module_path))
            kernel._set_launch(module, module[kernel.name])
        kernel.not_launchable_reason = None
    return kernel

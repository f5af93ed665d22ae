"""Thread-level TIRx IRModule -> CUDA source, cubin, resource use and (with a GPU) a loadable TVM module.

`tvm.compile(..., tir_pipeline=pipeline.PIPELINE)` (TVM's "tirx" pipeline and the launch tags of pipeline.py)
lowers the module, generates CUDA C++ and, when TVM's CUDA runtime is loaded (a GPU driver is present), asks
the global `tvm_callback_cuda_compile` for a binary. tile_nb installs its own callback so it chooses the
compiler (NVRTC or nvcc), keeps the ptxas report and PTX, and times the step. Without a driver TVM never calls
the callback and keeps the source only; the cubin is then made here, from the same source, so resource use is
known on CPU-only machines too (that module cannot launch).

A `compute_XY` target (target.py) is compiled the same way (the cubin for sm_XY checks that ptxas accepts the
code and gives its resources), but the callback hands TVM the PTX, which TVM loads as such (it tells PTX from
a cubin by the leading '/' of PTX's comment header), so the driver compiles it for whatever GPU runs it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import cuda_compile, extern_sources, postproc
from .cuda_compile import CubinResult
from .resources import Resources, dynamic_shared_by_kernel
from .target import resolve_target, target_arch, target_embeds_ptx

__all__ = ["BuildOptions", "BuildResult", "build", "cuda_runtime_loaded"]


@dataclass(frozen=True)
class BuildOptions:
    """Knobs of the CUDA build. All of them are part of the kernel cache key."""

    compiler: str = "auto"          # "auto" (NVRTC, else nvcc), "nvrtc" or "nvcc"
    fast_math: bool = True          # TVM's own default; approximate exp/log/division
    fmad: bool = True               # False: no multiply-add contraction (nvcc --fmad=false)
    ptxas_options: tuple[str, ...] = ()
    # the host function: TVM's LLVM host, or "cuda_host" (backend/cuda_host.py)
    host: str = "llvm"

    @classmethod
    def from_dict(cls, options: dict[str, Any] | None) -> BuildOptions:
        options = dict(options or {})
        known = {"compiler", "fast_math", "fmad", "ptxas_options", "host"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown build option(s) {unknown}; known options: {sorted(known)}")
        if "ptxas_options" in options:
            options["ptxas_options"] = tuple(options["ptxas_options"])
        if options.get("compiler", "auto") not in ("auto", "nvrtc", "nvcc"):
            raise ValueError(
                f"build option compiler must be 'auto', 'nvrtc' or 'nvcc'; got {options['compiler']!r}"
            )
        if options.get("host", "llvm") not in ("llvm", "cuda_host"):
            raise ValueError(f"build option host must be 'llvm' (TVM's LLVM host function, the default) or "
                             f"'cuda_host' (a leaner launch, built by nvcc); got {options['host']!r}")
        return cls(**options)

    def to_dict(self) -> dict[str, Any]:
        options = {
            "compiler": self.compiler,
            "fast_math": self.fast_math,
            "ptxas_options": list(self.ptxas_options),
        }
        # absent by default: the cache keys of existing kernels stay as they were
        if self.host != "llvm":
            options["host"] = self.host
        if not self.fmad:
            options["fmad"] = False
        return options


@dataclass
class BuildResult:
    """Everything one build produced. `module` is None when no GPU runtime is loaded in this process."""

    target: Any
    arch: str
    cuda_source: str
    module: Any = None                    # tvm.runtime.Executable, launchable
    cubin: bytes | None = None
    ptx: str | None = None
    compiler: str | None = None
    compile_log: str = ""
    resources: dict[str, Resources] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    skipped: str | None = None            # why no cubin was made, when none was
    source_regions: dict = field(default_factory=dict)   # what `take_marks` said of the generated source


def cuda_runtime_loaded() -> bool:
    """True when TVM's CUDA runtime is registered (it loads only where a driver, libcuda.so.1, exists)."""
    import tvm_ffi

    return tvm_ffi.get_global_func("device_api.cuda", allow_missing=True) is not None


# ------------------------------------------------------------------------------------------ compile callback

class _Capture:
    """One build's request to the callback: how to compile, and where the result goes."""

    def __init__(self, arch: str, options: BuildOptions, take_marks, ptx: bool = False):
        self.arch, self.options, self.take_marks, self.ptx = arch, options, take_marks, ptx
        self.results: list[tuple[str, dict, CubinResult]] = []


_state = threading.local()
_build_lock = threading.RLock()       # TVM's compile callback is process-global: one build at a time
_installed = False


def _callback(code: str, *_unused) -> bytes:
    """Registered as `tvm_callback_cuda_compile`. Outside a tile_nb build it defers to TVM's original."""
    capture: _Capture | None = getattr(_state, "capture", None)
    if capture is None:
        from tvm.support import nvcc as tvm_nvcc

        return tvm_nvcc.tvm_callback_cuda_compile(code)
    opts = capture.options
    code, regions = capture.take_marks(code)
    result = cuda_compile.compile_cuda(code, capture.arch, compiler=opts.compiler, fast_math=opts.fast_math,
                                       ptxas_options=opts.ptxas_options, fmad=opts.fmad)
    capture.results.append((code, regions, result))
    if capture.ptx:
        return _loadable_ptx(result, capture.arch, code, opts)
    return result.cubin


def _loadable_ptx(result: CubinResult, arch: str, code: str, options: BuildOptions) -> bytes:
    """The PTX of a compile, as TVM loads PTX: text whose first character is '/' (nvcc's and NVRTC's PTX start
    with a `//` comment header; one is added where it is missing). A compiler that kept none: `nvcc -ptx`."""
    ptx = result.ptx or cuda_compile.compile_ptx(code, arch, fast_math=options.fast_math, fmad=options.fmad)
    if not ptx:
        raise cuda_compile.CudaCompileError(result.compiler, arch, "the compiler kept no PTX and nvcc is not "
                                            "there to make it, so a compute_ target has nothing to load")
    result.ptx = ptx
    text = ptx if ptx.startswith("/") else "//\n" + ptx
    return text.encode()


def _install_callback() -> None:
    global _installed
    if _installed:
        return
    import tvm.support.nvcc  # noqa: F401 - registers TVM's callback first, so ours replaces it and not vice versa
    import tvm_ffi

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", _callback, override=True)
    # A Ctrl-C in nvcc crosses TVM's C++ on its way back; unregistered, it would come out as a RuntimeError.
    tvm_ffi.register_error("KeyboardInterrupt", KeyboardInterrupt)
    tvm_ffi.register_error("SystemExit", SystemExit)
    _installed = True


def _no_marks(code: str) -> tuple[str, dict]:
    return code, {}


@contextlib.contextmanager
def compiling_cuda(arch: str, options: BuildOptions, take_marks=None, *, ptx: bool = False):
    """Inside, TVM's CUDA compiles go through `cuda_compile` with `options` and `take_marks` applied (one
    build at a time: TVM's compile callback is process-global); the capture lists what was compiled. With
    `ptx`, TVM's module gets the PTX instead of the cubin."""
    with _build_lock:
        _install_callback()
        capture = _Capture(arch, options, take_marks or _no_marks, ptx)
        _state.capture = capture
        try:
            yield capture
        finally:
            _state.capture = None


# ------------------------------------------------------------------------------------------ the build

def build(mod, target=None, options: BuildOptions | dict | None = None, *,
          take_marks: Callable[[str], tuple[str, dict]] | None = None) -> BuildResult:
    """Compile a thread-level TIRx IRModule for CUDA.

    Example::

        result = build(tvm.IRModule({"main": func}), "sm_90a")
        result.cuda_source, result.resources, result.timings   # cubin/resources need NVRTC or nvcc

    Stages timed: `codegen` (TVM's lowering passes and CUDA codegen) and `cubin` (NVRTC/nvcc with ptxas).
    Each kernel's dynamic shared memory comes from `mod` (ptxas cannot see it: it is sized at launch).
    `take_marks(code) -> (code, regions)` takes the lowering's source marks out of the
    generated CUDA before it is compiled (tile_nb.lower.sourcemap.split_marks); the result
    keeps the code without them and the regions.
    """
    import tvm

    from . import pipeline  # loads TVM: imported here so that `import tile_nb` stays light

    if not isinstance(options, BuildOptions):
        options = BuildOptions.from_dict(options)
    target = resolve_target(target)
    arch = target_arch(target)
    # T.import_source's code goes in first (extern_sources.py); a registered CUDA post-processing callback
    # (postproc.py) rewrites the source before it is compiled
    take_marks = extern_sources.with_sources(take_marks or _no_marks, mod)
    take_marks = postproc.after_marks(take_marks, target)
    with compiling_cuda(arch, options, take_marks, ptx=target_embeds_ptx(target)) as capture, target:
        start = time.perf_counter()
        executable = tvm.compile(mod, target=target, tir_pipeline=pipeline.PIPELINE)
        total = time.perf_counter() - start
    compile_seconds = sum(r.seconds for _, _, r in capture.results)
    timings = {"codegen": total - compile_seconds}

    if capture.results:
        # A GPU runtime is loaded: TVM asked us for the binary and holds it in a launchable module.
        source, regions, compiled = capture.results[-1]
        module = executable
    else:
        source, regions = take_marks(_source_of(executable))
        module, compiled = None, None
    result = BuildResult(target=target, arch=arch, cuda_source=source, module=module, timings=timings,
                         source_regions=regions)

    if compiled is None:
        if cuda_compile.available_compiler(options.compiler) is None:
            result.skipped = f"no CUDA compiler ({options.compiler}) on this machine: CUDA source only"
        else:
            compiled = cuda_compile.compile_cuda(
                source,
                arch,
                compiler=options.compiler,
                fast_math=options.fast_math,
                ptxas_options=options.ptxas_options,
                fmad=options.fmad,
            )
    if compiled is not None:
        timings["cubin"] = compiled.seconds
        result.cubin, result.ptx, result.compiler = compiled.cubin, compiled.ptx, compiled.compiler
        result.compile_log, result.resources = compiled.log, compiled.resources
        dynamic = dynamic_shared_by_kernel(mod)
        result.resources = {k: dataclasses.replace(r, dynamic_shared_bytes=dynamic[k]) if k in dynamic else r
                            for k, r in result.resources.items()}
    return result


def _source_of(executable) -> str:
    """The CUDA text held by the device module of a built executable."""
    for sub in executable.mod.imports:
        try:
            text = sub.inspect_source("cuda")
        except Exception:  # noqa: BLE001 - a module kind that holds no CUDA text
            continue
        if text:
            return text
    raise RuntimeError("TVM produced no CUDA module: does the IRModule contain a kernel (T.device_entry / "
                       "T.launch_thread)?")

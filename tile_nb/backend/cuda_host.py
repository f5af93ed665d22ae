"""A lean launcher: the host function built by TVM's `cuda_host` target instead of its LLVM host.

The default host function (LLVM) reaches the kernel through packed calls into TVM's runtime: one to set the device,
one per tensor map (`runtime.cuTensorMapEncodeTiled`) and one to launch. TVM's `cuda_host` target writes the same
host function as CUDA C++ instead (argument checks, `cuTensorMapEncodeTiled` and `cudaLaunchKernelEx` called
directly), which nvcc builds together with the kernel into a shared library that tvm_ffi loads. Measured on the
H200 (benchmarks/results/dispatch.md): the seed GEMM's bare launch 8.0 -> 5.1 us; the price is an nvcc build of
host and device code (~5 s more per kernel), so it is opt-in: the build option `host="cuda_host"`.

Needs nvcc, a C++ compiler and ninja (tvm_ffi.cpp builds with them) and, to link, the CUDA driver library.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from .build import BuildOptions, compiling_cuda
from .cuda_compile import CudaCompileError, ToolMissingError
from .toolchain import find_tool

__all__ = ["build_launcher", "cuda_host_source", "load_launcher"]


def cuda_host_source(mod, arch: str, take_marks=None, options: BuildOptions | None = None) -> str:
    """One CUDA C++ translation unit for a lowered IRModule: the kernels, then TVM's host wrappers.
    `take_marks(code) -> (code, regions)` takes the lowering's source marks out (as `build` does: TVM compiles the
    device code on the way, where a GPU runtime is loaded, and keeps the text it generated)."""
    import tvm
    from tvm.backend.cuda import export_cuda_host

    target = tvm.target.Target({"kind": "cuda", "arch": arch}, host="cuda_host")
    try:
        with compiling_cuda(arch, options or BuildOptions(), take_marks), target:
            built = tvm.compile(mod, target=target, tir_pipeline="tirx")
        source = export_cuda_host(getattr(built, "mod", built))
    except Exception as err:  # noqa: BLE001 - TVM refuses what its cuda_host codegen does not support; say so
        raise CudaCompileError("TVM's cuda_host codegen", arch, f"{type(err).__name__}: {err}\n(build option "
                               "host='cuda_host'; the default host='llvm' builds this kernel)") from None
    return take_marks(source)[0] if take_marks is not None else source


def build_launcher(source: str, arch: str, folder: str | os.PathLike, *, link: bool = True) -> tuple[Path, float]:
    """Build `source` (from `cuda_host_source`) in `folder` with nvcc through tvm_ffi.cpp: a shared library, or
    with `link=False` only the object file (what a machine without a CUDA driver can check). Returns (path,
    seconds)."""
    import tvm_ffi.cpp

    missing = [tool for tool, path in (("nvcc", find_tool("nvcc")), ("ninja", shutil.which("ninja"))) if path is None]
    if missing:
        raise ToolMissingError(f"build option host='cuda_host' needs {' and '.join(missing)} on PATH (nvcc from the "
                               "CUDA toolkit; ninja: pip install ninja); the default host='llvm' needs neither")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.cu").write_text(source)
    start = time.perf_counter()
    output = None if link else "kernel.o"
    try:
        with _arch_list(arch):
            path = tvm_ffi.cpp.build("kernel", sources=[str(folder / "kernel.cu")], extra_cuda_cflags=["-O3"],
                                     extra_ldflags=["-lcuda"], build_directory=str(folder), output=output)
    except RuntimeError as err:   # tvm_ffi.cpp raises RuntimeError with the compiler's output
        raise CudaCompileError("nvcc (cuda_host launcher)", arch, str(err)) from None
    return Path(path), time.perf_counter() - start


def load_launcher(path: str | os.PathLike, name: str):
    """(module, function) of a built launcher library; keep the module alive while the function is used."""
    import tvm_ffi

    module = tvm_ffi.load_module(os.fspath(path))
    return module, module[name]


@contextlib.contextmanager
def _arch_list(arch: str):
    """tvm_ffi.cpp reads the architecture from TVM_FFI_CUDA_ARCH_LIST ("9.0a"); without it, it asks nvidia-smi,
    which says 9.0 (no wgmma). Set for the build only (callers hold the backend's build lock)."""
    number = arch.removeprefix("sm_").rstrip("af")          # sm_90a -> 90, sm_100a -> 100
    value = f"{number[:-1]}.{number[-1]}{arch[len('sm_') + len(number):]}"
    saved = os.environ.get("TVM_FFI_CUDA_ARCH_LIST")
    os.environ["TVM_FFI_CUDA_ARCH_LIST"] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TVM_FFI_CUDA_ARCH_LIST"]
        else:
            os.environ["TVM_FFI_CUDA_ARCH_LIST"] = saved

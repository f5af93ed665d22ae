"""A lean launcher: the host function built by TVM's `cuda_host` target instead of its LLVM host.

The default host function (LLVM) reaches the kernel through packed calls into TVM's runtime: one to set the
device, one per tensor map (`runtime.cuTensorMapEncodeTiled`) and one to launch. TVM's `cuda_host` target
writes the same host function as CUDA C++ instead (argument checks, `cuTensorMapEncodeTiled` and
`cudaLaunchKernelEx` called directly), which nvcc builds together with the kernel into a shared library that
tvm_ffi loads. It shortens the launch, but the nvcc build of host and device code costs seconds per kernel, so
it is opt-in: the build option `host="cuda_host"` (see docs/decisions.md#host-cost-of-a-cached-call). The
generated source is rewritten first (`cache_launch_setup`) so that repeated launches skip re-encoding
unchanged tensor maps and re-setting the kernel's dynamic shared memory size.

Needs nvcc, a C++ compiler and ninja (tvm_ffi.cpp builds with them) and, to link, the CUDA driver library.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import time
from pathlib import Path

from . import extern_sources
from .build import BuildOptions, compiling_cuda
from .cuda_compile import CudaCompileError, ToolMissingError
from .toolchain import find_tool

__all__ = ["build_launcher", "cache_launch_setup", "cuda_host_source", "load_launcher"]


def cuda_host_source(mod, arch: str, take_marks=None, options: BuildOptions | None = None) -> str:
    """One CUDA C++ translation unit for a lowered IRModule: the kernels, then TVM's host wrappers.
    `take_marks(code) -> (code, regions)` takes the lowering's source marks out (as `build` does: TVM compiles
    the device code on the way, where a GPU runtime is loaded, and keeps the text it generated)."""
    import tvm
    from tvm.backend.cuda import export_cuda_host

    from . import pipeline

    if any(pipeline.calls_grid_sync(f) for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)):
        # TVM's cuda_host launcher fills a cudaLaunchConfig_t without the launch tags (pipeline.py)
        raise CudaCompileError("TVM's cuda_host codegen", arch,
                               "T.sync_grid needs a cooperative launch, which the cuda_host launcher "
                               "does not make (build option host='cuda_host'; the default host='llvm' "
                               "launches it cooperatively)")
    target = tvm.target.Target({"kind": "cuda", "arch": arch}, host="cuda_host")
    take_marks = extern_sources.with_sources(take_marks or (lambda code: (code, {})), mod)
    try:
        with compiling_cuda(arch, options or BuildOptions(), take_marks), target:
            built = tvm.compile(mod, target=target, tir_pipeline=pipeline.PIPELINE)
        source = export_cuda_host(getattr(built, "mod", built))
    except Exception as err:  # noqa: BLE001 - TVM refuses what its cuda_host codegen does not support; say so
        raise CudaCompileError("TVM's cuda_host codegen", arch, f"{type(err).__name__}: {err}\n(build option "
                               "host='cuda_host'; the default host='llvm' builds this kernel)") from None
    return cache_launch_setup(take_marks(source)[0])


# What `cache_launch_setup` adds to the host code. Each tensor-map call site and each dynamic-shared-memory
# call site is its own template instance (`Site`), so each has its own cache.
LAUNCH_CACHE_PRELUDE = r"""
// tile_nb launch caches (tile_nb/backend/cuda_host.py, cache_launch_setup): skip the driver calls whose
// result a launch with the same arguments already has.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

// Every argument a tensor map is encoded from. Packed into a zeroed struct (padding, unused dims) so that
// memcmp compares exactly the arguments.
struct TileNbTensorMapKey {
  CUtensorMapDataType data_type;
  cuuint32_t rank;
  void* address;
  cuuint64_t dims[5];
  cuuint64_t strides[4];
  cuuint32_t box[5];
  cuuint32_t element_strides[5];
  CUtensorMapInterleave interleave;
  CUtensorMapSwizzle swizzle;
  CUtensorMapL2promotion l2_promotion;
  CUtensorMapFloatOOBfill oob_fill;
};

struct TileNbTensorMapCache {
  bool valid;
  TileNbTensorMapKey key;
  CUtensorMap map;
};

// cuTensorMapEncodeTiled, remembering the last map encoded at this call site: same arguments, same map (the
// map is a pure function of them; it names no device or context, and under unified addressing the global
// address tells the devices' tensors apart). thread_local rather than a mutex: a hit takes no lock and
// threads never see a half-written map; the price is one encode per host thread and call site. A failed
// encode returns the driver's code and leaves the cache as it was.
template <int Site>
static CUresult tile_nb_encode_tiled(CUtensorMap* map, CUtensorMapDataType data_type, cuuint32_t rank,
                                     void* address, const cuuint64_t* dims, const cuuint64_t* strides,
                                     const cuuint32_t* box, const cuuint32_t* element_strides,
                                     CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                     CUtensorMapL2promotion l2_promotion, CUtensorMapFloatOOBfill oob_fill) {
  if (rank < 1 || rank > 5) {  // outside the driver's range: let the driver say so, uncached
    return cuTensorMapEncodeTiled(map, data_type, rank, address, dims, strides, box, element_strides,
                                  interleave, swizzle, l2_promotion, oob_fill);
  }
  TileNbTensorMapKey key;
  std::memset(&key, 0, sizeof key);
  key.data_type = data_type;
  key.rank = rank;
  key.address = address;
  std::memcpy(key.dims, dims, rank * sizeof *dims);
  if (rank > 1) std::memcpy(key.strides, strides, (rank - 1) * sizeof *strides);
  std::memcpy(key.box, box, rank * sizeof *box);
  std::memcpy(key.element_strides, element_strides, rank * sizeof *element_strides);
  key.interleave = interleave;
  key.swizzle = swizzle;
  key.l2_promotion = l2_promotion;
  key.oob_fill = oob_fill;
  thread_local TileNbTensorMapCache cache;  // zero-initialized: not valid
  if (cache.valid && std::memcmp(&cache.key, &key, sizeof key) == 0) {
    *map = cache.map;
    return CUDA_SUCCESS;
  }
  CUresult result = cuTensorMapEncodeTiled(map, data_type, rank, address, dims, strides, box, element_strides,
                                           interleave, swizzle, l2_promotion, oob_fill);
  if (result == CUDA_SUCCESS) {
    std::memcpy(&cache.key, &key, sizeof key);  // bytes, padding included, as memcmp reads them
    cache.map = *map;
    cache.valid = true;
  }
  return result;
}

// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), called only when `bytes`
// differs from what this call site last set on this device (the attribute is per function and device; the
// caller passes the current device). Process-wide like the attribute: an atomic per device for the hit, a
// mutex so that a set and its record stay together. Devices past the table are set on every call, as before.
template <int Site, typename Kernel>
static cudaError_t tile_nb_set_max_dynamic_smem(Kernel kernel, int device, int64_t bytes) {
  constexpr int kDevices = 64;
  static std::atomic<int64_t> last_set[kDevices];  // static storage starts at 0: never set
  static std::mutex setting;
  if (device < 0 || device >= kDevices) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  }
  if (last_set[device].load(std::memory_order_acquire) == bytes) return cudaSuccess;
  std::lock_guard<std::mutex> guard(setting);
  cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes));
  last_set[device].store(error == cudaSuccess ? bytes : 0, std::memory_order_release);
  return error;
}
// end of tile_nb launch caches
"""

# The spellings of TVM 0.27's cuda_host codegen that `cache_launch_setup` rewrites.
_PRELUDE_MARK = "// tile_nb launch caches"
# after the host includes, before the host functions
_HOST_CODE_START = "#define TVM_DLL TVM_FFI_DLL_EXPORT\n"
_ENCODE_CALL = re.compile(r"\bCUresult (\w+) = cuTensorMapEncodeTiled\(")
_ANY_ENCODE_CALL = re.compile(r"\bcuTensorMapEncode\w*\(")
_SET_SMEM_CALL = re.compile(
    r"\bcudaFuncSetAttribute\((::\w+), cudaFuncAttributeMaxDynamicSharedMemorySize, (\w+)\)"
)
_GET_DEVICE = re.compile(r"\bcudaGetDevice\(&(\w+)\)")


class LaunchCacheError(RuntimeError):
    """TVM's cuda_host source is not spelled as `cache_launch_setup` expects (a TVM
    upgrade changed its codegen)."""


def cache_launch_setup(source: str) -> str:
    """Rewrite TVM's cuda_host source so that a launch skips the setup calls whose result it already has.

    The generated host function calls `cuTensorMapEncodeTiled` for every tensor map and
    `cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)` on every launch, though
    both results depend only on their arguments, which repeat from call to call; skipping them is most of what
    is left to save in a launch, the attribute more than the encode (see
    docs/decisions.md#host-cost-of-a-cached-call). Each encode call goes through `tile_nb_encode_tiled<site>`
    (a thread_local cache of the last arguments and map per call site) and each set through
    `tile_nb_set_max_dynamic_smem<site>` (the last size set, per device); both are in `LAUNCH_CACHE_PRELUDE`,
    inserted before the host functions. A source with neither call (a cp.async kernel with at most 48 KiB of
    dynamic shared memory) comes back unchanged; one whose calls are not spelled as expected raises
    LaunchCacheError rather than launching uncached without a word."""
    if _PRELUDE_MARK in source:
        return source                                              # rewritten already
    host_at = source.find(_HOST_CODE_START)
    encodes, sets = len(_ENCODE_CALL.findall(source)), len(_SET_SMEM_CALL.findall(source))
    if encodes != len(_ANY_ENCODE_CALL.findall(source)) or "runtime.cuTensorMapEncode" in source:
        raise _unexpected("every tensor-map encode spelled `CUresult NAME = cuTensorMapEncodeTiled(`")
    if not encodes and host_at >= 0 and "CUtensorMap" in source[host_at:]:
        raise _unexpected("a cuTensorMapEncodeTiled call for the host's CUtensorMap")
    if sets != source.count("cudaFuncSetAttribute("):
        raise _unexpected("every cudaFuncSetAttribute spelled `cudaFuncSetAttribute(::KERNEL, "
                          "cudaFuncAttributeMaxDynamicSharedMemorySize, NAME)`")
    if not (encodes or sets):
        return source
    before = source[:max(host_at, 0)]
    if (
        source.count(_HOST_CODE_START) != 1
        or _ANY_ENCODE_CALL.search(before)
        or "cudaFuncSetAttribute(" in before
    ):
        raise _unexpected(f"one line {_HOST_CODE_START.strip()!r} before the host functions and their calls")
    host = source[host_at + len(_HOST_CODE_START):]
    site = itertools.count()
    host = _ENCODE_CALL.sub(lambda call: f"CUresult {call[1]} = tile_nb_encode_tiled<{next(site)}>(", host)
    site = itertools.count()
    host = _SET_SMEM_CALL.sub(lambda call: f"tile_nb_set_max_dynamic_smem<{next(site)}>({call[1]}, "
                              f"{_device_before(call.string, call.start())}, {call[2]})", host)
    return source[:host_at] + _HOST_CODE_START + LAUNCH_CACHE_PRELUDE + host


def _device_before(host: str, at: int) -> str:
    """The variable that the host function around `at` got the current device in (cuda_host sets it from the
    tensors' device before the launch)."""
    function_at = host.rfind("TVM_DLL int32_t ", 0, at)
    devices = _GET_DEVICE.findall(host, function_at, at) if function_at >= 0 else []
    if not devices:
        raise _unexpected("`cudaGetDevice(&NAME)` before cudaFuncSetAttribute in the same host function")
    return devices[-1]


def _unexpected(what: str) -> LaunchCacheError:
    return LaunchCacheError(
        f"cache_launch_setup expected {what} in TVM's cuda_host source: did its codegen change? "
        "(the default host='llvm' builds without it)"
    )


def refuse_ptx_target(arch: str) -> None:
    """A `compute_XY` target (PTX for the driver) cannot take host='cuda_host': its build is machine code for
    one GPU (tvm_ffi's build embeds no PTX). Seen on the H200 and H100: an sm_80 cubin and "no kernel image is
    available". `arch` is the target's label (`target.target_label`), compute_XY for a PTX build."""
    if arch.startswith("compute_"):
        raise CudaCompileError(
            "nvcc (cuda_host launcher)",
            arch,
            f"host='cuda_host' builds the kernel as machine "
            f"code for one GPU (tvm_ffi's build embeds no PTX), so a {arch} target, which hands "
            "PTX to the driver, cannot use it: keep the default host ('llvm') for compute_XY "
            "targets, or build for the GPU's own sm_XY",
        )


def build_launcher(
    source: str, arch: str, folder: str | os.PathLike, *, link: bool = True
) -> tuple[Path, float]:
    """Build `source` (from `cuda_host_source`) in `folder` with nvcc through tvm_ffi.cpp: a shared library,
    or with `link=False` only the object file (what a machine without a CUDA driver can check). Returns (path,
    seconds)."""
    refuse_ptx_target(arch)
    import tvm_ffi.cpp

    missing = [
        tool for tool, path in (("nvcc", find_tool("nvcc")), ("ninja", shutil.which("ninja"))) if path is None
    ]
    if missing:
        raise ToolMissingError(
            f"build option host='cuda_host' needs {' and '.join(missing)} on PATH (nvcc from the "
            "CUDA toolkit; ninja: pip install ninja); the default host='llvm' needs neither"
        )
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
    """tvm_ffi.cpp reads the architecture from TVM_FFI_CUDA_ARCH_LIST ("9.0a"); without it, it asks
    nvidia-smi, which says 9.0 (no wgmma). Set for the build only (callers hold the backend's build lock)."""
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

"""tile_nb.runtime: compiled kernels, their launch on torch tensors, and the memory + disk kernel cache.

    import tile_nb.runtime as rt
    kernel = rt.compile(func, target=None)     # phase-2 PrimFunc, or an already lowered IRModule
    kernel(a, b, c)                            # torch CUDA tensors, on torch's current stream
    kernel.cuda_source, kernel.ptx, kernel.sass, kernel.resources, kernel.lowered_ir, kernel.timings

TVM is imported inside `compile`, so importing this package is cheap.
"""
from ..backend.resources import Resources
from .cache import DiskCache, cache_dir
from .cache_guard import CacheSecurityError
from .compile import clear_cache, clear_memory_cache, compile, with_device_facts
from .kernel import CompiledKernel, KernelNotLaunchableError

__all__ = [
           "CacheSecurityError",
           "CompiledKernel",
           "DiskCache",
           "KernelNotLaunchableError",
           "Resources",
           "cache_dir",
           "clear_cache",
           "clear_memory_cache",
           "compile",
           "with_device_facts",
]

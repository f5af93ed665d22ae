"""tile_nb.backend: thread-level TIRx -> CUDA source -> cubin (NVRTC or nvcc), PTX, SASS and resource use.

    from tile_nb.backend import build
    result = build(lowered_irmodule, target="sm_90a")
    print(result.cuda_source); print(result.resources); print(result.timings)

TVM is imported inside the functions that need it, so `import tile_nb.backend` stays light.
"""
from . import toolchain
from .build import BuildOptions, BuildResult, build, cuda_runtime_loaded
from .cuda_compile import (
                           CubinResult,
                           CudaCompileError,
                           ToolMissingError,
                           available_compiler,
                           compile_cuda,
                           compile_ptx,
                           disassemble,
)
from .resources import Resources, combine, parse_ptxas_log
from .target import DEFAULT_ARCH, device_arch, resolve_target, target_arch, target_caps

__all__ = [
                           "DEFAULT_ARCH",
                           "BuildOptions",
                           "BuildResult",
                           "CubinResult",
                           "CudaCompileError",
                           "Resources",
                           "ToolMissingError",
                           "available_compiler",
                           "build",
                           "combine",
                           "compile_cuda",
                           "compile_ptx",
                           "cuda_runtime_loaded",
                           "device_arch",
                           "disassemble",
                           "parse_ptxas_log",
                           "resolve_target",
                           "target_arch",
                           "target_caps",
                           "toolchain",
]

"""CUDA source -> cubin (NVRTC when `cuda-bindings` is there, else nvcc), plus PTX and SASS text.

Both compilers run ptxas with `-v`, so every compile also yields the resource report (see `resources.py`).
PTX comes for free: NVRTC keeps it beside the cubin, and nvcc leaves it in its `--keep` folder. SASS needs
`cuobjdump` or `nvdisasm`; it is made on demand because a notebook rarely looks at it.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from ..errors import TileNBError
from . import toolchain
from .resources import Resources, parse_ptxas_log

__all__ = [
    "CubinResult",
    "CudaCompileError",
    "ToolMissingError",
    "available_compiler",
    "compile_cuda",
    "compile_ptx",
    "disassemble",
]

# Same macro set TVM's own callback uses: the generated code relies on half/bfloat16 operators.
_COMMON_FLAGS = (
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__",
    "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
)


class CudaCompileError(TileNBError, RuntimeError):
    """The CUDA compiler rejected the generated source. `log` holds its full output."""

    def __init__(self, compiler: str, arch: str, log: str):
        self.compiler, self.arch, self.log = compiler, arch, log
        TileNBError.__init__(self, str(self))
        self.args = (compiler, arch, log)

    def __reduce__(self):  # rebuilt from its own arguments, so it pickles across processes
        return (CudaCompileError, (self.compiler, self.arch, self.log))

    def __str__(self) -> str:
        tail = "\n".join(self.log.strip().splitlines()[-40:])
        return f"{self.compiler} could not compile the generated CUDA for {self.arch}:\n{tail}"


class ToolMissingError(TileNBError, RuntimeError):
    """Neither NVRTC nor nvcc is available, so no cubin can be made here."""


@dataclass
class CubinResult:
    """What one compile produced."""

    cubin: bytes
    arch: str
    compiler: str                 # "nvrtc 13.5" or "nvcc 13.0"
    seconds: float
    log: str = ""                 # compiler + ptxas output (warnings, the -v report)
    ptx: str | None = None
    resources: dict[str, Resources] = field(default_factory=dict)


def available_compiler(preference: str = "auto") -> str | None:
    """'nvrtc' or 'nvcc' (whichever `preference` allows and exists), or None."""
    if preference not in ("auto", "nvrtc", "nvcc"):
        raise ValueError(f"compiler must be 'auto', 'nvrtc' or 'nvcc'; got {preference!r}")
    if preference in ("auto", "nvrtc") and toolchain.nvrtc_version():
        return "nvrtc"
    if preference in ("auto", "nvcc") and toolchain.find_tool("nvcc"):
        return "nvcc"
    return None


def compile_cuda(source: str, arch: str, *, compiler: str = "auto", fast_math: bool = True,
                 ptxas_options: tuple[str, ...] = (), fmad: bool = True) -> CubinResult:
    """Compile CUDA C++ to a cubin for `arch` (e.g. "sm_90a"); raise CudaCompileError with the log on failure.

    `compiler="auto"` prefers NVRTC (in-process: no nvcc process start, no
    host-side pass) and falls back to nvcc. `fmad=False` keeps multiplies and adds apart (no contraction into
    FMA), even under fast math.
    """
    chosen = available_compiler(compiler)
    if chosen is None:
        wanted = (
            "NVRTC (pip install cuda-bindings nvidia-cuda-nvrtc) or nvcc" if compiler == "auto" else compiler
        )
        raise ToolMissingError(f"cannot build a cubin: {wanted} is not available on this machine")
    if chosen == "nvrtc":
        return _compile_nvrtc(source, arch, math_flags(fast_math, fmad), ptxas_options)
    return _compile_nvcc(source, arch, math_flags(fast_math, fmad), ptxas_options)


def math_flags(fast_math: bool, fmad: bool = True) -> list[str]:
    """The compiler's floating-point flags (nvcc's and NVRTC's spellings agree). `--fmad=false` comes last:
    both compilers honor it after `--use_fast_math`, which otherwise implies `--fmad=true`."""
    return (["--use_fast_math"] if fast_math else []) + ([] if fmad else ["--fmad=false"])


# ---------------------------------------------------------------------------------------------------- NVRTC

# TVM's generated header pulls in <cuda/std/type_traits> under NVRTC for a few `std::` aliases. Parsing that
# header is most of NVRTC's compile time
# (docs/decisions.md#compiling-nvrtc-by-default-the-type_traits-header-dropped), so when the kernel uses none
# of the aliases the block is dropped before compiling. The names are checked in the rest of the source.
_TRAITS_BLOCK = re.compile(
    r"[ \t]*#include <cuda/std/type_traits>\n[ \t]*namespace std \{(?P<body>.*?)\n[ \t]*\}\n", re.DOTALL
)


# NVRTC has no <cuda.h>, so TVM's `const __grid_constant__ CUtensorMap` kernel parameters (TMA)
# name an unknown type there. The driver API defines it as 16 opaque 64-bit words aligned to 64
# bytes (CU_TENSOR_MAP_NUM_QWORDS).
_TENSOR_MAP_TYPE = """
#if defined(__CUDACC_RTC__) && !defined(CUDA_VERSION)
typedef struct CUtensorMap_st { alignas(64) unsigned long long opaque[16]; } CUtensorMap;
#endif
"""


def slim_source_for_nvrtc(source: str) -> str:
    """Drop the type-traits include when nothing after it uses the names it brings in; define CUtensorMap."""
    if "CUtensorMap" in source and "CUtensorMap_st" not in source:
        source = _TENSOR_MAP_TYPE + source
    m = _TRAITS_BLOCK.search(source)
    if not m:
        return source
    names = re.findall(r"using cuda::std::(\w+);", m.group("body"))
    rest = source[m.end():]
    if any(re.search(rf"\b{re.escape(n)}\b", rest) for n in names) or "cuda::std::" in rest:
        return source
    return source[:m.start()] + source[m.end():]


def _nvrtc_check(nvrtc, result, what: str) -> None:
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC {what} failed: {result}")


def _compile_nvrtc(source: str, arch: str, math: list[str], ptxas_options: tuple[str, ...]) -> CubinResult:
    from cuda.bindings import nvrtc

    start = time.perf_counter()
    opts = [f"--gpu-architecture={arch}", "-default-device", "--device-int128", *_COMMON_FLAGS,
            # vector_types.h uses these without always defining them under NVRTC
            "-D__NV_SILENCE_DEPRECATION_BEGIN=", "-D__NV_SILENCE_DEPRECATION_END=",
            "-D__NV_SILENCE_HOST_DEPRECATION_BEGIN=", "-D__NV_SILENCE_HOST_DEPRECATION_END=",
            "--ptxas-options=-v", "--ptxas-options=--warn-on-local-memory-usage"]
    opts += [f"--ptxas-options={o}" for o in ptxas_options]   # NVRTC does not split on commas
    opts += math
    opts += [f"-I{d}" for d in toolchain.cuda_include_dirs()]
    encoded = [o.encode() for o in opts]

    err, prog = nvrtc.nvrtcCreateProgram(
        slim_source_for_nvrtc(source).encode(), b"tile_nb_kernel.cu", 0, [], []
    )
    _nvrtc_check(nvrtc, err, "nvrtcCreateProgram")
    try:
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log_buf = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log_buf)
        log = log_buf.rstrip(b"\x00 ").decode(errors="replace")
        version = f"nvrtc {toolchain.nvrtc_version()}"
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CudaCompileError(version, arch, log)
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _nvrtc_check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        _nvrtc_check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin)[0], "nvrtcGetCUBIN")
        ptx = None
        err, size = nvrtc.nvrtcGetPTXSize(prog)   # NVRTC keeps the PTX it went through, at no cost
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS and size > 1:
            ptx_buf = b" " * size
            if nvrtc.nvrtcGetPTX(prog, ptx_buf)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS:
                ptx = ptx_buf.rstrip(b"\x00").decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    resources = parse_ptxas_log(log)
    if not resources and ptx:
        # Some NVRTC versions (13.0;
        # docs/decisions.md#compiling-nvrtc-by-default-the-type_traits-header-dropped) leave the ptxas -v
        # report out of the program log: then run ptxas on the PTX for it (the cubin stays NVRTC's).
        report = _ptxas_report(ptx, arch, ptxas_options)
        if report:
            log += "\n" + report
            resources = parse_ptxas_log(report)
    return CubinResult(cubin=bytes(cubin), arch=arch, compiler=version, seconds=time.perf_counter() - start,
                       log=log, ptx=ptx, resources=resources)


def _ptxas_report(ptx: str, arch: str, ptxas_options: tuple[str, ...]) -> str | None:
    """`ptxas -v` output for a PTX text, or None without ptxas or when it fails."""
    ptxas = toolchain.find_tool("ptxas")
    if not ptxas:
        return None
    with tempfile.TemporaryDirectory(prefix="tile_nb_ptxas_") as tmp:
        path = os.path.join(tmp, "kernel.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        code, out = _run(
            [ptxas, "-v", f"--gpu-name={arch}", *ptxas_options, "-o", os.path.join(tmp, "k.cubin"), path], tmp
        )
    return out if code == 0 else None


# ---------------------------------------------------------------------------------------------------- nvcc

def _run(cmd: list[str], cwd: str) -> tuple[int, str]:
    proc = subprocess.run(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600, check=False
    )
    return proc.returncode, proc.stdout.decode(errors="replace")


def _compile_nvcc(source: str, arch: str, math: list[str], ptxas_options: tuple[str, ...]) -> CubinResult:
    nvcc = toolchain.find_tool("nvcc")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tile_nb_nvcc_") as tmp:
        src = os.path.join(tmp, "kernel.cu")
        with open(src, "w") as f:
            f.write(source)
        ptxas = ",".join(["-v", "--warn-on-local-memory-usage", *ptxas_options])
        cmd = [nvcc, "--cubin", "-O3", f"-arch={arch}", *math, *_COMMON_FLAGS, "--expt-relaxed-constexpr",
               "--expt-extended-lambda", f"--ptxas-options={ptxas}",
               "--keep", f"--keep-dir={tmp}",       # leaves the PTX behind, so no second compile is needed
               "-o", os.path.join(tmp, "kernel.cubin"), src]
        code, log = _run(cmd, tmp)
        version = f"nvcc {toolchain.nvcc_version()}"
        if code != 0:
            raise CudaCompileError(version, arch, log)
        with open(os.path.join(tmp, "kernel.cubin"), "rb") as f:
            cubin = f.read()
        ptx = None
        ptx_files = [n for n in os.listdir(tmp) if n.endswith(".ptx")]
        if ptx_files:
            with open(os.path.join(tmp, ptx_files[0])) as f:
                ptx = f.read()
    return CubinResult(cubin=cubin, arch=arch, compiler=version, seconds=time.perf_counter() - start,
                       log=log, ptx=ptx, resources=parse_ptxas_log(log))


def compile_ptx(source: str, arch: str, *, fast_math: bool = True, fmad: bool = True) -> str | None:
    """PTX for `source` via `nvcc -ptx`, for when the cubin came from elsewhere. None without nvcc."""
    nvcc = toolchain.find_tool("nvcc")
    if not nvcc:
        return None
    with tempfile.TemporaryDirectory(prefix="tile_nb_ptx_") as tmp:
        src = os.path.join(tmp, "kernel.cu")
        with open(src, "w") as f:
            f.write(source)
        cmd = [nvcc, "-ptx", "-O3", f"-arch={arch}", *math_flags(fast_math, fmad), *_COMMON_FLAGS,
               "--expt-relaxed-constexpr", "-o", os.path.join(tmp, "kernel.ptx"), src]
        code, log = _run(cmd, tmp)
        if code != 0:
            raise CudaCompileError(f"nvcc {toolchain.nvcc_version()}", arch, log)
        with open(os.path.join(tmp, "kernel.ptx")) as f:
            return f.read()


def disassemble(cubin: bytes) -> str | None:
    """SASS text of a cubin (`cuobjdump -sass`, else `nvdisasm`), or None when neither tool is installed."""
    tools = []
    if toolchain.find_tool("cuobjdump"):
        tools.append([toolchain.find_tool("cuobjdump"), "-sass"])
    if toolchain.find_tool("nvdisasm"):
        tools.append([toolchain.find_tool("nvdisasm"), "-c"])
    if not tools:
        return None
    with tempfile.TemporaryDirectory(prefix="tile_nb_sass_") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        errors = []
        for cmd in tools:
            code, out = _run([*cmd, path], tmp)
            if code == 0 and out.strip():
                return out
            errors.append(out)
    raise RuntimeError("could not disassemble the cubin:\n" + "\n".join(errors))

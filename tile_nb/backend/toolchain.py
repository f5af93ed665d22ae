"""Finding the CUDA tools: nvcc, ptxas, cuobjdump, nvdisasm and NVRTC (through `cuda-bindings`).

Every probe is memoized and never raises: a missing tool means the artifact it makes is None, not an error,
because CI and binder machines have no GPU and may have no toolkit either.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

__all__ = ["cuda_home", "cuda_include_dirs", "describe", "find_tool", "nvcc_version", "nvrtc_version"]


@functools.cache
def cuda_home() -> str | None:
    """The CUDA toolkit root: $CUDA_HOME / $CUDA_PATH, else the folder above `nvcc`, else /usr/local/cuda."""
    def is_toolkit(root: str | None) -> bool:
        # nvcc on PATH may be a wrapper script outside the toolkit: look for a toolkit header instead
        return bool(root) and (os.path.isfile(os.path.join(root, "include", "cuda_runtime.h"))
                               or os.path.isdir(os.path.join(root, "targets")))

    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    candidates.append("/usr/local/cuda")
    for root in candidates:
        if is_toolkit(root):
            return root
    return None


@functools.cache
def find_tool(name: str) -> str | None:
    """Path of a CUDA command-line tool, looked up on PATH, then in the toolkit's bin folder, then in NVIDIA's
    pip wheels (`nvidia/cu13/bin/nvdisasm` from nvidia-cuda-nvdisasm, which the test extra installs)."""
    found = shutil.which(name)
    if found:
        return found
    folders = [os.path.join(cuda_home(), "bin")] if cuda_home() else []
    try:
        import nvidia  # a namespace package: one folder per installed NVIDIA wheel family

        folders += [os.path.join(root, sub, "bin") for root in nvidia.__path__ for sub in ("cu13", "cu12")]
    except ImportError:
        pass
    for folder in folders:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


@functools.cache
def nvcc_version() -> str | None:
    """'13.0' from `nvcc --version`, or None without nvcc."""
    nvcc = find_tool("nvcc")
    if not nvcc:
        return None
    try:
        out = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


@functools.cache
def nvrtc_version() -> str | None:
    """'13.5' when `cuda.bindings.nvrtc` imports and its library loads, else None."""
    if os.environ.get("TILE_NB_NO_NVRTC"):
        return None
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None
        return f"{major}.{minor}"
    except Exception:  # noqa: BLE001 - ImportError, or the shared library failing to load
        return None


@functools.cache
def cuda_include_dirs() -> tuple[str, ...]:
    """Header folders NVRTC needs (it has no default include path): the toolkit's include, the per-platform
    `targets/<triple>/include` and its `cccl` subfolder (`<cuda/std/...>`),
    and the headers pip wheels ship."""
    dirs: list[str] = []
    home = cuda_home()
    if home:
        dirs.append(os.path.join(home, "include"))
        targets = os.path.join(home, "targets")
        if os.path.isdir(targets):
            for triple in sorted(os.listdir(targets)):
                inc = os.path.join(targets, triple, "include")
                dirs += [inc, os.path.join(inc, "cccl")]
        dirs.append(os.path.join(home, "include", "cccl"))
    try:  # headers from the nvidia-* wheels, for machines with NVRTC from pip but no toolkit
        import nvidia

        for base in getattr(nvidia, "__path__", []):
            for sub in ("cuda_nvrtc", "cuda_runtime", "cu13", "cuda_cccl"):
                inc = os.path.join(base, sub, "include")
                dirs += [inc, os.path.join(inc, "cccl")]
    except ImportError:
        pass
    seen: list[str] = []
    for d in dirs:
        if os.path.isdir(d) and d not in seen:
            seen.append(d)
    return tuple(seen)


def describe() -> dict[str, str | None]:
    """What this machine has, for metadata and for skip reasons in tests."""
    return {
        "nvcc": nvcc_version(),
        "nvrtc": nvrtc_version(),
        "ptxas": find_tool("ptxas"),
        "cuobjdump": find_tool("cuobjdump"),
        "nvdisasm": find_tool("nvdisasm"),
        "cuda_home": cuda_home(),
    }

"""`tilelang.contrib.nvcc` on tile_nb: the compute capability helpers (host facts), not the compiler driver.

`get_target_compute_version(target=None)` reads the arch of `target` ("cuda -arch=sm_90a", a TVM Target, a
dict with "arch") when it names one, else the current GPU's capability from torch ("9.0" under
`tile_nb.run --cpu`, the interpreter's pretend device). `parse_compute_version("9.0")` is (9, 0). Compiling
with nvcc (`compile_cuda`, ...) is tile_nb's runtime's business and raises UnsupportedTilelangAPI here."""
from __future__ import annotations

import re

from .._support import forwarding_getattr

__all__ = ["get_target_compute_version", "parse_compute_version"]

_ARCH = re.compile(r"sm_(\d+)[af]?\b")


def _arch_of(target) -> str | None:
    if target is None:
        return None
    if isinstance(target, dict):
        text = str(target.get("arch", ""))
    else:
        attrs = getattr(target, "attrs", None)
        text = str(attrs["arch"]) if attrs is not None and "arch" in attrs else str(target)
    found = _ARCH.search(text)
    if found is None:
        return None
    digits = found.group(1)
    return f"{digits[:-1]}.{digits[-1]}"


def get_target_compute_version(target=None) -> str:
    """The compute capability ("9.0") of `target`'s arch, else of the current GPU torch sees."""
    version = _arch_of(target)
    if version is not None:
        return version
    import torch

    if not torch.cuda.is_available():
        raise ValueError(
            "tilelang.contrib.nvcc.get_target_compute_version: no arch in the target "
            f"({target!r}) and torch sees no CUDA device; give a target such as 'cuda -arch=sm_90a'"
        )
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def parse_compute_version(compute_version: str) -> tuple[int, int]:
    """("9.0") -> (9, 0)."""
    try:
        major, minor = str(compute_version).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise RuntimeError(f"tilelang.contrib.nvcc.parse_compute_version: expected 'major.minor', got "
                           f"{compute_version!r}") from None


__getattr__ = forwarding_getattr(__name__, "tilelang.contrib.nvcc", {})

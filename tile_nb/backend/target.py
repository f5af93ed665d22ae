"""Which CUDA target a kernel is built for.

The architecture comes from the GPU in this process when there is one (so the cubin loads on it), else from the
target the caller names, else `sm_90a` (the H200 the project measures on). TVM's own `Target("cuda")` would
silently pick `sm_50` on a machine without a GPU, so a bare "cuda" is completed here instead.
"""
from __future__ import annotations

import functools
import re
from typing import Any

__all__ = ["DEFAULT_ARCH", "arch_for_capability", "device_arch", "device_sm_count", "resolve_target", "target_arch"]

DEFAULT_ARCH = "sm_90a"

_ARCH_RE = re.compile(r"^sm_(\d+)([af]?)$")


def arch_for_capability(major: int, minor: int) -> str:
    """`(9, 0)` -> `"sm_90a"`. From Hopper on, the arch-specific `a` variant unlocks wgmma, TMA multicast and
    setmaxnreg; a cubin built for it loads only on that exact chip, which is what a device probe is for."""
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


@functools.cache
def device_arch() -> str | None:
    """The arch of torch's current CUDA device, or None when there is no usable GPU. Never raises."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        return arch_for_capability(major, minor)
    except Exception:  # noqa: BLE001 - a broken driver means "no device" for target selection
        return None


@functools.cache
def device_sm_count() -> int | None:
    """The SM count of torch's current CUDA device (what a persistent kernel fills), or None. Never raises."""
    if device_arch() is None:
        return None
    try:
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)
    except Exception:  # noqa: BLE001 - as device_arch
        return None


def _parse_target_string(text: str) -> dict[str, Any]:
    """Accept the spellings people type: "cuda", "sm_80", "cuda -arch=sm_80", or TVM's JSON form."""
    text = text.strip()
    if text.startswith("{"):
        import json

        return json.loads(text)
    if _ARCH_RE.match(text):
        return {"kind": "cuda", "arch": text}
    parts = text.split()
    if not parts or parts[0] != "cuda":
        raise ValueError(f"unsupported target {text!r}: tile_nb builds CUDA only; use 'cuda', 'sm_90a' or "
                         f"{{'kind': 'cuda', 'arch': 'sm_90a'}}")
    spec: dict[str, Any] = {"kind": "cuda"}
    for opt in parts[1:]:
        m = re.match(r"^-{1,2}arch=(\S+)$", opt)
        if not m:
            raise ValueError(f"unsupported target option {opt!r} in {text!r}; only -arch=sm_XY is understood")
        spec["arch"] = m.group(1)
    return spec


def resolve_target(target: Any = None):
    """Return a `tvm.target.Target` of kind cuda with an explicit arch.

    `target` may be None, a string ("cuda", "sm_80", "cuda -arch=sm_80"), a dict in TVM's JSON form, or a Target.
    An arch named by the caller wins (one may want to read sm_80 code on an H200); otherwise the device's arch,
    otherwise `DEFAULT_ARCH`.
    """
    import tvm

    if isinstance(target, tvm.target.Target):
        if target.kind.name != "cuda":
            raise ValueError(f"unsupported target kind {target.kind.name!r}: tile_nb builds CUDA only")
        if target.attrs.get("arch"):
            return target
        spec = dict(target.export())
    elif target is None:
        spec = {"kind": "cuda"}
    elif isinstance(target, str):
        spec = _parse_target_string(target)
    elif isinstance(target, dict):
        spec = dict(target)
    else:
        raise TypeError(f"target must be None, a str, a dict or a tvm Target; got {type(target).__name__}")
    if spec.get("kind", "cuda") != "cuda":
        raise ValueError(f"unsupported target kind {spec.get('kind')!r}: tile_nb builds CUDA only")
    spec["kind"] = "cuda"
    if not spec.get("arch"):
        spec["arch"] = device_arch() or DEFAULT_ARCH
    if not _ARCH_RE.match(str(spec["arch"])):
        raise ValueError(f"unsupported CUDA arch {spec['arch']!r}; expected the form sm_90a or sm_80")
    return tvm.target.Target(spec)


def target_arch(target) -> str:
    """The `sm_XY[a]` string of a resolved target."""
    return str(target.attrs["arch"])

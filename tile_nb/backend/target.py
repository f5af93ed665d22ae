"""Which CUDA target a kernel is built for.

The architecture is, strongest first: the one the caller names (`target="sm_80"`, `"cuda -arch=sm_80"`, a dict
or a tvm Target), else the environment variable `TILE_NB_ARCH` (`TILE_NB_ARCH=sm_75`), else the GPU in this
process (so the cubin loads on it), else `sm_90a` (the H200 the project measures on). So any architecture can
be built, read and checked on a machine without a GPU. TVM's own `Target("cuda")` would silently pick `sm_50`
on a machine without a GPU, so a bare "cuda" is completed here instead.

Two kinds of build, by spelling (nvcc's own names):
- `sm_80`: the kernel lowered for sm_80 and loaded as an sm_80 cubin, which runs on that GPU only (the same
  major version: an sm_80 cubin runs on sm_86, not on sm_90);
- `compute_80`: the same lowering and the same cubin check (ptxas, resources), but the module holds the PTX,
  which the driver compiles for the GPU it runs on: sm_80's code paths run on any newer GPU (an H200), for
  correctness, never for speed. Marked on the tvm Target by the key "ptx" (`target_embeds_ptx`).
Architectures tile_nb builds, and what each gets: tile_nb/lower/analysis/arch.py and docs/architectures.md.
"""
from __future__ import annotations

import functools
import os
import re
from typing import Any

from ..lower.analysis.arch import ArchCaps, parse_arch

__all__ = [
    "ARCH_ENV",
    "DEFAULT_ARCH",
    "arch_for_capability",
    "device_arch",
    "device_sm_count",
    "launch_problem",
    "resolve_target",
    "target_arch",
    "target_caps",
    "target_embeds_ptx",
    "target_label",
]

DEFAULT_ARCH = "sm_90a"
ARCH_ENV = "TILE_NB_ARCH"
PTX_KEY = "ptx"  # a key of the tvm Target: the module holds PTX (a compute_XY build), not a cubin

_ARCH_RE = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


def split_arch(text: str, where: str = "") -> tuple[str, bool]:
    """`"compute_80"` -> ("sm_80", True), `"sm_80"` -> ("sm_80", False); refused (ValueError naming `where`)
    unless tile_nb builds for it (lower/analysis/arch.py)."""
    text = str(text).strip()
    ptx = text.startswith("compute_")
    arch = "sm_" + text[len("compute_"):] if ptx else text
    parse_arch(arch, where or None)
    return arch, ptx


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
        raise ValueError(f"unsupported target {text!r}: tile_nb builds CUDA only; use 'cuda', 'sm_90a', "
                         f"'compute_80' or {{'kind': 'cuda', 'arch': 'sm_90a'}}")
    spec: dict[str, Any] = {"kind": "cuda"}
    for opt in parts[1:]:
        m = re.match(r"^-{1,2}arch=(\S+)$", opt)
        if not m:
            raise ValueError(
                f"unsupported target option {opt!r} in {text!r}; only -arch=sm_XY (or compute_XY) is "
                f"understood"
            )
        spec["arch"] = m.group(1)
    return spec


def resolve_target(target: Any = None):
    """Return a `tvm.target.Target` of kind cuda with an explicit arch.

    `target` may be None, a string ("cuda", "sm_80", "compute_80", "cuda -arch=sm_80"), a dict in TVM's JSON
    form, or a Target. An arch named by the caller wins (one may want to read sm_80 code on an H200);
    otherwise `TILE_NB_ARCH`, otherwise the device's arch, otherwise `DEFAULT_ARCH`. A `compute_XY` arch gives
    the Target arch sm_XY and the key "ptx" (the module holds PTX for the driver to compile).
    """
    import tvm

    if isinstance(target, tvm.target.Target):
        if target.kind.name != "cuda":
            raise ValueError(f"unsupported target kind {target.kind.name!r}: tile_nb builds CUDA only")
        if target.attrs.get("arch"):
            split_arch(str(target.attrs["arch"]))
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
    where = "the target"
    if not spec.get("arch"):
        chosen = os.environ.get(ARCH_ENV, "").strip()
        if chosen:
            spec["arch"], where = chosen, f"the environment variable {ARCH_ENV}"
        else:
            spec["arch"] = device_arch() or DEFAULT_ARCH
    arch, ptx = split_arch(str(spec["arch"]), where)
    spec["arch"] = arch
    if ptx:
        keys = list(spec.get("keys") or ("cuda", "gpu"))
        spec["keys"] = keys + [PTX_KEY] * (PTX_KEY not in keys)
    return tvm.target.Target(spec)


def target_arch(target) -> str:
    """The `sm_XY[a]` string of a resolved target (what the lowering builds for)."""
    return str(target.attrs["arch"])


def target_caps(target: Any = None) -> ArchCaps:
    """What the architecture a kernel is built for offers (`tile_nb.lower.analysis.arch.ArchCaps`), the arch
    chosen as every compile chooses it: `target` if given, else `TILE_NB_ARCH`, else the GPU in this process,
    else sm_90a. For sizing tiles to the GPU at hand:

        caps = target_caps()     # on a T4 (or TILE_NB_ARCH=sm_75 / compute_75): caps.arch == "sm_75",
        caps.max_shared_bytes    # 65536 bytes of shared memory per block; caps.wgmma False
    """
    return ArchCaps.of(target_arch(resolve_target(target)))


def target_embeds_ptx(target) -> bool:
    """Whether the module of a build for `target` holds PTX (a `compute_XY` target), not a cubin."""
    return PTX_KEY in [str(k) for k in target.keys]


def target_label(target) -> str:
    """`compute_80` for a PTX build, else the arch (`sm_80`): the name people type."""
    arch = target_arch(target)
    return "compute_" + arch[len("sm_"):] if target_embeds_ptx(target) else arch


def launch_problem(target, device: str | None) -> str | None:
    """Why a module built for `target` cannot run on a GPU of arch `device` (e.g. "sm_90a"), or None.

    A cubin runs on its own compute capability (tile_nb asks for the same digits); PTX of an architecture that
    is not arch-specific runs, compiled by the driver, on that one and every newer GPU."""
    if device is None:
        return "torch sees no CUDA device"
    arch = target_arch(target)
    (sm, variant), (dev_sm, _) = parse_arch(arch), parse_arch(device)
    if target_embeds_ptx(target):
        if sm <= dev_sm and not variant:
            return None
        if variant:
            return (
                f"it was built as PTX for {target_label(target)}, arch-specific PTX, which only "
                f"the {arch} GPU "
                f"itself runs; the device is {device}"
            )
        return f"it was built as PTX for {target_label(target)}, newer than the device ({device})"
    if sm == dev_sm:
        return None
    hint = (f", or target='compute_{arch[3:]}' ({ARCH_ENV}=compute_{arch[3:]}) to run {arch}'s code as PTX "
            f"that the driver compiles for this GPU" if sm < dev_sm and not variant else "")
    return (
        f"it was built for {arch} but the device is {device}; compile with target=None to use the device's "
        f"arch{hint}"
    )

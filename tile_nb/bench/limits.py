"""The per-block limits a compiled kernel must fit, and the check that prunes configurations by them.

With a GPU the figures come from torch's device properties; without one, from the lowering's table for the
target arch (`tile_nb.lower.analysis.budget`, from the CUDA programming guide), so compile-only tuning on a
CPU machine prunes as the GPU would. The lowering already refuses a kernel whose shared-memory tiles or
register fragments cannot fit; this check reads what ptxas reports of the built kernel: the registers it
really allocated (x threads, against the SM's register file), static shared memory, and spills.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DeviceLimits", "limits_for", "resource_problem"]

@dataclass(frozen=True)
class DeviceLimits:
    arch: str
    shared_per_block: int            # bytes, the opt-in maximum (static + dynamic)
    registers_per_sm: int = 65536
    registers_per_thread: int = 255
    threads_per_block: int = 1024
    source: str = "table"            # "device" (torch's properties) or "table" (by arch)


def _digits(arch: str) -> str:
    m = re.match(r"^sm_(\d+)", arch)
    return m.group(1) if m else ""


def limits_for(arch: str, *, use_device: bool = True) -> DeviceLimits:
    """Limits of `arch`: from the current GPU when it is that arch and `use_device`, else from the table."""
    if use_device:
        try:
            import torch

            from ..backend.target import device_arch

            if torch.cuda.is_available() and _digits(device_arch() or "") == _digits(arch):
                props = torch.cuda.get_device_properties(torch.cuda.current_device())
                shared = getattr(props, "shared_memory_per_block_optin", None)
                regs = getattr(props, "regs_per_multiprocessor", None)
                if shared:
                    return DeviceLimits(arch, int(shared), int(regs or 65536), source="device")
        except Exception:  # noqa: BLE001, S110 - a broken driver: the table below, labelled source='table'
            pass
    from ..lower.analysis.budget import MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM, max_shared_bytes

    return DeviceLimits(arch, max_shared_bytes(arch), REGISTERS_PER_SM, MAX_REGISTERS_PER_THREAD)


def resource_problem(resources: dict, threads: int | None, limits: DeviceLimits,
                     max_spill_bytes: int | None = 0) -> str | None:
    """Why a kernel with these ptxas figures cannot run (or should not be tried), or None.

    - shared memory (static + dynamic) above the opt-in maximum per block: it cannot launch;
    - registers x threads above the registers of one SM: not even one block fits;
    - spilled bytes (stores + loads) above `max_spill_bytes` (None: spills allowed): local-memory traffic in
      the inner loop; such a configuration is almost never the fastest.
    """
    shared = int(resources.get("shared_bytes", 0)) + int(resources.get("dynamic_shared_bytes") or 0)
    if shared > limits.shared_per_block:
        return (f"shared memory {shared:,} B > {limits.shared_per_block:,} B per block ({limits.arch}, "
                f"from the {'device' if limits.source == 'device' else 'arch table'})")
    regs = int(resources.get("registers", 0))
    if threads and regs * threads > limits.registers_per_sm:
        return (
            f"{regs} registers x {threads} threads = {regs * threads:,} > "
            f"{limits.registers_per_sm:,} registers "
            "per SM"
        )
    spills = int(resources.get("spill_stores", 0)) + int(resources.get("spill_loads", 0))
    if max_spill_bytes is not None and spills > max_spill_bytes:
        return (
            f"spills {resources.get('spill_stores', 0)} B stored + "
            f"{resources.get('spill_loads', 0)} B loaded "
            f"(limit {max_spill_bytes} B; max_spill_bytes=None allows spills)"
        )
    return None

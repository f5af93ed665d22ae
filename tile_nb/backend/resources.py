"""Per-kernel resource use as ptxas reports it (`-v`): registers, static shared memory, spills, stack.

ptxas prints, per entry function (nvcc and NVRTC differ only in the line prefixes):

    ptxas info    : Compiling entry function 'gemm_kernel' for 'sm_90a'
    ptxas info    : Function properties for gemm_kernel
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 128 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]

Dynamic shared memory is sized at launch, so ptxas cannot see it; `dynamic_shared_bytes` is filled in from the
lowered IR where its size is a constant.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

__all__ = ["Resources", "combine", "dynamic_shared_from_script", "parse_ptxas_log"]


@dataclass(frozen=True)
class Resources:
    """Resource use of one compiled kernel (all sizes in bytes)."""

    registers: int = 0
    shared_bytes: int = 0          # static shared memory (`__shared__` arrays), from ptxas
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    barriers: int = 0
    dynamic_shared_bytes: int | None = None   # `extern __shared__`, from the IR; None when unknown

    @property
    def total_shared_bytes(self) -> int:
        return self.shared_bytes + (self.dynamic_shared_bytes or 0)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Resources:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def __str__(self) -> str:
        dyn = f" + {self.dynamic_shared_bytes} B dynamic" if self.dynamic_shared_bytes else ""
        return (
            f"{self.registers} registers, {self.shared_bytes} B shared{dyn}, "
            f"{self.spill_stores} B spill stores, {self.spill_loads} B spill loads, "
            f"{self.stack_bytes} B stack"
        )


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_ptxas_log(log: str) -> dict[str, Resources]:
    """Map each entry function named in a ptxas `-v` log to its Resources. Device functions that ptxas lists
    with their own "Function properties" (non-inlined calls) are not entries and are left out."""
    fields: dict[str, dict[str, int]] = {}
    entry: str | None = None        # the entry whose "Used N registers" line comes next
    props_for: str | None = None    # the function whose frame line comes next
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry = m.group(1)
            fields.setdefault(entry, {})
            continue
        if m := _PROPS.search(line):
            props_for = m.group(1)
            continue
        if (m := _FRAME.search(line)) and props_for is not None:
            fields.setdefault(props_for, {}).update(
                stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
            props_for = None
            continue
        if (m := _USED.search(line)) and entry is not None:
            info = fields.setdefault(entry, {})
            info["registers"] = int(m.group(1))
            if s := _SMEM.search(line):
                info["shared_bytes"] = int(s.group(1))
            if b := _BARRIERS.search(line):
                info["barriers"] = int(b.group(1))
            entry = None
    entries = {name for name in fields if "registers" in fields[name]}
    return {name: Resources(**fields[name]) for name in sorted(entries)}


def combine(per_kernel: dict[str, Resources]) -> Resources | None:
    """One figure for a module: its only kernel, or the largest use of each resource over several."""
    if not per_kernel:
        return None
    if len(per_kernel) == 1:
        return next(iter(per_kernel.values()))
    values = list(per_kernel.values())
    dyn = [r.dynamic_shared_bytes for r in values if r.dynamic_shared_bytes is not None]
    return Resources(
        registers=max(r.registers for r in values),
        shared_bytes=max(r.shared_bytes for r in values),
        spill_stores=max(r.spill_stores for r in values),
        spill_loads=max(r.spill_loads for r in values),
        stack_bytes=max(r.stack_bytes for r in values),
        barriers=max(r.barriers for r in values),
        dynamic_shared_bytes=max(dyn) if dyn else None,
    )


# `smem_pool = T.alloc_buffer((49152,), "uint8", scope="shared.dyn")` in TVMScript;
# `T.decl_buffer(..., data=...)` views into the pool are not allocations and are not counted.
_DYN_ALLOC = re.compile(r'T\.alloc_buffer\(\(([^()]*)\),\s*"(\w+)"[^\n]*?scope="shared\.dyn"')
_DTYPE_BITS = re.compile(r"^[a-z]+?(\d+)(?:x(\d+))?$")


def dynamic_shared_from_script(script: str) -> int | None:
    """Bytes of dynamic shared memory allocated in a lowered module's TVMScript, or None when there is none or
    a size is not a constant."""
    total = 0
    for dims_text, dtype in _DYN_ALLOC.findall(script):
        dims = [d.strip() for d in dims_text.split(",") if d.strip()]
        bits = _DTYPE_BITS.match(dtype)
        if not dims or not all(d.isdigit() for d in dims) or not bits:
            return None
        count = 1
        for d in dims:
            count *= int(d)
        total += count * int(bits.group(1)) * int(bits.group(2) or 1) // 8
    return total or None

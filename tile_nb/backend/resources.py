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

__all__ = ["Resources", "combine", "dynamic_shared_by_kernel", "parse_ptxas_log"]


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


def dynamic_shared_by_kernel(mod) -> dict[str, int]:
    """Bytes of dynamic shared memory (`shared.dyn` allocations; views into them are not counted) of each
    device kernel of a thread-level IRModule, by the name TVM gives the kernel: each T.Kernel of a function
    `f` (an outermost `thread_extent` scope) becomes `f_kernel`, `f_kernel_1`, ... in program order. A kernel
    with no such allocation, or one whose size is not a constant, is left out. (Read from the IR, not its
    printed script: a function with several T.Kernel once reported their sum for each.)"""
    from tvm import tirx

    from ..lower.irwalk import iter_stmts

    sizes: dict[str, int] = {}
    for gvar, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        symbol = str((func.attrs or {}).get("global_symbol", gvar.name_hint))
        for index, launch in enumerate(_outermost_launches(func.body)):
            total = 0
            for stmt in iter_stmts(launch):
                if isinstance(stmt, tirx.AllocBuffer) and stmt.buffer.scope() == "shared.dyn":
                    if not all(isinstance(d, tirx.IntImm) for d in stmt.buffer.shape):
                        total = None
                        break
                    count = 1
                    for d in stmt.buffer.shape:
                        count *= int(d)
                    total += count * _element_bytes(stmt.buffer.dtype)
            if total:
                sizes[f"{symbol}_kernel" + (f"_{index}" if index else "")] = total
    return sizes


def _element_bytes(dtype) -> int:
    """Bytes of one element of a TVM dtype (vector lanes included)."""
    import tvm

    t = tvm.DataType(str(dtype))
    return t.bits * t.lanes // 8


def _outermost_launches(stmt):
    """The outermost `thread_extent` scopes under `stmt`: one per device kernel."""
    from tvm import tirx

    from ..lower.irwalk import children

    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent":
        yield stmt
        return
    for child in children(stmt):
        yield from _outermost_launches(child)

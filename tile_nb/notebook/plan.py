"""The lowering plan of a compiled kernel (`CompiledKernel.plan`, tile_nb.lower.KernelPlan.summary()) as text:
where each fragment lives and its register layout (with who holds the top-left corner), the MMAs, the
shared-memory pool, the pipelines and what the kernel assumes of each call; for a function with several
T.Kernel, each kernel's (`FunctionPlan.summary()["kernels"]`)."""
from __future__ import annotations

__all__ = ["plan_text"]


def _kib(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"


def plan_text(plan: dict) -> str:
    """The plan as text; a function with several T.Kernel (`plan["kernels"]`) one section per kernel."""
    kernels = plan.get("kernels")
    if not kernels:
        return "\n".join(_kernel_lines(plan, "Lowering plan"))
    lines = []
    for i, kernel in enumerate(kernels, 1):
        lines += _kernel_lines(kernel, f"Kernel {i} of {len(kernels)}, lowering plan")
    lines += [f"Note: {n}" for n in plan.get("function_notes") or []]
    return "\n".join(lines)


def _kernel_lines(plan: dict, title: str) -> list[str]:
    lines = [f"{title}: {plan.get('arch', '?')}, {plan.get('threads', '?')} threads per block"]
    fragments = plan.get("fragments") or []
    if fragments:
        lines.append(f"Fragments ({plan.get('fragment_registers', 0)} registers per thread in all):")
        for f in fragments:
            shape = "x".join(str(n) for n in f.get("shape", []))
            lines.append(f"  {f['name']} [{shape}] {f.get('dtype', '')}: {f['where']}: {f.get('layout', '')}")
            if f.get("picture"):
                lines.append("    thread holding each element (top-left corner):")
                lines += ["    " + row for row in f["picture"].split("\n")]
    for m in plan.get("mma") or []:
        lines.append(f"T.gemm into {m['name']}: {m['kind']}, {m['tile'][0]}x{m['tile'][1]} tile")
    shared = plan.get("shared") or []
    if shared:
        lines.append(f"Shared memory: {_kib(plan.get('shared_bytes', 0))} per block")
        for t in shared:
            extra = ", ".join(x for x in ("swizzled" if t.get("swizzle") else "",
                                          f"{t['stages']} stages" if t.get("stages", 1) > 1 else "") if x)
            lines.append(
                f"  {t['name']}: {_kib(t['bytes'])} at {t['offset']}{f' ({extra})' if extra else ''}"
            )
    for p in plan.get("pipelines") or []:
        prefetched = ", ".join(p.get("prefetched") or []) or "nothing"
        lines.append(f"T.Pipelined loop {p['loop']}: {p['stages']} stages, prefetches {prefetched}")
        lines += [f"  {tile} is copied ahead only where `{cond}` holds for its iteration"
                  for tile, cond in (p.get("guarded") or {}).items()]
        lines += [f"  {note}" for note in p.get("in_order") or []]
    if plan.get("pipeline"):
        lines.append(f"Pipeline: {plan['pipeline']}")
    if plan.get("assumes"):
        lines.append("Assumes for this call (checked on every call): " + "; ".join(plan["assumes"]))
    lines += [f"Note: {n}" for n in plan.get("notes") or []]
    return lines

"""The grammar: one module per family of kernels. Each has a frozen `Spec` dataclass (its repr regenerates
the kernel), `draw(chooser) -> Spec` and `render(spec) -> Case`."""
from __future__ import annotations

from . import copies, elementwise, gemm, loops, pipelined, reductions

FAMILIES = {
    "copy": copies,
    "elementwise": elementwise,
    "reduce": reductions,
    "gemm": gemm,
    "gather": pipelined,
    "loops": loops,
}

__all__ = ["FAMILIES", "render"]


def render(spec):
    """The Case of any family's spec."""
    for module in FAMILIES.values():
        for value in vars(module).values():
            if isinstance(value, type) and isinstance(spec, value) and value.__module__ == module.__name__:
                return module.render(spec)
    raise TypeError(f"not a difftest spec: {spec!r}")

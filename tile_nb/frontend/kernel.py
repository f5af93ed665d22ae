"""A kernel definition: the user's function, its source, signature analysis and rewritten body.

Everything here is computed once, at decoration; `instantiate` binds the rewritten body to the closure's
current values for one elaboration.
"""
from __future__ import annotations

import types
from dataclasses import dataclass

from .params import KernelSignature, analyze_signature
from .rewrite import FACTORY_NAME, rewrite_kernel
from .source import KernelSource, get_source

__all__ = ["KernelDefinition"]


@dataclass
class KernelDefinition:
    fn: types.FunctionType
    source: KernelSource
    signature: KernelSignature
    factory: types.FunctionType

    @classmethod
    def from_function(cls, fn, out_idx=None) -> KernelDefinition:
        """`out_idx`: the positions of signature tensors that are outputs
        (allocated by the call, returned)."""
        source = get_source(fn)
        signature = analyze_signature(fn, source, out_idx)
        code = rewrite_kernel(source, fn.__code__.co_freevars)
        namespace: dict = {}
        exec(code, fn.__globals__, namespace)  # noqa: S102 - defines the factory; the body runs on elaboration
        return cls(fn, source, signature, namespace[FACTORY_NAME])

    @property
    def name(self) -> str:
        return self.fn.__name__

    def closure_values(self) -> tuple:
        return tuple(cell.cell_contents for cell in (self.fn.__closure__ or ()))

    def instantiate(self, hooks):
        return self.factory(hooks, *self.closure_values())

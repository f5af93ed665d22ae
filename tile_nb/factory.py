"""Kernel factories: `@tile_nb.jit` of a Python function that defines a `@T.prim_func` and returns it.

This is tilelang's older kernel style: the factory's arguments pick sizes, dtypes and tile shapes as plain
Python, and the kernel inside annotates its tensors in its signature with those values:

    @tile_nb.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=128, block_N=128, block_K=32):
        @T.prim_func
        def main(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
                 C: T.Tensor((M, N), T.float32)):
            ...
        return main

    kernel = matmul(1024, 1024, 512)    # a tile_nb kernel (JITFunction); C = kernel(A, B)

A call runs the factory once per distinct argument values (keyed as compile-time values are: by type and
current contents) and what the factory reads (its globals, closure cells and helpers, keyed as a kernel's
reads are: a global changed in a notebook cell runs the factory again), and makes a `JITFunction` of the
kernel it returns, with the factory's `jit` options (`out_idx`, target, lowering options). Later calls with
the same values return that kernel.
"""
from __future__ import annotations

import functools

from ._locks import KeyedLocks, build_once
from .errors import SignatureError
from .frontend.environment import factory_key
from .language.functions import PrimFuncDefinition

__all__ = ["KernelFactory"]


class KernelFactory:
    """What `@tile_nb.jit` makes of a kernel factory. Call it with the
    factory's arguments to get the kernel: `make_kernel(prim_func_fn, **jit_options)` (jit.py passes
    JITFunction, so that this module needs nothing of the layer that uses it)."""

    def __init__(self, fn, jit_options: dict, make_kernel):
        self.fn = fn
        self.jit_options = dict(jit_options)
        self.make_kernel = make_kernel
        self._kernels: dict = {}
        self._building = KeyedLocks()
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        key = factory_key(self.fn, args, kwargs)
        return build_once(self._kernels, key, lambda: self._build(args, kwargs), self._building)

    def _build(self, args, kwargs):
        made = self.fn(*args, **kwargs)
        if not isinstance(made, PrimFuncDefinition):
            code = self.fn.__code__
            raise SignatureError(
                f"the kernel factory '{self.fn.__name__}' returned {type(made).__name__} "
                f"{made!r:.80}; a factory "
                "under @tile_nb.jit returns the @T.prim_func it defines",
                filename=code.co_filename,
                lineno=code.co_firstlineno,
                hint="end the factory with `return main` (the @T.prim_func's name)",
            )
        return self.make_kernel(made.fn, **self.jit_options)

    def __repr__(self) -> str:
        return f"<tile_nb kernel factory {self.fn.__qualname__}>"

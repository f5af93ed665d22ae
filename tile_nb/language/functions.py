"""Kernel-building functions in tilelang's spellings: `@T.prim_func` and `@T.macro`.

- `@T.prim_func` marks a kernel whose tensors are annotated in its signature, usually defined inside a Python
  function that picks the sizes (a kernel factory):

      @tile_nb.jit(out_idx=[-1])
      def matmul(M, N, K, block_M=128):
          @T.prim_func
          def main(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
                   C: T.Tensor((M, N), T.float32)):
              with T.Kernel(T.ceildiv(M, block_M), ...) as (bx, by):
                  ...
          return main

      kernel = matmul(1024, 1024, 512)     # runs the factory once per argument values; a tile_nb kernel
      C = kernel(A, B)                     # out_idx: C is allocated by the call and returned

- `@T.macro` marks a helper whose body is kernel code (loops over T.Parallel, IR `if`s, stores into buffers,
  `T.Kernel`, `T.empty`): calling it inside a kernel body elaborates its body there, as if written inline. Its
  `return` gives a value back to the caller. A plain Python helper, by contrast, runs as ordinary Python.

Both are markers: the front end (tile_nb.frontend) gives them their meaning while it elaborates a kernel.
"""
from __future__ import annotations

import functools
import types

from ..errors import DSLError
from . import state as _state

__all__ = ["prim_func", "macro", "Ref", "PrimFuncDefinition", "Macro", "defines_prim_func"]


def _check_function(fn, what: str) -> None:
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"{what} decorates a Python function (`def`); got {type(fn).__name__} {fn!r}")


class PrimFuncDefinition:
    """What `@T.prim_func` returns: the kernel function, for `tile_nb.jit(func, out_idx=...)` (or a kernel
    factory under `tile_nb.jit`) to compile. It is not callable itself."""

    def __init__(self, fn: types.FunctionType):
        _check_function(fn, "@T.prim_func")
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        raise DSLError(
            f"'{self.fn.__name__}' is a @T.prim_func kernel definition; compile it to call it",
            hint=f"tile_nb.jit({self.fn.__name__}, out_idx=[...]) makes a kernel of it, or return it "
            "from a kernel factory decorated with @tile_nb.jit",
        )

    def __repr__(self) -> str:
        return f"<T.prim_func {self.fn.__qualname__}>"


class Macro:
    """What `@T.macro` returns. Called inside a kernel body, its body is elaborated there (the front end
    installs `State.on_macro`); called anywhere else it raises."""

    def __init__(self, fn: types.FunctionType):
        _check_function(fn, "@T.macro")
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        st = _state.active(f"the T.macro '{self.fn.__name__}'")
        return st.on_macro(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<T.macro {self.fn.__qualname__}>"


class _RefType:
    """`x: T.Ref` on a T.macro parameter: the argument is a location (a buffer element `A[i]` or
    a `T.alloc_var`), and `x = value` in the macro stores there, as a C++ reference would.
    Reading `x` reads the location."""

    def __repr__(self) -> str:
        return "T.Ref"


Ref = _RefType()


def prim_func(fn=None, *, private: bool = False, check_well_formed: bool = True):
    """`@T.prim_func`: a kernel with its tensors annotated in the signature
    (`A: T.Tensor((M, K), T.float16)`). tilelang's `private` and `check_well_formed` flags change
    nothing here and are accepted."""
    if fn is None:
        return lambda f: PrimFuncDefinition(f)
    return PrimFuncDefinition(fn)


def macro(fn=None, *, hygienic: bool = True):
    """`@T.macro`: a helper whose body is kernel code, elaborated where it is called. (`hygienic`: its names
    are its own, as any Python function's; `hygienic=False` is not supported.)"""
    if not hygienic:
        raise DSLError(
            "@T.macro(hygienic=False) (a macro that reads the caller's local names) is not supported",
            hint="pass what the macro needs as arguments",
        )
    if fn is None:
        return lambda f: Macro(f)
    return Macro(fn)


def defines_prim_func(fn: types.FunctionType) -> bool:
    """True when `fn` is a kernel factory: its code, or a function nested in it, reads the name `prim_func`
    (the `@T.prim_func` decorator is evaluated by the enclosing function's code)."""
    todo = [fn.__code__]
    while todo:
        code = todo.pop()
        if "prim_func" in code.co_names:
            return True
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return False

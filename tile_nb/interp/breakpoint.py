"""`T.breakpoint()` on the interpreter: stop in the debugger at the user's line with the kernel's variables.

The interpreter runs closures, not the user's function, so there is no frame of the kernel to stop in. One is
made: a small function compiled with the user's file name, whose body sits on the user's line, assigns every
variable in scope (named as in the kernel) and calls Python's `breakpoint()`. pdb, IPython's debugger and
Jupyter's then show the user's file and line, and their locals are the kernel's: tiles as the
interpreter's torch tensors (live: writing them changes the run), `T.alloc_var` scalars and float scalar
parameters as 0-d tensors, indices (block ids, loop vars, integer parameters and dims) as Python ints.
`breakpoint()` goes through `sys.breakpointhook`, so `PYTHONBREAKPOINT=0` disables it and a test can
install a hook that records the frame.
"""
from __future__ import annotations

import builtins
import keyword

import torch
from tvm.tirx.buffer import is_buffer_var

from . import values as V
from .compiler import Compiler
from .errors import InterpreterError

__all__ = ["compile_breakpoint"]

_FRAMES: dict[tuple, object] = {}  # (kernel, file, line, names) -> the generated function


def compile_breakpoint(comp: Compiler, node):
    line, *wanted = (int(a.value) for a in node.args[1:5])
    if comp.par_vars:
        raise InterpreterError(
            "T.breakpoint inside a T.Parallel loop is not supported: the loop's iterations are "
            "spread over the threads. Stop before or after the loop",
            comp.location,
        )
    shown = _in_scope(comp)
    filename = comp.location.filename or f"<tile_nb kernel {comp.name}>"
    stop = _frame_function(comp.name, filename, line, tuple(name for name, _, _ in shown))

    def run(f):
        block = f.block_ids() or (0,)
        if not all(w < 0 or (block[i] if i < len(block) else 0) == w for i, w in enumerate(wanted)):
            return 0
        values = {}
        for name, slot, kind in shown:
            value = f.vals[slot]
            if value is None:
                continue
            if kind == "var":
                value = value[0]  # a T.alloc_var: the scalar, as a 0-d view (live)
            elif kind == "float" and not V.is_tensor(value):
                value = torch.tensor(value, dtype=torch.float32)
            values[name] = value
        stop(values)
        return 0
    return run


def _in_scope(comp: Compiler) -> list[tuple[str, int, str]]:
    """(name, slot, kind) of the variables and buffers visible at the statement being compiled; a later
    variable of the same name hides an earlier one, as in the kernel's Python."""
    found: dict[str, tuple[str, int, str]] = {}
    for slot, var in comp.vars.items():
        if slot in comp.closed:
            continue
        name = str(var.name)
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("__"):
            continue
        if is_buffer_var(var):
            kind = "var" if var.scope() == "local.var" else "tile"
        else:
            dtype = str(getattr(var.ty, "dtype", "int32"))
            kind = "float" if dtype.startswith(("float", "bfloat")) else "int"
        found[name] = (name, slot, kind)
    return list(found.values())


def _frame_function(kernel: str, filename: str, line: int, names: tuple[str, ...]):
    """A function named after the kernel whose code is on `line` of `filename`: it binds `names` from the dict
    it is given and calls `breakpoint()`; the debugger stops at the next line event, on that line too."""
    key = (kernel, filename, line, names)
    fn = _FRAMES.get(key)
    if fn is None:
        fname = kernel if kernel.isidentifier() and not keyword.iskeyword(kernel) else "kernel"
        body = "".join(
            f"{n} = __tile_nb_values[{n!r}] if {n!r} in __tile_nb_values else None; " for n in names
        )
        pad = "\n" * max(line - 2, 0)
        # Twice round a loop on the one line: the jump back after breakpoint() is a line event on the user's
        # line, where debugpy (Jupyter's and VS Code's debugger) stops; pdb stops there too.
        loop = "for __tile_nb_again in (False, True): "
        stop = "breakpoint() if not __tile_nb_again else None"
        source = f"{pad}def {fname}(__tile_nb_values):\n    {loop}{body}{stop}\n"
        scope = {"__builtins__": builtins}
        exec(compile(source, filename, "exec"), scope)  # noqa: S102 - our own generated source
        fn = _FRAMES[key] = scope[fname]
        if len(_FRAMES) > 256:
            _FRAMES.clear()
    return fn

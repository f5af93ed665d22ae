"""The Python twins of `%%tilekernel`: `show(f, ...)` and the `kernel_view` it is built on.

`show(gemm, M=256, N=256, K=128)` takes the same arguments as `gemm.specialize(...)` and returns a
`KernelView` (template and specialized IR side by side). `kernel_view` adds the options of the
magic: compile for the CUDA source and lowered IR, run the kernel (on the CPU interpreter for CPU
tensors), and compare against a reference.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tile_nb.notebook.build import (
    func_params,
    max_abs_err,
    signature_of,
    source_of,
    template_func_of,
    tensor_device,
    view_from_parts,
)
from tile_nb.notebook.views import KernelView

__all__ = ["kernel_view", "show", "split_arguments"]

def _is_tensor(value) -> bool:
    return hasattr(value, "data_ptr") and hasattr(value, "shape")


def split_arguments(kernel, args: tuple, kwargs: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a call's arguments into (compile-time candidates, consts given by keyword).

    Arguments bound to a parameter of the Python signature that are not tensors are compile-time candidates
    (the template takes them); keywords that name no parameter are consts (`M=1024`).
    """
    sig = signature_of(kernel)
    if sig is None:
        return {}, dict(kwargs)
    names = set(sig.parameters)
    try:
        bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in names}).arguments
    except TypeError:
        bound = {k: v for k, v in kwargs.items() if k in names}
    compile_time = {k: v for k, v in bound.items() if not _is_tensor(v)}
    consts = {k: v for k, v in kwargs.items() if k not in names}
    return compile_time, consts


def _compile_time_values(kernel, compile_time: dict, template_func) -> dict[str, Any]:
    """Every compile-time parameter with its value (given or default), for the params list of the view.

    The kernel's own parameter analysis says which parameters are compile-time
    (`kernel.signature.compile_time`, as `tile_nb.jit` has it); otherwise, every Python parameter that is not
    a runtime param of the template.
    """
    sig = signature_of(kernel)
    if sig is None:
        return dict(compile_time)
    declared = getattr(getattr(kernel, "signature", None), "compile_time", None)
    if declared is not None:
        names = {getattr(p, "name", p) for p in declared}
    else:
        runtime = {p.name for p in func_params(template_func)} if template_func is not None else set()
        names = set(sig.parameters) - runtime
    values = {}
    for name, param in sig.parameters.items():
        if name not in names:
            continue
        if name in compile_time:
            values[name] = compile_time[name]
        elif param.default is not param.empty:
            values[name] = param.default
    return values


def _call_template(kernel, compile_time: dict):
    """`kernel.template(...)` with the compile-time values (a runtime value given
    by keyword is bound, not used)."""
    return kernel.template(**compile_time)


def _accepts_backend(kernel) -> bool:
    try:
        return "backend" in inspect.signature(type(kernel).__call__).parameters
    except (TypeError, ValueError):
        return False


def _run(kernel, args: tuple, kwargs: dict, cpu: bool):
    """Call the kernel; with `cpu`, on the CPU interpreter even for CUDA tensors. Returns (output, device)."""
    device = tensor_device(args)
    if not cpu or device == "cpu":
        return kernel(*args, **kwargs), device
    if _accepts_backend(kernel):
        return kernel(*args, backend="cpu", **kwargs), "cpu"
    cpu_args = tuple(a.cpu() if _is_tensor(a) else a for a in args)
    out = kernel(*cpu_args, **kwargs)
    for original, copy in zip(args, cpu_args, strict=True):
        if _is_tensor(original):
            original.copy_(copy)
    return out, "cpu"


def source_filename(kernel) -> str | None:
    """The file (or cell) the kernel was defined in, to quote source lines."""
    for path in (
        ("definition", "source", "filename"),
        ("source", "filename"),
        ("__wrapped__", "__code__", "co_filename"),
        ("fn", "__code__", "co_filename"),
        ("__code__", "co_filename"),
    ):
        obj = kernel
        for attr in path:
            obj = getattr(obj, attr, None)
        if isinstance(obj, str):
            return obj
    return None


def kernel_view(kernel, args: tuple = (), kwargs: dict | None = None, *, specialize: bool | None = None,
                lowered: bool = False, cuda: bool = False, run: bool = False, cpu: bool = False,
                expected: Any = None, name: str | None = None, notes: list[str] | None = None) -> KernelView:
    """Build the view of a jit function for these arguments (what `%%tilekernel` shows).

    - `args`/`kwargs`: as for `kernel.specialize` (tensors, or consts as keywords such as `M=1024`);
    - `specialize`: show phase 2 (default: when any argument is given);
    - `lowered` / `cuda`: compile (`kernel.compile`) and show the lowered IR / the CUDA, PTX and SASS;
    - `run`: call the kernel; `cpu` forces the CPU interpreter; `expected`: a reference tensor (or a callable
      returning one) to compare the output with (the returned value, else the last tensor argument).
    """
    kwargs = dict(kwargs or {})
    compile_time, given_consts = split_arguments(kernel, args, kwargs)
    template = _call_template(kernel, compile_time)
    template_func = template_func_of(template)
    if specialize is None:
        specialize = bool(args or kwargs) or run
    # A `T.dynamic` dim given by keyword (`--shapes N=1000`) stays symbolic: one
    # compiled kernel serves every value.
    dynamic = [n for n in given_consts if n in (getattr(template, "dynamic", None) or ())]
    if dynamic:
        note = (f"{', '.join(dynamic)}: T.dynamic, so phase 2 keeps {'it' if len(dynamic) == 1 else 'them'} "
                "symbolic (one kernel serves every value)")
        notes = [*(notes or []), note]
        given_consts = {k: v for k, v in given_consts.items() if k not in dynamic}
    ir_kwargs = {k: v for k, v in kwargs.items() if k not in dynamic}
    specialized = kernel.specialize(*args, **ir_kwargs) if specialize else None
    compiled = kernel.compile(*args, **ir_kwargs) if (lowered or cuda) else None

    run_info, backend = None, ("cuda" if compiled is not None else None)
    if run:
        out, device = _run(kernel, args, ir_kwargs, cpu)
        err = None
        if expected is not None:
            reference = expected() if callable(expected) else expected
            actual = out if out is not None else [a for a in args if _is_tensor(a)][-1]
            err = max_abs_err(actual, reference)
        run_info = {"device": device, "max_abs_err": err}
        backend = "cpu-interpreter" if device == "cpu" else "cuda"
    return view_from_parts(
        name or getattr(kernel, "__name__", None) or "kernel", template=template, specialized=specialized,
        compiled=compiled, compile_time=_compile_time_values(kernel, compile_time, template_func),
        given_consts=given_consts, run=run_info, backend=backend, lowered=lowered, cuda=cuda, notes=notes,
        source_filename=source_filename(kernel), source=source_of(kernel))


def show(kernel, *args, **kwargs) -> KernelView:
    """The view of `kernel` specialized like `kernel.specialize(*args, **kwargs)`;
    with no arguments, the template.

    >>> show(gemm, M=256, N=256, K=128)          # doctest: +SKIP
    KernelView gemm
      ...
    """
    if not hasattr(kernel, "template"):  # (a TVM PrimFunc has a `specialize` of its own, but no `template`)
        return _view_of_funcs(kernel)
    return kernel_view(kernel, args, kwargs)


def _view_of_funcs(func: Callable | Any) -> KernelView:
    """A view of a plain TVM PrimFunc (or anything with `.script()`): one specialized section."""
    name = (
        str(getattr(func, "attrs", {}).get("global_symbol", "kernel")) if hasattr(func, "attrs") else "kernel"
    )
    return view_from_parts(name, specialized=func)

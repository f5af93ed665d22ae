"""Inputs and descriptions for benchmarks: random tensors shaped by a kernel's
annotations, byte counts, labels."""
from __future__ import annotations

import inspect
import platform
from collections.abc import Callable, Iterable

__all__ = ["make_inputs"]


def is_tensor(x) -> bool:
    return hasattr(x, "data_ptr") and hasattr(x, "shape")


def tensors_in(values: Iterable) -> list:
    out = []
    for v in values:
        if is_tensor(v):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            out += tensors_in(v)
    return out


def nbytes_of(values: Iterable) -> int:
    return sum(int(t.numel()) * int(t.element_size()) for t in tensors_in(values))


def describe(args: Iterable) -> str:
    """`X float32[256], 2.0`: tensors by dtype and shape, other values by repr (short)."""
    parts = []
    for a in args:
        if is_tensor(a):
            parts.append(f"{str(a.dtype).replace('torch.', '')}[{', '.join(str(int(d)) for d in a.shape)}]")
        else:
            text = repr(a)
            parts.append(text if len(text) <= 20 else text[:17] + "...")
    return ", ".join(parts)


def device_of(values: Iterable) -> str:
    for t in tensors_in(values):
        return str(t.device)
    return "cpu"


def device_name(gpu: bool) -> str:
    if gpu:
        try:
            import torch

            return torch.cuda.get_device_name()
        except Exception:  # noqa: BLE001 - a name is decoration; never fail a benchmark for it
            return "CUDA device"
    return f"CPU ({platform.machine() or 'unknown'})"


def sync(gpu: bool) -> None:
    if gpu:
        import torch

        torch.cuda.synchronize()


def positional_arity(fn: Callable) -> int | None:
    """How many positional parameters without defaults `fn` takes (None: *args, or not introspectable)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return None
    return sum(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params
    )


def call_baseline(baseline: Callable, args: tuple) -> Callable[[], object]:
    """A zero-argument baseline as is; one that takes arguments gets the kernel's
    arguments (`lambda A, B, C: ...`)."""
    arity = positional_arity(baseline)
    if arity == 0:
        return baseline
    first = args if arity is None else args[:arity]
    return lambda: baseline(*first)


def callable_name(fn: Callable) -> str:
    """A function's name, or a lambda's body as written (`torch.matmul(A, B)`), for labels."""
    name = getattr(fn, "__name__", None)
    if name and name != "<lambda>":
        return name
    try:
        import ast
        import textwrap

        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)).strip())
    except (OSError, TypeError, SyntaxError, IndentationError):
        return "baseline"
    code = fn.__code__
    arg_names = list(code.co_varnames[: code.co_argcount])
    lambdas = [
        n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and [a.arg for a in n.args.args] == arg_names
    ]
    if len(lambdas) != 1:
        return "baseline"
    return ast.unparse(lambdas[0].body)[:60]


def compile_time_names(kernel) -> set[str]:
    declared = getattr(getattr(kernel, "signature", None), "compile_time", None)
    return {getattr(p, "name", p) for p in declared} if declared is not None else set()


def make_inputs(kernel, *, device: str | None = None, seed: int = 0, **values) -> tuple:
    """Random input tensors for `kernel` specialized with `values` (consts and compile-time parameters).

    The shapes and dtypes come from the kernel's own annotations (phase 2), so `make_inputs(gemm, M=256,
    N=256, K=128)` gives `(A, B, C)`. Floating tensors are `randn`, integer tensors small integers; outputs
    the kernel returns are not made. `device` defaults to "cuda" when torch sees a GPU, else "cpu".
    """
    import torch

    from ..language.dtypes import torch_dtype

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    func = kernel.specialize(**values)
    outputs = (
        {str(o) for o in func.attrs.get("tile_nb.outputs", []) or []} if func.attrs is not None else set()
    )
    params = {str(p.name): p for p in func.params}
    names = [p.name for p in kernel.signature.runtime]
    gen = torch.Generator().manual_seed(seed)
    made = []
    for n in names:
        if n in outputs:
            continue
        p = params.get(n)
        shape = getattr(p, "shape", None)
        if p is None or shape is None:
            raise ValueError(
                f"make_inputs(): '{n}' of {kernel.__name__}() is not a tensor with a static shape; "
                "give make_args=callable(config) -> arguments"
            )
        try:
            dims = [int(d) for d in shape]
        except (TypeError, ValueError):
            raise ValueError(f"make_inputs(): '{n}' has a dynamic shape {tuple(str(d) for d in shape)}; give "
                             "make_args=callable(config) -> arguments") from None
        dtype = torch_dtype(str(p.dtype))
        if dtype.is_floating_point:
            t = torch.randn(dims, generator=gen, dtype=torch.float32).to(dtype)
        elif dtype == torch.bool:
            t = torch.zeros(dims, dtype=dtype)
        else:
            t = torch.randint(-4, 5, dims, generator=gen).to(dtype)
        made.append(t.to(device))
    return tuple(made)

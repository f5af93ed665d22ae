"""`tilelang.utils.tensor` on tile_nb: `TensorSupplyType` (the profiler's), `get_tensor_supply` and
`torch_assert_close`, with tilelang's signatures and meaning (written for tile_nb, not copied).

- `get_tensor_supply(supply_type)` returns `supply(param)`: a tensor of `param.shape` and `param.dtype`
  (any object with those: a torch tensor, a TVM buffer, a kernel parameter; the dtype a torch dtype or
  a dtype name) on the current device ("cuda" when torch sees one, so the CPU under
  `tile_nb.run --cpu`), filled as the type says.
- `torch_assert_close(a, b, rtol=1e-2, atol=1e-3, max_mismatched_ratio=0.001, ...)` passes when at most
  `int(numel * max_mismatched_ratio)` elements lie outside `atol + rtol * |b|` (NaN equals NaN by default),
  after checking shape (and device, dtype, layout, stride as asked); else AssertionError with the count, the
  first mismatch and the greatest differences. Returns True.
"""
from __future__ import annotations

import enum

from .._support import forwarding_getattr

__all__ = ["TensorSupplyType", "get_tensor_supply", "torch_assert_close", "is_float8_dtype"]


class TensorSupplyType(enum.Enum):
    """How tilelang's profiler fills a kernel's inputs (`tilelang.profiler.TensorSupplyType` is this one)."""
    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


def _torch_dtype(dtype):
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    from ...language.dtypes import as_dtype, torch_dtype

    return torch_dtype(str(as_dtype(str(dtype))))


def is_float8_dtype(dtype) -> bool:
    return "float8" in str(dtype)


def _device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def get_tensor_supply(supply_type: TensorSupplyType = TensorSupplyType.Integer):
    """tilelang's tensor supply: `get_tensor_supply(kind)(param)` makes a
    tensor shaped and typed like `param`.

    Integer: small integers (-2..2; 0..2 unsigned, 0..1 bool, -128..127 cast for
    FP8); Uniform: U(-1, 1); Normal:
    N(-1, 1) (tilelang's mean); Randn: N(0, 1); Zero, One; Auto: U(-1, 1) for float16/bfloat16/float32, else
    as Integer. Uniform and Normal of int8 give ones (as tilelang's)."""
    if not isinstance(supply_type, TensorSupplyType):
        raise TypeError(f"get_tensor_supply(supply_type=...) takes a TensorSupplyType; got {supply_type!r}")

    def supply(param):
        import torch

        shape = getattr(param, "shape", None)
        dtype = getattr(param, "dtype", None)
        if shape is None or dtype is None:
            raise TypeError(
                f"tilelang.utils.tensor supply: expected a parameter with .shape and .dtype (a tensor, "
                f"a buffer); got {type(param).__name__}"
            )
        try:
            dims = [int(d) for d in shape]
        except (TypeError, ValueError):
            raise ValueError(f"tilelang.utils.tensor supply: the shape must be static to make a tensor; got "
                             f"{tuple(str(d) for d in shape)}") from None
        dt = _torch_dtype(dtype)
        device = _device()

        def integers():
            if dt == torch.bool:
                return torch.randint(0, 2, dims, device=device).to(dt)
            if is_float8_dtype(dt):
                return torch.randint(-128, 128, dims, device=device, dtype=torch.int8).to(dt)
            if not dt.is_signed and not dt.is_floating_point:
                return torch.randint(0, 3, dims, device=device).to(dt)
            return torch.randint(-2, 3, dims, device=device).to(dt)

        kind = supply_type
        if kind is TensorSupplyType.Auto:
            if dt in (torch.float16, torch.bfloat16, torch.float32):
                return torch.empty(dims, device=device, dtype=dt).uniform_(-1.0, 1.0)
            return integers()
        if dt == torch.int8 and kind in (TensorSupplyType.Uniform, TensorSupplyType.Normal):
            return torch.ones(dims, device=device, dtype=dt)
        if kind is TensorSupplyType.Integer:
            return integers()
        if kind is TensorSupplyType.Uniform:
            return torch.empty(dims, device=device, dtype=torch.float32).uniform_(-1.0, 1.0).to(dt)
        if kind is TensorSupplyType.Normal:
            return torch.empty(dims, device=device, dtype=torch.float32).normal_(-1.0, 1.0).to(dt)
        if kind is TensorSupplyType.Randn:
            return torch.randn(dims, device=device).to(dt)
        if kind is TensorSupplyType.Zero:
            return torch.zeros(dims, device=device, dtype=dt)
        return torch.ones(dims, device=device, dtype=dt)   # One

    return supply


def _same_attributes(a, b, check_device, check_dtype, check_layout, check_stride) -> None:
    import torch

    def differ(what, x, y):
        raise AssertionError(f"torch_assert_close: the {what} differ: {x} != {y}")

    if a.shape != b.shape:
        differ("shapes", tuple(a.shape), tuple(b.shape))
    if check_layout and a.layout != b.layout:
        differ("layouts", a.layout, b.layout)
    if check_stride and a.layout == b.layout == torch.strided and a.stride() != b.stride():
        differ("strides", a.stride(), b.stride())
    if check_device and a.device != b.device:
        differ("devices", a.device, b.device)
    if check_dtype and a.dtype != b.dtype:
        differ("dtypes", a.dtype, b.dtype)


def _common(a, b):
    import torch

    if a.device != b.device:
        a, b = a.cpu(), b.cpu()
    if a.layout != torch.strided:
        a = a.to_dense()
    if b.layout != torch.strided:
        b = b.to_dense()
    if a.dtype != b.dtype:
        wide = {torch.uint16: torch.int64, torch.uint32: torch.int64, torch.uint64: torch.int64}
        common = torch.promote_types(wide.get(a.dtype, a.dtype), wide.get(b.dtype, b.dtype))
        a, b = a.to(common), b.to(common)
    return a, b


def torch_assert_close(
    tensor_a,
    tensor_b,
    rtol: float = 1e-2,
    atol: float = 1e-3,
    max_mismatched_ratio: float = 0.001,
    verbose: bool = False,
    equal_nan: bool = True,
    check_device: bool = True,
    check_dtype: bool = True,
    check_layout: bool = True,
    check_stride: bool = False,
    base_name: str = "LHS",
    ref_name: str = "RHS",
):
    """AssertionError unless at most `int(numel * max_mismatched_ratio)` elements of `tensor_a` lie outside
    `atol + rtol * |tensor_b|` of `tensor_b` (after the attribute checks); True otherwise."""
    import torch

    from ..checks import record_error

    _same_attributes(tensor_a, tensor_b, check_device, check_dtype, check_layout, check_stride)
    a, b = _common(tensor_a, tensor_b)
    if not (a.is_floating_point() or a.is_complex()):
        a, b = a.to(torch.float64), b.to(torch.float64)
    record_error(a, b)
    bad = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    n_bad = int(bad.sum().item())
    total = a.numel()
    allowed = int(total * max_mismatched_ratio)
    if verbose:
        print(f"{n_bad} of {total} elements mismatched (allowed: {allowed})")
    if n_bad <= allowed:
        return True
    flat = int(bad.reshape(-1).int().argmax().item())
    index = list(torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else []
    index = [int(i) for i in index]
    x, y = a.reshape(-1)[flat].item(), b.reshape(-1)[flat].item()
    diff = (a - b).abs()
    finite = diff[torch.isfinite(diff)]
    greatest = finite.max().item() if finite.numel() else float("nan")
    relative = (diff / (b.abs() + 1e-12))
    relative = relative[torch.isfinite(relative)]
    greatest_rel = relative.max().item() if relative.numel() else float("nan")
    raise AssertionError(
        f"Too many mismatched elements: {n_bad} > {allowed} ({max_mismatched_ratio:.2%} of {total} "
        "allowed, got "
        f"{n_bad / total:.2%}; rtol={rtol}, atol={atol}).\nFirst mismatch at index {index}: "
        f"{base_name}={x!r}, "
        f"{ref_name}={y!r}, abs_diff={abs(x - y)!r}\nGreatest absolute difference: {greatest}, "
        "greatest relative "
        f"difference: {greatest_rel}"
    )


__getattr__ = forwarding_getattr(__name__, "tilelang.utils.tensor", {})

"""Conversions to 8-bit floats saturate on both backends, as CUDA converts (`cvt.rn.satfinite`, the
`__nv_fp8_e4m3` / `__nv_fp8_e5m2` constructors): past the largest finite value, and from +-infinity, to that
value (448 for e4m3, 57344 for e5m2); NaN stays NaN. torch's own e5m2 conversion gives infinity there, so the
interpreter clamps first (interp/values.py `saturate`); e4m3 has no infinity and torch saturates it already.
Stores, T.copy and T.Cast on the interpreter; the same kernels on the GPU (marked gpu), bit for bit."""
import pytest
import torch

import tile_nb
import tile_nb.language as T

LIMIT = {"float8_e5m2": 57344.0, "float8_e4m3fn": 448.0}
_TORCH = {"float8_e5m2": torch.float8_e5m2, "float8_e4m3fn": torch.float8_e4m3fn}
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def to_fp8(X, dtype: T.dtype = T.float8_e5m2, mode: str = "copy"):
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    Y = T.empty((N,), dtype)
    with T.Kernel(1, threads=128) as _:
        if mode == "copy":
            T.copy(X, Y)
        elif mode == "store":
            for i in T.Parallel(N):
                Y[i] = X[i] * 2.0
        else:
            for i in T.Parallel(N):
                Y[i] = T.Cast(dtype, X[i] * 2.0)
    return Y


def _values():
    # inside the range, at its edge, past it, infinities, NaN, and a subnormal of e5m2
    return torch.tensor([1.5, -3.25, 20000.0, 28672.0, 35000.0, -1e6, float("inf"), -float("inf"),
                         float("nan"), 1e-5, 200.0, 300.0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["copy", "store", "cast"])
@pytest.mark.parametrize("dtype", ["float8_e5m2", "float8_e4m3fn"])
def test_conversions_to_8_bit_floats_saturate(backend, mode, dtype):
    x = _values()
    y = to_fp8(x.to(backend), dtype=getattr(T, dtype), mode=mode).cpu()
    scaled = x if mode == "copy" else x * 2
    limit = LIMIT[dtype]
    # the expected values: torch's conversion of the value clamped to the finite range (NaN kept)
    expected = scaled.clamp(-limit, limit).to(_TORCH[dtype])
    assert torch.equal(y.view(torch.uint8), expected.view(torch.uint8)), (y.float(), expected.float())
    finite = y.float()[~torch.isnan(scaled)]
    assert torch.isfinite(finite).all() and finite.abs().max().item() == limit

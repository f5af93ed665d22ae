"""T.sin, T.cos, T.erf, T.log10, T.floor, T.ceil, T.trunc, T.round: the interpreter against
torch (round: half to even, as CUDA's nearbyintf in the default rounding mode), each lowered to
CUDA for sm_90a, and on the GPU."""
import pytest
import torch

import tile_nb
import tile_nb.language as T

OPS = {"sin": torch.sin, "cos": torch.cos, "erf": torch.erf, "log10": torch.log10, "floor": torch.floor,
       "ceil": torch.ceil, "trunc": torch.trunc, "round": torch.round}
CUDA_NAMES = {
    "sin": "sinf",
    "cos": "cosf",
    "erf": "erff",
    "log10": "log10f",
    "floor": "floorf",
    "ceil": "ceilf",
    "trunc": "truncf",
    "round": "nearbyintf",
}


@tile_nb.jit
def unary(A, op: str):
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
        for i in T.Parallel(64):
            if bx * 64 + i < N:
                B[bx * 64 + i] = getattr(T, op)(A[bx * 64 + i])
    return B


def _input(op: str, n: int, device="cpu"):
    torch.manual_seed(n)
    x = torch.randn(n, device=device) * 3
    if op == "log10":
        x = x.abs() + 0.1
    if op == "round" and n > 4:
        x[:4] = torch.tensor([0.5, 1.5, 2.5, -0.5])   # ties: half to even
    return x


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("n", [1, 100])
def test_interpreter_against_torch(op, n):
    x = _input(op, n)
    torch.testing.assert_close(unary(x, op), OPS[op](x))


@pytest.mark.parametrize("op", sorted(OPS))
def test_lowers_to_the_cuda_math_function(op):
    source = unary.compile(N=100, op=op, target="sm_90a").cuda_source
    assert f"{CUDA_NAMES[op]}(" in source


@pytest.mark.gpu
@pytest.mark.parametrize("op", sorted(OPS))
def test_gpu_against_torch(op):
    x = _input(op, 100, "cuda")
    torch.testing.assert_close(unary(x, op), OPS[op](x), atol=1e-6, rtol=1e-5)

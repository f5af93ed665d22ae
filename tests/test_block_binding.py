"""`T.get_block_binding(dim)`: the open kernel's block index along a grid dim, for macros and helpers
that are not given it (tilelang's mxfp4 dequantization example reads it inside a macro). Interpreter
against torch at odd shapes, a size of 1 and a dynamic dim; sm_90a / sm_80 builds; the GPU (marked
gpu); errors at the user's line."""

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import DSLError

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@T.macro
def _scaled_tile(X, Y, block_M, block_N):
    by, bx = T.get_block_binding(1), T.get_block_binding(0)   # not passed in: read from the kernel
    M, N = X.shape
    for i, j in T.Parallel(block_M, block_N):
        r, c = by * block_M + i, bx * block_N + j
        if r < M and c < N:
            Y[r, c] = X[r, c] * 2.0 + T.cast(bx * 1000 + by, T.float32)


@tile_nb.jit
def tagged(X, Y, block_M: int = 8, block_N: int = 16):
    M = T.dynamic("M")
    N = T.const("N")
    X: T.Tensor[[M, N], T.float32]
    Y: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=32) as (bx, by):
        _scaled_tile(X, Y, block_M, block_N)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("M,N", [(37, 45), (1, 1), (8, 16)])
def test_block_binding_is_the_kernels_block_index(device, M, N):
    torch.manual_seed(M * N)
    x = torch.randn(M, N, device=device)
    y = torch.zeros(M, N, device=device)
    tagged(x, y)
    rows, cols = torch.arange(M).view(M, 1) // 8, torch.arange(N).view(1, N) // 16
    torch.testing.assert_close(y.cpu(), x.cpu() * 2.0 + (cols * 1000 + rows).float())


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_block_binding_builds(arch):
    x = torch.empty(37, 45)
    k = tagged.compile(x, x, target=arch)
    assert k.cubin and "blockIdx.y" in k.cuda_source


def _kernel(src: str, name: str):
    return tile_nb.run_source(src, {"T": T, "tile_nb": tile_nb}, filename=f"<blockbinding-{name}>")[name]


@pytest.mark.parametrize(
    "where,line,message",
    [
        (
            "inside",
            "b = T.get_block_binding(1)",
            "dim must be an int from 0 to 0 (the kernel's grid has 1 dim); got 1",
        ),
        ("inside", "b = T.get_block_binding('x')", "got 'x'"),
        ("outside", "b = T.get_block_binding(0)", "must be called inside `with T.Kernel(...)`"),
    ],
)
def test_bad_block_binding(where, line, message):
    inside, outside = (line, "pass") if where == "inside" else ("pass", line)
    k = _kernel(f"""
@tile_nb.jit
def bad_binding(X):
    X: T.Tensor[[8], T.float32]
    {outside}
    with T.Kernel(1, threads=32) as bx:
        {inside}
""", "bad_binding")
    with pytest.raises(DSLError, match=f"line {7 if where == 'inside' else 5}") as info:
        k(torch.zeros(8))
    assert message in str(info.value)

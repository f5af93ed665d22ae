"""`T.empty` outputs whose dims are arithmetic of T.dynamic dims (`T.empty((N * 2 + 1,), ...)`): allocated at
each call from the call's own sizes (a KeyError before), and refused with a clear error when a dim's var comes
from no argument."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import ArgumentError


@tile_nb.jit
def interleave(X, block: int = 64):
    """out[2j] = out[2j + 1] = X[j], and one trailing element equal to the sum of X's first element and 1."""
    N = T.dynamic('N')
    X: T.Tensor[[N], T.float32]
    out = T.empty((N * 2 + 1,), T.float32)
    with T.Kernel(T.ceildiv(N * 2 + 1, block)) as bx:
        for i in T.Parallel(block):
            j = bx * block + i
            if j < N * 2:
                out[j] = X[j // 2]
            elif j == N * 2:
                out[j] = T.if_then_else(N > 0, X[0], T.float32(0)) + 1.0
    return out


def reference(x):
    tail = (x[:1] if len(x) else torch.zeros(1)) + 1.0
    return torch.cat([x.repeat_interleave(2), tail])


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("n", [37, 1, 64, 0])
def test_output_dims_are_arithmetic_of_dynamic_dims(backend, n):
    if backend == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device; none is present on this machine")
    x = torch.randn(n, device=backend)
    out = interleave(x)
    assert out.shape == (2 * n + 1,)
    torch.testing.assert_close(out.cpu(), reference(x.cpu()), rtol=0, atol=0)


def test_an_output_dim_no_argument_gives_is_refused():
    @tile_nb.jit
    def orphan(X):
        N = T.dynamic('N')
        R = T.dynamic('R')
        X: T.Tensor[[N], T.float32]
        out = T.empty((R * 2,), T.float32)
        with T.Kernel(1) as bx:
            out[0] = X[0]
        return out

    with pytest.raises(
        ArgumentError, match=r"output 'out' has a dim over T.dynamic R, which no argument's shape"
    ):
        orphan(torch.randn(4))


@tile_nb.jit
def scale_dynamic(X, Y, block: int = 32):
    N = T.dynamic('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] * 3.0


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_dynamic_dim_of_zero_launches_nothing(backend):
    """N = 0 makes the grid ceildiv(N, 32) = 0 at the call: no launch (a zero-block launch is a CUDA error),
    the same as a static size of 0; the shape stays off the fast path, and later sizes run as usual."""
    if backend == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device; none is present on this machine")
    empty = torch.empty(0, device=backend)
    for _ in range(2):  # the second call must not take a fast-path launch of the empty grid
        assert scale_dynamic(empty, torch.empty(0, device=backend)) is None
    assert not any((0,) in [shape[0] for shape in entry.specs] for entry in scale_dynamic._fast.values())
    for n in (1, 45):
        x, y = torch.randn(n, device=backend), torch.full((n,), float("nan"), device=backend)
        scale_dynamic(x, y)
        torch.testing.assert_close(y, x * 3.0)


def test_the_grid_over_dynamic_dims_is_evaluated_per_call():
    from tile_nb.frontend.checks import empty_at_call

    x = torch.randn(7)
    scale_dynamic(x, torch.empty(7))
    spec = next(iter(next(iter(scale_dynamic._fast.values())).specs.values()))
    assert [tag for tag, _ in spec.expectations.dynamic_grid] == ["blockIdx.x"]
    assert empty_at_call(spec.expectations, {"N": 0}) and not empty_at_call(spec.expectations, {"N": 1})

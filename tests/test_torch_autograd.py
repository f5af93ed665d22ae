"""Forward kernels paired with backward kernels (tile_nb/torch/autograd.py): gradcheck in float64 on the
interpreter, eager against torch.compile (aot_eager, inductor), a backward kernel bound by names and a Python
backward calling kernels, the errors (no backward paired, a pairing that cannot work); fp16 / bf16 tolerance
checks on the GPU (marked gpu)."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
import tile_nb.torch as tt
from tile_nb.torch import NoBackwardError, TorchOpError


# ---- y = scale * X * W, gradients by a backward kernel bound by names --------------------------------------
@tile_nb.jit
def mul_bwd(X, W, grad_out, scale: float = 1.0, dtype: T.dtype = T.float64, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], dtype]
    W: T.Tensor[[N], dtype]
    grad_out: T.Tensor[[N], dtype]
    grad_X = T.empty((N,), dtype)
    grad_W = T.empty((N,), dtype)
    acc = T.float64 if dtype == T.float64 else T.float32
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            k = bx * block + i
            if k < N:
                g = T.cast(grad_out[k], acc) * scale
                grad_X[k] = T.cast(g * T.cast(W[k], acc), dtype)
                grad_W[k] = T.cast(g * T.cast(X[k], acc), dtype)
    return grad_X, grad_W


@tt.autograd(backward=mul_bwd, save=("X", "W"))
@tile_nb.jit
def mul(X, W, scale: float = 1.0, dtype: T.dtype = T.float64, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], dtype]
    W: T.Tensor[[N], dtype]
    out = T.empty((N,), dtype)
    acc = T.float64 if dtype == T.float64 else T.float32
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            k = bx * block + i
            if k < N:
                out[k] = T.cast(T.cast(X[k], acc) * T.cast(W[k], acc) * scale, dtype)
    return out


# ---- RMSNorm: a Python backward calling a kernel for dX and per-row dW terms -------------------------------
@tile_nb.jit
def rms_fwd(X, W, dtype: T.dtype = T.float64, eps: float = 1e-6, block_M: int = 4, block_N: int = 64):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], dtype]
    W: T.Tensor[[N], dtype]
    out = T.empty((M, N), dtype)
    acc = T.float64 if dtype == T.float64 else T.float32
    with T.Kernel(T.ceildiv(M, block_M)) as bx:
        Xf = T.alloc_fragment((block_M, block_N), acc)
        Sq = T.alloc_fragment((block_M, block_N), acc)
        Wf = T.alloc_fragment((block_N,), acc)
        r = T.alloc_fragment((block_M,), acc)
        T.copy(X[bx * block_M, 0], Xf)
        T.copy(W[0], Wf)
        for i, j in T.Parallel(block_M, block_N):
            Sq[i, j] = Xf[i, j] * Xf[i, j]
        T.reduce_sum(Sq, r, dim=1)
        for i in T.Parallel(block_M):
            r[i] = T.rsqrt(r[i] / N + eps)
        for i, j in T.Parallel(block_M, block_N):
            if bx * block_M + i < M and j < N:
                out[bx * block_M + i, j] = T.cast(Xf[i, j] * r[i] * Wf[j], dtype)
    return out


@tile_nb.jit
def rms_bwd(
    X, W, grad_out, dtype: T.dtype = T.float64, eps: float = 1e-6, block_M: int = 4, block_N: int = 64
):
    """grad_X, and grad_out * X * r per row (their column sums are grad_W)."""
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], dtype]
    W: T.Tensor[[N], dtype]
    grad_out: T.Tensor[[M, N], dtype]
    grad_X = T.empty((M, N), dtype)
    grad_W_rows = T.empty((M, N), dtype)
    acc = T.float64 if dtype == T.float64 else T.float32
    with T.Kernel(T.ceildiv(M, block_M)) as bx:
        Xf = T.alloc_fragment((block_M, block_N), acc)
        G = T.alloc_fragment((block_M, block_N), acc)
        Sq = T.alloc_fragment((block_M, block_N), acc)
        Wf = T.alloc_fragment((block_N,), acc)
        r = T.alloc_fragment((block_M,), acc)
        dot = T.alloc_fragment((block_M,), acc)
        T.copy(X[bx * block_M, 0], Xf)
        T.copy(grad_out[bx * block_M, 0], G)
        T.copy(W[0], Wf)
        for i, j in T.Parallel(block_M, block_N):
            Sq[i, j] = Xf[i, j] * Xf[i, j]
        T.reduce_sum(Sq, r, dim=1)
        for i in T.Parallel(block_M):
            r[i] = T.rsqrt(r[i] / N + eps)
        for i, j in T.Parallel(block_M, block_N):
            Sq[i, j] = G[i, j] * Wf[j] * Xf[i, j] * r[i]
        T.reduce_sum(Sq, dot, dim=1)
        for i, j in T.Parallel(block_M, block_N):
            if bx * block_M + i < M and j < N:
                grad_X[bx * block_M + i, j] = T.cast(
                    r[i] * (G[i, j] * Wf[j] - Xf[i, j] * r[i] * dot[i] / N), dtype
                )
                grad_W_rows[bx * block_M + i, j] = T.cast(G[i, j] * Xf[i, j] * r[i], dtype)
    return grad_X, grad_W_rows


def rms_setup(ctx, inputs, output):
    X, W = inputs
    ctx.save_for_backward(X, W)


def rms_backward(ctx, grad):
    X, W = ctx.saved_tensors
    grad_X, grad_W_rows = tt.op(rms_bwd)(X, W, grad.contiguous(), **ctx.compile_values)
    return grad_X, grad_W_rows.sum(0)


rmsnorm = tt.autograd(rms_fwd, backward=rms_backward, setup_context=rms_setup)


def rms_reference(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rand(*shape, seed=0, dtype=torch.float64, device="cpu", requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=device).requires_grad_(requires_grad)


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def grads(fn, *inputs):
    for t in inputs:
        t.grad = None
    fn(*inputs).backward()
    out = [t.grad.clone() for t in inputs]
    for t in inputs:
        t.grad = None
    return out


# ---- eager -------------------------------------------------------------------------------------------------
def test_mul_gradients_eager():
    x, w = rand(100), rand(100, seed=1)
    y = mul(x, w, scale=2.0)
    assert y.requires_grad and y.grad_fn is not None
    gx, gw = grads(lambda a, b: (mul(a, b, scale=2.0) * torch.arange(100.0, dtype=torch.float64)).sum(), x, w)
    ramp = torch.arange(100.0, dtype=torch.float64)
    torch.testing.assert_close(gx, 2.0 * w.detach() * ramp)
    torch.testing.assert_close(gw, 2.0 * x.detach() * ramp)


def test_mul_gradcheck_float64():
    x, w = rand(37), rand(37, seed=1)
    assert torch.autograd.gradcheck(lambda a, b: mul(a, b, scale=3.0), (x, w))
    assert torch.autograd.gradgradcheck is not None  # (double backward is not paired: first order only)


def test_gradient_of_one_input_only():
    x, w = rand(20), rand(20, seed=1, requires_grad=False)
    mul(x, w, scale=2.0).sum().backward()
    torch.testing.assert_close(x.grad, 2.0 * w)
    assert w.grad is None


def test_rmsnorm_gradcheck_float64():
    x, w = rand(6, 48), rand(48, seed=1)
    torch.testing.assert_close(rmsnorm(x, w), rms_reference(x, w))
    assert torch.autograd.gradcheck(lambda a, b: rmsnorm(a, b), (x, w))


def test_rmsnorm_gradients_match_torch():
    x, w = rand(9, 40), rand(40, seed=1)
    ours = grads(lambda a, b: rmsnorm(a, b).sin().sum(), x, w)
    ref = grads(lambda a, b: rms_reference(a, b).sin().sum(), x, w)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("which", ["kernel backward", "python backward"])
def test_opcheck_paired(which):
    if which == "kernel backward":
        torch.library.opcheck(mul.torch_op(scale=2.0), (rand(20), rand(20, seed=1)))
    else:
        torch.library.opcheck(rmsnorm.torch_op(), (rand(6, 48), rand(48, seed=1)))


def test_the_op_name_says_which_backward_is_paired():
    """A compiled graph kept on disk calls the forward op by name and carries the backward it was traced with:
    another pairing of the same forward kernel must be another name. A Python backward has no stable text,
    so its op's name is this process's alone (`_u...`)."""
    first = mul.entry({}).opname
    again = tt.autograd(mul.forward, backward=mul_bwd, save=("X", "W")).entry({}).opname
    other = tt.autograd(mul.forward, backward=mul_bwd, save=("W", "X")).entry({}).opname
    assert first.startswith("mul_ad_") and again.startswith(first + "_")  # the same op: a copy number
    assert not other.startswith(first)
    assert "_ad_u" in rmsnorm.entry({}).opname


def test_compile_values_reach_the_backward():
    """A backward kernel's compile-time parameters named like the forward's take the forward call's values."""
    x, w = rand(10), rand(10, seed=1)
    gx, _ = grads(lambda a, b: mul(a, b, scale=5.0).sum(), x, w)
    torch.testing.assert_close(gx, 5.0 * w.detach())


# ---- two outputs, gradients named by inputs= ---------------------------------------------------------------
@tile_nb.jit
def prod_sum_bwd(X, W, grad_P, grad_S, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float64]
    W: T.Tensor[[N], T.float64]
    grad_P: T.Tensor[[N], T.float64]
    grad_S: T.Tensor[[N], T.float64]
    dW = T.empty((N,), T.float64)
    dX = T.empty((N,), T.float64)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            k = bx * block + i
            if k < N:
                dX[k] = grad_P[k] * W[k] + grad_S[k]
                dW[k] = grad_P[k] * X[k] + grad_S[k]
    return dW, dX


@tt.autograd(backward=prod_sum_bwd, inputs=("W", "X"))
@tile_nb.jit
def prod_sum(X, W, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float64]
    W: T.Tensor[[N], T.float64]
    P = T.empty((N,), T.float64)
    S = T.empty((N,), T.float64)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            k = bx * block + i
            if k < N:
                P[k] = X[k] * W[k]
                S[k] = X[k] + W[k]
    return P, S


def test_two_outputs_gradcheck():
    x, w = rand(30), rand(30, seed=1)
    assert torch.autograd.gradcheck(lambda a, b: prod_sum(a, b), (x, w))


def test_two_outputs_one_unused():
    x, w = rand(30), rand(30, seed=1)
    gx, gw = grads(lambda a, b: prod_sum(a, b)[0].sum(), x, w)
    torch.testing.assert_close(gx, w.detach())
    torch.testing.assert_close(gw, x.detach())


# ---- autotuned kernels on both sides -----------------------------------------------------------------------
@tile_nb.autotune(configs={"block": [32, 64]})
@tile_nb.jit
def tuned_mul_bwd(X, W, grad_out, scale: float = 1.0, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float64]
    W: T.Tensor[[N], T.float64]
    grad_out: T.Tensor[[N], T.float64]
    grad_X = T.empty((N,), T.float64)
    grad_W = T.empty((N,), T.float64)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            k = bx * block + i
            if k < N:
                grad_X[k] = scale * W[k] * grad_out[k]
                grad_W[k] = scale * X[k] * grad_out[k]
    return grad_X, grad_W


@tt.autograd(backward=tuned_mul_bwd, save=("X", "W"))
@tile_nb.autotune(configs={"block": [32, 64]})
@tile_nb.jit
def tuned_mul(X, W, scale: float = 1.0, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float64]
    W: T.Tensor[[N], T.float64]
    out = T.empty((N,), T.float64)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            k = bx * block + i
            if k < N:
                out[k] = scale * X[k] * W[k]
    return out


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_autotuned_forward_and_backward_gradcheck():
    x, w = rand(50), rand(50, seed=1)
    assert torch.autograd.gradcheck(lambda a, b: tuned_mul(a, b, scale=1.5), (x, w))


# ---- torch.compile -----------------------------------------------------------------------------------------
def _loss(a, b):
    return (mul(a.sin(), b, scale=2.0) ** 2).sum() + rmsnorm(a.view(4, 16) * 2, b[:16]).cos().sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_forward_and_backward(backend, fresh_dynamo):
    from torch._dynamo.utils import counters

    x, w = rand(64), rand(64, seed=1)
    expected = grads(_loss, x, w)
    compiled = torch.compile(_loss, fullgraph=True, backend=backend)
    torch.testing.assert_close(compiled(x, w), _loss(x, w))
    for got, ref in zip(grads(compiled, x, w), expected, strict=True):
        torch.testing.assert_close(got, ref)
    assert dict(counters["graph_break"]) == {}


def test_compile_dynamic_shapes_backward(fresh_dynamo):
    f = torch.compile(
        lambda a, b: mul(a, b, scale=2.0).sum(), fullgraph=True, backend="aot_eager", dynamic=True
    )
    for n in (10, 23, 70):
        x, w = rand(n), rand(n, seed=1)
        gx, gw = grads(f, x, w)
        torch.testing.assert_close(gx, 2.0 * w.detach())
        torch.testing.assert_close(gw, 2.0 * x.detach())


# ---- errors ------------------------------------------------------------------------------------------------
def test_no_backward_paired_through_the_op():
    x, w = rand(8), rand(8, seed=1)
    y = tt.op(mul.kernel)(x, w, scale=2.0)
    assert y.requires_grad                      # not a silent detach
    with pytest.raises(NoBackwardError, match=r"mul\(\) has no backward kernel paired") as err:
        y.sum().backward()
    assert isinstance(err.value, RuntimeError)
    assert "tile_nb.torch.autograd(mul" in err.value.hint


def test_no_backward_paired_under_compile(fresh_dynamo):
    """The bare kernel inside torch.compile is its op: a backward through it raises, as through the op."""
    bare = mul.kernel
    f = torch.compile(lambda a, b: bare(a, b).sum(), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="has no backward kernel paired"):
        f(rand(8), rand(8, seed=1)).backward()


def test_bare_kernel_eager_is_not_differentiable():
    """The bare kernel in eager mode runs outside autograd: torch's own error at backward."""
    y = mul.kernel(rand(8), rand(8, seed=1))
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()


@tile_nb.jit
def inplace_scale(X, Y, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float64]
    Y: T.Tensor[[N], T.float64]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] * 2.0


def test_pairing_a_mutating_forward_is_refused():
    pair = tt.autograd(inplace_scale, backward=mul_bwd)
    with pytest.raises(
        TorchOpError, match=r"cannot be paired with a backward: it writes its argument\(s\) Y"
    ):
        pair(rand(8), rand(8, seed=1, requires_grad=False))


@tile_nb.jit
def odd_bwd(X, Z, grad_out, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float64]
    Z: T.Tensor[[N], T.float64]
    grad_out: T.Tensor[[N], T.float64]
    grad_X = T.empty((N,), T.float64)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                grad_X[bx * block + i] = grad_out[bx * block + i] * Z[bx * block + i]
    return grad_X


def test_backward_parameter_that_matches_nothing():
    pair = tt.autograd(mul.kernel, backward=odd_bwd, save=("X",))
    with pytest.raises(TorchOpError, match=r"odd_bwd\(\) runtime parameter 'Z' matches nothing"):
        pair(rand(8), rand(8, seed=1))


def test_pairing_argument_errors():
    with pytest.raises(TorchOpError, match="setup_context= goes with a Python backward"):
        tt.autograd(mul.kernel, backward=mul_bwd, setup_context=rms_setup)
    with pytest.raises(TorchOpError, match="save= and inputs= go with a backward kernel"):
        tt.autograd(mul.kernel, backward=rms_backward, save=("X",))
    with pytest.raises(TypeError, match="pairs a @tile_nb.jit kernel"):
        tt.autograd(lambda x: x, backward=mul_bwd)


# ---- GPU: fp16 / bf16 within tolerance ---------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("compiled", [False, True])
def test_gpu_gradients_half(dtype, compiled, fresh_dynamo):
    dt = T.float16 if dtype == torch.float16 else T.bfloat16
    x, w = rand(64, 256, dtype=dtype, device="cuda"), rand(256, seed=1, dtype=dtype, device="cuda")

    def f(a, b):
        return (mul(a.reshape(-1), b.repeat(64), scale=2.0, dtype=dt).float().sum()
                + rmsnorm(a, b, dtype=dt, block_N=256).float().square().sum())

    def ref(a, b):
        a, b = a.double(), b.double()
        return (2.0 * a.reshape(-1) * b.repeat(64)).sum() + rms_reference(a, b).square().sum()

    fn = torch.compile(f, fullgraph=True, backend="inductor") if compiled else f
    ours = grads(fn, x, w)
    expected = grads(ref, x, w)
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    for a, b in zip(ours, expected, strict=True):
        torch.testing.assert_close(a.double(), b.double(), rtol=tol, atol=tol * b.abs().max().item())

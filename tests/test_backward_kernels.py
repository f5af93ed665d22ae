"""The backward kernels of tests/kernels/backward.py (RMSNorm dX / dW, LayerNorm dX / dW / dB, softmax dX, fused
cross-entropy loss + dlogits) against torch autograd: on the interpreter in float64 (to a few ulps: the kernels
compute what autograd computes, in another order) and float32 at odd shapes (1, 7 and 33 rows; 1, 5 and 127
columns; row blocks of 4, so the last block is partial), with the row count T.dynamic too; gradcheck through
tile_nb.torch.autograd pairs; the sm_90a lowering of each kernel (no GPU needed); and, marked gpu, fp16 / bf16 on
CUDA against torch in float32."""
import pytest
import torch
import torch.nn.functional as F

from kernels import backward as bw

SHAPES = [(1, 1), (1, 127), (7, 5), (33, 1), (33, 127)]
F64 = dict(dtype="float64", block_M=4)


def _rand(*shape, seed, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)


def _inputs(M, N, dtype=torch.float64, device="cpu", seed=0):
    X, dY = _rand(M, N, seed=seed, dtype=dtype, device=device), _rand(M, N, seed=seed + 1, dtype=dtype, device=device)
    W, B = _rand(N, seed=seed + 2, dtype=dtype, device=device), _rand(N, seed=seed + 3, dtype=dtype, device=device)
    return X, W, B, dY


def _autograd(fn, inputs, grad):
    """Gradients of fn(*inputs) against `grad`, by torch autograd in float64."""
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    return torch.autograd.grad(fn(*leaves), leaves, grad.double())


def _rms_ref(X, W):
    return F.rms_norm(X, (X.shape[1],), W, 1e-6)


def _ln_ref(X, W, B):
    return F.layer_norm(X, (X.shape[1],), W, B, 1e-5)


def _close64(ours, ref):
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


def _col_sum(part, dtype, acc, dynamic_rows=False):
    return bw.col_sum(part, dtype=dtype, acc=acc, dynamic_rows=dynamic_rows)


# ---- float64 on the interpreter ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_bwd_float64(shape):
    X, W, _, dY = _inputs(*shape)
    dX, dW_part = bw.rms_norm_bwd(X, W, dY, **F64)
    assert dW_part.shape == ((shape[0] + 3) // 4, shape[1]) and dW_part.dtype == torch.float64
    ref_dX, ref_dW = _autograd(_rms_ref, (X, W), dY)
    _close64(dX, ref_dX)
    _close64(_col_sum(dW_part, "float64", "float64"), ref_dW)


@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm_bwd_float64(shape):
    X, W, B, dY = _inputs(*shape)
    dX, dW_part, dB_part = bw.layer_norm_bwd(X, W, dY, **F64)
    ref_dX, ref_dW, ref_dB = _autograd(_ln_ref, (X, W, B), dY)
    _close64(dX, ref_dX)
    _close64(_col_sum(dW_part, "float64", "float64"), ref_dW)
    _close64(_col_sum(dB_part, "float64", "float64"), ref_dB)


@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_fwd_bwd_float64(shape):
    X, _, _, dY = _inputs(*shape)
    Y = bw.softmax_fwd(X, **F64)
    _close64(Y, torch.softmax(X, 1))
    (ref_dX,) = _autograd(lambda x: torch.softmax(x, 1), (X,), dY)
    _close64(bw.softmax_bwd(Y, dY, **F64), ref_dX)


@pytest.mark.parametrize("shape", SHAPES)
def test_cross_entropy_float64(shape):
    M, N = shape
    X = _rand(M, N, seed=4) * 3
    targets = torch.randint(0, N, (M,), generator=torch.Generator().manual_seed(5))
    loss, dlogits = bw.cross_entropy_fwd_bwd(X, targets, grad_scale=1.0 / M, **F64)
    assert loss.dtype == torch.float64 and dlogits.dtype == torch.float64
    x = X.clone().requires_grad_()
    ref_loss = F.cross_entropy(x, targets, reduction="none")
    (ref_d,) = torch.autograd.grad(ref_loss.mean(), x)
    _close64(loss, ref_loss.detach())
    _close64(dlogits, ref_d)


def test_cross_entropy_extreme_logits():
    """Logits of +-1e4 (exp overflows without the max shift) and targets at the first and last column."""
    X = torch.tensor([[1e4, 0.0, -1e4], [-1e4, -1e4, 1e4], [0.5, 0.25, 0.0]], dtype=torch.float64)
    targets = torch.tensor([0, 0, 2])
    loss, dlogits = bw.cross_entropy_fwd_bwd(X, targets, **F64)
    x = X.clone().requires_grad_()
    ref_loss = F.cross_entropy(x, targets, reduction="none")
    (ref_d,) = torch.autograd.grad(ref_loss.sum(), x)
    _close64(loss, ref_loss.detach())
    _close64(dlogits, ref_d)


def test_dynamic_rows_float64():
    """dynamic_rows=True: one kernel for every row count (1, 7, 33), partial sums of a T.dynamic row count."""
    for M in (1, 7, 33):
        X, W, B, dY = _inputs(M, 5, seed=M)
        cfg = dict(F64, dynamic_rows=True)
        dX, dW_part, dB_part = bw.layer_norm_bwd(X, W, dY, **cfg)
        ref_dX, ref_dW, ref_dB = _autograd(_ln_ref, (X, W, B), dY)
        _close64(dX, ref_dX)
        _close64(_col_sum(dW_part, "float64", "float64", dynamic_rows=True), ref_dW)
        _close64(_col_sum(dB_part, "float64", "float64", dynamic_rows=True), ref_dB)
        dX, dW_part = bw.rms_norm_bwd(X, W, dY, **cfg)
        ref_dX, ref_dW = _autograd(_rms_ref, (X, W), dY)
        _close64(dX, ref_dX)
        _close64(_col_sum(dW_part, "float64", "float64", dynamic_rows=True), ref_dW)


# ---- float32 on the interpreter: tolerances from the arithmetic ------------------------------------------------------
def _rel(ours, ref):
    ours, ref = ours.double(), ref.double()
    return ((ours - ref).norm() / ref.norm().clamp_min(1e-30)).item()


# float32 sums of N terms carry a relative error of about sqrt(N) * 2^-24 (random rounding; N * 2^-24 at worst,
# 7.6e-6 at N = 127); the norms' gradients cancel terms of similar size, so allow 1e-5 relative (in the norm).
F32_TOL = 1e-5


@pytest.mark.parametrize("shape", [(7, 5), (33, 127)])
def test_float32_against_autograd(shape):
    M, N = shape
    X, W, B, dY = _inputs(M, N, dtype=torch.float32)
    cfg = dict(dtype="float32", block_M=4)
    dX, dW_part = bw.rms_norm_bwd(X, W, dY, **cfg)
    for ours, ref in zip((dX, _col_sum(dW_part, "float32", "float32")), _autograd(_rms_ref, (X, W), dY)):
        assert ours.dtype == torch.float32 and _rel(ours, ref) < F32_TOL
    dX, dW_part, dB_part = bw.layer_norm_bwd(X, W, dY, **cfg)
    ours = (dX, _col_sum(dW_part, "float32", "float32"), _col_sum(dB_part, "float32", "float32"))
    for a, ref in zip(ours, _autograd(_ln_ref, (X, W, B), dY)):
        assert _rel(a, ref) < F32_TOL
    Y = bw.softmax_fwd(X, **cfg)
    (ref,) = _autograd(lambda x: torch.softmax(x, 1), (X,), dY)
    assert _rel(bw.softmax_bwd(Y, dY, **cfg), ref) < F32_TOL
    targets = torch.randint(0, N, (M,), generator=torch.Generator().manual_seed(5))
    loss, dlogits = bw.cross_entropy_fwd_bwd(X, targets, **cfg)
    x = X.double().requires_grad_()
    ref_loss = F.cross_entropy(x, targets, reduction="none")
    (ref_d,) = torch.autograd.grad(ref_loss.sum(), x)
    assert _rel(loss, ref_loss.detach()) < F32_TOL and _rel(dlogits, ref_d) < F32_TOL


# ---- gradcheck through the tile_nb.torch.autograd pairs ------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1), (7, 5)])
def test_pairs_gradcheck(shape):
    M, N = shape
    pairs = bw.differentiable()
    X, W, B, _ = _inputs(M, N, seed=7)
    X, W, B = (t.requires_grad_() for t in (X, W, B))
    targets = torch.randint(0, N, (M,), generator=torch.Generator().manual_seed(8))
    gradcheck = torch.autograd.gradcheck
    assert gradcheck(lambda x: pairs["softmax"](x, **F64), (X,))
    assert gradcheck(lambda x, w: pairs["rms_norm"](x, w, **F64), (X, W))
    assert gradcheck(lambda x, w, b: pairs["layer_norm"](x, w, b, **F64), (X, W, B))
    assert gradcheck(lambda x: pairs["cross_entropy"](x, targets, **F64)[0], (X,))


def test_pairs_forward_match_torch():
    pairs = bw.differentiable()
    X, W, B, _ = _inputs(7, 5, seed=9)
    _close64(pairs["rms_norm"](X, W, **F64), _rms_ref(X, W))
    _close64(pairs["layer_norm"](X, W, B, **F64), _ln_ref(X, W, B))


# ---- the sm_90a lowering (no GPU needed) -------------------------------------------------------------------------
def _kernel_calls(M, N, dtype, dynamic_rows=False):
    """(kernel, args, compile-time values) of every kernel at one shape and dtype."""
    X = torch.empty(M, N, dtype=dtype)
    W = torch.empty(N, dtype=dtype)
    part = torch.empty((M + 3) // 4, N)
    targets = torch.zeros(M, dtype=torch.int64)
    cfg = dict(dtype=str(dtype).removeprefix("torch."), block_M=4, dynamic_rows=dynamic_rows)
    return [
        (bw.rms_norm_bwd, (X, W, X), cfg),
        (bw.layer_norm_bwd, (X, W, X), cfg),
        (bw.softmax_fwd, (X,), cfg),
        (bw.softmax_bwd, (X, X), cfg),
        (bw.cross_entropy_fwd_bwd, (X, targets), cfg),
        (bw.rms_norm_fwd, (X, W), cfg),
        (bw.layer_norm_fwd, (X, W, W), cfg),
        (bw.col_sum, (part,), dict(dtype=cfg["dtype"], dynamic_rows=dynamic_rows)),
    ]


def test_compile_sm90a_fp16():
    """Each kernel compiles (lowering, CUDA source, nvcc where installed) for sm_90a at 33 x 1000 fp16."""
    for kernel, args, cfg in _kernel_calls(33, 1000, torch.float16):
        compiled = kernel.compile(*args, target="sm_90a", **cfg)
        assert "__global__" in compiled.cuda_source, kernel.definition.name


@pytest.mark.parametrize("shape,dtype,dynamic_rows", [((7, 5), torch.bfloat16, True), ((1, 1), torch.float32, False),
                                                      ((33, 127), torch.float16, False)])
def test_lower_sm90a_odd_shapes(shape, dtype, dynamic_rows):
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower import lower

    target = resolve_target("sm_90a")
    for kernel, args, cfg in _kernel_calls(*shape, dtype, dynamic_rows=dynamic_rows):
        func = kernel.specialize(**_consts(kernel, args, cfg, dynamic_rows))
        lower(func, target)


def _consts(kernel, args, cfg, dynamic_rows):
    """The specialize() keywords of one call: M (unless dynamic) / R and N from the first argument's shape."""
    rows, cols = args[0].shape
    row_name = "R" if kernel is bw.col_sum else "M"
    out = dict(cfg, N=cols)
    if not dynamic_rows:
        out[row_name] = rows
    return out


# ---- fp16 / bf16 on CUDA against torch in float32 ------------------------------------------------------------------
GPU_SHAPES = [(1, 1), (7, 5), (33, 127), (4096, 1000), (1000, 4096)]
# fp16 / bf16 outputs round to 2^-11 / 2^-8 of their size; the inputs are the same rounded values for torch, so the
# error is that rounding plus float32 sums: 2e-3 (fp16) and 1e-2 (bf16) relative in the norm.
GPU_TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("dynamic_rows", [False, True])
def test_gpu_against_torch(dtype, shape, dynamic_rows):
    M, N = shape
    X, W, B, dY = _inputs(M, N, dtype=dtype, device="cuda")
    name = str(dtype).removeprefix("torch.")
    cfg = dict(dtype=name, block_M=1, dynamic_rows=dynamic_rows)
    tol = GPU_TOL[dtype]

    def check(ours, ref):
        assert ours.is_cuda and not torch.isnan(ours).any()
        assert _rel(ours.cpu(), ref.cpu()) < tol

    def ref_grads(fn, inputs):
        leaves = [t.detach().float().requires_grad_() for t in inputs]
        return torch.autograd.grad(fn(*leaves), leaves, dY.float())

    dX, dW_part = bw.rms_norm_bwd(X, W, dY, **cfg)
    ref = ref_grads(_rms_ref, (X, W))
    check(dX, ref[0])
    check(bw.col_sum(dW_part, dtype=name, dynamic_rows=dynamic_rows), ref[1])
    dX, dW_part, dB_part = bw.layer_norm_bwd(X, W, dY, **cfg)
    ref = ref_grads(_ln_ref, (X, W, B))
    check(dX, ref[0])
    check(bw.col_sum(dW_part, dtype=name, dynamic_rows=dynamic_rows), ref[1])
    check(bw.col_sum(dB_part, dtype=name, dynamic_rows=dynamic_rows), ref[2])
    Y = bw.softmax_fwd(X, **cfg)
    check(Y, torch.softmax(X.float(), 1))
    check(bw.softmax_bwd(Y, dY, **cfg), ref_grads(lambda x: torch.softmax(x, 1), (X,))[0])
    targets = torch.randint(0, N, (M,), device="cuda")
    loss, dlogits = bw.cross_entropy_fwd_bwd(X, targets, **cfg)
    x = X.float().requires_grad_()
    ref_loss = F.cross_entropy(x, targets, reduction="none")
    (ref_d,) = torch.autograd.grad(ref_loss.sum(), x)
    check(loss, ref_loss.detach())
    check(dlogits, ref_d)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_pairs_backward(dtype):
    pairs = bw.differentiable()
    X, W, B, dY = _inputs(257, 1000, dtype=dtype, device="cuda")
    name = str(dtype).removeprefix("torch.")
    for key, fn, ref_fn, inputs in [
        ("rms_norm", lambda x, w: pairs["rms_norm"](x, w, dtype=name), _rms_ref, (X, W)),
        ("layer_norm", lambda x, w, b: pairs["layer_norm"](x, w, b, dtype=name), _ln_ref, (X, W, B)),
        ("softmax", lambda x: pairs["softmax"](x, dtype=name), lambda x: torch.softmax(x, 1), (X,)),
    ]:
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        ours = torch.autograd.grad(fn(*leaves), leaves, dY)
        ref_leaves = [t.detach().float().requires_grad_() for t in inputs]
        ref = torch.autograd.grad(ref_fn(*ref_leaves), ref_leaves, dY.float())
        for a, b in zip(ours, ref):
            assert a.dtype == dtype and _rel(a.cpu(), b.cpu()) < GPU_TOL[dtype], key

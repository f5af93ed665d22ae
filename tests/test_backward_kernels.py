"""The backward kernels of tests/kernels/backward.py (RMSNorm dX / dW, LayerNorm dX / dW / dB, softmax dX,
fused cross-entropy loss + dlogits) against torch autograd: on the interpreter in float64 (to a few ulps: the
kernels compute what autograd computes, in another order) and float32 at odd shapes (1, 7 and 33 rows; 1, 5
and 127 columns; row blocks of 4, so the last block is partial), with the row count T.dynamic too; gradcheck
through tile_nb.torch.autograd pairs; the sm_90a lowering of each kernel (no GPU needed); and, marked gpu,
fp16 / bf16 on CUDA against torch in float32."""

import pytest
import torch
import torch.nn.functional as F
from kernels import backward as bw

from tile_nb.backend import toolchain

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")

SHAPES = [(1, 1), (1, 127), (7, 5), (33, 1), (33, 127)]
F64 = dict(dtype="float64", block_M=4)


def _rand(*shape, seed, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)


def _inputs(M, N, dtype=torch.float64, device="cpu", seed=0):
    X, dY = (
        _rand(M, N, seed=seed, dtype=dtype, device=device),
        _rand(M, N, seed=seed + 1, dtype=dtype, device=device),
    )
    W, B = (
        _rand(N, seed=seed + 2, dtype=dtype, device=device),
        _rand(N, seed=seed + 3, dtype=dtype, device=device),
    )
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


# ---- float64 on the interpreter ----------------------------------------------------------------------------
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


# (block_M, ctas): one CTA taking every row, 3 and 5 CTAs for rows that are not a multiple of them (33 rows:
# 11 per CTA; 70 rows in blocks of 4: 18 blocks, 6 per CTA), more CTAs than row blocks (ctas > M: grid = M)
PERSISTENT = [(1, 1), (1, 3), (4, 3), (2, 5), (1, 264)]


@pytest.mark.parametrize("dynamic_rows", [False, True])
@pytest.mark.parametrize("block_M,ctas", PERSISTENT)
@pytest.mark.parametrize("shape", [(1, 1), (1, 127), (33, 1), (70, 9), (33, 127)])
def test_norm_bwd_persistent_float64(shape, block_M, ctas, dynamic_rows):
    """Several row blocks per CTA: dW / dB summed in registers over a CTA's rows, one partial row per CTA."""
    M, N = shape
    X, W, B, dY = _inputs(M, N, seed=M + N)
    cfg = dict(dtype="float64", block_M=block_M, ctas=ctas, dynamic_rows=dynamic_rows)
    grid = min(ctas, -(-M // block_M))
    dX, dW_part = bw.rms_norm_bwd(X, W, dY, **cfg)
    assert dW_part.shape == (grid, N)
    ref_dX, ref_dW = _autograd(_rms_ref, (X, W), dY)
    _close64(dX, ref_dX)
    _close64(_col_sum(dW_part, "float64", "float64", dynamic_rows), ref_dW)
    dX, dW_part, dB_part = bw.layer_norm_bwd(X, W, dY, **cfg)
    assert dW_part.shape == dB_part.shape == (grid, N)
    ref_dX, ref_dW, ref_dB = _autograd(_ln_ref, (X, W, B), dY)
    _close64(dX, ref_dX)
    _close64(_col_sum(dW_part, "float64", "float64", dynamic_rows), ref_dW)
    _close64(_col_sum(dB_part, "float64", "float64", dynamic_rows), ref_dB)


@pytest.mark.parametrize("block_R,block_N", [(64, 32), (4, 8), (1, 1)])
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (264, 70)])
def test_col_sum_float64(shape, block_R, block_N):
    """col_sum at row and column counts that are not multiples of its blocks."""
    P = _rand(*shape, seed=shape[0])
    _close64(bw.col_sum(P, dtype="float64", acc="float64", block_R=block_R, block_N=block_N), P.sum(0))


@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_fwd_bwd_float64(shape):
    X, _, _, dY = _inputs(*shape)
    Y = bw.softmax_fwd(X, **F64)
    _close64(Y, torch.softmax(X, 1))
    (ref_dX,) = _autograd(lambda x: torch.softmax(x, 1), (X,), dY)
    _close64(bw.softmax_bwd(Y, dY, **F64), ref_dX)


def _cross_entropy(kernel):
    """cross_entropy_fwd_bwd, or cross_entropy_chunked in chunks of 4 columns (1, 2 and 32 chunks at N = 1, 5,
    127; the last one partial)."""
    if kernel == "chunked":
        return lambda X, targets, **cfg: bw.cross_entropy_chunked(X, targets, block_N=4, threads=128, **cfg)
    return bw.cross_entropy_fwd_bwd


@pytest.mark.parametrize("kernel", ["rows", "chunked"])
@pytest.mark.parametrize("shape", SHAPES)
def test_cross_entropy_float64(shape, kernel):
    M, N = shape
    X = _rand(M, N, seed=4) * 3
    targets = torch.randint(0, N, (M,), generator=torch.Generator().manual_seed(5))
    loss, dlogits = _cross_entropy(kernel)(X, targets, grad_scale=1.0 / M, **F64)
    assert loss.dtype == torch.float64 and dlogits.dtype == torch.float64
    x = X.clone().requires_grad_()
    ref_loss = F.cross_entropy(x, targets, reduction="none")
    (ref_d,) = torch.autograd.grad(ref_loss.mean(), x)
    _close64(loss, ref_loss.detach())
    _close64(dlogits, ref_d)


@pytest.mark.parametrize("kernel", ["rows", "chunked"])
def test_cross_entropy_extreme_logits(kernel):
    """Logits of +-1e4 (exp overflows without the max shift) and targets at the first and last column."""
    X = torch.tensor([[1e4, 0.0, -1e4, 3.0, 2.0], [-1e4, -1e4, 1e4, 0.0, 1e4], [0.5, 0.25, 0.0, -1.0, -2.0]],
                     dtype=torch.float64)
    targets = torch.tensor([0, 0, 4])
    loss, dlogits = _cross_entropy(kernel)(X, targets, **F64)
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


# ---- float32 on the interpreter: tolerances from the arithmetic --------------------------------------------
def _rel(ours, ref, floor=0.0):
    """The error's norm relative to the reference's, or to `floor` where that is larger: a gradient
    that is exactly zero in exact arithmetic (the norms at one column, attention at one key) comes out
    of fp16 / fp32 sums as rounding noise, which is measured against the size of the terms that
    cancelled (`floor`), not against zero."""
    ours, ref = ours.double(), ref.double()
    return ((ours - ref).norm() / max(ref.norm().item(), floor, 1e-30)).item()


# Gradients below 2^-10 of the output gradient's norm are at the rounding noise of fp16 sums (2^-11 per term):
# errors are measured against that size where the exact gradient is smaller (zero, for one column or one key).
NOISE_FLOOR = 2.0 ** -10


# float32 sums of N terms carry a relative error of about sqrt(N) * 2^-24 (random rounding; N *
# 2^-24 at worst, 7.6e-6 at N = 127); the norms' gradients cancel terms of similar size, so
# allow 1e-5 relative (in the norm).
F32_TOL = 1e-5


@pytest.mark.parametrize("shape", [(7, 5), (33, 127)])
def test_float32_against_autograd(shape):
    M, N = shape
    X, W, B, dY = _inputs(M, N, dtype=torch.float32)
    cfg = dict(dtype="float32", block_M=4)
    dX, dW_part = bw.rms_norm_bwd(X, W, dY, **cfg)
    for ours, ref in zip(
        (dX, _col_sum(dW_part, "float32", "float32")), _autograd(_rms_ref, (X, W), dY), strict=True
    ):
        assert ours.dtype == torch.float32 and _rel(ours, ref) < F32_TOL
    dX, dW_part, dB_part = bw.layer_norm_bwd(X, W, dY, **cfg)
    ours = (dX, _col_sum(dW_part, "float32", "float32"), _col_sum(dB_part, "float32", "float32"))
    for a, ref in zip(ours, _autograd(_ln_ref, (X, W, B), dY), strict=True):
        assert _rel(a, ref) < F32_TOL
    Y = bw.softmax_fwd(X, **cfg)
    (ref,) = _autograd(lambda x: torch.softmax(x, 1), (X,), dY)
    assert _rel(bw.softmax_bwd(Y, dY, **cfg), ref) < F32_TOL
    targets = torch.randint(0, N, (M,), generator=torch.Generator().manual_seed(5))
    x = X.double().requires_grad_()
    ref_loss = F.cross_entropy(x, targets, reduction="none")
    (ref_d,) = torch.autograd.grad(ref_loss.sum(), x)
    for kernel in ("rows", "chunked"):
        loss, dlogits = _cross_entropy(kernel)(X, targets, **cfg)
        assert _rel(loss, ref_loss.detach()) < F32_TOL and _rel(dlogits, ref_d) < F32_TOL


# ---- gradcheck through the tile_nb.torch.autograd pairs ----------------------------------------------------
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


# ---- the sm_90a lowering (no GPU needed) -------------------------------------------------------------------
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
        (bw.cross_entropy_chunked, (X, targets), dict(cfg, block_N=256)),
    ]


def test_compile_sm90a_fp16():
    """Each kernel compiles (lowering, CUDA source, nvcc where installed) for sm_90a at 33 x 1000 fp16."""
    for kernel, args, cfg in _kernel_calls(33, 1000, torch.float16):
        compiled = kernel.compile(*args, target="sm_90a", **cfg)
        assert "__global__" in compiled.cuda_source, kernel.definition.name


@pytest.mark.parametrize(
    "shape,dtype,dynamic_rows",
    [((7, 5), torch.bfloat16, True), ((1, 1), torch.float32, False), ((33, 127), torch.float16, False)],
)
def test_lower_sm90a_odd_shapes(shape, dtype, dynamic_rows):
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower import lower

    target = resolve_target("sm_90a")
    for kernel, args, cfg in _kernel_calls(*shape, dtype, dynamic_rows=dynamic_rows):
        func = kernel.specialize(**_consts(kernel, args, cfg, dynamic_rows))
        lower(func, target)


@needs_nvcc
@pytest.mark.parametrize("dynamic_rows", [False, True])
@pytest.mark.parametrize("N", [4096, 8192])
def test_norm_bwd_builds_sm90a_unspilled(N, dynamic_rows):
    """At the benchmark's row lengths (benchmarks/backward.py: 16384 x 4096, 4096 x 8192, fp16) the default
    configuration (norm_bwd_config: 256 / 512 threads, 264 / 132 CTAs, 4 stages) builds for sm_90a with no
    spills, in the registers its CTA count counts on, in shared memory only the X and dY rows of the
    pipeline's stages (and the reductions' few words); col_sum of 264 partial rows likewise."""
    from tile_nb.runtime import compile as rt_compile

    cfg = bw.norm_bwd_config(N)
    rows = {} if dynamic_rows else dict(M=16384 * 4096 // N)
    for kernel in (bw.rms_norm_bwd, bw.layer_norm_bwd):
        func = kernel.specialize(N=N, dtype="float16", dynamic_rows=dynamic_rows, **rows, **cfg)
        r = rt_compile(func, "sm_90a", options={"cache": False}).resources
        assert r.spill_stores == 0 and r.spill_loads == 0, (kernel, r)
        assert r.registers * cfg["threads"] * cfg["ctas"] // 132 <= 65536, (kernel, r)
        assert cfg["stages"] * 2 * N * 2 <= r.total_shared_bytes < cfg["stages"] * 2 * N * 2 + 1024, (
            kernel,
            r,
        )
    r = rt_compile(
        bw.col_sum.specialize(R=264, N=N, dtype="float16"), "sm_90a", options={"cache": False}
    ).resources
    assert r.spill_stores == 0 and r.spill_loads == 0, r


def _consts(kernel, args, cfg, dynamic_rows):
    """The specialize() keywords of one call: M (unless dynamic) / R and N from the first argument's shape."""
    rows, cols = args[0].shape
    row_name = "R" if kernel is bw.col_sum else "M"
    out = dict(cfg, N=cols)
    if not dynamic_rows:
        out[row_name] = rows
    return out


# ---- fp16 / bf16 on CUDA against torch in float32 ----------------------------------------------------------
GPU_SHAPES = [(1, 1), (7, 5), (33, 127), (4096, 1000), (1000, 4096)]
# fp16 / bf16 outputs round to 2^-11 / 2^-8 of their size; the inputs are the same rounded values for torch,
# so the error is that rounding plus float32 sums: 2e-3 (fp16) and 1e-2 (bf16) relative in the norm.
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

    floor = NOISE_FLOOR * dY.float().norm().item()

    def check(ours, ref):
        assert ours.is_cuda and not torch.isnan(ours).any()
        assert _rel(ours.cpu(), ref.cpu(), floor) < tol

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
@pytest.mark.parametrize("shape,ctas", [((16384, 4096), 264), ((4099, 8192), 264), ((4099, 8192), 132),
                                        ((1000, 4096), 7), ((2, 4096), 264), ((300, 127), 396)])
@pytest.mark.parametrize("dynamic_rows", [False, True])
def test_gpu_norm_bwd_persistent(dtype, shape, ctas, dynamic_rows):
    """The persistent norm backwards at the benchmark's shapes and odd ones (rows not a multiple of the CTAs,
    fewer rows than CTAs, N not a multiple of the threads' vector width) against torch in float32."""
    M, N = shape
    X, W, B, dY = _inputs(M, N, dtype=dtype, device="cuda", seed=M)
    name = str(dtype).removeprefix("torch.")
    cfg = dict(bw.norm_bwd_config(N), dtype=name, ctas=ctas, dynamic_rows=dynamic_rows)
    floor = NOISE_FLOOR * dY.float().norm().item()
    for kernel, ref_fn, inputs in [
        (bw.rms_norm_bwd, _rms_ref, (X, W)),
        (bw.layer_norm_bwd, _ln_ref, (X, W, B)),
    ]:
        dX, *parts = kernel(X, W, dY, **cfg)
        assert all(p.shape == (min(ctas, M), N) for p in parts)
        ours = (dX, *(bw.col_sum(p, dtype=name) for p in parts))
        leaves = [t.detach().float().requires_grad_() for t in inputs]
        ref = torch.autograd.grad(ref_fn(*leaves), leaves, dY.float())
        for a, b in zip(ours, ref, strict=True):
            assert a.dtype == dtype and _rel(a.cpu(), b.cpu(), floor) < GPU_TOL[dtype], kernel


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (33, 127), (4096, 32000), (257, 128256)])
def test_gpu_cross_entropy_chunked(dtype, shape):
    """LLM vocabularies (32000, 128256): the chunked kernel against torch in float32, mean reduction."""
    M, N = shape
    X = (_rand(M, N, seed=1, device="cuda") * 4).to(dtype)
    targets = torch.randint(0, N, (M,), device="cuda")
    loss, dlogits = bw.cross_entropy_chunked(X, targets, dtype=str(dtype).removeprefix("torch."),
                                             grad_scale=1.0 / M, dynamic_rows=True)
    x = X.float().requires_grad_()
    ref_loss = F.cross_entropy(x, targets, reduction="none")
    (ref_d,) = torch.autograd.grad(ref_loss.mean(), x)
    assert _rel(loss, ref_loss.detach()) < 3e-5   # float32 sums of up to 128256 terms
    # against the reference rounded to the output dtype: at 32000 columns most gradients (~1e-12) are below
    # fp16's smallest subnormal and must round to zero, which is no error of the kernel
    assert dlogits.dtype == dtype and _rel(dlogits.float(), ref_d.to(dtype).float()) < GPU_TOL[dtype]


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
        for a, b in zip(ours, ref, strict=True):
            assert a.dtype == dtype and _rel(a.cpu(), b.cpu()) < GPU_TOL[dtype], key


# ---- FlashAttention backward (tests/kernels/attention_backward.py) -----------------------------------------
from kernels import attention_backward as ab  # noqa: E402

LOG2E = 1.4426950408889634
# Small blocks keep the interpreter fast; the lowering refuses them (and float64),
# so their warning is expected here.
not_lowerable_ok = pytest.mark.filterwarnings("ignore::tile_nb.NotLowerableWarning")


def _attention_ref(Q, K, V, causal):
    """O and the base-2 logsumexp of the scaled scores, in torch (K and V
    repeated over each KV head's group)."""
    group = Q.shape[1] // K.shape[1]
    K, V = K.repeat_interleave(group, 1), V.repeat_interleave(group, 1)
    s = Q @ K.transpose(-1, -2) / Q.shape[-1] ** 0.5
    if causal:
        S = Q.shape[2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=Q.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ V, torch.logsumexp(s, -1) * LOG2E


def _attention_inputs(B, H, HK, S, D, dtype=torch.float64, device="cpu", seed=0):
    return (_rand(B, H, S, D, seed=seed, dtype=dtype, device=device),
            _rand(B, HK, S, D, seed=seed + 1, dtype=dtype, device=device),
            _rand(B, HK, S, D, seed=seed + 2, dtype=dtype, device=device),
            _rand(B, H, S, D, seed=seed + 3, dtype=dtype, device=device))


def _attention_check(Q, K, V, dO, causal, cfg, close, atomic_dq=False):
    """The forward and a backward (attention_backward, or with `atomic_dq` attention_backward_atomic) against
    float64 autograd."""
    O, LSE = ab.flash_attention_fwd(Q, K, V, causal=causal, **cfg)
    leaves = [t.detach().double().requires_grad_() for t in (Q, K, V)]
    ref_O, ref_LSE = _attention_ref(*leaves, causal)
    ref_grads = torch.autograd.grad(ref_O, leaves, dO.double())
    # the backward kernels at the forward's blocks (the dQ kernel's roles swapped: blocks of unequal sizes
    # meet the other kernel's partial blocks)
    blocks = {} if "block_M" not in cfg else dict(
        dkdv=dict(block_M=cfg["block_M"], block_N=cfg["block_N"]),
        dq=dict(block_M=cfg["block_N"], block_N=cfg["block_M"]))
    if atomic_dq:
        grads = ab.attention_backward_atomic(Q, K, V, O, LSE, dO, causal=causal, dkdv=blocks.get("dkdv"))
    else:
        grads = ab.attention_backward(Q, K, V, O, LSE, dO, causal=causal, **blocks)
    for name, ours, ref in zip(
        ("O", "LSE", "dQ", "dK", "dV"), (O, LSE, *grads), (ref_O, ref_LSE, *ref_grads), strict=True
    ):
        assert ours.dtype == (Q.dtype if name != "LSE" else ref_LSE.dtype if Q.dtype == torch.float64
                              else torch.float32), name
        close(name, ours, ref.detach())


ATT_CFG = dict(dtype="float64", block_M=8, block_N=16)


@not_lowerable_ok
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("S", [1, 7, 33])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)])
def test_attention_bwd_float64(causal, S, heads):
    """Odd sequence lengths (one key block, partial blocks, query blocks of 8 against key blocks of 16), MHA
    and GQA (two query heads per KV head: dK, dV added from both)."""
    H, HK = heads
    Q, K, V, dO = _attention_inputs(1, H, HK, S, 8, seed=S)

    def close(name, ours, ref):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12, msg=name)

    _attention_check(Q, K, V, dO, causal, ATT_CFG, close)


@not_lowerable_ok
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("S", [1, 33])
def test_attention_bwd_atomic_dq_float64(causal, S):
    """dQ added by the dK/dV kernel's atomics (attention_bwd_dkdv_dq, then the float32 -> dtype conversion):
    every key block's CTA adds into each query block it sees; GQA, odd lengths, query blocks of 8 against key
    blocks of 16."""
    Q, K, V, dO = _attention_inputs(1, 4, 2, S, 8, seed=S + 5)

    def close(name, ours, ref):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12, msg=name)

    _attention_check(Q, K, V, dO, causal, ATT_CFG, close, atomic_dq=True)


@not_lowerable_ok
def test_attention_bwd_dynamic_sequence_length():
    """S is T.dynamic: one specialization of each kernel serves S = 5, 9 and 40 (batch 2)."""
    cfg = dict(dtype="float64", block_M=8, block_N=8)
    kernels = (ab.flash_attention_fwd, ab.attention_bwd_preprocess, ab.attention_bwd_dkdv,
               ab.attention_bwd_dq)
    before = [k.stats["specializations"] for k in kernels]
    for S in (5, 9, 40):
        Q, K, V, dO = _attention_inputs(2, 2, 1, S, 4, seed=S)

        def close(name, ours, ref):
            torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12, msg=name)

        _attention_check(Q, K, V, dO, True, cfg, close)
    assert all(k.stats["specializations"] - n <= 1 for k, n in zip(kernels, before, strict=True))


@not_lowerable_ok
def test_attention_bwd_float32():
    """float32 inputs, float32 arithmetic: sums of 16 (head dim) and 33 (keys)
    terms; 1e-5 relative in the norm."""
    Q, K, V, dO = _attention_inputs(1, 4, 2, 33, 16, dtype=torch.float32, seed=3)

    def close(name, ours, ref):
        assert _rel(ours, ref) < 1e-5, (name, _rel(ours, ref))

    _attention_check(Q, K, V, dO, False, dict(dtype="float32", block_M=16, block_N=16), close)


@not_lowerable_ok
def test_attention_pair_gradcheck():
    """gradcheck of O through the tile_nb.torch.autograd pair (float64, GQA,
    causal; S = 3 with blocks of 2)."""
    attention = ab.flash_attention()
    Q, K, V, _ = _attention_inputs(1, 2, 1, 3, 2, seed=11)
    Q, K, V = (t.requires_grad_() for t in (Q, K, V))
    cfg = dict(dtype="float64", causal=True, block_M=2, block_N=2)
    assert torch.autograd.gradcheck(lambda q, k, v: attention(q, k, v, **cfg)[0], (Q, K, V))


ATT_LOWER = [("float16", 64, False), ("float16", 64, True), ("bfloat16", 128, False), ("bfloat16", 128, True)]


@pytest.mark.parametrize("dtype,D,causal", ATT_LOWER)
def test_attention_lowers_sm90a(dtype, D, causal):
    """The four kernels lower for sm_90a at their defaults (GQA: 8 query heads on 2 KV heads; S dynamic),
    every T.gemm of both backward kernels on wgmma, P^T, dS^T and dS as register operands (no shared tile
    for them)."""
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower import lower_with_plan

    plans = {}
    for kernel in (ab.flash_attention_fwd, ab.attention_bwd_preprocess, ab.attention_bwd_dkdv,
                   ab.attention_bwd_dq):
        consts = dict(B=2, H=8, D=D, dtype=dtype) if kernel is ab.attention_bwd_preprocess else dict(
            B=2, H=8, HK=2, D=D, dtype=dtype, causal=causal)
        _, plan = lower_with_plan(kernel.specialize(**consts), resolve_target("sm_90a"))
        plans[kernel] = plan.summary()
    for kernel, operands in ((ab.attention_bwd_dkdv, ("pT", "dsT")), (ab.attention_bwd_dq, ("ds",))):
        summary = plans[kernel]
        assert {m["kind"] for m in summary["mma"]} == {"wgmma"}, (kernel, summary["mma"])
        where = {f["name"]: f["where"] for f in summary["fragments"]}
        assert all(where[name] == "registers" for name in operands), where


@needs_nvcc
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_bwd_builds_sm90a_unspilled(D, causal):
    """The backward kernels at their defaults build for sm_90a without spills, and add nothing atomically
    (each gradient tile has one owner CTA)."""
    from tile_nb.runtime import compile as rt_compile

    for kernel in (ab.attention_bwd_dkdv, ab.attention_bwd_dq):
        func = kernel.specialize(B=2, H=8, HK=2, D=D, dtype="float16", causal=causal)
        compiled = rt_compile(func, "sm_90a", options={"cache": False})
        r = compiled.resources
        assert r.spill_stores == 0 and r.spill_loads == 0, (kernel, r)
        assert "atomicAdd" not in compiled.cuda_source


@needs_nvcc
@pytest.mark.parametrize("D", [64, 128])
def test_attention_bwd_atomic_dq_builds_sm90a_unspilled(D):
    """The dK/dV kernel that also adds dQ puts its five GEMMs on wgmma (dQ's with a transposed A and a K-major
    B) and builds for sm_90a without spills (at head dim 128 a thread holds ~250 registers: a change that adds
    a few fails here, not as spills on the GPU), and adds with atomics."""
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower import lower_with_plan
    from tile_nb.runtime import compile as rt_compile

    func = ab.attention_bwd_dkdv_dq.specialize(B=2, H=8, HK=2, D=D, dtype="float16", causal=True)
    _, plan = lower_with_plan(func, resolve_target("sm_90a"))
    assert [(m["name"], m["kind"]) for m in plan.summary()["mma"]] == [
        (name, "wgmma") for name in ("sT", "dpT", "dv", "dk", "dq")]
    compiled = rt_compile(func, "sm_90a", options={"cache": False})
    r = compiled.resources
    assert r.spill_stores == 0 and r.spill_loads == 0, r
    assert "atomicAdd" in compiled.cuda_source


def test_attention_bwd_d128_with_128_threads_is_refused():
    """At head dim 128, one warpgroup holding dK and dV of 128 key rows and the two score tiles would need
    384 registers per thread: the lowering says so, naming the fragments (the default is 256 threads)."""
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower import LoweringError, lower

    func = ab.attention_bwd_dkdv.specialize(B=1, H=2, HK=2, D=128, dtype="float16", threads=128)
    with pytest.raises(LoweringError, match="384 32-bit registers per thread"):
        lower(func, resolve_target("sm_90a"))


# fp16 / bf16 inputs: P and dS are rounded to the input dtype for the tensor-core GEMMs (as FlashAttention
# does), so the gradients carry about 2^-11 (fp16) / 2^-8 (bf16) relative error per term, plus float32 sums.
ATT_GPU_TOL = {torch.float16: 5e-3, torch.bfloat16: 3e-2}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2)])
@pytest.mark.parametrize("S", [1, 127, 1000])
@pytest.mark.parametrize("atomic_dq", [False, True], ids=["dq_kernel", "atomic_dq"])
def test_gpu_attention_bwd(dtype, D, causal, heads, S, atomic_dq):
    """The backward at the kernels' defaults against float64 autograd: the dQ kernel's, or with `atomic_dq`
    attention_backward_atomic's (dQ added by the dK/dV kernel)."""
    H, HK = heads
    Q, K, V, dO = _attention_inputs(2, H, HK, S, D, dtype=dtype, device="cuda", seed=S)
    name = str(dtype).removeprefix("torch.")

    floor = NOISE_FLOOR * dO.float().norm().item()

    def close(what, ours, ref):
        assert ours.is_cuda and not torch.isnan(ours).any(), what
        err = _rel(ours.cpu(), ref.cpu(), floor)
        assert err < ATT_GPU_TOL[dtype], (what, err)

    _attention_check(Q, K, V, dO, causal, dict(dtype=name), close, atomic_dq)   # the kernels' defaults


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_attention_backward_is_deterministic(causal):
    """No gradient is summed across CTAs (no atomics), so two runs give the same bits (GQA 8 / 2,
    S = 1000)."""
    Q, K, V, dO = _attention_inputs(2, 8, 2, 1000, 64, dtype=torch.float16, device="cuda", seed=5)
    O, LSE = ab.flash_attention_fwd(Q, K, V, causal=causal)
    first = ab.attention_backward(Q, K, V, O, LSE, dO, causal=causal)
    second = ab.attention_backward(Q, K, V, O, LSE, dO, causal=causal)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_attention_pair(dtype):
    """The pair's gradients on CUDA against SDPA's in float32 (GQA 8 / 2, causal, S = 1000, head dim 128)."""
    attention = ab.flash_attention()
    Q, K, V, dO = _attention_inputs(1, 8, 2, 1000, 128, dtype=dtype, device="cuda")
    leaves = [t.clone().requires_grad_() for t in (Q, K, V)]
    O, _ = attention(*leaves, dtype=str(dtype).removeprefix("torch."), causal=True)
    ours = torch.autograd.grad(O, leaves, dO)
    ref_leaves = [t.detach().float().requires_grad_() for t in (Q, K, V)]
    ref = torch.autograd.grad(_attention_ref(*ref_leaves, True)[0], ref_leaves, dO.float())
    for a, b in zip(ours, ref, strict=True):
        assert a.dtype == dtype and _rel(a, b) < ATT_GPU_TOL[dtype]


# ---- a lowering failure found while writing these kernels (T.cast of the var of a
# T.Parallel dim of extent 1 raised
# AttributeError: 'int' object has no attribute 'ty' in tile_nb/lower/exprs.py) ------------------------------
def test_cast_of_unit_parallel_index_lowers():
    import tile_nb
    import tile_nb.language as T
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower import lower

    @tile_nb.jit
    def column_index(X, block_M: int = 4):
        M, N = T.const('M, N')
        X: T.Tensor[[M, N], T.float32]
        Y = T.empty((M, N), T.float32)
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, N), T.float32)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.cast(j, T.float32)
            T.copy(x, Y[bx * block_M, 0])
        return Y

    lower(column_index.specialize(M=4, N=5), resolve_target("sm_90a"))   # N > 1 lowers
    lower(column_index.specialize(M=4, N=1), resolve_target("sm_90a"))


# ---- the pairs under torch.compile -------------------------------------------------------------------------
@not_lowerable_ok
def test_pairs_under_torch_compile():
    """LayerNorm, RMSNorm and attention pairs in one fullgraph torch.compile (aot_eager): their
    Python backwards call the kernels through tile_nb.torch.op, so the backward graph traces too;
    gradients as torch's in float64."""
    import torch._dynamo

    torch._dynamo.reset()
    pairs, attention = bw.differentiable(), ab.flash_attention()
    X, W, B, _ = _inputs(7, 5, seed=12)
    Q, K, V, _ = _attention_inputs(1, 2, 1, 9, 4, seed=13)

    def loss(pairs_on, x, w, b, q, k, v):
        if pairs_on:
            norms = pairs["layer_norm"](x, w, b, **F64) * pairs["rms_norm"](x, w, **F64)
            o = attention(q, k, v, dtype="float64", causal=True, block_M=8, block_N=8)[0]
        else:
            norms, o = _ln_ref(x, w, b) * _rms_ref(x, w), _attention_ref(q, k, v, True)[0]
        return norms.sin().sum() + o.square().sum()

    compiled = torch.compile(lambda *a: loss(True, *a), backend="aot_eager", fullgraph=True)
    try:
        leaves = [t.clone().requires_grad_() for t in (X, W, B, Q, K, V)]
        ours = torch.autograd.grad(compiled(*leaves), leaves)
        ref_leaves = [t.clone().requires_grad_() for t in (X, W, B, Q, K, V)]
        ref = torch.autograd.grad(loss(False, *ref_leaves), ref_leaves)
        for a, b in zip(ours, ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    finally:
        torch._dynamo.reset()

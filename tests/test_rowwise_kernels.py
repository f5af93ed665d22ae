"""The row kernels of benchmarks/rowwise.py (tests/kernels/rowwise.py) against torch on random inputs: odd
shapes, one row, one column, dynamic row counts; on the interpreter and (marked gpu) on CUDA. And what their
CUDA must look like: register fragments (no shared-memory copy of the rows), warp shuffles for the row
statistics, 16-byte vector loads, and no spills at 16384 columns."""
import pytest
import torch
import torch.nn.functional as F
from kernels import rowwise as rw

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
SHAPES = [(37, 1000), (1, 64), (5, 1), (64, 1024)]


def _inputs(M, N, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(M, N, generator=g).half()
    W = torch.randn(N, generator=g).half()
    B = torch.randn(N, generator=g).half()
    return X.to(device), W.to(device), B.to(device)


def _check(Y, expected, tol=2e-3):
    Y, expected = Y.double().cpu(), expected.double().cpu()
    assert not torch.isnan(Y).any(), "unwritten output elements"
    err = ((Y - expected).norm() / expected.norm().clamp_min(1e-30)).item()
    assert err < tol, err


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dynamic_rows", [False, True])
def test_norms_and_softmax(backend, shape, dynamic_rows):
    M, N = shape
    X, W, B = _inputs(M, N, backend)
    cfg = dict(block_M=2, threads=64, dynamic_rows=dynamic_rows)
    Y = torch.full_like(X, float("nan"))
    rw.rms_norm(X, W, Y, **cfg)
    _check(Y, F.rms_norm(X.float(), (N,), W.float(), 1e-6))
    Y.fill_(float("nan"))
    rw.layer_norm(X, W, B, Y, **cfg)
    if N > 1:  # a one-column layer norm is all zeros plus B: compare it exactly below
        _check(Y, F.layer_norm(X.float(), (N,), W.float(), B.float(), 1e-5))
    else:
        assert torch.equal(Y.cpu(), B.cpu().expand(M, 1))
    Y.fill_(float("nan"))
    rw.softmax(X, Y, **cfg)
    _check(Y, torch.softmax(X.float(), 1))
    X32, Y32 = X.float(), torch.full((M, N), float("nan"), device=backend)
    rw.softmax(X32, Y32, dtype="float32", **cfg)
    _check(Y32, torch.softmax(X32.double(), 1), tol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_elementwise(backend, shape):
    M, N = shape
    X, _, B = _inputs(M, N, backend, seed=1)
    Y = torch.full_like(X, float("nan"))
    rw.add_bias(X, B, Y, block_M=4, threads=64)
    assert torch.equal(Y.cpu(), (X.cpu().float() + B.cpu().float()).half())
    Y.fill_(float("nan"))
    rw.gelu_tanh(X, Y, block_M=4, threads=64, dynamic_rows=True)
    _check(Y, F.gelu(X.float(), approximate="tanh"))
    for variant in (rw.gelu_tanh_approx, rw.gelu_tanh_precise):  # benchmarks/rowwise.py's other math choices
        Y.fill_(float("nan"))
        variant(X, Y, block_M=4, threads=64, dynamic_rows=True)
        _check(Y, F.gelu(X.float(), approximate="tanh"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_rows_across_warps(backend):
    """Rows split over several warps: the row statistics go through the shared workspace."""
    X, W, B = _inputs(3, 8192, backend, seed=2)
    Y = torch.full_like(X, float("nan"))
    rw.layer_norm(X, W, B, Y, block_M=1, threads=512)
    _check(Y, F.layer_norm(X.float(), (8192,), W.float(), B.float(), 1e-5))
    Y.fill_(float("nan"))
    rw.softmax(X, Y, block_M=1, threads=256)
    _check(Y, torch.softmax(X.float(), 1))


# ---- what the CUDA looks like (no GPU needed) --------------------------------------------------------------

def _compiled(fn, *args, **kwargs):
    return fn.compile(*args, target="sm_90a", **kwargs)


def test_softmax_and_rmsnorm_use_shuffles_and_registers():
    X = torch.empty(64, 4096).half()
    for kernel in (_compiled(rw.softmax, X, X, threads=256),
                   _compiled(rw.rms_norm, X, torch.empty(4096).half(), X, threads=256)):
        src = kernel.cuda_source
        assert (
            "__shfl_xor_sync" in src
            and "tnb_vld_float16x8_float32" in src
            and "tnb_vst_float32x8_float16" in src
        )
        plan = kernel.plan
        assert all(f["where"] == "registers" for f in plan["fragments"]), plan["fragments"]
        # shared memory holds only the cross-warp partials (8 warps' worth per row), never a row
        assert plan["shared_bytes"] <= 64 * 4
    from kernels import reference as ref

    X32 = torch.empty(64, 1024)
    src = _compiled(ref.softmax, X32, X32).cuda_source
    assert "__shfl_xor_sync" in src and "tnb_vld_float32x4_float32" in src


def test_gelu_variants_choose_their_tanh():
    """approx_math: tanh.approx.f32 in the source; precise: tanhf, built without --use_fast_math (no
    tanh.approx.f32 in the PTX, which CUDA 13's fast math would put there for tanhf)."""
    X = torch.empty(64, 1024).half()
    approx, precise = _compiled(rw.gelu_tanh_approx, X, X), _compiled(rw.gelu_tanh_precise, X, X)
    assert "tanh.approx.f32" in approx.cuda_source and approx.plan["options"] == {"approx_math": True}
    assert "tanhf(" in precise.cuda_source and "tanh.approx" not in precise.cuda_source
    if precise.ptx:
        assert "tanh.approx.f32" not in precise.ptx


@pytest.mark.parametrize("fn", ["rms_norm", "layer_norm"])
def test_norms_at_16384_columns_compile_without_spills(fn):
    X, W = torch.empty(64, 16384).half(), torch.empty(16384).half()
    args = (X, W, X) if fn == "rms_norm" else (X, W, W, X)
    kernel = _compiled(getattr(rw, fn), *args, block_M=1, threads=512)
    res = kernel.resources
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0, res


def test_plan_is_inspectable():
    X = torch.empty(64, 1024).half()
    plan = _compiled(rw.layer_norm, X, X[0], X[0], X, block_M=4).plan
    names = {f["name"]: f for f in plan["fragments"]}
    assert names["mean"]["where"] == "registers" and "replica" in names["mean"]["layout"]
    assert names["x"]["layout"].startswith("32 registers per thread")


# ---- a dynamic last dim keeps the vector path when the call's size allows it -------------------------------

import tile_nb  # noqa: E402
import tile_nb.language as T  # noqa: E402
from tile_nb.jit import CallFacts  # noqa: E402


@tile_nb.jit
def scale_tiles(X, Y, block_M: int = 4, block_N: int = 256):
    M, N = T.dynamic('M'), T.dynamic('N')
    X: T.Tensor[[M, N], T.float16]
    Y: T.Tensor[[M, N], T.float16]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N)) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), T.float32)
        T.copy(X[bx * block_M, by * block_N], x)
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = x[i, j] * 2.0 + 1.0
        T.copy(x, Y[bx * block_M, by * block_N])


def test_dynamic_dim_divisible_by_16_keeps_vector_accesses():
    X = torch.empty(37, 1024).half()
    spec = scale_tiles._specialize((X, X), {})[1]
    plain = scale_tiles._compiled(spec, "sm_90a")
    divisible = scale_tiles._compiled(spec, "sm_90a", facts=CallFacts(divisible=("N",)))
    assert "tnb_vld" not in plain.cuda_source  # N could be odd: element by element
    assert "tnb_vld_float16x8_float32" in divisible.cuda_source and divisible.plan["assumes"] == [
        "N % 16 == 0"
    ]


def test_compile_with_tensors_uses_the_facts_of_a_launch_on_them():
    X = torch.empty(37, 1024).half()
    assert scale_tiles.compile(X, X, target="sm_90a").plan["assumes"] == ["N % 16 == 0"]
    shifted = torch.empty(37 * 1000 + 1).half()[1:].view(37, 1000)
    assert scale_tiles.compile(shifted, X[:, :1000].contiguous(), target="sm_90a").plan["assumes"] == [
        "X not 16-byte aligned"]
    assert scale_tiles.compile(target="sm_90a").plan["assumes"] == []  # no tensors: the general kernel

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cols", [1000, 1024, 17, 1])
def test_dynamic_dims_any_size(backend, cols):
    X = torch.randn(37, cols, generator=torch.Generator().manual_seed(cols)).half().to(backend)
    Y = torch.full_like(X, float("nan"))
    scale_tiles(X, Y)
    assert torch.equal(Y.cpu(), (X.cpu().float() * 2 + 1).half())


# ---- abs-max (per-row quantization scales) -----------------------------------------------------------------

@tile_nb.jit
def row_absmax(X, S, block_M: int = 2, threads: int = 128):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float16]
    S: T.Tensor[[M], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), T.float32)
        s = T.alloc_fragment((block_M,), T.float32)
        T.copy(X[bx * block_M, 0], x)
        T.reduce_absmax(x, s, dim=1)
        T.copy(s, S[bx * block_M])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, threads", [((37, 1000), 128), ((3, 4096), 512), ((1, 1), 32)])
def test_absmax_reduction(backend, shape, threads):
    X = (torch.randn(*shape, generator=torch.Generator().manual_seed(3)) * 5).half().to(backend)
    S = torch.full((shape[0],), float("nan"), device=backend)
    row_absmax(X, S, threads=threads)
    assert torch.equal(S.cpu(), X.cpu().float().abs().amax(dim=1))
    if backend == "cpu":
        src = row_absmax.compile(X, S, threads=threads, target="sm_90a").cuda_source
        assert "fabsf" in src or "abs(" in src

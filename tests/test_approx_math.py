"""The lowering option `approx_math` (tilelang's pass_configs 'tl.enable_fast_math'): T.tanh, T.exp and T.exp2
of float32 (float16 / bfloat16 through float32) lowered to the GPU's approximate instructions, whatever the
toolkit and its --use_fast_math. CPU: the CUDA and PTX hold the instructions only with the option on, the
option is in the plan and the cache key, the interpreter stays precise, tilelang's key maps onto it. GPU
(marked gpu): GELU (tanh form) and exp / exp2 against torch within the bounds of the PTX ISA (docs/IR.md)."""
import pytest
import torch
import torch.nn.functional as F

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.lower import ENV_SWITCHES
from tile_nb.lower import options as lo

SQRT_2_OVER_PI = 0.7978845608028654
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")

# PTX ISA bounds (docs/IR.md, "approx_math"): tanh.approx.f32 relative error <=
# 2^-11; ex2.approx.ftz.f32 <= 2 ulp.
TANH_REL = 2.0 ** -11
EX2_REL = 2.0 ** -22
# on every bound: the ISA's figures are rounded (2^-10.987 is quoted for the f16 form)
MARGIN = 1 + 2.0 ** -4
# half an ulp of the output dtype, relative: the rounding of the stored result
OUT_REL = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in ENV_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    lo.reset_options()
    yield
    lo.reset_options()


def _gelu(X, Y, dt: T.dtype = T.float32, block_M: int = 4, block_N: int = 128):
    """GELU, tanh form, in float32 whatever the tensors' dtype: both dims T.dynamic, edges guarded."""
    M, N = T.dynamic("M"), T.dynamic("N")
    X: T.Tensor[[M, N], dt]
    Y: T.Tensor[[M, N], dt]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        for i, j in T.Parallel(block_M, block_N):
            r, c = by * block_M + i, bx * block_N + j
            if r < M and c < N:
                v = T.cast(X[r, c], T.float32)
                Y[r, c] = T.cast(0.5 * v * (1.0 + T.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v))), dt)


gelu = tile_nb.jit(_gelu)
gelu_approx = tile_nb.jit(_gelu, options={"approx_math": True})
gelu_approx_precise_build = tile_nb.jit(
    _gelu, options={"approx_math": True}, compile_options={"fast_math": False}
)
gelu_precise_build = tile_nb.jit(_gelu, compile_options={"fast_math": False})


@tile_nb.jit(options={"approx_math": True})
def exps(X, E, E2, dt: T.dtype = T.float32):
    """E = exp(X), E2 = exp2(X), elementwise over a T.dynamic length."""
    N = T.dynamic("N")
    X: T.Tensor[[N], dt]
    E: T.Tensor[[N], dt]
    E2: T.Tensor[[N], dt]
    with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
        for i in T.Parallel(128):
            if bx * 128 + i < N:
                E[bx * 128 + i] = T.exp(X[bx * 128 + i])
                E2[bx * 128 + i] = T.exp2(X[bx * 128 + i])


def gelu_bound(x: torch.Tensor, out_dtype) -> torch.Tensor:
    """Per element, how far the approximate GELU may be from the exact one
    (float64), from the PTX ISA's bound:
    tanh.approx.f32 gives tanh(u) (1 + d), |d| <= 2^-11, so 0.5 x (1 + tanh u) moves by at most
    0.5 |x| |tanh u| 2^-11; plus the float32 arithmetic around it (u, the product: a few ulp of |x| (1
    + |u|), taken as 8), the rounding of the stored result (half an ulp of its dtype) and 2^-24
    absolute for subnormal outputs."""
    x = x.double()
    u = SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
    exact = 0.5 * x * (1 + torch.tanh(u))
    return MARGIN * (0.5 * x.abs() * torch.tanh(u).abs() * TANH_REL + 8 * 2.0 ** -24 * x.abs() * (1 + u.abs())
                     + OUT_REL[out_dtype] * exact.abs() + 2.0 ** -24)


def _check_within(out, expected, bound):
    out, expected, bound = out.double().cpu(), expected.double().cpu(), bound.double().cpu()
    assert not torch.isnan(out).any(), "unwritten output elements"
    excess = (out - expected).abs() - bound
    worst = int(excess.argmax())
    assert excess.max() <= 0, (
        f"element {worst}: {out.flatten()[worst].item()} vs {expected.flatten()[worst].item()}, "
        f"bound {bound.flatten()[worst].item():.3g}"
    )


# ---- the option --------------------------------------------------------------------------------------------

def test_option_is_typed_off_by_default_and_read_from_the_environment(monkeypatch):
    assert lo.LoweringOptions().approx_math is False
    assert "TILE_NB_APPROX_MATH" in ENV_SWITCHES
    monkeypatch.setenv("TILE_NB_APPROX_MATH", "1")
    assert lo.current().approx_math is True and lo.current().changed() == {"approx_math": True}
    monkeypatch.setenv("TILE_NB_APPROX_MATH", "fast")
    with pytest.raises(lo.LoweringOptionError, match=r"TILE_NB_APPROX_MATH = 'fast': expected 0 or 1"):
        lo.current()


def test_plan_lists_the_option_and_the_cache_key_changes():
    X = torch.empty(77, 1000)
    on, off = gelu_approx.compile(X, X, target="sm_90a"), gelu.compile(X, X, target="sm_90a")
    assert on.plan["options"] == {"approx_math": True} and off.plan["options"] == {}
    assert on.key != off.key
    with tile_nb.options(approx_math=True):   # the process's options reach the key the same way
        assert gelu.compile(X, X, target="sm_90a").key == on.key


# ---- what the lowering emits -------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80", "sm_75"])
def test_cuda_has_tanh_approx_only_when_the_option_is_on(arch):
    X = torch.empty(77, 1000)
    on = gelu_approx_precise_build.compile(X, X, target=arch)
    off = gelu_precise_build.compile(X, X, target=arch)
    assert "tanh.approx.f32" in on.cuda_source and "tanhf(" not in on.cuda_source
    assert "tanh.approx" not in off.cuda_source and "tanhf(" in off.cuda_source
    # both build; without --use_fast_math only the option puts the instruction in the PTX (CUDA 13's fast math
    # turns tanhf into it by itself, older toolkits do not)
    assert on.cubin and off.cubin
    assert "tanh.approx.f32" in on.ptx and "tanh.approx.f32" not in off.ptx


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_exp_exp2_and_16_bit_floats_go_through_float32(dtype):
    X = torch.empty(1000, dtype=getattr(torch, dtype))
    k = exps.compile(X, X, X, dt=dtype, target="sm_90a")
    src = k.cuda_source
    assert "ex2.approx.ftz.f32" in src and "tnb_exp_approx(" in src and "tnb_exp2_approx(" in src
    assert "expf(" not in src and "exp2f(" not in src and "hexp" not in src.split("extern \"C\"")[-1]
    if dtype != "float32":
        assert "tnb_exp_approx(((float)" in src
    assert k.cubin


def test_float64_keeps_the_precise_functions():
    X = torch.empty(100, dtype=torch.float64)
    src = exps.compile(X, X, X, dt="float64", target="sm_90a").cuda_source
    assert "approx" not in src.split("extern \"C\"")[-1]


# ---- numerics ----------------------------------------------------------------------------------------------

SHAPES = [(1, 1), (77, 1000), (5, 129)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gelu_with_approx_math_is_within_the_ptx_bound(backend, shape, dtype):
    """The GPU within gelu_bound of torch's GELU (tanh form, float64); the interpreter keeps precise math, so
    it meets the bound with only float32 rounding."""
    g = torch.Generator().manual_seed(shape[0] * 1000 + shape[1])
    X = (3 * torch.randn(*shape, generator=g)).to(dtype)
    Y = torch.full_like(X, float("nan")).to(backend)
    gelu_approx(X.to(backend), Y, dt=str(dtype).split(".")[-1])
    expected = F.gelu(X.double(), approximate="tanh")
    _check_within(Y, expected, gelu_bound(X, dtype))
    if backend == "cpu":  # precise: float32 math, then the output's rounding
        _check_within(
            Y, expected, OUT_REL[dtype] * expected.abs() + 16 * 2.0**-24 * (1 + X.double().abs()) ** 2
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_exp_and_exp2_with_approx_math(backend):
    """exp2: ex2.approx.ftz.f32's 2 ulp; exp = ex2(x log2 e): the rounding of x log2 e adds |x
    log2 e| 2^-24 ln 2 relative (taken as |x| 2^-23), as CUDA's __expf. Inputs stay in [-20, 20]:
    no subnormal results to flush."""
    g = torch.Generator().manual_seed(7)
    X = (torch.rand(4097, generator=g) * 40 - 20).to(backend)
    E, E2 = torch.full_like(X, float("nan")), torch.full_like(X, float("nan"))
    exps(X, E, E2)
    x = X.double().cpu()
    _check_within(E2, torch.exp2(x), MARGIN * (EX2_REL + OUT_REL[torch.float32]) * torch.exp2(x))
    _check_within(
        E, torch.exp(x), MARGIN * (EX2_REL + 2.0**-23 * x.abs() + OUT_REL[torch.float32]) * torch.exp(x)
    )


# ---- tilelang's key ----------------------------------------------------------------------------------------

def test_tilelang_enable_fast_math_maps_onto_approx_math():
    from tile_nb import tilelang as tl

    assert tl._pass_configs({tl.PassConfigKey.TL_ENABLE_FAST_MATH: True}) == ({"fast_math": True},
                                                                             {"approx_math": True}, [])
    assert tl._pass_configs({"tl.enable_fast_math": False}) == ({"fast_math": False}, {"approx_math": False},
                                                                [])

    kernel = tl.jit(pass_configs={"tl.enable_fast_math": True})(_gelu)
    X = torch.empty(77, 1000)
    compiled = kernel._tile_nb.compile(X, X, target="sm_90a")
    assert compiled.plan["options"] == {"approx_math": True} and "tanh.approx.f32" in compiled.cuda_source
    plain = tl.jit(_gelu)._tile_nb.compile(X, X, target="sm_90a")
    assert "tanh.approx" not in plain.cuda_source


@needs_nvcc
def test_flash_attention_tma_path_takes_the_option():
    """The warp-specialized TMA pipeline (tma.py: softmax overlapped with the second T.gemm) emits the user's
    T.exp2 through the same rewrite: every exp2 becomes ex2.approx.ftz.f32."""
    from kernels.corpus import CORPUS

    from tile_nb import runtime

    make, arch = CORPUS["flash_attention_d128_sm90a"]
    k = runtime.compile(make(), arch, lowering={"approx_math": True}, options={"cache": False})
    body = k.cuda_source.split('extern "C"')[-1]
    assert k.plan["pipeline_kind"] == "tma" and k.plan["options"] == {"approx_math": True}
    assert "tnb_exp2_approx(" in body and "exp2f(" not in body and k.cubin

"""`T.gemm` on 8-bit floats (float8_e4m3fn / float8_e5m2, mixed allowed) that wgmma does not take: FMAs on the
CUDA cores (analysis/mma.py `eight_bit_gemm`, emit/fma_gemm.py), each operand converted to float32 first
(exact: every 8-bit float is a float32 value, and so is every product of two), the products summed in float32.
8-bit integers (int8 / uint8) into an int32 accumulator likewise, in int32 (exact below 2^31).

CPU: the interpreter against torch's float64 product of the same 8-bit values (block_N 16 and 32, odd shapes,
M = 1, N = 1, a dynamic M); the plan's choice and its note; the CUDA for sm_90a and sm_89 builds with nvcc
with FMAs, hardware 8-bit conversions and no tensor-core instruction; sm_80 is refused at the user's line (no
8-bit floats there); what stays refused says so. GPU (marked gpu, sm_90a): block_N 16 (FMAs) and block_N 64
(wgmma) against torch.
"""
import re

import pytest
import torch
from kernels.hopper import why_no_hopper_plan
from kernels.seed import gemm_variant

from tile_nb.backend import toolchain
from tile_nb.lower import LoweringError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
_DT = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "float16": torch.float16,
       "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64, "int8": torch.int8,
       "uint8": torch.uint8, "int32": torch.int32}
_UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
_FMA = "fma (CUDA cores, exact products)"
_TENSOR_CORE = ("mma.sync", "wgmma", "ldmatrix", "tnb_mma", "tnb_wgmma")


def cfg(a_dtype="float8_e4m3fn", b_dtype="float8_e4m3fn", acc_dtype="float32", out_dtype=None, **options):
    """gemm_variant (tests/kernels/seed.py) as the DeepGEMM example runs it: B stored [N, K] (transpose_B),
    64 x block_N x 128 tiles, 128 threads."""
    base = dict(block_M=64, block_N=16, block_K=128, threads=128, num_stages=2, trans_B=True)
    dtypes = dict(in_dtype=a_dtype, b_dtype=b_dtype, acc_dtype=acc_dtype, out_dtype=out_dtype or acc_dtype)
    return {**base, **dtypes, **options}


def _inputs(M, N, K, a_dtype="float8_e4m3fn", b_dtype="float8_e4m3fn", seed=0):
    """A [M, K] and B [N, K] of 8-bit floats over their range (x 3: some e4m3 subnormals and large values), or
    of 8-bit integers over their whole range."""
    g = torch.Generator().manual_seed(seed * 7919 + M * 131 + N * 17 + K)

    def draw(rows, dtype):
        if dtype == "int8":
            return torch.randint(-128, 128, (rows, K), generator=g, dtype=torch.int8)
        if dtype == "uint8":
            return torch.randint(0, 256, (rows, K), generator=g, dtype=torch.int16).to(torch.uint8)
        return (torch.randn(rows, K, generator=g) * 3).to(_DT[dtype])

    A, B = draw(M, a_dtype), draw(N, b_dtype)
    assert A.float().abs().sum() > 0 and B.float().abs().sum() > 0
    return A, B


def _check(C, A, B, acc_dtype="float32", out_dtype=None, roundings=1):
    """|C - A B^T| <= (K + 1) u sum_k |a b| + `roundings` roundings to C's dtype, elementwise, against the
    float64 product of the same 8-bit values (u: the unit roundoff of the sums; the products are exact, each
    addition rounds once)."""
    K = A.shape[1]
    exact = A.double() @ B.double().T
    magnitude = A.double().abs() @ B.double().abs().T
    bound = (K + 1) * _UNIT_ROUNDOFF[acc_dtype] * magnitude
    bound += roundings * _UNIT_ROUNDOFF[out_dtype or acc_dtype] * magnitude
    got = C.double().cpu()
    assert not torch.isnan(got).any(), "unwritten (NaN) output elements"
    worst = float(((got - exact).abs() - bound).max())
    assert worst <= 0, f"worst error {worst:.3g} over the bound"


def _nan(M, N, dtype, device):
    return torch.full((M, N), float("nan"), dtype=_DT[dtype], device=device)


# ---- numerics: the interpreter (CPU) and the GPU ----------------------------------------------------------

SHAPES = [(70, 45, 200), (1, 1, 1), (1, 45, 130), (70, 1, 129), (129, 33, 256)]
DTYPES = [("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e4m3fn"),
          ("float8_e4m3fn", "float8_e5m2")]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("block_N", [16, 32])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("a_dtype, b_dtype", DTYPES)
def test_fp8_gemm_against_torch(backend, block_N, shape, a_dtype, b_dtype):
    M, N, K = shape
    A, B = _inputs(M, N, K, a_dtype, b_dtype)
    C = _nan(M, N, "float32", backend)
    gemm_variant(A.to(backend), B.to(backend), C, **cfg(a_dtype, b_dtype, block_N=block_N))
    _check(C, A, B)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M", [1, 70, 200])
def test_dynamic_M_one_kernel_for_every_M(backend, M):
    A, B = _inputs(M, 45, 200, seed=1)
    C = _nan(M, 45, "float32", backend)
    gemm_variant(A.to(backend), B.to(backend), C, **cfg(block_N=32, dynamic_M=True))
    _check(C, A, B)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("acc_dtype, out_dtype", [("float32", "bfloat16"), ("float64", "float64"),
                                                  ("float16", "float16")])
def test_other_float_accumulators_and_outputs(backend, acc_dtype, out_dtype):
    """A float64 accumulator sums in float64; a float16 one in float32 registers (as for the tensor cores),
    rounded to float16 after each T.gemm (docs/IR.md's accumulation rule: here 2 k-tiles); a bfloat16 C is
    the float32 sum rounded once."""
    A, B = _inputs(70, 45, 200, seed=2)
    C = _nan(70, 45, out_dtype, backend)
    gemm_variant(A.to(backend), B.to(backend), C, **cfg(acc_dtype=acc_dtype, out_dtype=out_dtype))
    roundings = 2 if acc_dtype == "float16" else 1
    _check(C, A, B, "float64" if acc_dtype == "float64" else "float32", out_dtype, roundings)


@pytest.mark.gpu
@pytest.mark.parametrize("block_N, kind", [(16, _FMA), (64, "wgmma")])
@pytest.mark.parametrize("shape", [(70, 45, 200), (1, 1, 1), (256, 192, 1024)])
def test_fma_and_wgmma_agree_with_torch_on_sm90a(block_N, kind, shape):
    """On a Hopper GPU: block_N 16 runs as FMAs, block_N 64 on wgmma; both against torch's float64 product.
    wgmma's 8-bit float MMAs add with fewer bits than float32 (docs/IR.md, "8-bit floats"), hence its wider
    bound (test_gpu_gemm.py's FP8_ACCUMULATION_BOUND)."""
    if why_no_hopper_plan() is not None:
        pytest.skip(why_no_hopper_plan())
    M, N, K = shape
    A, B = _inputs(M, N, K, seed=3)
    options = cfg(block_N=block_N)
    kernel = gemm_variant.compile(A.cuda(), B.cuda(), _nan(M, N, "float32", "cuda"), **options)
    assert [m["kind"] for m in kernel.plan["mma"]] == [kind]
    C = _nan(M, N, "float32", "cuda")
    gemm_variant(A.cuda(), B.cuda(), C, **options)
    torch.cuda.synchronize()
    if kind == _FMA:
        _check(C, A, B)
    else:
        exact = A.double() @ B.double().T
        bound = 2.0 ** -9 * (A.double().abs() @ B.double().abs().T) + 2.0 ** -24 * exact.abs()
        assert bool(((C.double().cpu() - exact).abs() <= bound).all())


# ---- the plan: which gemms take the CUDA cores, and the note that says why ---------------------------------

def _compile(M=70, N=45, K=200, target="sm_90a", **options):
    o = cfg(**options)
    A, B = _inputs(M, N, K, o["in_dtype"], o["b_dtype"])
    return gemm_variant.compile(A, B, torch.empty(M, N, dtype=_DT[o["out_dtype"]]), target=target, **o)


def _fp8_notes(kernel, what="float"):
    return [n for n in kernel.plan["notes"] if n.startswith(f"8-bit {what} T.gemm into")]


@needs_nvcc
@pytest.mark.parametrize("block_N", [16, 32])
def test_narrow_block_N_runs_on_the_cuda_cores_and_the_note_says_why(block_N):
    k = _compile(block_N=block_N)
    assert [m["kind"] for m in k.plan["mma"]] == [_FMA]
    assert _fp8_notes(k) == [
        "8-bit float T.gemm into C_local (float8_e4m3fn x float8_e4m3fn) on the CUDA cores: "
        f"block_N={block_N}: no wgmma shape tile_nb emits (N a multiple of 64 up to 256); the operands "
        "convert exactly to float32 and each product adds by one FMA"
    ]


@needs_nvcc
def test_wgmma_eligible_fp8_gemm_keeps_wgmma_and_has_no_fma_note():
    k = _compile(block_N=64)
    assert [m["kind"] for m in k.plan["mma"]] == ["wgmma"]
    assert _fp8_notes(k) == []
    assert "wgmma.mma_async" in k.cuda_source


@pytest.mark.parametrize("options, why", [
    (dict(target="sm_89", block_N=64), "the target sm_89 has no wgmma"),
    (dict(block_N=64, trans_B=False), "B is stored [K, N]; wgmma reads 8-bit B stored [N, K] only"),
    (dict(block_N=64, block_M=16), "block_M=16: wgmma needs 64 rows per warpgroup"),
    (dict(block_N=64, block_K=32), "block_K=32: wgmma reads K rows of 64 or 128 bytes"),
    (dict(block_N=64, threads=96, block_M=96), "threads=96 is not whole warpgroups of 128"),
])
def test_each_reason_wgmma_declines_is_named(options, why):
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower.analysis.plan import make_plan

    target = options.pop("target", "sm_90a")
    o = cfg(**options)
    A, B = _inputs(70, 45, 200, o["in_dtype"], o["b_dtype"])
    if not o["trans_B"]:
        B = B.T.contiguous()
    func = gemm_variant.specialize(A, B, torch.empty(70, 45), **o)
    plan = make_plan(func, resolve_target(target))
    notes = [n for n in plan.notes if n.startswith("8-bit float T.gemm into")]
    assert len(notes) == 1 and why in notes[0], notes


def test_wgmma_off_sends_eligible_fp8_gemms_to_the_cuda_cores():
    import tile_nb

    with tile_nb.options(wgmma=False):
        k = _compile(block_N=64)
    assert [m["kind"] for m in k.plan["mma"]] == [_FMA]
    assert "wgmma is off" in _fp8_notes(k)[0]


# ---- CUDA builds -------------------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_89"])
@pytest.mark.parametrize("a_dtype, b_dtype", DTYPES[:2])
def test_builds_with_fmas_hardware_conversions_and_no_tensor_core_instruction(arch, a_dtype, b_dtype):
    k = _compile(target=arch, a_dtype=a_dtype, b_dtype=b_dtype, block_N=32)
    assert "#include <cuda_fp8.h>" in k.cuda_source
    body = k.cuda_source.split('extern "C"')[-1]
    assert not any(t in body for t in _TENSOR_CORE), [t for t in _TENSOR_CORE if t in body]
    assert k.cubin
    assert re.search(r"fma\.rn(\.ftz)?\.f32", k.ptx)
    # sm_89 and newer convert 8-bit floats in hardware, two at a time (cuda_fp8.h)
    for t in {a_dtype, b_dtype}:
        assert f"cvt.rn.f16x2.{'e4m3x2' if t == 'float8_e4m3fn' else 'e5m2x2'}" in k.ptx
    assert not any(t in k.ptx for t in ("mma.sync", "wgmma", "ldmatrix"))
    assert k.resources.spill_stores == 0


def test_sm80_refuses_8bit_floats_at_the_users_line():
    """Below sm_89 8-bit floats are refused (arch_rules.py) before any T.gemm is planned."""
    from kernels import seed

    with pytest.raises(LoweringError) as info:
        _compile(target="sm_80")
    assert "the target sm_80 lacks 8-bit float types" in str(info.value)
    assert info.value.filename == seed.__file__
    assert "T.copy(A[" in open(seed.__file__).read().splitlines()[info.value.lineno - 1]


# ---- what stays refused ------------------------------------------------------------------------------------

@pytest.mark.parametrize("options, said", [
    # an 8-bit float with a 16-bit one
    (dict(b_dtype="float16"), "8-bit float inputs need 8-bit floats (float8_e4m3fn or float8_e5m2) for both"),
    # an 8-bit float product into an integer accumulator
    (dict(acc_dtype="int32"), "a float accumulator (float32, float16, bfloat16 or float64), here C_local is "
     "int32"),
    # 8-bit integers into a float accumulator, or with an 8-bit float
    (dict(a_dtype="int8", b_dtype="int8"), "an int32 accumulator, here C_local is float32"),
    (dict(a_dtype="int8", b_dtype="float8_e4m3fn", acc_dtype="int32"),
     "8-bit integer inputs need 8-bit integers (int8 or uint8) for both A and B"),
])
def test_what_stays_refused_says_what_would_run(options, said):
    from kernels import seed

    o = cfg(block_N=16, **options)
    A = torch.ones(70, 200, dtype=_DT[o["in_dtype"]])
    B = torch.ones(45, 200, dtype=_DT[o["b_dtype"]])
    with pytest.raises(LoweringError) as info:
        gemm_variant.compile(A, B, torch.empty(70, 45, dtype=_DT[o["out_dtype"]]), target="sm_90a", **o)
    text = str(info.value)
    assert said in text, text
    assert "such gemms run on Hopper wgmma where the tile fits, else on the CUDA cores" in text, text
    assert "T.gemm(" in open(seed.__file__).read().splitlines()[info.value.lineno - 1]


# ---- 8-bit integers into int32 -----------------------------------------------------------------------------

INT_DTYPES = [("int8", "int8"), ("uint8", "int8"), ("int8", "uint8")]


def _exact_int(C, A, B):
    assert torch.equal(C.cpu(), (A.long() @ B.long().T).to(torch.int32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("block_N", [16, 32])
@pytest.mark.parametrize("shape", [(70, 45, 200), (1, 1, 1), (1, 45, 130), (70, 1, 129)])
@pytest.mark.parametrize("a_dtype, b_dtype", INT_DTYPES)
def test_int8_gemm_is_exact(backend, block_N, shape, a_dtype, b_dtype):
    M, N, K = shape
    A, B = _inputs(M, N, K, a_dtype, b_dtype)
    C = torch.full((M, N), -7, dtype=torch.int32, device=backend)
    options = cfg(a_dtype, b_dtype, "int32", block_N=block_N, dynamic_M=M == 1)
    gemm_variant(A.to(backend), B.to(backend), C, **options)
    _exact_int(C, A, B)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_89", "sm_80", "sm_75"])
def test_int8_builds_with_integer_multiply_adds_on_every_arch(arch):
    k = _compile(target=arch, a_dtype="int8", b_dtype="uint8", acc_dtype="int32", block_N=16)
    assert [m["kind"] for m in k.plan["mma"]] == [_FMA]
    notes = _fp8_notes(k, "integer")
    assert len(notes) == 1 and "(int8 x uint8) on the CUDA cores: " in notes[0]
    assert "convert exactly to int32" in notes[0]
    body = k.cuda_source.split('extern "C"')[-1]
    assert not any(t in body for t in _TENSOR_CORE) and "int C_local" in body
    assert k.cubin and "mad.lo.s32" in k.ptx
    assert not any(t in k.ptx for t in ("mma.sync", "wgmma", "ldmatrix"))


@pytest.mark.gpu
@pytest.mark.parametrize("block_N, kind", [(16, _FMA), (64, "wgmma")])
@pytest.mark.parametrize("shape", [(70, 45, 200), (1, 1, 1), (256, 192, 1024)])
def test_int8_fma_and_wgmma_are_exact_on_sm90a(block_N, kind, shape):
    if why_no_hopper_plan() is not None:
        pytest.skip(why_no_hopper_plan())
    M, N, K = shape
    A, B = _inputs(M, N, K, "int8", "int8", seed=4)
    options = cfg("int8", "int8", "int32", block_N=block_N)
    C = torch.full((M, N), -7, dtype=torch.int32, device="cuda")
    kernel = gemm_variant.compile(A.cuda(), B.cuda(), C, **options)
    assert [m["kind"] for m in kernel.plan["mma"]] == [kind]
    gemm_variant(A.cuda(), B.cuda(), C, **options)
    torch.cuda.synchronize()
    _exact_int(C, A, B)

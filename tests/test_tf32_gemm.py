"""`T.tfloat32` (tilelang's dtype for a float32 GEMM on the tensor cores in TF32): float32 storage whose
`T.gemm` rounds both operands to TF32 (`cvt.rna.tf32.f32`: 10 mantissa bits, nearest, ties away) and runs
mma.sync m16n8k8 .tf32 (sm_80+, tile_nb/lower/tf32_gemm.py); the interpreter rounds the same way
(interp.values.round_tf32), so the two differ only in the order of the float32 sums.

CPU: the rounding against an independent float64 formula and hand-worked ties; the interpreter's TF32 product
at odd shapes, a size of 1 and a T.dynamic M; plan, CUDA, PTX and nvcc builds for sm_90a and sm_80; the
refusal on sm_75; T.tfloat32 vs T.float32 in cache keys. GPU (marked gpu): the same kernels against torch on
the rounded operands, and ties rounded away from zero exactly.
"""
import pytest
import torch
from kernels.seed import SMALL_TILES, gemm_minus_row_max, gemm_variant, two_gemms_one_accumulator

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.interp.values import round_tf32
from tile_nb.lower import LoweringError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
U = 2.0 ** -24  # float32 unit roundoff


def tf32(dt=T.tfloat32, **options):
    """Options of the shared GEMM (tests/kernels/seed.py `gemm_variant`) here: float32 storage in tiles of
    `dt`, a float32 accumulator and C, small tiles."""
    return {**SMALL_TILES, "in_dtype": T.float32, "tile_dtype": dt, **options}


@tile_nb.jit
def gemm_fragment_a(X, W, C, block_M: int = 32, block_K: int = 64):
    """tilelang's mHC pre-norm GEMM in the small: a bfloat16 tile widened into a T.tfloat32 fragment, times a
    T.tfloat32 weight tile stored [N, K] (transpose_B), N = 32."""
    M, K = T.const("M, K")
    X: T.Tensor[[M, K], T.bfloat16]
    W: T.Tensor[[32, K], T.tfloat32]
    C: T.Tensor[[M, 32], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        acc = T.alloc_fragment((block_M, 32), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            x_s = T.alloc_shared((block_M, block_K), T.bfloat16)
            w_s = T.alloc_shared((32, block_K), T.tfloat32)
            T.copy(X[bx * block_M, k * block_K], x_s)
            T.copy(W[0, k * block_K], w_s)
            x_f = T.alloc_fragment((block_M, block_K), T.tfloat32)
            T.copy(x_s, x_f)
            T.gemm(x_f, w_s, acc, transpose_B=True)
        T.copy(acc, C[bx * block_M, 0])


def _inputs(M, N, K, trans_A=False, trans_B=False, seed=0):
    g = torch.Generator().manual_seed(seed * 7919 + M * 131 + N * 17 + K)
    A = torch.randn(*((K, M) if trans_A else (M, K)), generator=g)
    B = torch.randn(*((N, K) if trans_B else (K, N)), generator=g)
    return A, B


def _check_tf32(C, A, B, K, trans_A=False, trans_B=False, slack=1.0):
    """C within (K + 1) u sum |a~ b~| of the exact product of the TF32-rounded
    operands (a~ b~ is exact in float32:
    11 + 11 significant bits), and farther than that from the exact product of the unrounded ones wherever
    rounding moved it more than twice the bound (it does for most elements: TF32
    errs by about 2^-11 relative)."""
    a, b = (A.T if trans_A else A), (B.T if trans_B else B)
    at, bt = round_tf32(a).double(), round_tf32(b).double()
    bound = slack * (K + 1) * U * (at.abs() @ bt.abs())
    got = C.double().cpu()
    assert not torch.isnan(got).any()
    assert bool(((got - at @ bt).abs() <= bound).all()), float(((got - at @ bt).abs() - bound).max())
    moved = (at @ bt - a.double() @ b.double()).abs() > 3 * bound
    assert bool(((got - a.double() @ b.double()).abs()[moved] > bound[moved]).all())


# ---- the rounding ------------------------------------------------------------------------------------------

def test_round_tf32_hand_worked_values():
    e = 2.0 ** -11  # half a TF32 ulp at 1.0
    x = torch.tensor(
        [
            1.0,
            1 + e,
            -(1 + e),
            1 + 3 * e,
            1 + e - 2.0**-23,
            1 + 2 * e,
            2.0**100 * (1 + e),
            0.0,
            -0.0,
            float("inf"),
            float("-inf"),
            3.4028234663852886e38,
        ]
    )
    want = [1.0, 1 + 2 * e, -(1 + 2 * e), 1 + 4 * e, 1.0, 1 + 2 * e, 2.0 ** 100 * (1 + 2 * e), 0.0, -0.0,
            float("inf"), float("-inf"), float("inf")]
    assert round_tf32(x).tolist() == want
    assert torch.isnan(round_tf32(torch.tensor([float("nan")]))).all()


def test_round_tf32_matches_a_float64_formula_and_keeps_16_bit_values():
    """Against sign * round-half-away(|x| / q) * q, q = 2^(exponent - 10), in float64, on normal float32
    values of every magnitude; float16 and bfloat16 values are TF32 values already."""
    g = torch.Generator().manual_seed(1)
    x = (
        torch.randn(100000, generator=g, dtype=torch.float64)
        * torch.exp2(torch.randint(-100, 100, (100000,), generator=g))
    ).float()
    mant, exp = torch.frexp(x.double())  # |mant| in [0.5, 1): x = mant 2^exp, the leading bit is 2^(exp - 1)
    q = torch.exp2((exp - 11).double())
    want = torch.sign(x.double()) * torch.floor(x.double().abs() / q + 0.5) * q
    assert torch.equal(round_tf32(x).double(), want)
    for dt in (torch.float16, torch.bfloat16):
        y = torch.randn(10000, generator=g).to(dt).float()
        assert torch.equal(round_tf32(y), y)


def test_tfloat32_is_float32_storage_with_its_own_name():
    assert T.tfloat32 == "float32" and repr(T.tfloat32) == "T.tfloat32"
    assert T.dtype("tfloat32") is T.tfloat32
    from tile_nb import tilelang as tl

    assert tl.language.tfloat32 is T.tfloat32


# ---- plan, CUDA, refusals ----------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("trans", [(False, False), (True, True)])
def test_builds_mma_tf32_with_rna_conversions(arch, trans):
    A, B = _inputs(70, 45, 33, *trans)
    options = tf32(trans_A=trans[0], trans_B=trans[1])
    k = gemm_variant.compile(A, B, torch.empty(70, 45), target=arch, **options)
    assert [m["kind"] for m in k.plan["mma"]] == ["mma.sync m16n8k8 tf32"]
    assert k.cubin
    assert "cvt.rna.tf32.f32" in k.ptx and "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in k.ptx
    assert "wgmma" not in k.ptx and "ldmatrix" not in k.ptx


@needs_nvcc
def test_fragment_a_operand_builds():
    X, W = torch.randn(100, 256).bfloat16(), torch.randn(32, 256)
    k = gemm_fragment_a.compile(X, W, torch.empty(100, 32), target="sm_90a")
    assert k.plan["mma"][0]["kind"] == "mma.sync m16n8k8 tf32" and k.cubin


def test_float32_and_tfloat32_are_different_kernels():
    A, B = _inputs(70, 45, 33)
    tf = gemm_variant.compile(A, B, torch.empty(70, 45), target="sm_80", **tf32())
    f32 = gemm_variant.compile(A, B, torch.empty(70, 45), target="sm_80", **tf32(T.float32))
    assert tf.plan["mma"][0]["kind"] == "mma.sync m16n8k8 tf32"
    assert f32.plan["mma"][0]["kind"].startswith("fma")


def test_sm75_refuses_tf32_at_the_gemm_line():
    A, B = _inputs(70, 45, 33)
    with pytest.raises(
        LoweringError, match=r"T\.tfloat32 operands: the target sm_75 lacks TF32 .* sm_80"
    ) as info:
        gemm_variant.compile(A, B, torch.empty(70, 45), target="sm_75", **tf32())
    assert info.value.lineno is not None and "T.gemm(A_shared, B_shared, C_local" in str(info.value)


def test_block_k_not_a_multiple_of_8_is_refused():
    A, B = _inputs(64, 64, 12)
    with pytest.raises(LoweringError, match="K = 12 must be a multiple of 8"):
        gemm_variant.compile(A, B, torch.empty(64, 64), target="sm_80", **tf32(block_K=12))


# ---- numerics: interpreter (CPU) and GPU -------------------------------------------------------------------

SHAPES = [(70, 45, 33), (1, 1, 1), (129, 64, 100)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("trans", [(False, False), (True, False), (False, True), (True, True)])
def test_tf32_gemm_multiplies_the_rounded_operands(backend, shape, trans):
    M, N, K = shape
    A, B = _inputs(M, N, K, *trans)
    C = torch.full((M, N), float("nan"), device=backend)
    gemm_variant(A.to(backend), B.to(backend), C, **tf32(trans_A=trans[0], trans_B=trans[1]))
    # the tensor cores' float32 additions: allow twice the round-to-nearest bound on the GPU
    _check_tf32(C, A, B, K, *trans, slack=2.0 if backend == "cuda" else 1.0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M", [1, 70, 200])
def test_dynamic_M(backend, M):
    A, B = _inputs(M, 45, 33)
    C = torch.full((M, 45), float("nan"), device=backend)
    gemm_variant(A.to(backend), B.to(backend), C, **tf32(dynamic_M=True))
    _check_tf32(C, A, B, 33, slack=2.0 if backend == "cuda" else 1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_round_away_from_zero_exactly(backend):
    """A @ I with A's values halfway between two TF32 values: each output is one rounded value (plus zeros),
    so it must be exactly round-half-away (1 + 2^-11 -> 1 + 2^-10; round-half-even would give 1)."""
    e = 2.0 ** -11
    ties = torch.tensor(
        [1 + e, -(1 + e), 1 + 3 * e, 3 * (1 + e), 0.75 * (1 + 5 * e), 1 + e - 2.0**-23, 2.5, -7.0]
    )
    A = ties.repeat(64, 8)  # 64 x 64
    B = torch.eye(64)
    C = torch.full((64, 64), float("nan"), device=backend)
    gemm_variant(A.to(backend), B.to(backend), C, **tf32())
    assert torch.equal(C.cpu(), round_tf32(A))
    assert C[0, 0].item() == 1 + 2 * e and C[0, 1].item() == -(1 + 2 * e)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, K", [(100, 256), (1, 64), (64, 320)])
def test_fragment_a_operand(backend, M, K):
    g = torch.Generator().manual_seed(M + K)
    X = torch.randn(M, K, generator=g).bfloat16()
    W = torch.randn(32, K, generator=g)
    C = torch.full((M, 32), float("nan"), device=backend)
    gemm_fragment_a(X.to(backend), W.to(backend), C)
    _check_tf32(C, X.float(), W, K, trans_B=True, slack=2.0 if backend == "cuda" else 1.0)


@needs_nvcc
def test_row_statistics_of_a_tf32_accumulator_build():
    A, B = _inputs(100, 50, 40)
    k = gemm_minus_row_max.compile(A, B, torch.empty(100, 50), target="sm_80", tile_dtype=T.tfloat32)
    assert k.plan["mma"][0]["kind"] == "mma.sync m16n8k8 tf32" and k.cubin
    assert all(f["where"] == "registers" for f in k.plan["fragments"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N, K", [(100, 50, 40), (1, 1, 1), (64, 64, 72)])
def test_row_statistics_read_the_tf32_accumulator_in_its_layout(backend, M, N, K):
    A, B = _inputs(M, N, K, seed=5)
    C = torch.full((M, N), float("nan"), device=backend)
    gemm_minus_row_max(A.to(backend), B.to(backend), C, tile_dtype=T.tfloat32)
    at, bt = round_tf32(A).double(), round_tf32(B).double()
    s = at @ bt
    expected = s - s.max(dim=1, keepdim=True).values
    # each S element within 2 (K + 1) u sum |a~ b~| (the tensor cores' sums), the row max within the row's
    # largest such bound, then the subtraction's rounding
    per = 2 * (K + 1) * U * (at.abs() @ bt.abs())
    bound = per + per.max(dim=1, keepdim=True).values + U * expected.abs()
    assert bool(((C.double().cpu() - expected).abs() <= bound).all())


# C = tf32(A) tf32(B) + A2 B2 exactly: two T.gemm of different paths into one accumulator (each call takes its
# own path; the layout is the first one's).
TF32_THEN_FLOAT32 = dict(in_dtype=T.float32, tile_dtype=T.tfloat32, block_K=16)


@needs_nvcc
def test_tf32_and_float32_gemm_into_one_accumulator_build():
    A, B = _inputs(70, 45, 33)
    k = two_gemms_one_accumulator.compile(A, B, A, B, torch.empty(70, 45), target="sm_80",
                                          **TF32_THEN_FLOAT32)
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32" in k.ptx and "fma.rn" in k.ptx and k.cubin


@pytest.mark.parametrize("backend", BACKENDS)
def test_tf32_and_float32_gemm_into_one_accumulator(backend):
    M, N, K = 70, 45, 33
    A, B = _inputs(M, N, K, seed=1)
    A2, B2 = _inputs(M, N, K, seed=2)
    C = torch.full((M, N), float("nan"), device=backend)
    two_gemms_one_accumulator(*(x.to(backend) for x in (A, B, A2, B2)), C, **TF32_THEN_FLOAT32)
    at, bt = round_tf32(A).double(), round_tf32(B).double()
    exact = at @ bt + A2.double() @ B2.double()
    bound = 2 * (2 * K + 1) * U * (at.abs() @ bt.abs() + A2.double().abs() @ B2.double().abs())
    assert bool(((C.double().cpu() - exact).abs() <= bound).all())

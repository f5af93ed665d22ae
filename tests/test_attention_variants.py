"""FlashAttention variants (tests/kernels/reference.py `flash_attention_gqa`): grouped-query attention (HK KV
heads shared by H query heads), a `T.dynamic` sequence length, fp16 and bf16, head dims 64 and 128.

CPU: the interpreter against an fp64 torch reference, the JIT cache across sequence lengths,
and the sm_90a lowering (TVM + nvcc, no GPU). GPU (marked gpu): the same comparisons at
larger shapes on CUDA against SDPA."""
import re

import pytest
import torch
import torch.nn.functional as F
from kernels import reference as ref
from kernels.compare import rel_err, seeded
from kernels.cuda import cuda_source, ptxas_report, target

import tile_nb.language as T
from tile_nb.lower import lower_with_plan

fa = ref.flash_attention_gqa

# (torch dtype, tile_nb dtype, relative norm error bound); bf16 keeps 8 bits of mantissa where fp16 keeps 11
DTYPES = [pytest.param(torch.float16, T.float16, 5e-3, id="fp16"),
          pytest.param(torch.bfloat16, T.bfloat16, 2e-2, id="bf16")]


def _inputs(b, h, hk, s, d, dtype, device="cpu", seed=0):
    Q = torch.randn(b, h, s, d, generator=seeded(seed)).to(dtype).to(device)
    K = torch.randn(b, hk, s, d, generator=seeded(seed + 1)).to(dtype).to(device)
    V = torch.randn(b, hk, s, d, generator=seeded(seed + 2)).to(dtype).to(device)
    return Q, K, V, torch.full_like(Q, float("nan"))


def _expected(Q, K, V, causal):
    """SDPA in float64 on the inputs' device; each KV head serves H // HK consecutive query heads."""
    return F.scaled_dot_product_attention(
        Q.double(), K.double(), V.double(), is_causal=causal, enable_gqa=True
    )


# ---- CPU interpreter ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("torch_dtype,dtype,tol", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hk", [1, 2, 4])
@pytest.mark.parametrize("s", [100, 1])
def test_gqa_on_the_interpreter(torch_dtype, dtype, tol, causal, hk, s):
    """H = 4 query heads over 1 (MQA), 2 or 4 (MHA) KV heads; S off the 64-row tiles, and a single row."""
    Q, K, V, O = _inputs(1, 4, hk, s, 64, torch_dtype, seed=40)
    fa(Q, K, V, O, dtype=dtype, causal=causal)
    assert rel_err(O, _expected(Q, K, V, causal)) < tol


def test_one_specialization_serves_every_sequence_length():
    """S is T.dynamic: a second length reuses the first call's specialization (nothing new elaborated)."""
    cfg = dict(dtype=T.bfloat16, causal=True, block_M=32, block_N=64)
    Q, K, V, O = _inputs(2, 4, 2, 70, 64, torch.bfloat16, seed=50)
    fa(Q, K, V, O, **cfg)
    assert rel_err(O, _expected(Q, K, V, True)) < 2e-2
    after_first = dict(fa.stats)
    Q, K, V, O = _inputs(2, 4, 2, 33, 64, torch.bfloat16, seed=60)
    fa(Q, K, V, O, **cfg)
    assert fa.stats == after_first
    assert rel_err(O, _expected(Q, K, V, True)) < 2e-2
    assert 'Q: T.Buffer((2, 4, "S", 64)' in fa.specialize(Q, K, V, O, **cfg).script()  # S stays a variable


def test_one_compiled_kernel_for_sequence_lengths_divisible_by_16():
    """On the GPU path (compiled here, not run): S = 2048 and 4096 share one kernel (it assumes S % 16 == 0);
    S = 333 gets the general one."""
    from tile_nb.backend.cuda_compile import available_compiler

    if available_compiler() is None:
        pytest.skip("neither NVRTC nor nvcc is installed here")
    cfg = dict(dtype=T.float16, block_M=128, block_N=128, threads=256, target="sm_90a")

    def compiled(s):
        Q, K = torch.empty(1, 4, s, 128, dtype=torch.float16), torch.empty(1, 2, s, 128, dtype=torch.float16)
        return fa.compile(Q, K, K, Q, **cfg)

    first = compiled(2048)
    before = dict(fa.stats)
    assert compiled(4096) is first and fa.stats == before
    assert first.plan["assumes"] == ["S % 16 == 0"], first.plan["assumes"]
    general = compiled(333)
    assert general is not first and general.plan["assumes"] == []
    assert fa.stats["compilations"] == before["compilations"] + 1
    assert fa.stats["specializations"] == before["specializations"]


# ---- sm_90a lowering (no GPU) ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,mma", [(T.float16, "f16"), (T.bfloat16, "bf16")], ids=["fp16", "bf16"])
def test_two_warpgroups_lower_to_wgmma_and_tma_without_spills(dtype, mma, tmp_path):
    """FlashAttention-3's shape (two consumer warpgroups over a 128-row Q tile, head dim 128) with GQA and a
    dynamic S: both T.gemm on wgmma (P V in its register form), K and V by TMA, and
    nvcc builds it without spills."""
    func = fa.specialize(B=1, H=4, HK=2, D=128, dtype=dtype, block_M=128, block_N=128, threads=256)
    _, plan = lower_with_plan(func, target("sm_90a"))
    assert [type(a).__name__ for a in plan.accumulators.values()] == ["WgmmaAccLayout", "WgmmaAccLayout"]
    assert plan.tma is not None, plan.pipeline_note
    src = cuda_source(func, "sm_90a")
    signature = src[src.index('extern "C" __global__'):].split(";", 1)[0]
    assert "int S" in signature  # the sequence length is a kernel argument
    assert re.findall(r"const __grid_constant__ CUtensorMap (\w+)", signature) == [
        "K_tensormap",
        "V_tensormap",
    ]
    assert f"tnb_wgmma_m64n128k16_{mma}_{mma}_tb0" in src and f"tnb_wgmma_rs_m64n128k16_{mma}_tb1" in src
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


# ---- CUDA --------------------------------------------------------------------------------------------------

GPU_CONFIGS = [pytest.param(dict(block_M=64, block_N=64, threads=128), id="1wg_bm64"),
               pytest.param(dict(block_M=128, block_N=128, threads=256), id="2wg_bm128")]


@pytest.mark.gpu
@pytest.mark.parametrize("torch_dtype,dtype,tol", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("cfg", GPU_CONFIGS)
def test_gqa_on_cuda(torch_dtype, dtype, tol, causal, d, cfg):
    """B = 2, H = 8 query heads over HK = 2 KV heads; S a single row, off the tiles, and a long one."""
    for s in (1, 333, 2048):
        Q, K, V, O = _inputs(2, 8, 2, s, d, torch_dtype, device="cuda", seed=70)
        kernel = fa.compile(Q, K, V, O, dtype=dtype, causal=causal, **cfg)
        if kernel.arch == "sm_90a":
            assert [m["kind"] for m in kernel.plan["mma"]] == ["wgmma", "wgmma"], kernel.plan["mma"]
            if cfg["threads"] == 256:  # a producer warp where one CTA fills the SM (lower/analysis/tma.py)
                assert kernel.plan["pipeline_kind"] == "tma", kernel.plan["pipeline"]
                assert kernel.plan["producer_warp"] == (d == 128), kernel.plan["pipeline"]
        fa(Q, K, V, O, dtype=dtype, causal=causal, **cfg)
        err = rel_err(O, _expected(Q, K, V, causal))
        assert err < tol, f"S={s}: relative error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("hk", [1, 8])
def test_mqa_and_mha_on_cuda(hk):
    """The ends of GQA: one KV head for all 8 query heads, and one per query head."""
    Q, K, V, O = _inputs(2, 8, hk, 333, 128, torch.bfloat16, device="cuda", seed=80)
    fa(Q, K, V, O, dtype=T.bfloat16, causal=True, block_M=128, block_N=128, threads=256)
    assert rel_err(O, _expected(Q, K, V, True)) < 2e-2


@pytest.mark.gpu
def test_one_launch_kernel_for_two_sequence_lengths_on_cuda():
    """Two lengths divisible by 16 run the same compiled kernel on the GPU."""
    cfg = dict(dtype=T.float16, causal=False, block_M=64, block_N=64, num_stages=3)
    for i, s in enumerate((1024, 1536)):
        Q, K, V, O = _inputs(1, 4, 1, s, 64, torch.float16, device="cuda", seed=90)
        fa(Q, K, V, O, **cfg)
        assert rel_err(O, _expected(Q, K, V, False)) < 5e-3
        if i == 0:
            after_first = dict(fa.stats)
    assert fa.stats == after_first

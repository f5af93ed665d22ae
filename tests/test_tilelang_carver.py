"""`tilelang.carver` on tile_nb: `arch.CUDA` (the GPU here, or the target tile_nb builds for with a reference
GPU's facts), refused AMD/other devices, and `MatmulTemplate.recommend_hints`, tile_nb's own GEMM heuristic:
hints distinct, ranked, within the shared-memory budget (recomputed here by hand), thread counts that match
their warp tiles, topk respected; the top hints lower for sm_90a and sm_80 and run correctly on the
interpreter; bad input named."""
import os
import types

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.lower import lower
from tile_nb.tilelang import UnsupportedTilelangAPI
from tile_nb.tilelang.carver.arch import CDNA, CUDA, auto_infer_current_arch, get_arch
from tile_nb.tilelang.carver.roller.rasterization import NoRasterization
from tile_nb.tilelang.carver.template import MatmulTemplate


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def fake_h200(monkeypatch):
    props = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=100,
                                  L2_cache_size=60 * 2**20, shared_memory_per_multiprocessor=228 * 1024,
                                  shared_memory_per_block_optin=200 * 1024)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    return props


# -- arch ----------------------------------------------------------------------------------------------------
def test_cuda_without_a_gpu_describes_the_target_with_a_reference_gpu(no_gpu):
    arch = CUDA("sm_90a")
    assert not arch.has_device and arch.arch == "sm_90a" and arch.sm_version == 90
    assert arch.compute_capability == "90" and arch.platform == "CUDA"
    assert arch.compute_max_core == 132 and arch.smem_cap == 227 * 1024   # H100 SXM; tile_nb's sm_90 budget
    assert (arch.peak_tflops, arch.bandwidth_GBps) == (989.0, 3350.0)
    assert "no GPU here" in arch.source and "no GPU here" in repr(arch)
    a100 = CUDA("cuda -arch=sm_80")
    assert a100.compute_max_core == 108 and a100.smem_cap == 163 * 1024
    assert auto_infer_current_arch().arch == CUDA("cuda").arch


def test_cuda_reads_the_gpu_here(fake_h200):
    arch = CUDA("sm_90a")
    assert arch.has_device and arch.name == "NVIDIA H200"
    assert arch.compute_max_core == 100 and arch.smem_cap == 200 * 1024   # the device's opt-in caps it
    assert arch.l2_cache_size_bytes == 60 * 2**20
    assert (arch.peak_tflops, arch.bandwidth_GBps) == (989.0, 4800.0)
    other = CUDA("sm_80")   # a target for another GPU: the reference A100's facts, and it says why
    assert not other.has_device and "the GPU here is sm_90" in other.source


def test_cuda_refuses_targets_it_cannot_describe(no_gpu):
    with pytest.raises(ValueError, match=r"CUDA\(target=\.\.\.\).*unsupported target 'hip'"):
        CUDA("hip")
    with pytest.raises(ValueError, match="reference facts .* sm_80 and sm_90 only, not sm_86"):
        CUDA("sm_86")


def test_amd_and_other_devices_are_refused():
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.carver\.arch\.CDNA.*CUDA only"):
        CDNA("hip")
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.carver\.arch\.CDNA"):
        get_arch("hip")
    import tile_nb.tilelang.carver.template as template

    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.carver\.template\.ConvTemplate"):
        template.ConvTemplate


# -- hints ---------------------------------------------------------------------------------------------------
def _align(n):
    return -(-n // 1024) * 1024


PROBLEMS = [
    (4096, 4096, 4096, "float16", "float16", "float32", True),
    (1000, 333, 77, "float16", "float32", "float32", True),
    (1, 4096, 512, "bfloat16", "bfloat16", "float32", False),
    (2048, 1024, 640, "float8_e4m3fn", "float16", "float32", True),
    (512, 512, 512, "int8", "int32", "int32", True),
]


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("M, N, K, in_dtype, out_dtype, accum_dtype, trans_B", PROBLEMS)
def test_hints_are_valid_ranked_and_within_budget(no_gpu, target, M, N, K, in_dtype, out_dtype, accum_dtype,
                                                  trans_B):
    arch = CUDA(target)
    template = MatmulTemplate(M=M, N=N, K=K, in_dtype=in_dtype, out_dtype=out_dtype, accum_dtype=accum_dtype,
                              trans_B=trans_B)
    if in_dtype.startswith("float8") and target == "sm_80":
        with pytest.raises(ValueError, match="in_dtype float8_e4m3fn: sm_80 lacks 8-bit float"):
            template.with_arch(arch)
        return
    if in_dtype == "int8" and target == "sm_80":   # as the lowering refuses it
        with pytest.raises(ValueError, match="in_dtype int8: tile_nb's T.gemm runs 8-bit inputs on Hopper"):
            template.with_arch(arch)
        return
    hints = template.with_arch(arch).recommend_hints(topk=1000)
    assert len(hints) > 3
    assert len(template.recommend_hints(topk=3)) == 3
    top3 = template.recommend_hints(topk=3)
    assert [h.block + h.rstep for h in top3] == [h.block + h.rstep for h in hints[:3]]
    keys = {(tuple(h.block), h.rstep[0], h.pipeline_stage, h.threads) for h in hints}
    assert len(keys) == len(hints)
    times = [h.estimated_ms for h in hints]
    assert all(t is not None and t > 0 for t in times) and times == sorted(times)
    in_bytes = 1 if "8" in in_dtype else 2
    out_bytes = 4 if out_dtype in ("float32", "int32") else 2
    for h in hints:
        (bm, bn), (wm, wn), (bk,) = h.block, h.warp, h.rstep
        stages = h.pipeline_stage * (_align(bm * bk * in_bytes) + _align(bn * bk * in_bytes))
        shared = stages + _align(bm * bn * out_bytes)
        assert h.shared_bytes == shared <= arch.smem_cap
        assert (bm // wm) * (bn // wn) * 32 == h.threads and bm % wm == 0 and bn % wn == 0
        assert bk * in_bytes in (64, 128) and 2 <= h.pipeline_stage <= 4
        assert bm * bn // h.threads + 32 <= 255        # the accumulator with tile_nb's register headroom
        assert bm <= max(64, 1 << (M - 1).bit_length()) and bn <= max(64, 1 << (N - 1).bit_length())
        assert isinstance(h.rasterization_plan, NoRasterization) and h.use_tc
        if h.instruction == "wgmma":
            assert bm % (64 * (h.threads // 128)) == 0 and bn % 64 == 0
    assert {h.instruction for h in hints} == {"wgmma" if target == "sm_90a" else "mma.sync"}


def test_top_hint_for_a_big_square_gemm_on_sm_90a(no_gpu):
    """What the heuristic is tuned to (gemm_hints.py's docstring): tile_nb's fastest measured H200 GEMM
    tiling."""
    hint = MatmulTemplate(M=4096, N=4096, K=4096, in_dtype=T.float16, out_dtype=T.float16,
                          accum_dtype=T.float32).with_arch(CUDA("sm_90a")).recommend_hints(topk=1)[0]
    assert hint.config() == {"block_M": 128, "block_N": 256, "block_K": 64, "num_stages": 3,
                             "thread_num": 256}


def test_bad_input_is_named(no_gpu):
    with pytest.raises(ValueError, match=r"MatmulTemplate\(M=\.\.\.\): expected a positive int, got 0"):
        MatmulTemplate(M=0, N=1, K=1)
    with pytest.raises(ValueError, match=r"MatmulTemplate\(K=\.\.\.\): expected a positive int, got 2.5"):
        MatmulTemplate(M=1, N=1, K=2.5)
    with pytest.raises(ValueError, match=r"MatmulTemplate\(in_dtype=\.\.\.\): unknown dtype 'floaty'"):
        MatmulTemplate(M=1, N=1, K=1, in_dtype="floaty")
    template = MatmulTemplate(M=64, N=64, K=64)
    with pytest.raises(ValueError, match="no arch yet"):
        template.recommend_hints(topk=2)
    with pytest.raises(TypeError, match=r"with_arch\(arch\): expected a tilelang.carver.arch.CUDA, got str"):
        template.with_arch("cuda")
    with pytest.raises(ValueError, match=r"recommend_hints\(topk=\.\.\.\): expected a positive int, got 0"):
        template.with_arch(CUDA("sm_90a")).recommend_hints(topk=0)
    with pytest.raises(UnsupportedTilelangAPI, match="with_bias"):
        MatmulTemplate(M=1, N=1, K=1, with_bias=True)


def test_equivalent_function_is_the_matmul(no_gpu):
    func = MatmulTemplate(M=48, N=40, K=24, in_dtype="float16", out_dtype="float32",
                          accum_dtype="float32").equivalent_function()
    text = func.script()
    assert 'A: T.Buffer((48, 24), "float16")' in text and 'B: T.Buffer((40, 24), "float16")' in text
    assert 'C: T.Buffer((48, 40), "float32")' in text


# -- the hints drive the example's kernel ---------------------------------------------------------------
@tile_nb.jit
def _example_gemm(A, B, block_M: int = 64, block_N: int = 64, block_K: int = 32, num_stages: int = 2,
                  thread_num: int = 128, dt: T.dtype = T.float16, out_dt: T.dtype = T.float16,
                  acc_dt: T.dtype = T.float32):
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], dt]
    B: T.Tensor[[N, K], dt]
    C = T.empty([M, N], out_dt)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=thread_num) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dt)
        B_shared = T.alloc_shared((block_N, block_K), dt)
        C_local = T.alloc_fragment((block_M, block_N), acc_dt)
        C_shared = T.alloc_shared((block_M, block_N), out_dt)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_shared)
            T.copy(B[bx * block_N, k * block_K], B_shared)
            T.gemm(A_shared, B_shared, C_local, transpose_B=True)
        T.copy(C_local, C_shared)
        T.copy(C_shared, C[by * block_M, bx * block_N])
    return C


@pytest.mark.parametrize("target, dt, out_dt, acc_dt", [
    ("sm_90a", "float16", "float16", "float32"), ("sm_80", "float16", "float16", "float32"),
    ("sm_80", "bfloat16", "float32", "float32"), ("sm_90a", "float8_e4m3fn", "float16", "float32"),
    ("sm_90a", "int8", "int32", "int32"),
])
def test_top_hints_lower_within_tile_nbs_budget(no_gpu, target, dt, out_dt, acc_dt):
    """The lowering's own shared-memory and register checks accept the best hints of a large GEMM."""
    hints = MatmulTemplate(M=4096, N=4096, K=4096, in_dtype=dt, out_dtype=out_dt,
                           accum_dtype=acc_dt).with_arch(CUDA(target)).recommend_hints(topk=3)
    for hint in hints:
        func = _example_gemm.specialize(M=4096, N=4096, K=4096, dt=T.dtype(dt), out_dt=T.dtype(out_dt),
                                        acc_dt=T.dtype(acc_dt), **hint.config())
        lower(func, tvm_target(target))


def tvm_target(arch):
    import tvm

    return tvm.target.Target({"kind": "cuda", "arch": arch})


def test_hinted_kernel_agrees_with_torch_on_the_interpreter(no_gpu):
    """Odd sizes: the first hint's configuration of the example's kernel against torch."""
    M, N, K = 131, 77, 45
    hint = MatmulTemplate(M=M, N=N, K=K, in_dtype="float16", out_dtype="float16",
                          accum_dtype="float32").with_arch(CUDA("sm_90a")).recommend_hints(topk=1)[0]
    torch.manual_seed(0)
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(N, K, dtype=torch.float16)
    c = _example_gemm(a, b, **hint.config())
    torch.testing.assert_close(c.float(), a.float() @ b.float().T, rtol=2e-3, atol=2e-2)


@pytest.mark.gpu
def test_on_the_gpu_the_arch_is_the_device_and_the_hints_run():
    if os.environ.get("TILE_NB_ARCH"):  # e.g. compute_80 on an H100: the target, not this device
        pytest.skip(f"TILE_NB_ARCH={os.environ['TILE_NB_ARCH']} picks the arch: CUDA('cuda') describes that "
                    "target's reference GPU, not the device this test asserts")
    props = torch.cuda.get_device_properties(0)
    arch = CUDA("cuda")
    assert arch.has_device and arch.compute_max_core == props.multi_processor_count
    assert arch.sm_version == props.major * 10 + props.minor
    M, N, K = 1000, 777, 333
    hints = MatmulTemplate(M=M, N=N, K=K, in_dtype="float16", out_dtype="float16",
                           accum_dtype="float32").with_arch(arch).recommend_hints(topk=3)
    torch.manual_seed(1)
    a = torch.randn(M, K, dtype=torch.float16, device="cuda")
    b = torch.randn(N, K, dtype=torch.float16, device="cuda")
    for hint in hints:
        c = _example_gemm(a, b, **hint.config())
        torch.testing.assert_close(c.float(), a.float() @ b.float().T, rtol=2e-3, atol=5e-2)

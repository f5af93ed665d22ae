"""The sm_90a TMA pipeline (lower/analysis/tma.py): when it is chosen, what it emits, and that it builds.

CPU only: lowered IR and CUDA source through TVM, cubins through nvcc and NVRTC with ptxas resource use.
The GPU runs of these kernels are in tests/test_gpu_gemm.py (`test_tma_*`).
"""
import re

import pytest
from kernels.cuda import cuda_source, pipeline_note, plan, ptxas_report, target
from kernels.seed import gemm as seed_gemm
from kernels.seed import gemm_ir

import tile_nb
import tile_nb.language as T
from tile_nb.lower import lower, lower_with_plan
from tile_nb.lower.analysis.decisions import TWO_CTAS_PER_SM, PipelineKind

BIG = dict(block_N=256, block_K=64, threads=256)


def seed_tma(M=1024, N=1024, K=1024, **cfg):
    """The seed GEMM (one consumer warpgroup) with TMA asked for (the default since 2026-12-03)."""
    return gemm_ir(M, N, K, **cfg).with_attr("tile_nb.tma", 1)




@pytest.mark.parametrize(
    "cfg",
    [BIG, dict(BIG, trans_B=True), dict(BIG, block_M=256, block_N=128, threads=512)],
    ids=["big", "big_trans_B", "4_warpgroups"],
)
def test_gemm_kernels_get_the_tma_pipeline(cfg):
    p = plan(gemm_ir(1024, 1024, 1024, **cfg))
    assert p.pipeline_kind is PipelineKind.TMA and p.tma.producer_warp and p.producer_threads == 32


def test_one_warpgroup_gets_tma_and_a_producer_warp():
    """Measured faster than cp.async on the H200 (2026-12-03) once the TMA store epilogue came with it."""
    assert plan(gemm_ir(1024, 1024, 1024)).tma.producer_warp
    inline = plan(seed_tma().with_attr("tile_nb.producer_warp", 0))
    assert not inline.tma.producer_warp and inline.launch_threads == 128


def test_one_warpgroup_issues_its_own_loads_three_ctas_per_sm(tmp_path):
    """`tile_nb.producer_warp` = 0 on the seed (128 threads, 128x128x32, 3 stages, fp16 C): thread 0 issues
    the first two k-tiles before the loop and k-tile k + 2 in iteration k, after the stage it reuses (k - 1's)
    was released; the TMA store stages one 64-column panel at a time so that three CTAs still fit an SM."""
    func = seed_tma(8192, 8192, 8192, out_dtype=T.float16).with_attr("tile_nb.producer_warp", 0)
    p = plan(func)
    assert p.pipeline_kind is PipelineKind.TMA and p.tma.producer_threads == 0
    assert (p.tma_store.chunk, p.tma_store.panels) == (1, 2)  # one of two 64-column panels at a time
    src = cuda_source(func, "sm_90a")
    assert "__launch_bounds__(128)" in src
    prologue, loop = src[:src.index("for (int k = 0;")], src[src.index("for (int k = 0;"):]
    assert "for (int k_load = 0; k_load < 2; ++k_load)" in prologue
    release = loop.index("tnb_mbarrier_arrive((&(((uint64_t*)smem_pool_ptr)[(((k + 2) % 3)")
    issue = loop.index("if ((((int)threadIdx.x) == 0) && (k < 254))")
    assert release < issue < loop.index("tnb_tma_load_2d(", issue) < loop.index("tnb_wgmma_wait0")
    report = ptxas_report(src, "sm_90a", tmp_path)
    registers = int(re.search(r"Used (\d+) registers", report).group(1))
    shared = lower_with_plan(func, target("sm_90a"))[1].pool_bytes
    assert "0 bytes spill" in report and 65536 // (128 * registers) >= 3, report
    assert 3 * (shared + 1024) <= 228 * 1024, shared  # 48 KiB of stages + a 16 KiB staging panel
    with_warp = cuda_source(seed_tma(8192, 8192, 8192, out_dtype=T.float16), "sm_90a")  # the default
    assert "__launch_bounds__(160)" in with_warp


def test_cuda_source_of_the_warp_specialized_kernel():
    src = cuda_source(gemm_ir(1024, 1024, 1024, **BIG), "sm_90a")
    # the kernel gets one extra warp and two tensor maps, encoded on the host for each call
    assert "__launch_bounds__(288)" in src
    signature = src[src.index('extern "C" __global__'):].split(";", 1)[0]  # the declaration
    assert re.findall(r"const __grid_constant__ CUtensorMap (\w+)", signature) == [
        "A_tensormap",
        "B_tensormap",
    ]
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in src
    assert "mbarrier.try_wait.parity" in src and "mbarrier.arrive.expect_tx" in src
    # no thread issues cp.async, and consumers synchronise through mbarriers, not __syncthreads, in the loop
    assert "cp.async.cg" not in src and "cp.async.wait_group" not in src
    loop = src[src.index("for (int k = 0;"):]
    loop = loop[:loop.index("tnb_wgmma_wait0")]
    assert "tnb_cta_sync" not in loop and "tnb_wgmma_wait1" in loop
    # one A box (128 x 64) and four 64-column B panels (64 x 64) per k-tile: 48 KiB expected per stage
    assert "tnb_mbarrier_arrive_expect_tx(" in src and ", 49152);" in src
    assert len(re.findall(r"tnb_tma_load_2d\(", src)) == 5 + 1  # 5 calls + the helper's definition


def test_host_encodes_swizzled_tensor_maps():
    """A [M, K] with 64-element (128-byte) rows: SWIZZLE_128B; the seed's 32-element rows: SWIZZLE_64B."""
    big = lower(gemm_ir(1024, 2048, 512, **BIG), target("sm_90a")).script()
    # dims innermost first, byte strides, box (inner first), element strides
    assert "T.tensormap_encode_tiled(A_tensormap, A.data, 512, 1024, 1024, 64, 128, 1, 1" in big
    assert "T.tensormap_encode_tiled(B_tensormap, B.data, 2048, 512, 4096, 64, 64, 1, 1" in big
    assert big.count("swizzle=3") == 2
    seed = lower(seed_tma(), target("sm_90a")).script()
    assert "A.data, 1024, 1024, 2048, 32, 128, 1, 1" in seed and "swizzle=2" in seed


@pytest.mark.parametrize("compiler", ["nvcc", "nvrtc"])
@pytest.mark.parametrize("cfg", [{"tma": 1}, BIG, dict(BIG, trans_B=True), dict(BIG, num_stages=4)],
                         ids=["seed", "big", "big_trans_B", "big_s4"])
def test_tma_kernels_build_without_spills(cfg, compiler):
    """Both compilers (NVRTC has no <cuda.h>: the backend supplies the CUtensorMap type)."""
    from tile_nb.backend.cuda_compile import available_compiler
    from tile_nb.runtime import compile as rt_compile

    if available_compiler(compiler) != compiler:
        pytest.skip(f"{compiler} is not installed here")
    cfg = dict(cfg)
    func = gemm_ir(1000, 1032, 1000, **cfg) if not cfg.pop("tma", 0) else seed_tma(1000, 1032, 1000)
    kernel = rt_compile(func, "sm_90a", options={"compiler": compiler, "cache": False})
    res = kernel.resources
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
    # 65536 registers / (threads + the producer warp), rounded down to ptxas's granularity of 8
    threads = BIG["threads"] + 32 if cfg else 128 + 32
    assert res.registers <= min(255, 65536 // threads // 8 * 8)
    assert "cp.async.bulk.tensor" in kernel.ptx


@pytest.mark.parametrize(
    "func,why",
    [
        (lambda: gemm_ir(512, 512, 999, **BIG), "A's rows are not a multiple of 16 bytes"),
        (lambda: gemm_ir(512, 1030, 512, **BIG), "B's rows are not a multiple of 16 bytes"),
        (lambda: gemm_ir(512, 512, 512, num_stages=1, **BIG), "num_stages < 2"),
        (lambda: gemm_ir(512, 512, 512, **BIG).with_attr("tile_nb.tma", 0), "TMA turned off"),
        (lambda: gemm_ir(512, 512, 512, trans_A=True, **BIG).with_attr("tile_nb.wgmma_transpose_a", 0),
         "no wgmma T.gemm"),
        (
            lambda: gemm_ir(512, 512, 512, **dict(BIG, block_M=256, threads=512)),
            "the register fragments alone take 128",
        ),
        # ptxas cannot build a 128-register wgmma accumulator under 416 threads' cap of 128 registers (C7602)
        (
            lambda: gemm_ir(512, 512, 512, **dict(BIG, block_M=192, threads=384)),
            "the largest accumulator 128",
        ),
    ],
)
def test_ineligible_kernels_keep_cp_async_and_say_why(func, why):
    note = pipeline_note(func())
    assert note.startswith("cp.async (") and why in note, note


def test_a_transposed_a_loads_by_tma_one_box_per_panel(tmp_path):
    """A stored [K, M] (transpose_A) runs on wgmma by default (wgmma_transpose_a), so its GEMM takes the TMA
    pipeline: A's [block_K, block_M] tile is two 64-column panels, a TMA box each, as a [K, N] B's."""
    func = gemm_ir(512, 512, 512, trans_A=True, **dict(BIG, block_M=128))
    _, p = lower_with_plan(func, target("sm_90a"))
    assert p.uses_wgmma and p.tma is not None, pipeline_note(func)
    a_tile = next(t for b, t in p.shared.items() if b.name == "A_shared")
    assert a_tile.panel and tuple(a_tile.shape) == (64, 128)
    assert sorted(len(c.boxes) for c in p.tma.copies) == [2, 4]  # A: 128 columns, B: 256 columns
    src = cuda_source(func, "sm_90a")
    assert "_ta1_tb" in src and "mma.sync" not in src
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


@pytest.mark.parametrize(
    "func,why",
    [
        (lambda: gemm_ir(512, 512, 512, clear_accum=True, **BIG), "clear_accum=True"),
        (
            lambda: seed_gemm.specialize(M=512, N=512, K=512, out_dtype=T.float16, block_K=64).with_attr(
                "tile_nb.tma", 1
            ),
            "float16 accumulators are rounded",
        ),
    ],
)
def test_kernels_that_read_the_accumulator_each_k_tile_release_their_own_stage(func, why):
    """No wgmma group may stay in flight when the accumulator is cleared or rounded every k-tile: TMA still
    feeds the loop, and each iteration waits for its MMAs and releases its own stage."""
    note = pipeline_note(func())
    assert note.startswith("TMA + mbarriers") and "before its stage is released" in note and why in note, note


def test_register_only_statements_in_the_loop_keep_tma(tmp_path):
    """fp8 with precise accumulation: the loop adds each k-tile's sum into a float32 fragment (T.Parallel on
    registers only) after its T.gemm."""
    from kernels.seed import gemm_fp8

    func = gemm_fp8.specialize(M=1024, N=1024, K=1024, precise_accum=True, block_N=128)
    p = plan(func)
    assert p.pipeline_kind is PipelineKind.TMA and not p.tma.in_flight
    assert "the loop reads the accumulator" in p.tma.waits
    report = ptxas_report(cuda_source(func, "sm_90a"), "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


def test_sm80_has_no_tma():
    sm80 = plan(gemm_ir(1024, 1024, 1024), "sm_80")
    assert sm80.pipeline_kind is PipelineKind.CP_ASYNC and sm80.refusal("tma").code == "tma.no_wgmma"
    src = cuda_source(gemm_ir(1024, 1024, 1024), "sm_80")
    assert "CUtensorMap" not in src and "__launch_bounds__(128)" in src


def test_env_switch_is_part_of_the_compile_cache_key(monkeypatch):
    from tile_nb.runtime import compile as rt_compile

    func = gemm_ir(256, 256, 256, **BIG)
    tma = rt_compile(func, "sm_90a", options={"cache": False})
    monkeypatch.setenv("TILE_NB_TMA", "0")
    plain = rt_compile(func, "sm_90a", options={"cache": False})
    assert tma.key != plain.key
    assert "cp.async.bulk.tensor" in tma.cuda_source and "cp.async.bulk.tensor" not in plain.cuda_source


def test_the_jit_builds_again_when_a_switch_changes(monkeypatch):
    """`kernel.compile` in one process, before and after TILE_NB_TMA=0: two
    kernels, not the first one twice."""
    from kernels.seed import gemm_variant

    shapes = dict(M=256, N=256, K=256, target="sm_90a", **BIG)
    tma = gemm_variant.compile(**shapes)
    monkeypatch.setenv("TILE_NB_TMA", "0")
    plain = gemm_variant.compile(**shapes)
    assert tma.plan["pipeline_kind"] == "tma" and plain.plan["pipeline_kind"] == "cp.async"
    assert [r["code"] for r in plain.plan["refusals"]][:1] == ["tma.off"], plain.pipeline


def test_epilogue_barriers_leave_the_producer_warp_out(tmp_path):
    """C staged through shared memory needs a barrier between the two copies; with a producer warp that
    barrier is `bar.sync 1, 256` over the consumers (a __syncthreads would wait for the producer forever)."""
    from kernels.seed import gemm_smem_epilogue

    func = gemm_smem_epilogue.specialize(M=1000, N=1032, K=1000)
    assert plan(func).pipeline_kind is PipelineKind.TMA
    src = cuda_source(func, "sm_90a")
    after_loop = src[src.rindex("tnb_wgmma_wait0_r128(("):]  # the drain after the consumer loop
    assert "bar.sync 1, 256;" in src and "tnb_bar_sync_1_256();" in after_loop
    assert "tnb_cta_sync();" not in after_loop
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert "0 bytes spill stores" in report


def flash_ir(D=128, block_N=128, groups=2, **cfg):
    """The reference FlashAttention with `groups` consumer warpgroups of 64 Q rows each (FlashAttention-3's
    shapes: 2 x 64 rows at head dim 128, 3 x 64 at 64)."""
    from kernels.reference import flash_attention

    return flash_attention.specialize(B=1, H=2, S=1000, D=D, block_M=64 * groups, block_N=block_N,
                                      threads=128 * groups, **cfg)


@pytest.mark.parametrize(
    "D,block_N,causal,groups", [(64, 128, False, 2), (128, 128, False, 2), (128, 64, True, 2)]
)
def test_flash_attention_gets_the_tma_pipeline(D, block_N, causal, groups, tmp_path):
    """Two T.gemm in the loop (Q K^T, P V) with the softmax between them on registers: K and V arrive by TMA
    in one stage; each iteration waits for its MMAs and releases the stage once P V is done."""
    func = (
        flash_ir(D, block_N, groups, causal=causal)
        .with_attr("tile_nb.wgmma_pingpong", 1)
        .with_attr("tile_nb.tma", 1)
    )
    # (without it, two CTAs of head dim 64 per SM drop the warp)
    func = func.with_attr("tile_nb.producer_warp", 1)
    p = plan(func)
    assert p.pipeline_kind is PipelineKind.TMA and not p.tma.in_flight
    assert "2 T.gemm in the loop" in p.tma.waits
    src = cuda_source(func, "sm_90a")
    assert f"__launch_bounds__({128 * groups + 32})" in src
    signature = src[src.index('extern "C" __global__'):].split(";", 1)[0]
    assert re.findall(r"const __grid_constant__ CUtensorMap (\w+)", signature) == [
        "K_tensormap",
        "V_tensormap",
    ]
    loop = src[src.index("for (int k = 0;"):]
    loop = loop[:loop.index("tnb_mbarrier_arrive(")]
    # no CTA barrier and no cp.async in the consumers' loop; both T.gemm wait for their own group
    assert "tnb_cta_sync" not in loop and "cp.async.cg" not in loop and "tnb_wgmma_wait1" not in loop
    # K and V arrive on barriers of their own (block_N x D fp16 each): Q K^T waits for K only, P V for V
    assert "each T.gemm waits only for the tiles it reads" in p.pipeline_note and len(p.tma.arrivals) == 2
    expects = re.findall(
        r"tnb_mbarrier_arrive_expect_tx\(\(&\(\(\(uint64_t\*\)smem_pool_ptr\)\[.*?\]\)\), (\d+)\);", src
    )
    assert expects == [str(block_N * D * 2)] * 2, expects
    waits = [m.start() for m in re.finditer(r"tnb_mbarrier_wait\(", loop)]
    gemms = [m.start() for m in re.finditer(r"tnb_wgmma_(?:rs_)?m64n\d+k16", loop)]
    assert len(waits) == 2 and waits[0] < gemms[0] < waits[1] < gemms[-1]
    # ping-pong: each warpgroup waits for its turn before issuing a T.gemm and hands the turn on after it
    assert p.tma.pingpong == groups
    assert loop.count("tnb_bar_sync_256(((warp_tx >> 7) + 2));") == 2
    assert (
        len(re.findall(r"tnb_bar_arrive_256\(\(\(\(\(\(\(int\)threadIdx.x\) >> 7\) \+ 1\) [%&] ", loop)) == 2
    )
    # (three warpgroups: 192x64 at head dim 128, tested on the GPU)
    first_turn = src[:src.index("for (int k = 0;")]
    assert f"if ((((int)threadIdx.x) >> 7) == {groups - 1}) {{\n" in first_turn
    assert "tnb_bar_arrive_256(2);" in first_turn
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


def test_flash_attention_with_probabilities_in_shared_memory_keeps_cp_async():
    """With wgmma's register form turned off, P goes through shared memory between the two T.gemm: the stage
    release would not order that write, so the loop keeps cp.async and says why."""
    note = pipeline_note(flash_ir().with_attr("tile_nb.wgmma_register_a", 0))
    assert note.startswith("cp.async (") and "uses shared memory" in note, note


def test_pingpong_is_opt_in_and_for_loops_with_several_gemms():
    """Off by default (measured slower); when asked for, only loops with several T.gemm take turns (a GEMM
    loop has nothing to put under the other's MMAs)."""
    assert plan(gemm_ir(1024, 1024, 1024, **BIG).with_attr("tile_nb.wgmma_pingpong", 1)).tma.pingpong == 0
    off = plan(flash_ir())
    assert off.pipeline_kind is PipelineKind.TMA and off.tma.pingpong == 0


@pytest.mark.parametrize("D,block_N,producer", [(64, 128, "no producer warp"), (128, 64, "no producer warp"),
                                                (128, 128, "producer warpgroup")])
def test_flash_attention_drops_the_producer_warp_where_two_ctas_share_an_sm(D, block_N, producer):
    """80-96 KiB of tiles and 256 threads: two CTAs per SM, which a producer warp's registers would
    not allow, so the first consumer thread issues the TMA loads (with a producer warp, cp.async:
    measured faster than TMA at one CTA per SM); 160 KiB (head dim 128, 128x128 tiles) leaves one CTA
    either way: a producer warpgroup."""
    p = plan(flash_ir(D, block_N))
    assert p.pipeline_kind is PipelineKind.TMA and producer in p.pipeline_note, p.pipeline_note
    assert p.tma.producer_warp == (producer == "producer warpgroup")
    assert p.ctas_per_sm == (1 if p.tma.producer_warp else 2)
    warp = plan(flash_ir(D, block_N).with_attr("tile_nb.producer_warp", 1))
    if D == 128 and block_N == 128:
        assert warp.pipeline_kind is PipelineKind.TMA
    else:  # cp.async at two CTAs per SM, a typed refusal
        assert warp.tma is None and warp.refusal("tma").code == TWO_CTAS_PER_SM and warp.ctas_per_sm == 2


@pytest.mark.parametrize("heavy_first", [0, 1])
def test_two_ctas_per_sm_are_in_the_launch_bounds(heavy_first, tmp_path):
    """Where the plan counts on two CTAs per SM, ptxas is told (`__launch_bounds__(256, 2)`): each thread
    keeps to 128 registers. Without it the causal kernel launched heaviest first got 163, one CTA per SM."""
    func = flash_ir(64, 128, causal=True).with_attr("tile_nb.heavy_first", heavy_first)
    src = cuda_source(func, "sm_90a")
    assert 'extern "C" __global__ void __launch_bounds__(256, 2) flash_attention_kernel(' in src
    report = ptxas_report(src, "sm_90a", tmp_path)
    used = [int(n) for n in re.findall(r"Used (\d+) registers", report)]
    assert used and max(used) <= 128, report
    assert "__launch_bounds__(384)" in cuda_source(flash_ir(128, 128), "sm_90a")  # one CTA: no second number


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_tma_without_a_producer_warp_keeps_two_ctas_per_sm(causal, tmp_path):
    """`tile_nb.producer_warp` = 0 at head dim 64 (80 KiB of tiles, 256 threads): TMA loads without
    the warp that would cost the second CTA; the first consumer thread issues k-tile k + 1 at the top
    of iteration k (the loop waits for its MMAs, so k - 1's stage is free by then), in the 128
    registers of two CTAs per SM."""
    func = flash_ir(64, 128, causal=causal).with_attr("tile_nb.producer_warp", 0)
    note = pipeline_note(func)
    assert note.startswith("TMA + mbarriers, loads issued by the first consumer thread"), note
    assert "no softmax/MMA overlap (no producer warpgroup" in note, note
    src = cuda_source(func, "sm_90a")
    assert 'extern "C" __global__ void __launch_bounds__(256, 2) flash_attention_kernel(' in src
    loop = src[src.index("for (int k = 0;"):]
    issue = loop.index("(((int)threadIdx.x) == 0) && (k < ")
    assert issue < loop.index("tnb_tma_load_4d(") < loop.index("tnb_wgmma_commit()")
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert max(int(n) for n in re.findall(r"Used (\d+) registers", report)) <= 128, report
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


def test_one_warpgroup_flash_attention_keeps_cp_async():
    """One consumer warpgroup and two T.gemm: cp.async, with the reason, where two CTAs fit (head dim 64) and
    where they do not (head dim 256, never measured or tested with TMA on a GPU)."""
    from kernels.reference import flash_attention

    for D, why in ((64, "two CTAs fit an SM"), (256, "one consumer warpgroup and several T.gemm")):
        func = flash_attention.specialize(B=1, H=2, S=1000, D=D, block_M=64, block_N=64, threads=128)
        note = pipeline_note(func)
        assert note.startswith("cp.async (") and why in note, note


# ---- softmax/MMA overlap inside a warpgroup (tma.py: Overlap) ----------------------------------------------

def test_flash_attention_overlaps_softmax_with_the_previous_p_v(tmp_path):
    """Head dim 128, 128x128 tiles, two consumer warpgroups: iteration k issues Q K_k^T, then P_{k-1}
    V_{k-1}, runs the softmax of block k while P V runs, waits for it, then rescales acc and writes P_k;
    iteration 0 is peeled and the last P V follows the loop. A producer warpgroup hands its registers to
    the consumers (setmaxnreg), and ptxas builds it without spills, with the early statements'
    exponentials between the two waits."""
    func = flash_ir(128, 128)
    note = pipeline_note(func)
    assert "softmax/MMA overlap" in note and "setmaxnreg 24 / 240" in note, note
    src = cuda_source(func, "sm_90a")
    assert "__launch_bounds__(384)" in src  # 2 consumer warpgroups + a producer warpgroup
    assert (
        src.count("setmaxnreg.dec.sync.aligned.u32 24;") == 1
        and src.count("setmaxnreg.inc.sync.aligned.u32 240;") == 1
    )
    loop = src[src.index("for (int k = 0; k < "):]
    loop = loop[:loop.index("\n    }\n")]  # the loop body (iterations 1 .. n-1)
    order = [loop.index(s) for s in (
        "tnb_mbarrier_wait(",                      # K_k landed
        "tnb_wgmma_m64n128k16_f16_f16_tb0(",        # Q K_k^T issued
        "tnb_wgmma_rs_m64n128k16_f16_tb1(",         # P_{k-1} V_{k-1} issued
        "tnb_wgmma_wait1_r64((&(scores_ptr[0])));",  # Q K_k^T done
        "exp2f(",                                   # the softmax of block k
        "tnb_wgmma_wait0_r64((&(acc_ptr[0])));",     # P V done
        "tnb_fence_operand_r32((&(probs_ptr[0])));")]  # P's registers are free only now
    assert order == sorted(order), order
    assert "acc_ptr[0] = (acc_ptr[0] * rescale_ptr[0]);" in loop[order[-1]:]
    before = src[:src.index("for (int k = 0; k < ")]
    assert (
        "tnb_wgmma_wait0_r64((&(scores_ptr[0])));" in before
        and "tnb_wgmma_rs_" not in before[before.index("tnb_setmaxnreg_inc_240();") :]
    )  # the peeled iteration 0 has no P V before it
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


@pytest.mark.parametrize("causal", [False, True])
def test_three_warpgroups_at_head_dim_64_get_the_overlap_by_a_producer_warpgroup(causal, tmp_path):
    """FlashAttention-3's head-dim-64 configuration, 192x128 tiles over three consumer warpgroups: a
    producer warp would leave each thread 128 registers for about 138 of fragments, so the plan takes a
    producer warpgroup that gives its registers away (setmaxnreg 24 / 160) and ptxas builds the
    overlapped loop without spills."""
    func = flash_ir(64, 128, 3, causal=causal)
    p = plan(func)
    assert p.pipeline_kind is PipelineKind.TMA and p.tma.overlap is not None and p.tma.registers == (24, 160)
    src = cuda_source(func, "sm_90a")
    assert "__launch_bounds__(512)" in src
    report = ptxas_report(src, "sm_90a", tmp_path)
    assert sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)) == 0, report


def test_three_warpgroups_keep_cp_async_where_the_overlap_would_not_fit():
    """Head dim 128 with 192x128 tiles counts about 170 registers of fragments: more than the 160 a producer
    warpgroup leaves three consumer warpgroups, and more than a producer warp's 128."""
    p = plan(flash_ir(128, 128, 3))
    assert p.pipeline_kind is PipelineKind.CP_ASYNC and p.refusal("tma").code == "tma.registers"


@tile_nb.jit
def rescale_first(Q, K, V, O, block_M: int = 128, block_N: int = 128):
    """FlashAttention's loop with `acc *= rescale` moved up front (the previous block's factors): a statement
    before Q K^T that touches P V's accumulator. Lowered here, never run."""
    B, H, S, D = T.const('B, H, S, D')
    Q: T.Tensor[[B, H, S, D], T.float16]
    K: T.Tensor[[B, H, S, D], T.float16]
    V: T.Tensor[[B, H, S, D], T.float16]
    O: T.Tensor[[B, H, S, D], T.float16]
    with T.Kernel(T.ceildiv(S, block_M), H, B, threads=256) as (bx, by, bz):
        Q_s = T.alloc_shared((block_M, D), T.float16)
        K_s = T.alloc_shared((block_N, D), T.float16)
        V_s = T.alloc_shared((block_N, D), T.float16)
        scores = T.alloc_fragment((block_M, block_N), T.float32)
        probs = T.alloc_fragment((block_M, block_N), T.float16)
        acc = T.alloc_fragment((block_M, D), T.float32)
        m = T.alloc_fragment((block_M,), T.float32)
        m_prev = T.alloc_fragment((block_M,), T.float32)
        rescale = T.alloc_fragment((block_M,), T.float32)
        T.copy(Q[bz, by, bx * block_M, 0], Q_s)
        T.clear(acc)
        T.fill(m, -T.infinity(T.float32))
        T.fill(rescale, 1.0)
        for k in T.Pipelined(T.ceildiv(S, block_N), num_stages=2):
            for i, j in T.Parallel(block_M, D):
                acc[i, j] *= rescale[i]
            T.copy(K[bz, by, k * block_N, 0], K_s)
            T.clear(scores)
            T.gemm(Q_s, K_s, scores, transpose_B=True)
            T.copy(m, m_prev)
            T.reduce_max(scores, m, dim=1, clear=False)
            for i in T.Parallel(block_M):
                rescale[i] = T.exp2(m_prev[i] - m[i])
            for i, j in T.Parallel(block_M, block_N):
                scores[i, j] = T.exp2(scores[i, j] - m[i])
            T.copy(scores, probs)
            T.copy(V[bz, by, k * block_N, 0], V_s)
            T.gemm(probs, V_s, acc)
        T.copy(acc, O[bz, by, bx * block_M, 0])


def test_overlap_is_refused_where_it_would_reorder_reads_and_writes():
    """Moving P V of iteration k-1 after the next Q K^T is legal only when nothing up to that T.gemm touches P
    V's operands: here acc is rescaled before Q K^T, so the loop keeps its order and the plan says why."""
    p = plan(rescale_first.specialize(B=1, H=2, S=1000, D=128))
    assert p.pipeline_kind is PipelineKind.TMA and p.tma.overlap is None
    assert (
        "no softmax/MMA overlap (a statement up to the first T.gemm touches the second T.gemm's operands)"
        in p.pipeline_note
    )


def test_overlap_switch_and_ping_pong_keep_the_in_order_loop():
    off = pipeline_note(flash_ir(128, 128).with_attr("tile_nb.softmax_overlap", 0))
    assert "no softmax/MMA overlap (tile_nb.softmax_overlap = 0)" in off, off
    pingpong = pipeline_note(flash_ir(128, 128).with_attr("tile_nb.wgmma_pingpong", 1))
    assert "take turns" in pingpong and "no softmax/MMA overlap (ping-pong" in pingpong, pingpong


# ---- launch order (plan.py: _heavy_first) ------------------------------------------------------------------

@pytest.mark.parametrize("B,H", [(4, 32), (1, 3), (2, 6)])
def test_heavy_first_walks_every_cta_once_heaviest_first_in_groups_of_heads(B, H):
    """Evaluate the lowered remap for every CTA of a causal grid (8 Q blocks x H heads x B batches), taking
    CTAs in the hardware's launch order (x fastest): every (bx, by, bz) exactly once, and within each group of
    G heads the Q blocks from the last to the first, all G heads at each."""
    from kernels.reference import flash_attention

    func = flash_attention.specialize(
        B=B, H=H, S=1000, D=64, causal=True, block_M=128, block_N=128, threads=256
    )
    ir = lower(func.with_attr("tile_nb.heavy_first", 1), target("sm_90a")).script()
    exprs = {}
    for name in ("bx", "by", "bz"):
        m = re.search(
            rf"{name}_heavy_first: T.let\[T.int32\] = T.cuda.func_call\(\"tnb_warp_uniform\", (.*?), "
            r"source_code=",
            ir,
        )
        exprs[name] = m.group(1)
    group = next(g for g in (8, 4, 2, 1) if (B * H) % g == 0)
    order = []
    for bz in range(B):
        for by in range(H):
            for bx in range(8):
                env = dict(bx=bx, by=by, bz=bz)
                order.append(tuple(eval(exprs[n], {}, env) for n in ("bx", "by", "bz")))
    assert sorted(order) == [(x, y, z) for x in range(8) for y in range(H) for z in range(B)]
    for g in range(B * H // group):
        chunk = order[g * 8 * group:(g + 1) * 8 * group]
        assert [x for x, _, _ in chunk] == [x for x in reversed(range(8)) for _ in range(group)]
        assert len({(y, z) for _, y, z in chunk}) == group



def test_causal_attention_can_launch_its_heaviest_ctas_first():
    """On by default: causal Q block bx reads bx + 1 KV blocks, so the grid runs in groups of heads, each from
    its largest bx down. Constant trip counts (non-causal, GEMM) or a trip count that is not a known constant
    (a T.dynamic sequence length) keep the launch order, and so does tile_nb.heavy_first = 0."""
    from kernels.reference import flash_attention_gqa

    def plan(func, on=True):
        return lower_with_plan(func if on else func.with_attr("tile_nb.heavy_first", 0), target("sm_90a"))[1]

    causal = plan(flash_ir(128, 128, causal=True))
    assert causal.heavy_first and any("heaviest first" in n for n in causal.notes), causal.notes
    assert causal.heavy_first == 2  # flash_ir: H = 2, B = 1 (groups of up to 8 rows that divide them)
    assert not plan(flash_ir(128, 128, causal=True), on=False).heavy_first
    assert not plan(flash_ir(128, 128)).heavy_first
    assert not plan(gemm_ir(1024, 1024, 1024, **BIG)).heavy_first
    dynamic = flash_attention_gqa.specialize(
        B=1, H=4, HK=2, D=128, causal=True, block_M=128, block_N=128, threads=256
    )
    assert not plan(dynamic).heavy_first

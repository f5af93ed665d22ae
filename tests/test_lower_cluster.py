"""Clusters of two CTAs with TMA multicast (tile_nb/lower/cluster.py): when they are built, the tiles each CTA
walks, what the pipeline emits, and that the kernels build without spills. CPU only; the GPU runs are in
tests/test_gpu_gemm.py (`test_cluster_*`)."""
import re

import pytest
from kernels.cuda import lowered, target
from kernels.cuda import pipeline_note as note
from kernels.seed import gemm_fp8, gemm_ir

from tile_nb.lower import lower_with_plan
from tile_nb.runtime import compile as rt_compile

BIG = dict(block_N=256, block_K=64, threads=256, num_stages=4)


def clustered(func):
    return func.with_attr("tile_nb.cluster", 2)


def test_off_unless_asked_for():
    plain = gemm_ir(4096, 4096, 1024, **BIG)
    for func in (plain, plain.with_attr("tile_nb.cluster", 0)):
        p = lower_with_plan(func, target("sm_90a"))[1]
        assert p.persistent.multicast is None and p.refusal("cluster") is None and p.summary()["cluster"] == 0


def test_pairs_tiles_along_m_and_multicasts_b():
    """The GEMM's grid is (M tiles, N tiles): B's copy is the same for tiles that differ in bx, and it is the
    larger operand (64 x 256 against A's 128 x 64)."""
    assert (
        "clusters of 2 CTAs on tiles that differ in bx: each loads half of B_shared and multicasts it to both"
        in note(clustered(gemm_ir(4096, 4096, 1024, **BIG)))
    )


@pytest.mark.parametrize(
    "func,why",
    [
        # 31 x 15 tiles: no axis to pair along
        (lambda: clustered(gemm_ir(3904, 3840, 1024, **BIG)), "a grid axis of even extent"),
        (
            lambda: clustered(gemm_ir(4096, 4096, 1024, **BIG)).with_attr("tile_nb.sm_count", 131),
            "an even number of CTAs",
        ),
        (
            lambda: gemm_ir(4096, 4096, 1024, **BIG).with_attr("tile_nb.cluster", 4),
            "clusters of 2 CTAs are supported",
        ),
    ],
)
def test_refusals_say_why(func, why):
    n = note(func())
    assert "no cluster (" in n and why in n, n


@pytest.mark.parametrize("M,trans_B,operand", [
    (4096, True, "B_shared"),  # B stored [N, K]: one 256-row box, cut in two 128-row halves
    (3904, False, "A_shared"),  # 31 M tiles, 16 N tiles: pairs along N share A (one 128-row box, cut in two)
])
def test_a_single_box_is_cut_in_two(M, trans_B, operand):
    p = lower_with_plan(clustered(gemm_ir(M, 4096, 1024, trans_B=trans_B, **BIG)), target("sm_90a"))[1]
    mc = p.persistent.multicast
    assert mc.axis == ("blockIdx.y" if operand == "A_shared" else "blockIdx.x") and mc.size == 2
    assert p.tma.copies[mc.copy].tile_buffer.name == operand
    assert [len(half) for half in mc.halves] == [1, 1]  # one box, cut in two


@pytest.mark.parametrize("M,N,step", [(4000, 3000, (1, 0)), (3904, 4000, (0, 1))])
def test_the_two_ctas_of_a_cluster_walk_every_tile_once_in_pairs(M, N, step):
    """Evaluate the lowered tile walk for every CTA (rank = blockIdx.x % 2, as
    clusters of (2, 1, 1) are formed):
    every (bx, by) tile exactly once, and at each step the two CTAs of a cluster on neighbouring tiles along
    the pair axis: M (32 x 12 tiles, B shared) or N (31 x 16 tiles, A shared); ragged at every edge."""
    ir = lowered(clustered(gemm_ir(M, N, 1000, **BIG)))
    tiles_m, tiles_n = -(-M // 128), -(-N // 256)
    assert 'T.launch_thread("blockIdx.x", 132)' in ir and 'T.launch_thread("clusterCtaIdx.x", 2)' in ir
    count = re.search(r"for tile in range\((.*)\):", ir).group(1)
    bx_tile = re.search(r"    bx_tile: T.let\[T.int32\] = (.*)", ir[ir.index("for tile in"):]).group(1)
    by_tile = re.search(r"    by_tile: T.let\[T.int32\] = (.*)", ir[ir.index("for tile in"):]).group(1)
    seen = []
    for bx in range(132):
        env = dict(bx=bx, clusterCtaIdx_x=bx % 2)
        for tile in range(eval(count, {}, env)):
            env["tile"] = tile
            seen.append((bx, tile, eval(bx_tile, {}, env), eval(by_tile, {}, env)))
    assert sorted((m, n) for _, _, m, n in seen) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    where = {(bx, tile): (m, n) for bx, tile, m, n in seen}
    for (bx, tile), (m, n) in where.items():
        if bx % 2 == 0:
            assert where[(bx + 1, tile)] == (m + step[0], n + step[1])


def test_the_pipeline_multicasts_half_of_b_and_releases_stages_in_both_ctas(tmp_path):
    func = clustered(gemm_ir(4096, 4096, 1024, **BIG))
    kernel = rt_compile(func, "sm_90a", options={"cache": False})
    src = kernel.cuda_source
    # the empty barriers count the consumer warps of both CTAs (2 x 8); the full ones the local producer
    inits = re.findall(r"tnb_mbarrier_init\(.*?, (\d+)\);", src)
    assert inits == ["1", "16"] * 4, inits
    assert src.count("tnb_cluster_sync();") == 1 and "tnb_cta_sync();" not in src[:src.index("warp_tx) {")]
    # rank 0 loads B's panels 0 and 1, rank 1 panels 2 and 3, each into both CTAs; A stays a plain load
    loads = src[src.index("for (int k_load"):]
    rank0, rank1 = loads.split("} else {", 1)
    assert rank0.count("tnb_tma_load_multicast_2d(") == 2 and rank1.count("tnb_tma_load_multicast_2d(") == 2
    assert "(ushort)3" in rank0 and "tnb_tma_load_2d(" in rank0 and "A_tensormap" in rank0
    # every release reaches both CTAs: lanes 0 and 1 of each consumer warp
    # arrive on CTA 0's and CTA 1's barrier
    body = src[src.index("__global__"):]
    arrives = re.findall(
        r"if \((.*)\) \{\n\s*tnb_mbarrier_arrive_cluster\(.*?, \(\(\(int\)threadIdx.x\) & 31\)\);", body
    )
    assert len(arrives) == 2 and all("(((int)threadIdx.x) & 31) < 2" in a for a in arrives), arrives
    assert "tnb_mbarrier_arrive(" not in body
    # the producer's tail: one wait per stage after its last tile
    tail = loads[loads.index("} else {"):]
    tail = tail[tail.index("\n      }\n"):tail.index("  } else {")]
    assert tail.count("tnb_mbarrier_wait(") == 4, tail
    res = kernel.resources
    assert res.spill_stores == 0 and res.spill_loads == 0
    sass_or_ptx = kernel.ptx or ""
    assert "multicast::cluster" in sass_or_ptx and "mapa.shared::cluster" in sass_or_ptx


def test_fp8_clusters_build_without_spills():
    func = gemm_fp8.specialize(M=4096, N=4096, K=4096, block_N=256, block_K=128, threads=256, num_stages=4)
    kernel = rt_compile(clustered(func), "sm_90a", options={"cache": False})
    assert kernel.plan["cluster"] == 2
    assert kernel.resources.spill_stores == 0 and kernel.resources.spill_loads == 0


def test_the_cluster_is_part_of_the_plan_only_with_persistence():
    """A grid that fits on the GPU at once is not persistent: no cluster, and nothing said unless asked."""
    plan = lower_with_plan(clustered(gemm_ir(2048, 2048, 1024, **BIG)), target("sm_90a"))[1]
    assert plan.persistent is None and plan.refusal("cluster") is None


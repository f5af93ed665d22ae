"""Stream-K for the last wave of a persistent GEMM (lower/analysis/stream_k.py): when it is planned, that the
k-tile ranges it emits cover the tail exactly once with the contributors each finisher waits for, the
code's order, and that the kernels build without spills. CPU only; the GPU runs are in
tests/test_gpu_gemm.py (`test_stream_k_*`)."""

import pytest
import tvm
import tvm.sym
from kernels.cuda import lowered, plan
from kernels.cuda import pipeline_note as note
from kernels.seed import gemm_ir
from tvm import tirx

import tile_nb
import tile_nb.language as T
from tile_nb.lower.analysis.stream_k import StreamK
from tile_nb.lower.emit.stream_k import contributors, tail_range

BIG = dict(block_N=256, block_K=64, threads=256)





def forced(func):
    return func.with_attr("tile_nb.stream_k", 1)


def test_the_last_wave_is_shared_by_k_tiles():
    # 512 tiles on 132 SMs: 3 whole tiles each, then 116 tiles' 7424 k-tiles over 132 CTAs
    assert (
        "stream-K: the last 116 tiles (7424 k-tiles) shared by 132 CTAs (56.2 k-tiles each) after 3 "
        "whole tiles "
        "each; partial sums through a 16.5 MiB workspace"
    ) in note(forced(gemm_ir(4096, 4096, 4096, **BIG)))
    # 1376 tiles: a tail of 56 goes to 112 CTAs (at most two contributors per tile)
    sk = plan(gemm_ir(4096, 11008, 4096, **BIG)).stream_k
    assert (sk.tail, sk.iters, sk.ctas, sk.waves) == (56, 3584, 112, 10)
    off = plan(gemm_ir(4096, 11008, 4096, **BIG).with_attr("tile_nb.stream_k", 0))
    assert off.stream_k is None and off.refusal("stream_k") is None


def test_the_plan_says_stream_k_as_a_field():
    """runtime.kernel finds stream-K kernels (to launch them one stream at a time) by the summary's field."""
    on, off = (plan(f) for f in (forced(gemm_ir(4096, 4096, 4096, **BIG)),
                                 gemm_ir(4096, 4096, 4096, **BIG).with_attr("tile_nb.stream_k", 0)))
    assert on.stream_k is not None and on.summary()["stream_k"] is True
    assert off.stream_k is None and off.summary()["stream_k"] is False


@pytest.mark.parametrize("shape,built", [
    ((4096, 4096, 4096), False),  # the last wave is 88% full: 7.8 k-tiles per SM freed, fewer than it costs
    ((8192, 8192, 8192), True),  # 2048 tiles: 64 of 132 SMs idle for 128 k-tiles: 62 freed
    ((4096, 11008, 4096), True),  # 36.8 freed
    ((16384, 4096, 4096), False),  # 31.0 freed
    ((16384, 14336, 4096), False),  # 44.6 freed, but 1.3% of a CTA's 3475 k-tiles (lost 1-4% on the H200)
])
def test_by_default_where_it_frees_more_time_than_it_costs(shape, built):
    assert (plan(gemm_ir(*shape, **BIG)).stream_k is not None) == built
    assert plan(forced(gemm_ir(*shape, **BIG))).stream_k is not None  # = 1: wherever legal


@tile_nb.jit
def gemm_from_ones(A, B, C):
    """Accumulates onto ones: a partial sum per CTA would count them more than once."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, 128), T.ceildiv(N, 256), threads=256) as (bx, by):
        A_shared = T.alloc_shared((128, 64), T.float16)
        B_shared = T.alloc_shared((64, 256), T.float16)
        C_local = T.alloc_fragment((128, 256), T.float32)
        T.fill(C_local, 1.0)
        for k in T.Pipelined(T.ceildiv(K, 64), num_stages=3):
            T.copy(A[bx * 128, k * 64], A_shared)
            T.copy(B[k * 64, by * 256], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[bx * 128, by * 256])


@pytest.mark.parametrize(
    "func,why",
    [
        (
            lambda: gemm_ir(4096, 4096, 4096, **BIG).with_attr("tile_nb.sm_count", 128),
            "512 tiles fill 4 waves of 128 CTAs",
        ),
        (lambda: gemm_ir(4096, 4096, 256, **BIG), "464 k-tiles over 132 CTAs: fewer than the 3 stages each"),
        (lambda: gemm_ir(4096, 4096, 4096, **BIG).with_attr("tile_nb.cluster", 2), "not with clusters"),
        (
            lambda: gemm_from_ones.specialize(M=4096, N=4096, K=1024),
            "the body is not: clear one float32 wgmma accumulator",
        ),
    ],
    ids=["full-waves", "short-k", "clusters", "not-cleared"],
)
def test_refusals_say_why(func, why):
    unasked = plan(func())
    assert unasked.stream_k is None and unasked.refusal("stream_k") is None  # not asked for: nothing said
    text = note(func().with_attr("tile_nb.stream_k", 1))
    assert f"no stream-K ({why}" in text, text


def _ranges(tiles: int, ctas: int, n: int):
    """Evaluate the emitted range arithmetic for every CTA (constant CTA index: TVM folds it)."""
    waves, tail = divmod(tiles, ctas)
    sk = StreamK(waves, tail, min(ctas, 2 * tail), n, None, 128, 256)
    analyzer = tvm.sym.Analyzer()

    def value(e):
        return int(e) if isinstance(e, (int, bool)) else int(analyzer.simplify(e).value)

    ranges = {}
    for c in range(sk.ctas):
        r = tail_range(sk, tirx.const(c, "int32"), lambda name, v: v)
        ranges[c] = {f: value(getattr(r, f)) for f in r.__dataclass_fields__}
    first = {t: value(contributors(sk, tirx.const(t, "int32"))) for t in range(tail)}
    return sk, ranges, first


@pytest.mark.parametrize("tiles,ctas,n", [(512, 132, 64), (688, 132, 64), (133, 132, 64), (197, 132, 8),
                                          (263, 132, 64), (3584, 132, 64), (150, 132, 16), (300, 132, 7),
                                          (40, 3, 16), (30, 7, 64)])
def test_the_ranges_cover_the_tail_once_and_each_finisher_waits_for_its_contributors(tiles, ctas, n):
    sk, ranges, first = _ranges(tiles, ctas, n)
    covered, partials, finisher = {}, {}, {}
    for c, r in ranges.items():
        if r["partial_count"]:
            assert r["partial_start"] + r["partial_count"] < n  # a contribution never ends its tile
            partials.setdefault(r["partial_tile"], []).append(c)
            for k in range(r["partial_start"], r["partial_start"] + r["partial_count"]):
                covered.setdefault((r["partial_tile"], k), []).append(c)
        if r["finishes"]:
            assert r["finish_start"] > 0 or not r["partial_count"]
            finisher[r["finish_tile"]] = c
            assert r["finish_start"] + r["finish_count"] == n  # a finish runs to its tile's end
            for k in range(r["finish_start"], r["finish_start"] + r["finish_count"]):
                covered.setdefault((r["finish_tile"], k), []).append(c)
        # every CTA's share is longer than the ring (the producer's stores go inside it)
        share = r["partial_count"] + (r["finish_count"] if r["finishes"] else 0)
        # (300 tiles, n = 7: a share of 4 k-tiles, ruled out by the plan for S >= 4)
        assert share > 3 or tiles == 300
    assert sorted(covered) == [(t, k) for t in range(sk.tail) for k in range(n)]
    assert all(len(owners) == 1 for owners in covered.values())
    for t in range(sk.tail):
        # the finisher takes the slots of the CTAs from `first` up to itself: exactly the tile's contributors
        assert list(range(first[t], finisher[t])) == sorted(partials.get(t, []))
        assert finisher[t] - first[t] <= 2
        assert all(c < finisher[t] for c in partials.get(t, []))  # it waits only for CTAs launched before it


def test_contributors_publish_then_finishers_wait_add_and_store():
    ir = lowered(forced(gemm_ir(4096, 4096, 4096, out_dtype=T.float16, num_stages=4, **BIG)))
    consumers = ir[ir.index("for tile in range(3)"):]
    tail = consumers[consumers.index("if bx < 132:"):]
    contribution, finish = tail[:tail.index("if (sk_first_tile + 1) * 64 <= sk_end:")], \
        tail[tail.index("if (sk_first_tile + 1) * 64 <= sk_end:"):]
    finish, no_finish = finish[:finish.index("else:")], finish[finish.index("else:"):]
    # the contribution: the k-loop, the drain, its last stage released (no epilogue), the registers stored; no
    # flag yet
    order = [
        "for k in range(sk_partial_count)",
        "tnb_wgmma_wait0",
        "stage_barriers[4 + (192 + sk_partial_count - 1) % 4]",
        "tnb_sk_put_132x128x256",
    ]
    assert [contribution.index(x) for x in order] == sorted(contribution.index(x) for x in order)
    assert "tnb_vst" not in contribution and "tnb_sk_signal" not in contribution  # nothing to C, no flag
    # the finish: the loop over the tile's last k-tiles; then the contribution's flag (its stores
    # drained under that loop): a consumer barrier and one thread's release; then one thread waits
    # for the contributors' flags, a barrier, every thread adds their slots, then the epilogue (stage
    # the tile for the producer's stores)
    order = [
        "for k in range(sk_first_tile * 64 + 64 - sk_begin)",
        "tnb_wgmma_wait0",
        "if sk_partial_count > 0",
        "tnb_bar_sync_1_256",
        "tnb_sk_signal_132x128x256",
        "tnb_sk_wait_132x128x256",
        "tnb_bar_sync_1_256",
        "tnb_sk_add_132x128x256",
        "tnb_vst_float32x2_float16",
        "tnb_fence_proxy_async",
    ]
    at, pos = 0, []
    for x in order:  # in this order, each after the one before (the barrier appears twice)
        at = finish.index(x, at)
        pos.append(at)
    assert pos == sorted(pos)
    # a CTA that finishes nothing (its share inside one tile) publishes right after its contribution
    order = ["if sk_partial_count > 0", "tnb_bar_sync_1_256", "tnb_sk_signal_132x128x256"]
    assert [no_finish.index(x) for x in order] == sorted(no_finish.index(x) for x in order)
    assert "tnb_sk_wait" not in no_finish
    # the producer issues the last whole tile's stores at the 4th k-tile of this CTA's share
    producer = ir[:ir.index("for tile in range(3)")]
    assert "if k_load == 3:" in producer and "if sk_partial_count + k_load == 3:" in producer


def test_the_workspace_is_declared_once_in_the_module():
    from tile_nb.lower.emit.stream_k import _helpers

    sk = StreamK(3, 116, 132, 64, None, 128, 256)
    src = _helpers(sk)
    assert "#ifndef TNB_STREAM_K_132x128x256" in src
    assert "__device__ __align__(16) float tnb_sk_partials_132x128x256[4325376];" in src  # 132 x 128 KiB
    # the flags start at 1 as initialized data of the module (uninitialized device globals need not be zero);
    # a contributor sets 2, its finisher waits for 2 and sets 1 again
    assert "__device__ unsigned tnb_sk_flags_132x128x256[132] = {" + ", ".join(["1u"] * 132) + "};" in src
    assert '"r"(2u)' in src and "while (ready != 2);" in src and "*flag = 1;" in src


@pytest.mark.parametrize("cfg", [dict(BIG, num_stages=4, out_dtype=T.float16), dict(BIG, num_stages=3)],
                         ids=["s4-fp16-producer-stores", "s3-fp32"])
def test_stream_k_kernels_build_without_spills(cfg):
    from tile_nb.backend.cuda_compile import available_compiler
    from tile_nb.runtime import compile as rt_compile

    if available_compiler("nvcc") != "nvcc":
        pytest.skip("nvcc is not installed here")
    kernel = rt_compile(forced(gemm_ir(4096, 4096, 4096, **cfg)), "sm_90a", options={"cache": False})
    assert kernel.plan["stream_k"] is True
    res = kernel.resources
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
    assert (
        kernel.cuda_source.count("__device__ __align__(16) float tnb_sk_partials_132x128x256[4325376];") >= 1
    )


def test_eight_bit_inputs_get_it_only_when_asked():
    """fp8 stream-K kernels have not run on a GPU yet: by default they keep whole
    tiles even where it would pay."""
    from kernels.seed import gemm_variant

    fp8 = gemm_variant.specialize(
        M=8192,
        N=8192,
        K=16384,
        block_N=256,
        block_K=128,
        threads=256,
        num_stages=4,
        in_dtype=T.float8_e4m3fn,
        out_dtype=T.bfloat16,
        trans_B=True,
    )
    assert plan(fp8).stream_k is None  # 2048 tiles, 128 k-tiles each: 62 idle k-tiles per SM to share
    assert plan(forced(fp8)).stream_k.tail == 68
    assert plan(gemm_ir(8192, 8192, 16384, **BIG)).stream_k.tail == 68  # fp16 at the same tiling

"""The seed GEMM compiled through tile_nb.lower + TVM and run on a CUDA device,
checked against float64 torch."""
import pytest

torch = pytest.importorskip("torch")

from kernels.hopper import needs_hopper_plan
from kernels.seed import gemm_variant

import tile_nb.language as T

pytestmark = pytest.mark.gpu


_DT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def fp16_accumulator_tolerance(K: int) -> float:
    """A bound on the relative (Frobenius) error of a float16-accumulated product of unit normals, from its
    arithmetic: the tensor cores add 16 products exactly, then round the running sum to float16 (unit roundoff
    u = 2^-11) once per k-step, K / 16 times. A rounding of a sum of 16 j products errs by u |S| /
    sqrt(3) on average, so the error after n = K / 16 steps has a standard deviation of u n sqrt(8 / 3)
    against a sum of size 4 sqrt(n):
    a relative error of 0.41 u sqrt(n) (3.2e-3 at K = 4096, where one H200 run measured 3.04e-3
    over 8 outputs). Over as few as 8 outputs the spread is wide (the same model simulated on the
    CPU, 5,000 draws of 1 x 8 outputs:
    at most 3.0x that value at K = 4096 and 3.3x at K = 1000), so the bound is five times it plus the output's
    own rounding."""
    u = 2.0 ** -11
    return 5 * 0.41 * u * max(1.0, K / 16) ** 0.5 + u


def run_case(M, N, K, in_dtype="float16", out_dtype="float32", trans_A=False, trans_B=False, path="auto",
             expect_pipeline=None, attrs=None, expect_notes=(), **cfg):
    """path: "auto" (on sm_90a: wgmma, with TMA loads + a producer warp where eligible), "tma" (TMA also for
    one consumer warpgroup), "cp.async" (wgmma with the cp.async pipeline), "mma" (mma.sync forced) -- via
    lowering attributes. `expect_pipeline`: a prefix of the kernel's pipeline note (`kernel.pipeline`, from
    its lowering plan: which pipeline was built); `attrs`: more lowering attributes; `expect_notes`: words
    each to be found in that note."""
    from tile_nb.runtime import compile as rt_compile

    dev = "cuda"
    torch.manual_seed(M * 1_000_003 + N * 1_009 + K)  # the same inputs every run: a failure can be re-run
    a = torch.randn((K, M) if trans_A else (M, K), device=dev).to(_DT[in_dtype])
    b = torch.randn((N, K) if trans_B else (K, N), device=dev).to(_DT[in_dtype])
    c = torch.full((M, N), float("nan"), device=dev, dtype=_DT[out_dtype])  # poison: every element written
    # the accumulator of out_dtype (a float16 C accumulates in float16)
    func = gemm_variant.specialize(a, b, c, in_dtype=getattr(T, in_dtype), out_dtype=getattr(T, out_dtype),
                                   acc_dtype=getattr(T, out_dtype), trans_A=trans_A, trans_B=trans_B, **cfg)
    if path == "mma":
        func = func.with_attr("tile_nb.wgmma", 0)
    elif path in ("cp.async", "tma"):
        func = func.with_attr("tile_nb.tma", int(path == "tma"))
    for name, value in (attrs or {}).items():
        func = func.with_attr(name, value)
    kernel = rt_compile(func, None)
    if expect_pipeline is not None:
        assert (kernel.pipeline or "").startswith(expect_pipeline), kernel.pipeline
    for words in expect_notes:
        assert words in (kernel.pipeline or ""), kernel.pipeline
    kernel(a, b, c)
    torch.cuda.synchronize()
    a64 = a.double().T if trans_A else a.double()
    b64 = b.double().T if trans_B else b.double()
    ref = a64 @ b64
    assert not torch.isnan(c).any(), "unwritten (NaN) output elements"
    return ((c.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("path", ["auto", "mma"])
@pytest.mark.parametrize("trans_A", [False, True])
@pytest.mark.parametrize("trans_B", [False, True])
def test_transposes(trans_A, trans_B, path):
    assert run_case(512, 384, 256, trans_A=trans_A, trans_B=trans_B, path=path) < 1e-3


@pytest.mark.parametrize(
    "in_dtype,out_dtype,tol",
    [("float16", "float32", 1e-3), ("float16", "float16", 2e-3), ("bfloat16", "float32", 1e-3)],
)
def test_dtypes(in_dtype, out_dtype, tol):
    assert run_case(512, 512, 512, in_dtype=in_dtype, out_dtype=out_dtype) < tol


@pytest.mark.parametrize("path", ["auto", "mma"])
@pytest.mark.parametrize("trans_A,trans_B", [(False, False), (True, True), (False, True)])
def test_edges(trans_A, trans_B, path):
    assert run_case(1000, 1030, 999, trans_A=trans_A, trans_B=trans_B, path=path) < 1e-3


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_stages(stages):
    assert run_case(640, 768, 1024, num_stages=stages) < 1e-3


def test_rasterized_grid():
    """16 x 5 CTAs: the grouped CTA order (groups of 8 along x) is active."""
    assert run_case(2048, 640, 256) < 1e-3


@pytest.mark.parametrize("path", ["auto", "mma"])
@pytest.mark.parametrize("trans_B", [False, True])
def test_big_tile_256_threads(path, trans_B):
    cfg = dict(block_N=256, block_K=64, threads=256, trans_B=trans_B, path=path)
    assert run_case(1024, 1280, 512, **cfg) < 1e-3
    assert run_case(1000, 1030, 999, **cfg) < 1e-3


# ---- the TMA + producer-warp pipeline (sm_90a default where eligible; lower/analysis/tma.py) ---------------
TMA = "TMA + mbarriers"
needs_hopper = needs_hopper_plan  # an sm_90 GPU and the sm_90a target (kernels/hopper.py)


@needs_hopper
@pytest.mark.parametrize("trans_B", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_tma_edges_not_multiples_of_the_tile(big, trans_B):
    """1000 x 1032 x 1000: 16-byte row strides (TMA's rule) but M, N, K cut every tile: TMA zero-fills the
    boxes past the tensor's end, the copy-out is guarded."""
    cfg = dict(block_N=256, block_K=64, threads=256) if big else dict(path="tma")
    assert run_case(1000, 1032, 1000, trans_B=trans_B, expect_pipeline=TMA, **cfg) < 1e-3


@needs_hopper
@pytest.mark.parametrize(
    "in_dtype,out_dtype,tol",
    [("float16", "float16", 5e-3), ("bfloat16", "float32", 1e-3), ("bfloat16", "bfloat16", 3e-2)],
)
def test_tma_dtypes_big_tile(in_dtype, out_dtype, tol):
    """This kernel's accumulator has C's dtype: a 16-bit accumulator is rounded after
    every T.gemm (docs/IR.md), so no MMA group may stay in flight: each k-tile waits for
    its MMAs and releases its own stage."""
    cfg = dict(block_N=256, block_K=64, threads=256)
    expect = (
        TMA
        if out_dtype == "float32"
        else (
            "TMA + mbarriers, producer warp (warp-specialized); each k-tile's "
            "MMAs complete before its stage is released"
        )
    )
    assert (
        run_case(768, 1024, 1536, in_dtype=in_dtype, out_dtype=out_dtype, expect_pipeline=expect, **cfg) < tol
    )


@needs_hopper
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("K", [32, 64, 96, 4096])
def test_tma_stage_counts_and_short_loops(stages, K):
    """Loops shorter than, equal to and much longer than the stage ring
    (mbarrier parities wrap many times)."""
    assert run_case(256, 384, K, num_stages=stages, path="tma", expect_pipeline=TMA) < 1e-3


@needs_hopper
def test_tma_four_consumer_warpgroups():
    """256 x 128 tile over 512 threads: 4 consumer warpgroups release each stage (16 warp arrivals)."""
    cfg = dict(block_M=256, block_N=128, block_K=64, threads=512)
    assert run_case(1000, 1032, 1000, expect_pipeline=TMA, **cfg) < 1e-3


@needs_hopper
def test_tma_and_cp_async_paths_agree():
    """Same inputs through both pipelines: both within tolerance of float64 (the two paths differ only in how
    tiles reach shared memory, so the fp32 sums are the same up to MMA ordering)."""
    for path, note in (("auto", TMA), ("cp.async", "cp.async (TMA turned off")):
        assert run_case(1024, 1280, 512, block_N=256, block_K=64, threads=256, path=path,
                        expect_pipeline=note) < 1e-3


INLINE = "TMA + mbarriers, loads issued by the first consumer thread (no producer warp)"


@needs_hopper
@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
@pytest.mark.parametrize("producer_warp", [0, 1])
def test_one_warpgroup_tma_with_and_without_a_producer_warp(producer_warp, out_dtype):
    """The seed's launch shape (128 threads) with TMA forced: by default its own first thread issues the loads
    between its k-tiles; `tile_nb.producer_warp` = 1 adds a producer warp. A float16 C also leaves through the
    TMA store, one 64-column panel at a time (the staging tile may not cost a CTA per SM). Tiles cut at every
    edge, and a K of one k-tile."""
    expect = INLINE if not producer_warp else "TMA + mbarriers, producer warp"
    notes = (f"{2 if producer_warp else 1} of 2 panels at a time",) if out_dtype == "float16" else ()
    for M, N, K in ((1000, 1032, 1000), (256, 384, 32), (1, 8, 4096)):
        assert run_case(M, N, K, out_dtype=out_dtype, path="tma", expect_pipeline=expect, expect_notes=notes,
                        attrs={"tile_nb.producer_warp": producer_warp}) < \
            (fp16_accumulator_tolerance(K) if out_dtype == "float16" else 1e-3)


@needs_hopper
def test_ineligible_shapes_fall_back_to_cp_async_with_the_reason():
    """K = 999: A's rows are 1998 bytes, not a multiple of 16, so TMA cannot describe A; cp.async runs."""
    assert run_case(512, 512, 999, path="tma", expect_pipeline="cp.async (A") < 1e-3


@needs_hopper
def test_tma_kernel_with_a_shared_memory_epilogue():
    """Consumer-only barriers (bar.sync 1, 256) around the C tile staged in shared memory."""
    from kernels.seed import gemm_smem_epilogue

    a = torch.randn(1000, 1000, device="cuda").half()
    b = torch.randn(1000, 1032, device="cuda").half()
    c = torch.full((1000, 1032), float("nan"), device="cuda", dtype=torch.float16)
    assert gemm_smem_epilogue.compile(a, b, c).plan["pipeline_kind"] == "tma"
    gemm_smem_epilogue(a, b, c)
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 2e-3


@needs_hopper
@pytest.mark.parametrize("sms", [1, 3, 7])
@pytest.mark.parametrize("shape", [(1000, 1032, 1000), (1, 2056, 1000), (2048, 2048, 64), (640, 1536, 32),
                                   (300, 2048, 4096)])
def test_persistent_ctas_walk_every_tile(shape, sms):
    """Persistent CTAs (1, 3 or 7 of them) over grids of 9 to 128 tiles: every tile written once, edge tiles
    cut by M, N and K, loops of one k-tile (the ring's positions advance by one per tile) and of 64."""
    note = "TMA + mbarriers, producer warp (warp-specialized); persistent: "
    assert run_case(*shape, block_N=256, block_K=64, threads=256, expect_pipeline=note,
                    attrs={"tile_nb.persistent": 1, "tile_nb.sm_count": sms}) < 1e-3


@needs_hopper
@pytest.mark.parametrize("by_producer", [True, False], ids=["producer-stores", "consumer-stores"])
@pytest.mark.parametrize("stages,staged", [(3, "4 of 4 panels"), (4, "2 of 4 panels")])
@pytest.mark.parametrize("out_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape,sms", [((1000, 1032, 1000), 3), ((4000, 4104, 512), None), ((1, 2056, 64), 2),
                                       ((513, 1288, 4096), 7)])
def test_tma_store_epilogue(shape, sms, out_dtype, stages, staged, by_producer):
    """A 16-bit C leaves through a staging tile in shared memory and TMA stores, clipped at C's edges. By
    default the producer warp issues them once the consumers staged a tile (with 4 stages half of it in the
    stage of the tile's last k-tile), where the loop has at least `stages` k-tiles (K = 64 has one: the
    consumers' form); with tile_nb.producer_stores = 0 the consumers issue them (the whole tile with 3 stages,
    half at a time with 4; the next tile's stores wait until the staging tile is read). bf16 inputs for bf16
    output; the accumulator is float32, rounded once on the way out."""
    from tile_nb.runtime import compile as rt_compile

    M, N, K = shape
    in_dtype = "bfloat16" if out_dtype == "bfloat16" else "float16"
    a = torch.randn(M, K, device="cuda").to(_DT[in_dtype])
    b = torch.randn(K, N, device="cuda").to(_DT[in_dtype])
    c = torch.full((M, N), float("nan"), device="cuda", dtype=_DT[out_dtype])
    func = gemm_variant.specialize(a, b, c, block_N=256, block_K=64, threads=256, num_stages=stages,
                                   in_dtype=getattr(T, in_dtype), out_dtype=getattr(T, out_dtype))
    func = func.with_attr("tile_nb.persistent", 1)
    if sms:
        func = func.with_attr("tile_nb.sm_count", sms)
    if not by_producer:
        func = func.with_attr("tile_nb.producer_stores", 0)
    kernel = rt_compile(func, None)
    if by_producer and -(-K // 64) >= stages:
        assert "TMA stores issued by the producer warp" in kernel.pipeline, kernel.pipeline
    else:
        assert f"epilogue through shared memory and TMA stores ({staged}" in kernel.pipeline, kernel.pipeline
    kernel(a, b, c)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any(), "unwritten (NaN) output elements"
    ref = a.double() @ b.double()
    tol = 3e-3 if out_dtype == "float16" else 2e-2
    assert ((c.double() - ref).norm() / ref.norm()).item() < tol


@needs_hopper
@pytest.mark.parametrize("shape", [(2048, 2048, 1024), (1000, 1032, 1000), (1, 264, 64)])
def test_tma_store_without_persistent_ctas(shape):
    """Asked for (`tile_nb.tma_store` = 1) on a grid of one wave: each CTA stores its one tile through shared
    memory and waits for its stores before it exits."""
    from tile_nb.runtime import compile as rt_compile

    M, N, K = shape
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    func = gemm_variant.specialize(a, b, c, block_N=256, block_K=64, threads=256, out_dtype=T.float16)
    kernel = rt_compile(func.with_attr("tile_nb.tma_store", 1).with_attr("tile_nb.persistent", 0), None)
    assert kernel.plan["persistent_ctas"] is None and kernel.plan["tma_store"], kernel.pipeline
    kernel(a, b, c)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any()
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 3e-3


@needs_hopper
@pytest.mark.parametrize("shape,trans_B,shared,sms", [
    ((4000, 3000, 1000), False, "half of B_shared", None),  # 32 x 12 tiles on 132 CTAs; B's four panels split
    ((4000, 3000, 1000), True, "half of B_shared", None),  # B stored [N, K]: its one box cut in two
    ((3904, 4000, 520), False, "half of A_shared", None),  # 31 x 16 tiles: pairs along N share A
    ((1000, 1032, 1000), False, "half of B_shared", 4),  # 8 x 5 tiles on 2 clusters; odd tile counts per CTA
    ((256, 264, 4096), False, "half of B_shared", 2),  # 2 x 2 tiles: one cluster, two tiles each, 64 k-tiles
])
@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
def test_cluster_multicast_gemm(shape, trans_B, shared, sms, out_dtype):
    """Clusters of two CTAs (`tile_nb.cluster` = 2): each CTA loads half of the shared operand and multicasts
    it to both; stage releases reach both CTAs. Every tile written once (NaN poison), the product right, edges
    cut by M, N and K."""
    attrs = {"tile_nb.cluster": 2} | ({"tile_nb.sm_count": sms} if sms else {})
    assert (
        run_case(
            *shape,
            out_dtype=out_dtype,
            trans_B=trans_B,
            block_N=256,
            block_K=64,
            threads=256,
            num_stages=4,
            expect_pipeline="TMA + mbarriers, producer warp (warp-specialized)",
            attrs=attrs,
            expect_notes=("persistent: ", "clusters of 2 CTAs", shared),
        )
        < 3e-3
    )


@needs_hopper
@pytest.mark.parametrize("shape", [(4096, 4096, 1024), (1000, 1032, 1024)])
def test_cluster_multicast_fp8_gemm(shape):
    """fp8 with B stored [N, K] (K-major, as wgmma reads 8-bit operands): its 256-row box cut in two."""
    from kernels.seed import gemm_fp8

    from tile_nb.runtime import compile as rt_compile

    M, N, K = shape
    a = (torch.randn(M, K, device="cuda") * 3).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, device="cuda") * 3).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.37], device="cuda"), torch.tensor([1.9], device="cuda")
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cfg = dict(block_N=256, block_K=128, threads=256, num_stages=4)
    func = gemm_fp8.specialize(a, b, c, sa, sb, **cfg).with_attr("tile_nb.cluster", 2)
    if M < 2048:
        func = func.with_attr("tile_nb.sm_count", 4)
    kernel = rt_compile(func, None)
    assert "clusters of 2 CTAs" in kernel.pipeline and "half of B_shared" in kernel.pipeline, kernel.pipeline
    kernel(a, b, c, sa, sb)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any()
    ref = (a.double() @ b.double().T) * 0.37 * 1.9
    scaled = (
        torch._scaled_mm(a, b.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16) if M % 16 == 0 else None
    )
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-2
    if scaled is not None:
        torch.testing.assert_close(c.double(), scaled.double(), rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@needs_hopper
def test_an_unaligned_output_keeps_register_stores():
    """C starting 2 bytes into its allocation: TMA needs 16-byte aligned tensors, so the JIT's unaligned
    specialization stores from registers (and A, B keep their TMA loads)."""
    M, N, K = 1000, 1032, 512
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    c = torch.full((M * N + 1,), float("nan"), device="cuda", dtype=torch.float16)[1:].view(M, N)
    cfg = dict(block_N=256, block_K=64, threads=256, out_dtype=T.float16)
    kernel = gemm_variant.compile(a, b, c, **cfg)
    assert kernel.plan["pipeline_kind"] == "tma" and not kernel.plan["tma_store"], kernel.pipeline
    gemm_variant(a, b, c, **cfg)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any()
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 3e-3


@needs_hopper
@pytest.mark.parametrize("stages", [2, 4])
def test_persistent_ctas_with_a_rounded_accumulator_and_other_rings(stages):
    """A float16 accumulator (each k-tile waits for its MMAs and releases its own stage), one consumer
    warpgroup (TMA forced), bf16 inputs, 2- and 4-stage rings."""
    for in_dtype, out_dtype, tol in (("float16", "float16", 5e-3), ("bfloat16", "float32", 1e-3)):
        assert (
            run_case(
                1000,
                1032,
                1000,
                in_dtype=in_dtype,
                out_dtype=out_dtype,
                num_stages=stages,
                block_K=64,
                path="tma",
                expect_pipeline="TMA",
                attrs={"tile_nb.persistent": 1, "tile_nb.sm_count": 5, "tile_nb.producer_warp": 1},
            )
            < tol
        )


@needs_hopper
def test_persistent_ctas_with_a_shared_memory_epilogue_and_the_device_sm_count():
    """C staged through shared memory: a consumer barrier ends each tile, before the next one rewrites
    C_shared. Without `tile_nb.sm_count` the launch has one CTA per SM of this GPU."""
    from kernels.seed import gemm_smem_epilogue

    from tile_nb.runtime import compile as rt_compile

    a = torch.randn(4000, 1000, device="cuda").half()
    b = torch.randn(1000, 4104, device="cuda").half()
    c = torch.full((4000, 4104), float("nan"), device="cuda", dtype=torch.float16)
    kernel = rt_compile(gemm_smem_epilogue.specialize(a, b, c).with_attr("tile_nb.persistent", 1), None)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert f"persistent: {sms} CTAs (one per SM) walk the 544 tiles" in kernel.pipeline, kernel.pipeline
    kernel(a, b, c)
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 2e-3


@needs_hopper
@pytest.mark.parametrize(
    "shape,out_dtype,stages,attrs",
    [
        ((4096, 4096, 4096), "float16", 4, {}),  # 512 tiles: a tail of 116 over 132 CTAs, producer stores
        ((4096, 4096, 4096), "float16", 4, {"tile_nb.producer_stores": 0}),
        ((2100, 4296, 1000), "float16", 3, {}),  # edge tiles in M, N and K; a tail of 25 over 50 CTAs
        ((896, 4864, 2048), "bfloat16", 4, {}),  # 133 tiles: one tail tile in two halves
        ((4096, 11008, 4096), "float16", 4, {}),  # 1376 tiles: a tail of 56 over 112 CTAs
        ((4096, 4096, 1024), "float32", 3, {}),  # a float32 C: the register epilogue
        ((1, 34048, 1024), "float16", 4, {}),  # M = 1: 133 tiles of one valid row
        ((1000, 1032, 1000), "float16", 4, {"tile_nb.sm_count": 3}),  # 40 tiles on 3 CTAs: one tail tile
    ],
    ids=[
        "4096-producer-stores",
        "4096-consumer-stores",
        "edges",
        "bf16-one-tail-tile",
        "4096x11008",
        "fp32-out",
        "m1",
        "3-ctas",
    ],
)
def test_stream_k_gemm_agrees_with_torch_twice(shape, out_dtype, stages, attrs):
    """Stream-K for the last wave (stream_k.py): every output element against a float64 product, element by
    element (a k-tile lost or counted twice in one tile shows), and a second launch with other inputs (the
    flags and the workspace left by the first must not leak into it)."""
    from tile_nb.runtime import compile as rt_compile

    M, N, K = shape
    in_dtype = "bfloat16" if out_dtype == "bfloat16" else "float16"
    func = gemm_variant.specialize(M=M, N=N, K=K, block_N=256, block_K=64, threads=256, num_stages=stages,
                                   in_dtype=getattr(T, in_dtype), out_dtype=getattr(T, out_dtype))
    # wherever legal, not only where it pays
    for name, value in dict(attrs, **{"tile_nb.stream_k": 1}).items():
        func = func.with_attr(name, value)
    kernel = rt_compile(func, None)
    assert kernel.plan["stream_k"] is True, kernel.pipeline
    tol = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5}[out_dtype]
    for seed in (0, 1):
        torch.manual_seed(seed)
        a = torch.randn(M, K, device="cuda").to(_DT[in_dtype])
        b = torch.randn(K, N, device="cuda").to(_DT[in_dtype])
        c = torch.full((M, N), float("nan"), device="cuda", dtype=_DT[out_dtype])
        kernel(a, b, c)
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        assert not torch.isnan(c).any(), "unwritten (NaN) output elements"
        worst = ((c.double() - ref).abs() / ref.abs().max()).max().item()
        assert worst < tol, f"launch {seed + 1}: max error {worst:.2e} of the largest |C|"


@pytest.mark.parametrize("shape, split", [((1, 1, 1), 4), ((130, 300, 200), 3), ((1024, 1024, 1024), 4),
                                          ((256, 512, 4096), 8), ((96, 64, 1000), 5)])
def test_split_k(shape, split):
    """Slices of K summed with atomics (the last slices partly or wholly past K) give the full product."""
    from kernels.seed import gemm_split_k

    M, N, K = shape
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.zeros(M, N, device="cuda")
    gemm_split_k(a, b, c, split_K=split)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-3, atol=1e-3 * K ** 0.5)


_FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
# of sum |a b|: docs/IR.md, "8-bit floats" (measured worst 2^-10.4 at K = 16384)
FP8_ACCUMULATION_BOUND = 2.0 ** -9


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (1000, 1000, 1024), (1, 1, 32), (130, 300, 1000),
                                   # the last: persistent, producer stores
                                   (256, 512, 4096), (4000, 4104, 1024)])
@pytest.mark.parametrize("a_dtype,b_dtype,out_dtype", [("float8_e4m3fn", "float8_e4m3fn", "bfloat16"),
                                                        ("float8_e5m2", "float8_e4m3fn", "float16"),
                                                        ("float8_e4m3fn", "float8_e4m3fn", "float32")])
def test_fp8_gemm_agrees_with_the_interpreter_and_scaled_mm(shape, a_dtype, b_dtype, out_dtype):
    """8-bit float GEMM with per-tensor scales on wgmma (TMA where the rows allow, cp.async else): the same
    result as the CPU interpreter and as a float64 product of the same 8-bit values, every element written."""
    from kernels.seed import gemm_fp8

    M, N, K = shape
    a = (torch.randn(M, K, device="cuda") * 3).to(_FP8[a_dtype])
    b = (torch.randn(N, K, device="cuda") * 3).to(_FP8[b_dtype])
    sa, sb = torch.tensor([0.37], device="cuda"), torch.tensor([1.9], device="cuda")
    c = torch.full((M, N), float("nan"), device="cuda", dtype=_DT[out_dtype])
    cfg = dict(a_dtype=getattr(T, a_dtype), b_dtype=getattr(T, b_dtype), out_dtype=getattr(T, out_dtype))
    gemm_fp8(a, b, c, sa, sb, **cfg)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any(), "unwritten (NaN) output elements"
    ref = (a.double() @ b.double().T) * 0.37 * 1.9
    # docs/IR.md: Hopper's FP8 MMAs accumulate with fewer bits than float32 (about 2^-11 of sum |a b| measured
    # at K = 1024 on the H200), so the bound is on that sum, whatever the output dtype; plus C's own rounding.
    magnitude = (a.double().abs() @ b.double().abs().T) * 0.37 * 1.9
    rounding = {"float32": 2 ** -24, "float16": 2 ** -11, "bfloat16": 2 ** -8}[out_dtype]
    bound = FP8_ACCUMULATION_BOUND * magnitude + rounding * ref.abs() + 1e-30
    worst = ((c.double() - ref).abs() / bound).max().item()
    assert worst <= 1.0, f"error reaches {worst:.2f} of the bound"
    if M * N * K <= 2 ** 27:  # the interpreter on the same inputs: within the same bound of each other
        c_cpu = torch.empty(M, N, dtype=_DT[out_dtype])
        gemm_fp8(a.cpu(), b.cpu(), c_cpu, sa.cpu(), sb.cpu(), **cfg)
        assert ((c.cpu().double() - c_cpu.double()).abs() <= 2 * bound.cpu()).all()
    if (
        a_dtype == b_dtype == "float8_e4m3fn"
        and out_dtype == "bfloat16"
        and K % 16 == 0
        and M % 16 == N % 16 == 0
    ):
        scaled = torch._scaled_mm(a, b.T, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        torch.testing.assert_close(c.double(), scaled.double(), rtol=1e-2, atol=1e-2 * ref.abs().max().item())


def test_fp8_gemm_uses_tma_and_wgmma_k32():
    from kernels.seed import gemm_fp8

    kernel = gemm_fp8.compile(M=2048, N=2048, K=2048, target=None)
    assert kernel.plan["pipeline_kind"] == "tma", kernel.pipeline
    assert "m64n256k32.f32.e4m3.e4m3" in kernel.cuda_source
    assert kernel.resources.spill_stores == 0 and kernel.resources.spill_loads == 0


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (1000, 1000, 1024), (1, 1, 32), (130, 300, 1000),
                                   (256, 512, 4096)])
def test_int8_gemm_is_exact_on_the_gpu(shape):
    """int8 x int8 -> int32 on wgmma: exactly the integer product (and the interpreter's result)."""
    from kernels.seed import gemm_int8

    M, N, K = shape
    a = torch.randint(-128, 128, (M, K), device="cuda", dtype=torch.int8)
    b = torch.randint(-128, 128, (N, K), device="cuda", dtype=torch.int8)
    c = torch.full((M, N), -7, device="cuda", dtype=torch.int32)
    gemm_int8(a, b, c)
    ref = (a.double() @ b.double().T).to(torch.int32)  # exact: |sums| < 2^53
    assert torch.equal(c, ref)
    if M * N * K <= 2 ** 27:
        c_cpu = torch.empty(M, N, dtype=torch.int32)
        gemm_int8(a.cpu(), b.cpu(), c_cpu)
        assert torch.equal(c.cpu(), c_cpu)


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (1000, 1000, 4096), (130, 300, 1000)])
def test_fp8_gemm_with_precise_accumulation(shape):
    """precise_accum: each k-tile summed on its own, then added in float32 on the CUDA cores: the error no
    longer grows with K, and matches cuBLAS's own (non-fast) fp8 accumulation."""
    from kernels.seed import gemm_fp8

    M, N, K = shape
    a = (torch.randn(M, K, device="cuda") * 3).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, device="cuda") * 3).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.37], device="cuda"), torch.tensor([1.9], device="cuda")
    c = torch.full((M, N), float("nan"), device="cuda")
    cfg = dict(out_dtype=T.float32, precise_accum=True, block_N=128)
    kernel = gemm_fp8.compile(a, b, c, sa, sb, **cfg)
    if K % 16 == 0:
        assert kernel.plan["pipeline_kind"] == "tma", kernel.pipeline
    gemm_fp8(a, b, c, sa, sb, **cfg)
    ref = (a.double() @ b.double().T) * 0.37 * 1.9
    magnitude = (a.double().abs() @ b.double().abs().T) * 0.37 * 1.9
    # Within a k-tile the MMAs still keep fewer bits (fp8_accuracy.py: worst 2^-12.7 of sum |a b| at K = 256,
    # 2^-16.9 at K = 16384, as cuBLAS without fast accumulation); across k-tiles the sums are float32.
    assert ((c.double() - ref).abs() <= 2 ** -12 * magnitude + 1e-30).all()
    if K % 16 == 0 and M % 16 == 0 and N % 16 == 0:
        cublas = torch._scaled_mm(
            a, b.T, scale_a=sa, scale_b=sb, out_dtype=torch.float32, use_fast_accum=False
        )
        assert ((c.double() - cublas.double()).abs() <= 2 ** -14 * magnitude + 1e-30).all()
    if M * N * K <= 2 ** 27:
        c_cpu = torch.empty(M, N)
        gemm_fp8(a.cpu(), b.cpu(), c_cpu, sa.cpu(), sb.cpu(), **cfg)
        assert ((c.cpu().double() - c_cpu.double()).abs() <= 2 ** -12 * magnitude.cpu() + 1e-30).all()


@needs_hopper
@pytest.mark.parametrize("trans_B", [False, True])
@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (1000, 1032, 1000), (130, 200, 4096)])
def test_block_k_128_reads_k_major_operands_from_panels(shape, trans_B):
    """block_K = 128 (256-byte rows): A, and B stored [N, K], in 64-column panels; TMA where rows allow."""
    assert run_case(*shape, trans_B=trans_B, block_N=128, block_K=128, threads=256) < 1e-3


@pytest.mark.parametrize("shape", [(256, 256, 256), (200, 130, 300), (1, 1, 16)])
def test_gemm_with_a_from_registers(shape):
    """wgmma's register form (A fragment in registers) against float64 and the interpreter."""
    from kernels.seed import gemm_a_in_registers

    M, N, K = shape
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(K, N, device="cuda").half()
    c = torch.full((M, N), float("nan"), device="cuda")
    gemm_a_in_registers(a, b, c)
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-3
    c_cpu = torch.empty(M, N)
    gemm_a_in_registers(a.cpu(), b.cpu(), c_cpu)
    torch.testing.assert_close(c.cpu(), c_cpu, rtol=1e-3, atol=1e-3)


@needs_hopper
def test_stream_k_launches_on_two_streams_take_turns():
    """Stream-K's workspace lives in the kernel's module, so launches on two streams must not overlap:
    the kernel launches through runtime.kernel.OneStreamAtATime. Two streams each launch it 4 times on
    their own inputs, queued behind a sleep kernel on each so that both queues start together (the
    CTAs of one launch would otherwise meet the next launch's at the tail, where the workspace is
    used); every output is checked."""
    from tile_nb.runtime import compile as rt_compile
    from tile_nb.runtime.kernel import OneStreamAtATime

    M = N = K = 4096
    func = gemm_variant.specialize(M=M, N=N, K=K, block_N=256, block_K=64, threads=256, num_stages=4,
                                   out_dtype=T.float16).with_attr("tile_nb.stream_k", 1)
    kernel = rt_compile(func, None)
    assert isinstance(kernel._func, OneStreamAtATime), kernel.pipeline
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    inputs = [
        [(torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()) for _ in range(4)]
        for _ in streams
    ]
    outputs = [[torch.empty(M, N, device="cuda", dtype=torch.float16) for _ in range(4)] for _ in streams]
    torch.cuda.synchronize()
    for stream in streams:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(50_000_000)  # ~25 ms: every launch is queued before either stream runs one
    for i in range(4):
        for s, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                kernel(*inputs[s][i], outputs[s][i])
    torch.cuda.synchronize()
    for s in range(2):
        for i, ((a, b), c) in enumerate(zip(inputs[s], outputs[s], strict=True)):
            ref = a.double() @ b.double()
            worst = ((c.double() - ref).abs() / ref.abs().max()).max().item()
            assert worst < 2e-3, f"stream {s}, launch {i}: max error {worst:.2e}"

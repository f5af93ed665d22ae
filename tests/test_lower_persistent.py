"""Persistent CTAs over a TMA kernel's tiles (lower/analysis/persistent.py): when they are built, what they
emit, and that the kernels build without spills. CPU only; the GPU runs are in tests/test_gpu_gemm.py
(`test_persistent_*`)."""
import re

import pytest
from kernels.cuda import lowered, plan
from kernels.cuda import pipeline_note as note
from kernels.seed import gemm as seed_gemm
from kernels.seed import gemm_ir, gemm_smem_epilogue

import tile_nb
import tile_nb.language as T

BIG = dict(block_N=256, block_K=64, threads=256)


def persistent(func, sms=None, stream_k=0):
    """Persistent CTAs asked for; the last wave's tiles whole (stream-K off:
    tests/test_lower_stream_k.py has it)."""
    func = func.with_attr("tile_nb.persistent", 1).with_attr("tile_nb.stream_k", stream_k)
    return func if sms is None else func.with_attr("tile_nb.sm_count", sms)


def whole_tiles(func):
    return func.with_attr("tile_nb.stream_k", 0)





def test_on_by_default_where_the_grid_is_larger_than_the_gpu():
    assert plan(gemm_ir(4096, 4096, 1024, **BIG)).persistent.ctas == 132
    off = plan(gemm_ir(4096, 4096, 1024, **BIG).with_attr("tile_nb.persistent", 0))
    assert off.persistent is None and off.refusal("persistent") is None
    # refused without being asked for: nothing said
    fits = plan(gemm_ir(2048, 2048, 1024, **BIG))
    assert fits.persistent is None and fits.refusal("persistent") is None
    assert plan(gemm_ir(2048, 2048, 1024, **BIG).with_attr("tile_nb.persistent", 1)).refusal(
        "persistent").code == "persistent.fits"
    # one consumer warpgroup (TMA forced): CTAs share SMs, so not by default
    seed_tma = gemm_ir(4096, 4096, 1024).with_attr("tile_nb.tma", 1)
    assert plan(seed_tma).persistent is None
    assert plan(seed_tma.with_attr("tile_nb.persistent", 1)).persistent.ctas == 132


def test_one_cta_per_sm_walks_the_tiles_in_grouped_order():
    func = persistent(gemm_ir(4096, 4096, 1024, **BIG))
    assert "persistent: 132 CTAs (one per SM) walk the 512 tiles" in note(func)
    ir = lowered(func)
    assert 'T.launch_thread("blockIdx.x", 132)' in ir and 'T.launch_thread("blockIdx.y", 1)' in ir
    # CTA b takes tiles b, b + 132, ...: ceil((512 - b) / 132) of them
    assert tile_counts(ir, 132) == [4] * 116 + [3] * 16  # 512 tiles
    # tile t -> (bx, by) in groups of 8 down x (32 x 16 tiles), as the non-persistent grid's raster
    assert "bx_tile: T.let[T.int32] = (bx + tile * 132) // 128 * 8 + (bx + tile * 132) % 128 % 8" in ir
    assert "by_tile: T.let[T.int32] = (bx + tile * 132) % 128 // 8" in ir
    # the stage ring carries on across tiles: k-tile k of the i-th tile is at ring position i * 16 + k
    assert "stage_barriers[(tile * 16 + k) % 3]), (tile * 16 + k) // 3 % 2)" in ir
    assert "stage_barriers[3 + (tile_load * 16 + k_load) % 3]), (tile_load * 16 + k_load) // 3 % 2 ^ 1)" in ir
    # the last k-tile's stage is released after the drain (no later iteration of this tile releases it)
    tail = ir[ir.index("tnb_wgmma_wait0_r128", ir.index("for tile in")):]
    assert "stage_barriers[3 + (tile * 16 + 16 + 3 - 1) % 3]" in tail.split("tnb_vst")[0]


def test_the_sm_count_sets_the_launch():
    ir = lowered(persistent(gemm_ir(1000, 1032, 1000, **BIG), sms=3))
    assert 'T.launch_thread("blockIdx.x", 3)' in ir
    assert tile_counts(ir, 3) == [14, 13, 13]  # 8 x 5 = 40 tiles


def test_kernels_whose_accumulator_is_read_every_k_tile():
    """float16 accumulator (rounded after every T.gemm): each k-tile releases its own stage, nothing after."""
    func = seed_gemm.specialize(M=4096, N=4096, K=1024, out_dtype=T.float16, block_K=64)
    func = persistent(func.with_attr("tile_nb.tma", 1).with_attr("tile_nb.raster_group", 1))
    p = plan(func)
    assert p.persistent is not None and not p.tma.in_flight  # each k-tile releases its own stage
    ir = lowered(func)
    assert "bx_tile: T.let[T.int32] = (bx + tile * 132) % 32" in ir  # no grouping: x fastest
    tail = ir[ir.index("for k in range(16)", ir.index("for tile in")):]
    assert "tnb_wgmma_wait0" in tail and "(tile * 16 + 16 + 3 - 1) % 3" not in tail


def test_a_shared_memory_epilogue_ends_each_tile_with_a_consumer_barrier():
    func = persistent(gemm_smem_epilogue.specialize(M=4096, N=4096, K=512))
    ir = lowered(func)
    tile_loop = ir[ir.index("for tile in"):]
    # barrier, C_shared written, barrier, read (the epilogue); then the barrier before the next tile
    assert tile_loop.count("tnb_bar_sync_1_256") == 3, tile_loop
    assert tile_loop.rstrip().endswith('T.cuda.func_call("tnb_bar_sync_1_256")')


def tile_counts(ir: str, ctas: int) -> list:
    """How many tiles each CTA walks, evaluating the tile loops' extents (the
    producer's and the consumers' agree)."""
    extents = re.findall(r"for tile(?:_load)? in range\((.*)\):", ir)
    assert len(extents) == 2 and extents[0] == extents[1], extents
    return [eval(extents[0], {"bx": b}) for b in range(ctas)]  # noqa: S307 - floor division as in TIR


@tile_nb.jit
def triangular(A, B, C, block_M: int = 128, block_N: int = 256, block_K: int = 64):
    """A test kernel whose k-loop grows with bx (as causal attention's does)."""
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=256) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), T.float16)
        B_shared = T.alloc_shared((block_K, block_N), T.float16)
        C_local = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_local)
        for k in T.Pipelined(bx + 1, num_stages=3):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[bx * block_M, by * block_N])


@pytest.mark.parametrize(
    "func,why",
    [
        (lambda: gemm_ir(2048, 2048, 1024, **BIG), "128 tiles fit on 132 SMs at once"),
        (
            lambda: gemm_ir(4096, 4096, 1024).with_attr("tile_nb.tma", 0),
            "they need the TMA pipeline's producer",
        ),
        (
            lambda: gemm_ir(4096, 4096, 1024).with_attr("tile_nb.producer_warp", 0),
            "they need a producer warp",
        ),
        (
            lambda: triangular.specialize(M=4096, N=4096, K=4096),
            "the pipelined loop's trip count differs from tile to tile",
        ),
    ],
)
def test_refusals_say_why(func, why):
    text = note(persistent(func()))
    assert f"no persistent CTAs ({why}" in text, text


def test_a_dynamic_grid_is_refused():
    @tile_nb.jit
    def dyn(A, B, C, out_dtype: T.dtype = T.float32):
        M = T.dynamic('M')
        N, K = T.const('N, K')
        A: T.Tensor[[M, K], T.float16]
        B: T.Tensor[[K, N], T.float16]
        C: T.Tensor[[M, N], out_dtype]
        with T.Kernel(T.ceildiv(M, 128), T.ceildiv(N, 256), threads=256) as (bx, by):
            A_shared = T.alloc_shared((128, 64), T.float16)
            B_shared = T.alloc_shared((64, 256), T.float16)
            C_local = T.alloc_fragment((128, 256), T.float32)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, 64), num_stages=3):
                T.copy(A[bx * 128, k * 64], A_shared)
                T.copy(B[k * 64, by * 256], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[bx * 128, by * 256])

    text = note(persistent(dyn.specialize(N=4096, K=1024)))
    assert "no persistent CTAs (the grid depends on a T.dynamic dimension)" in text, text
    # nor TMA stores of a 16-bit C (kept to static shapes until a GPU run covers T.dynamic outputs)
    fp16 = dyn.specialize(N=4096, K=1024, out_dtype=T.float16)
    assert plan(fp16).tma_store is None and plan(fp16).refusal("tma_store") is None
    assert "no TMA store (C has a T.dynamic dimension)" in note(fp16.with_attr("tile_nb.tma_store", 1))


@pytest.mark.parametrize("cfg", [dict(BIG), dict(BIG, num_stages=4), dict(BIG, out_dtype=T.float16)],
                         ids=["s3", "s4", "fp16_accumulator"])
def test_persistent_kernels_build_without_spills(cfg):
    from tile_nb.backend.cuda_compile import available_compiler
    from tile_nb.runtime import compile as rt_compile

    if available_compiler("nvcc") != "nvcc":
        pytest.skip("nvcc is not installed here")
    kernel = rt_compile(persistent(gemm_ir(4096, 4096, 4096, **cfg)), "sm_90a", options={"cache": False})
    res = kernel.resources
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0
    assert re.search(r"for \(int tile = 0; tile < \(\(643 - \(\(int\)blockIdx.x\)\) / 132\); \+\+tile\)",
                     kernel.cuda_source)


def test_a_16_bit_c_leaves_through_shared_memory_and_tma_stores():
    """The consumers' form (tile_nb.producer_stores = 0; the default where the
    producer may not issue them)."""
    s3 = whole_tiles(
        gemm_ir(4096, 4096, 1024, out_dtype=T.float16, **BIG).with_attr("tile_nb.producer_stores", 0)
    )
    assert "epilogue through shared memory and TMA stores (4 of 4 panels at a time)" in note(s3)
    ir = lowered(s3)
    # C's tensor map: 64-column boxes of 128 rows, 128-byte swizzle (the staging panels' layout)
    assert "T.tensormap_encode_tiled(C_tensormap, C.data, 4096, 4096, 8192, 64, 128, 1, 1" in ir
    epilogue = ir[ir.index("tnb_bulk_wait_read0"):]
    assert epilogue.count("tnb_tma_store_2d") == 4 and epilogue.count("tnb_bulk_commit") == 1
    assert "by_tile * 256 + 192, bx_tile * 128" in epilogue  # the last panel's coordinates, innermost first
    # the stores finish before the CTA exits
    assert ir.rstrip().endswith('T.cuda.func_call("tnb_bulk_wait0")')
    # 4 stages leave room for half the tile: two rounds of two panels
    s4 = whole_tiles(gemm_ir(4096, 4096, 1024, out_dtype=T.float16, num_stages=4, **BIG)
                     .with_attr("tile_nb.producer_stores", 0))
    assert (plan(s4).tma_store.chunk, plan(s4).tma_store.panels) == (2, 4)
    assert lowered(s4).count("tnb_bulk_commit\")") == 2


def test_the_producer_warp_issues_the_stores_of_a_persistent_kernel():
    """The consumers stage the tile (the panels the staging tile lacks go into the last k-tile's stage of B)
    and release that stage; the producer, which waits for the stage before refilling it anyway, then issues
    the stores: no barrier and no store wait in the consumers' epilogue."""
    s4 = whole_tiles(gemm_ir(4096, 4096, 1024, out_dtype=T.float16, num_stages=4, **BIG))
    assert note(s4).endswith(
        "epilogue through shared memory (4 panels, 2 of them in the last k-tile's stage of "
        "B_shared) and TMA stores issued by the producer warp"
    )
    ir = lowered(s4)
    producer, consumers = ir[:ir.index("for tile in range")], ir[ir.index("for tile in range"):]
    assert "tnb_bulk" not in consumers and "tnb_tma_store" not in consumers
    # the staging tile's panels, then one consumer barrier (both warpgroups' MMAs have read B's
    # last stage), then the panels into that stage; the stage of the tile's last k-tile (K =
    # 1024: 16 of them) is released after
    staging, spill = "T.address_of(C_stage[", "T.address_of(B_shared_as_C[(tile * 16 + 16 - 1) % 4"
    assert consumers.count("tnb_bar_sync_1_256") == 1
    assert (
        consumers.index("tnb_wgmma_wait0")
        < consumers.index(staging)
        < consumers.index("tnb_bar_sync_1_256")
        < consumers.index(spill)
    )
    release = 'T.address_of(stage_barriers[4 + (tile * 16 + 16 - 1) % 4])'
    assert (
        consumers.index(spill)
        < consumers.index("tnb_fence_proxy_async")
        < consumers.index("tnb_warp_sync")
        < consumers.index(release)
    )
    # the producer: the previous tile's 4 stores at k-tile 3 of the next, then the last tile's after the loop
    assert producer.count('"tnb_tma_store_2d"') == 8 and producer.count('"tnb_bulk_commit"') == 2
    assert producer.count('"tnb_bulk_wait_read0"') == 1 and producer.count('"tnb_bulk_wait0"') == 1
    assert "if k_load == 3 and tile_load > 0:" in producer
    s3 = gemm_ir(4096, 4096, 1024, out_dtype=T.float16, **BIG)  # the whole tile fits the staging tile
    store = plan(s3).tma_store
    assert store.by_producer and store.spill is None and (store.chunk, store.panels) == (4, 4)
    # where the producer may not: fewer k-tiles than stages, clusters, or switched off
    short = gemm_ir(4096, 4096, 128, out_dtype=T.float16, num_stages=4, **BIG)
    for func in (short, s4.with_attr("tile_nb.cluster", 2)):
        store = plan(func).tma_store
        assert not store.by_producer and (store.chunk, store.panels) == (2, 4)


def test_tma_store_switch_and_refusals():
    fp16 = gemm_ir(4096, 4096, 1024, out_dtype=T.float16, **BIG)
    assert plan(fp16.with_attr("tile_nb.tma_store", 0)).tma_store is None
    assert plan(fp16.with_attr("tile_nb.persistent", 0)).tma_store is not None
    fp32 = gemm_ir(4096, 4096, 1024, **BIG)
    assert plan(fp32).tma_store is None and not plan(fp32).refusals  # not asked for: nothing said
    assert "no TMA store (C is not a 2-d 8- or 16-bit tensor" in note(fp32.with_attr("tile_nb.tma_store", 1))
    # a C whose data pointer is not 16-byte aligned in this call (the JIT specializes on it): register stores
    shifted = fp16.with_attr("tile_nb.unaligned", ["C"])
    assert plan(shifted).tma_store is None and not plan(shifted).refusals
    assert plan(shifted.with_attr("tile_nb.tma_store", 1)).refusal("tma_store").code == "tma_store.unaligned"
    assert "no TMA store (C's data pointer is not 16-byte aligned" in note(
        shifted.with_attr("tile_nb.tma_store", 1)
    )


def test_a_kernel_of_one_wave_gets_tma_stores_too():
    """Not persistent (128 tiles on 132 SMs): each CTA stores its one tile and
    waits for the stores at the end."""
    func = gemm_ir(2048, 2048, 1024, out_dtype=T.float16, **BIG)
    assert note(func).endswith(
        "epilogue through shared memory and TMA stores (4 of 4 panels at a time); a CTA "
        "of one tile waits for its stores before it exits"
    )
    ir = lowered(func)
    assert ir.count('"tnb_tma_store_2d"') == 4 and ir.rstrip().endswith('T.cuda.func_call("tnb_bulk_wait0")')
    cp_async = gemm_ir(2048, 2048, 1024, out_dtype=T.float16).with_attr("tile_nb.tma", 0)  # no TMA pipeline
    assert plan(cp_async).tma_store is None and plan(cp_async).refusal("tma_store") is None
    assert "no TMA store (it comes with the TMA pipeline)" in note(cp_async.with_attr("tile_nb.tma_store", 1))


@pytest.mark.parametrize("in_dtype", ["float16", "float8_e4m3fn"])
def test_producer_stores_read_the_panels_the_consumers_wrote(in_dtype):
    """Byte addresses in the generated CUDA: the producer's TMA stores read exactly the four 16 KiB panels the
    consumers write (two in the staging tile, two in the B tile's stage of the last k-tile, 1 KiB
    aligned), also where B is 8-bit and the panels hold 16-bit C (a unit slip there made
    misaligned stores on the GPU)."""
    from kernels.seed import gemm_fp8, gemm_variant

    from tile_nb.runtime import compile as rt_compile

    if in_dtype == "float16":
        func = gemm_variant.specialize(
            M=4000,
            N=4104,
            K=1024,
            block_N=256,
            block_K=64,
            threads=256,
            num_stages=4,
            in_dtype=T.float16,
            out_dtype=T.float16,
        )
    else:
        func = gemm_fp8.specialize(M=4000, N=4104, K=1024, out_dtype=T.bfloat16)
    kernel = rt_compile(func, "sm_90a", options={"cache": False})
    assert "2 of them in the last k-tile's stage of B_shared" in kernel.pipeline
    shared = {t["name"]: t for t in kernel.plan["shared"]}
    size = {"half": 2, "bfloat16_t": 2, "nv_bfloat16": 2, "__nv_bfloat16": 2}
    pointer = r"\(&\(\(\((\w+)\*\)smem_pool_ptr\)\[\(?(.*?)\)?\]\)\)"

    def byte(kind, index):
        return size[kind] * int(index)

    stores = {byte(k, i) for k, i in re.findall(r"tnb_tma_store_2d\(" + pointer, kernel.cuda_source)}
    b = shared["B_shared"]
    last_stage = b["offset"] + 3 * b["bytes"] // 4          # 16 k-tiles: the last one is in stage 3 of 4
    staging = shared["C_stage"]["offset"]
    assert stores == {staging, staging + 16384, last_stage, last_stage + 16384}
    assert all(s % 1024 == 0 for s in stores)
    # the consumers' 4-byte writes: each panel's base plus the swizzled offset of a thread's pair of columns
    writes = re.findall(r"tnb_vst_float32x2_\w+\(" + pointer, kernel.cuda_source)
    bases = {byte(k, i.rsplit(" + ", 1)[1]) for k, i in writes}
    assert {base // 16384 * 16384 for base in bases} == stores

"""tilelang's host-side APIs and hints on tile_nb's stand-in: `tilelang.utils.tensor`, the cache switches,
`DType.as_torch` / `tilelang.DataType`, the autotuner's search (`@tilelang.autotune`, `AutoTuner`,
`set_autotune_inputs`), `tilelang.carver.arch.driver`, `tilelang.contrib.nvcc`, and the language hints
`T.use_swizzle` / `T.GemmWarpPolicy` (accepted, recorded, results unchanged). Checked against torch; refusals
must name the API."""
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch

import tile_nb
import tile_nb.language as T
import tile_nb.tilelang as tl
from tile_nb.errors import DSLError
from tile_nb.tilelang import UnsupportedTilelangAPI
from tile_nb.tilelang.autotuner import AutoTuner, autotune, get_autotune_inputs, set_autotune_inputs
from tile_nb.tilelang.utils.tensor import TensorSupplyType, get_tensor_supply, torch_assert_close

GPU = pytest.mark.gpu


# -- tilelang.utils.tensor -----------------------------------------------------------------------------------
def test_torch_assert_close_allows_the_mismatched_ratio_and_no_more():
    a = torch.zeros(1000)
    b = a.clone()
    b[:2] = 1.0                                   # 2 of 1000 outside atol + rtol*|b|
    assert torch_assert_close(a, b, max_mismatched_ratio=0.002) is True
    with pytest.raises(
        AssertionError, match=r"(?s)Too many mismatched elements: 2 > 1 .*First mismatch at index \[0\]"
    ):
        torch_assert_close(a, b)                  # default ratio 0.001: 1 allowed
    # the tolerance is atol + rtol * |reference| (torch.isclose's), tested on its edge
    ref = torch.full((10,), 100.0)
    assert torch_assert_close(ref + 0.9, ref, rtol=1e-2, atol=0.0, max_mismatched_ratio=0)
    with pytest.raises(AssertionError):
        torch_assert_close(ref + 1.1, ref, rtol=1e-2, atol=0.0, max_mismatched_ratio=0)


def test_torch_assert_close_checks_attributes_and_nan():
    a = torch.tensor([1.0, float("nan")])
    assert torch_assert_close(a, a.clone(), max_mismatched_ratio=0)
    with pytest.raises(AssertionError):
        torch_assert_close(a, a.clone(), equal_nan=False, max_mismatched_ratio=0)
    with pytest.raises(AssertionError, match="shapes differ"):
        torch_assert_close(torch.zeros(2), torch.zeros(3))
    with pytest.raises(AssertionError, match="dtypes differ"):
        torch_assert_close(torch.zeros(2), torch.zeros(2, dtype=torch.float16))
    assert torch_assert_close(torch.zeros(2), torch.zeros(2, dtype=torch.float16), check_dtype=False)
    assert torch_assert_close(torch.tensor([1, 2]), torch.tensor([1, 2]), max_mismatched_ratio=0)


def test_tensor_supply_kinds():
    like = torch.empty(64, 32, dtype=torch.float16)
    auto = get_tensor_supply(TensorSupplyType.Auto)(like)
    assert auto.shape == (64, 32) and auto.dtype == torch.float16 and auto.abs().max() <= 1
    ints = get_tensor_supply(TensorSupplyType.Integer)(like)
    assert ints.dtype == torch.float16 and set(ints.unique().tolist()) <= {-2, -1, 0, 1, 2}
    i32 = get_tensor_supply(TensorSupplyType.Auto)(types.SimpleNamespace(shape=[5, 7], dtype="int32"))
    assert i32.dtype == torch.int32 and i32.min() >= -2 and i32.max() <= 2
    u8 = get_tensor_supply(TensorSupplyType.Integer)(torch.empty(100, dtype=torch.uint8))
    assert u8.max() <= 2
    assert get_tensor_supply(TensorSupplyType.Zero)(like).eq(0).all()
    assert (
        get_tensor_supply(TensorSupplyType.One)(types.SimpleNamespace(shape=(3,), dtype=T.bfloat16))
        .eq(1)
        .all()
    )
    # tilelang's
    assert get_tensor_supply(TensorSupplyType.Normal)(torch.empty(4, dtype=torch.int8)).eq(1).all()
    with pytest.raises(ValueError, match="shape must be static"):
        get_tensor_supply()(types.SimpleNamespace(shape=["n", 4], dtype="float32"))
    with pytest.raises(TypeError, match="TensorSupplyType"):
        get_tensor_supply("auto")


def test_supply_type_is_the_profilers():
    from tile_nb.tilelang.profiler import TensorSupplyType as Profilers

    assert TensorSupplyType is Profilers and tl.TensorSupplyType is Profilers


# -- cache switches, dtypes ----------------------------------------------------------------------------------
def test_cache_switches_drive_tile_nbs_disk_cache(monkeypatch):
    from tile_nb.runtime.cache import cache_enabled

    monkeypatch.delenv("TILE_NB_DISABLE_CACHE", raising=False)
    assert tl.is_cache_enabled() and cache_enabled()
    tl.disable_cache()
    assert os.environ["TILE_NB_DISABLE_CACHE"] == "1"
    assert not tl.is_cache_enabled() and not cache_enabled()
    tl.enable_cache()
    assert tl.is_cache_enabled() and cache_enabled()


def test_dtype_as_torch_and_datatype():
    from tile_nb.language.dtypes import ALL_DTYPES

    for name, dt in ALL_DTYPES.items():
        assert dt.as_torch() is getattr(torch, name)
    assert T.dtype("float16").as_torch() is torch.float16
    assert tl.DataType("float16").bits == 16 and tl.DataType(T.int8).bits == 8


def test_tfloat32_is_tile_nb_tfloat32():
    """(It was refused while the interpreter did not round to TF32; tests/test_tf32_gemm.py covers it now.)"""
    import tile_nb.tilelang.language as TL

    assert TL.tfloat32 is T.tfloat32 and TL.tfloat32 == "float32"


# -- carver.arch.driver, contrib.nvcc ------------------------------------------------------------------------
@pytest.fixture
def fake_gpu(monkeypatch):
    props = types.SimpleNamespace(name="Fake", multi_processor_count=7, shared_memory_per_block=48 * 1024,
                                  shared_memory_per_multiprocessor=100 * 1024, regs_per_multiprocessor=65536)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 6))
    return props


def test_driver_reads_torch_device_properties(fake_gpu):
    from tile_nb.tilelang.carver.arch import driver

    assert driver.get_num_sms() == 7
    assert driver.get_device_name() == "Fake"
    assert (
        driver.get_shared_memory_per_block() == 49152
        and driver.get_shared_memory_per_block(format="kb") == 48
    )
    assert driver.get_max_dynamic_shared_size_bytes(format="kb") == 100
    assert driver.get_registers_per_block() == 65536
    with pytest.raises(ValueError, match="format"):
        driver.get_shared_memory_per_block(format="gb")
    with pytest.raises(UnsupportedTilelangAPI, match="get_persisting_l2_cache_max_size"):
        driver.get_persisting_l2_cache_max_size()


def test_driver_without_a_gpu(monkeypatch):
    from tile_nb.tilelang.carver.arch import driver

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert driver.get_cuda_device_properties() is None
    with pytest.raises(RuntimeError, match="get_num_sms: torch sees no CUDA device"):
        driver.get_num_sms()


def test_nvcc_compute_versions(fake_gpu):
    from tile_nb.tilelang.contrib import nvcc

    assert nvcc.get_target_compute_version() == "8.6"             # the device's
    assert nvcc.get_target_compute_version("cuda -arch=sm_90a") == "9.0"
    assert nvcc.get_target_compute_version({"kind": "cuda", "arch": "sm_100a"}) == "10.0"
    assert nvcc.parse_compute_version("12.1") == (12, 1)
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.contrib\.nvcc\.compile_cuda"):
        nvcc.compile_cuda


def test_carver_other_names_are_refused():
    import tile_nb.tilelang.carver as carver
    import tile_nb.tilelang.carver.arch as arch

    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.carver\.arch\.get_tensor_core_caps"):
        arch.get_tensor_core_caps
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.carver\.ElementwiseTemplate"):
        carver.ElementwiseTemplate


# -- language hints ------------------------------------------------------------------------------------------
@tile_nb.jit
def _hinted_gemm(A, B, block: int = 32, order: str = "row", policy: int = 1):
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C = T.empty([M, N], T.float32)
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
        T.use_swizzle(panel_size=4, order=order)
        a = T.alloc_shared([block, K], T.float16)
        b = T.alloc_shared([K, block], T.float16)
        c = T.alloc_fragment([block, block], T.float32)
        T.copy(A[by * block, 0], a)
        T.copy(B[0, bx * block], b)
        T.gemm(a, b, c, clear_accum=True, policy=policy)
        T.copy(c, C[by * block, bx * block])
    return C


def test_swizzle_and_warp_policy_are_recorded_and_change_nothing():
    torch.manual_seed(0)
    A, B = torch.randn(64, 32, dtype=torch.float16), torch.randn(32, 96, dtype=torch.float16)
    ref = A.float() @ B.float()
    for policy in T.GemmWarpPolicy:
        torch.testing.assert_close(_hinted_gemm(A, B, policy=policy), ref, atol=1e-3, rtol=1e-3)
    hints = list(_hinted_gemm.specialize(M=64, N=96, K=32, order="column", policy=T.GemmWarpPolicy.FullCol)
                 .attrs["tile_nb.hints"])
    assert len(hints) == 2
    assert hints[0].startswith("use_swizzle(panel_size=4, order='column')")
    assert "gemm policy=GemmWarpPolicy.FullCol" in hints[1]


def test_pass_configs_hints_are_recorded_in_the_kernel_and_change_nothing():
    """tilelang's lowering hints in `pass_configs` (a `@tilelang.jit` kernel and a `@T.prim_func` factory):
    recorded in the elaborated kernel's `tile_nb.hints` with the reason, not applied; results are torch's."""
    hints = {tl.PassConfigKey.TL_DISABLE_TMA_LOWER: True, tl.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}
    hinted = tl.jit(pass_configs=hints)(_hinted_gemm.fn)
    A, B = torch.randn(64, 32, dtype=torch.float16), torch.randn(32, 96, dtype=torch.float16)
    torch.testing.assert_close(hinted(A, B), A.float() @ B.float(), atol=1e-3, rtol=1e-3)
    recorded = [str(h) for h in hinted._tile_nb.specialize(A, B).attrs["tile_nb.hints"]]
    assert recorded[:2] == [
        "pass_configs tl.disable_tma_lower=True: recorded, not applied (tile_nb decides where copies use TMA "
        "itself (LoweringOptions.tma))",
        "pass_configs tl.disable_warp_specialized=True: recorded, not applied (tile_nb decides producer "
        "warps itself (LoweringOptions.producer_warp))",
    ]
    assert any(h.startswith("use_swizzle(") for h in recorded[2:])   # the body's own hints follow

    @tl.jit(out_idx=[1], pass_configs={"tl.disable_safe_memory_legalize": True})
    def double(n):
        @T.prim_func
        def main(X: T.Tensor((n,), T.float32), Y: T.Tensor((n,), T.float32)):
            with T.Kernel(1, threads=32):
                for i in T.Parallel(n):
                    Y[i] = X[i] * 2

        return main

    x = torch.randn(7)
    kernel = double(7)
    torch.testing.assert_close(kernel(x), 2 * x)
    assert [str(h) for h in kernel.tile_nb_kernel.specialize(x).attrs["tile_nb.hints"]] == [
        "pass_configs tl.disable_safe_memory_legalize=True: recorded, not applied (tile_nb keeps its bounds "
        "guards (an in-bounds access reads the same))"]


def test_hint_arguments_are_checked():
    A, B = torch.zeros(32, 32, dtype=torch.float16), torch.zeros(32, 32, dtype=torch.float16)
    with pytest.raises(DSLError, match=r"T\.use_swizzle\(order=\.\.\.\): expected one of .* got 'diagonal'"):
        _hinted_gemm(A, B, order="diagonal")
    with pytest.raises(DSLError, match=r"T\.gemm\(policy=\.\.\.\): expected a T\.GemmWarpPolicy .* got 7"):
        _hinted_gemm(A, B, policy=7)


# -- the autotuner -------------------------------------------------------------------------------------------
def _scaled(configs, **options):
    """A kernel whose tuned `mult` changes the result: only mult=2 matches the reference x * 2."""
    @tl.jit
    def scale(X, mult: int = 1, block: int = 16):
        N = T.const("N")
        X: T.Tensor([N], T.float32)
        Y = T.empty([N], T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = X[bx * block + i] * mult
        return Y

    return autotune(configs=configs, **options)(scale)


CONFIGS = [
    {"mult": 3, "block": 16},
    {"mult": 2, "block": 16},
    {"mult": 2, "block": 32},
    {"mult": 5, "block": 32},
]


def test_search_keeps_only_configurations_that_pass_ref_prog(capsys):
    tuned = _scaled(CONFIGS, ref_prog=lambda x: x * 2)
    x = torch.randn(100)
    y = tuned(x)
    torch.testing.assert_close(y, x * 2, atol=0, rtol=0)
    kernel = tuned.compile(x)                     # the choice for these arguments, no second search
    assert kernel.config["mult"] == 2 and kernel.latency > 0
    torch.testing.assert_close(kernel(x), x * 2, atol=0, rtol=0)
    err = capsys.readouterr().err
    assert err.count("tile_nb autotune scale: 4 configurations") == 1 and "host clock" in err


def test_given_tuned_parameter_skips_the_search(capsys):
    tuned = _scaled(CONFIGS, ref_prog=lambda x: x * 2)
    x = torch.randn(40)
    torch.testing.assert_close(tuned(x, mult=3), x * 3)   # what the call gives, unchecked (tilelang's rule)
    assert "tile_nb autotune" not in capsys.readouterr().err


def test_search_on_set_autotune_inputs():
    tuned = _scaled(CONFIGS, ref_prog=lambda x: x * 2)
    x = torch.randn(48)
    assert get_autotune_inputs() is None
    with set_autotune_inputs(x):
        assert get_autotune_inputs() == [x]
        kernel = tuned.compile(N=48)
    assert get_autotune_inputs() is None
    assert kernel.config["mult"] == 2
    torch.testing.assert_close(kernel(x), x * 2, atol=0, rtol=0)


def test_search_with_no_passing_configuration_says_why():
    tuned = _scaled([{"mult": 3}, {"mult": 4}], ref_prog=lambda x: x * 2)
    with pytest.raises(
        RuntimeError, match=r"(?s)found no configuration .*'mult': 3.*output 0 differs from ref_prog"
    ):
        tuned(torch.randn(20))


def test_search_inputs_are_copies():
    """The search runs on clones: a kernel writing into its argument leaves the
    caller's tensor to the final run."""
    @tl.jit
    def bump(X, add: int = 1):
        N = T.const("N")
        X: T.Tensor([N], T.float32)
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                X[i] = X[i] + add

    tuned = autotune(configs=[{"add": 1}, {"add": 2}])(bump)
    x = torch.zeros(8)
    tuned(x)
    # one run's worth, not one per configuration
    assert x.eq(tuned.compile(torch.zeros(8)).config["add"]).all()


def test_per_config_pass_configs():
    ignored = {tl.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}
    tuned = _scaled([{"mult": 2, "pass_configs": ignored}], ref_prog=lambda x: x * 2)
    torch.testing.assert_close(tuned(torch.ones(4)), torch.full((4,), 2.0))
    fast = _scaled([{"mult": 2, "pass_configs": {tl.PassConfigKey.TL_ENABLE_FAST_MATH: True}}])
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.autotune configs with pass_configs"):
        fast(torch.ones(4))


def test_supply_prog_is_refused_by_name():
    tuned = _scaled([{"mult": 2}], supply_prog=lambda params: [torch.ones(4)])
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.autotune\(supply_prog=\)"):
        tuned.compile(N=4)


def test_autotuner_api_mode_over_a_factory():
    pytest.importorskip("tile_nb.factory")  # @T.prim_func kernel factories (tilelang.jit(out_idx=))

    N = 64

    def kernel(mult=None, block=None):
        @T.prim_func
        def main(X: T.Tensor((N,), T.float32), Y: T.Tensor((N,), T.float32)):
            with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < N:
                        Y[bx * block + i] = X[bx * block + i] * mult

        return main

    x = torch.randn(64)
    with set_autotune_inputs(x):
        result = (
            AutoTuner.from_kernel(kernel=kernel, configs=[{"mult": 3, "block": 16}, {"mult": 2, "block": 32}])
            .set_compile_args(out_idx=[-1], target="auto")
            .set_profile_args(ref_prog=lambda x: x * 2)
            .run(warmup=1, rep=2)
        )
    assert result.config == {"mult": 2, "block": 32} and result.latency > 0
    assert [why is None for _, _, why in result.table] == [False, True]
    torch.testing.assert_close(result.kernel(x), x * 2, atol=0, rtol=0)


SCRIPT = '''
import torch
import tilelang
import tilelang.language as T
from tilelang.autotuner import autotune
from tilelang.carver.arch import driver
from tilelang.contrib import nvcc
from tilelang.utils.tensor import torch_assert_close


@autotune(configs=[{"block": 16}, {"block": 64}], ref_prog=lambda x: x + 1)
@tilelang.jit
def inc(X, block=32):
    N = T.const("N")
    X: T.Tensor((N,), T.float32)
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
        for i in T.Parallel(block):
            Y[bx * block + i] = X[bx * block + i] + 1.0
    return Y


x = torch.randn(128, device="cuda")
torch_assert_close(inc(x), x + 1, max_mismatched_ratio=0)
print("best", inc.compile(x).config, driver.get_num_sms(), nvcc.get_target_compute_version(),
      T.float16.as_torch(), tilelang.is_cache_enabled())
'''


def test_script_under_tile_nb_run_cpu(tmp_path):
    (tmp_path / "script.py").write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ)
    env.pop("TILE_NB_DISABLE_CACHE", None)
    done = subprocess.run([sys.executable, "-m", "tile_nb.run", "--cpu", "script.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "132 9.0 torch.float16 True" in done.stdout           # the pretend cc 9.0 device's facts
    assert "best {'block':" in done.stdout and "host clock" in done.stderr


@GPU
def test_search_times_on_the_gpu(capsys):
    tuned = _scaled(CONFIGS, ref_prog=lambda x: x * 2)
    x = torch.randn(1 << 16, device="cuda")
    torch.testing.assert_close(tuned(x), x * 2, atol=0, rtol=0)
    assert "GPU (tile_nb.bench.do_bench" in capsys.readouterr().err


def test_interpreter_search_drops_configurations_the_gpu_lowering_refuses():
    """On the interpreter a kernel too big for the GPU still runs; the search
    drops it, as it would not compile."""
    @tl.jit
    def staged(X, rows: int = 8):
        N = T.const("N")
        X: T.Tensor([N, 1024], T.float32)
        Y = T.empty([N, 1024], T.float32)
        with T.Kernel(T.ceildiv(N, rows), threads=128) as bx:
            tile = T.alloc_shared([rows, 1024], T.float32)        # rows=128: 512 KiB of shared memory
            T.copy(X[bx * rows, 0], tile)
            T.copy(tile, Y[bx * rows, 0])
        return Y

    x = torch.randn(128, 1024)
    kernel = autotune(configs=[{"rows": 128}, {"rows": 8}], ref_prog=lambda x: x)(staged).compile(x)
    assert kernel.config == {"rows": 8}
    torch.testing.assert_close(kernel(x), x, atol=0, rtol=0)
    too_big = autotune(configs=[{"rows": 256}], ref_prog=lambda x: x)(staged)
    with pytest.raises(
        RuntimeError,
        match=r"(?s)found no configuration.*'rows': 256.*GPU lowering refuses it: .*"
        r"shared memory",
    ):
        too_big(torch.randn(256, 1024))


def test_transform_pass_config_key_is_the_stand_ins():
    from tile_nb.tilelang.transform import PassConfigKey

    assert PassConfigKey is tl.PassConfigKey
    import tile_nb.tilelang.transform as transform

    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.transform\.LowerTileOp"):
        transform.LowerTileOp


def test_profiler_inputs_follow_the_supply_type():
    kernel = _scaled([{"mult": 2}]).compile(N=64, mult=2)
    ints = kernel.get_profiler(TensorSupplyType.Integer)._inputs()
    assert len(ints) == 1 and ints[0].shape == (64,) and set(ints[0].unique().tolist()) <= {-2, -1, 0, 1, 2}
    assert kernel.get_profiler(TensorSupplyType.One)._inputs()[0].eq(1).all()
    default = kernel.get_profiler()._inputs()[0]                  # tile_nb's own: randn
    assert default.dtype == torch.float32 and not set(default.unique().tolist()) <= {-2, -1, 0, 1, 2}

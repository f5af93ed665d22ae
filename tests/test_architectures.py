"""Every architecture from sm_75 to sm_120 builds a kernel or refuses it with a LoweringError at
the user's line that names the architecture and what it lacks, never a compiler dump (issue 35,
items 1 and 3; docs/architectures.md).

Tiers:
- CPU: the architecture facts, target selection (`TILE_NB_ARCH`, `compute_XY` PTX builds), the instructions
  each arch's CUDA uses, and the refusals;
- CUDA toolkit (skipped without nvcc): the reference kernels of tests/kernels/corpus.py compiled to cubins by
  ptxas for each architecture, or refused as EXPECTED says; a few cases unmarked, the whole matrix `slow`;
- GPU (`gpu`, the H200): `compute_75` / `compute_80` builds of the seed GEMM and FlashAttention, loaded as
  PTX, compiled by the driver and compared with torch (not run yet: no GPU in the session that wrote them).

`python tests/test_architectures.py` prints the matrix as the markdown table of
benchmarks/results/architectures.md.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from kernels import arch_matrix  # noqa: E402
from kernels.corpus import ARCHS  # noqa: E402

import tile_nb  # noqa: E402
import tile_nb.language as T  # noqa: E402
from tile_nb.backend import toolchain  # noqa: E402
from tile_nb.lower.analysis.arch import ArchCaps, UnsupportedArchError, parse_arch  # noqa: E402

HAVE_NVCC = toolchain.find_tool("nvcc") is not None
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="needs nvcc/ptxas to build cubins")


# ---------------------------------------------------------------------------------------------- the matrix

# the kernels (the corpus and three configurations for the smaller GPUs) and the refusals each pair expects
_kernels, _expected = arch_matrix.kernels, arch_matrix.expected


def _compile(name: str, arch: str):
    from kernels import corpus

    from tile_nb.lower import LoweringOptions
    from tile_nb.runtime import compile as rt_compile

    return rt_compile(_kernels()[name](), arch, options={"cache": False},
                      lowering=LoweringOptions(sm_count=corpus.SM_COUNT))


def _check(name: str, arch: str):
    """Build `name` for `arch` and check the outcome against EXPECTED; returns the kernel or the error."""
    from tile_nb.backend.cuda_compile import CudaCompileError
    from tile_nb.lower import LoweringError

    expected = _expected().get((name, arch))
    try:
        kernel = _compile(name, arch)
    except CudaCompileError as err:  # the failure this file exists to prevent: a compiler dump
        pytest.fail(f"{name} for {arch}: a raw compiler error instead of a LoweringError:\n{err}")
    except LoweringError as err:
        assert expected is not None, f"{name} for {arch} was refused, expected to build: {err}"
        assert expected in str(err), f"{name} for {arch}: expected a refusal with {expected!r}, got: {err}"
        assert arch in str(err) or "sm_75" in expected, f"the refusal does not name {arch}: {err}"
        assert err.lineno is not None and err.filename and err.filename.endswith(".py"), \
            f"the refusal of {name} for {arch} does not point at the user's line: {err}"
        return err
    assert expected is None, f"{name} for {arch} built, but a refusal with {expected!r} was expected"
    assert kernel.arch == arch and kernel.cubin, f"{name} for {arch}: no cubin"
    resources = kernel.resources_by_kernel
    assert resources and all(r.registers > 0 for r in resources.values()), resources
    return kernel


FAST_CASES = [
    ("gemm_seed_1000x1032x1000_sm80", "sm_75"),    # mma.sync m16n8k8 and plain copies
    ("gemm_bf16_1024", "sm_75"),                   # refused: no bfloat16
    ("gemm_fp8_128x256x128_8192_sm90a", "sm_80"),  # refused: no 8-bit floats
    ("flash_attention_d64_64x64", "sm_75"),
    ("rowwise_softmax_fp16_sm90a", "sm_120"),
    ("gemm_seed_1000x1032x1000_sm80", "sm_100a"),
]


@needs_nvcc
@pytest.mark.parametrize("name, arch", FAST_CASES)
def test_a_representative_kernel_builds_or_is_refused(name, arch):
    _check(name, arch)


def _matrix_cases():
    try:
        names = sorted(_kernels())
    except Exception:  # noqa: BLE001 - collection must not fail where the kernels cannot be built
        names = []
    return [
        pytest.param(n, a, marks=pytest.mark.slow) for a in ARCHS for n in names if (n, a) not in FAST_CASES
    ]


@needs_nvcc
@pytest.mark.parametrize("name, arch", _matrix_cases())
def test_every_reference_kernel_builds_or_is_refused(name, arch):
    _check(name, arch)


# ---------------------------------------------------------------------------------------------- CPU: facts

def test_architecture_facts():
    t4, a100, l4, h200, b200, rtx50 = (
        ArchCaps.of(a) for a in ("sm_75", "sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120")
    )
    assert not (t4.cp_async or t4.mma_k16 or t4.bf16 or t4.fp8 or t4.wgmma)
    assert a100.cp_async and a100.mma_k16 and a100.bf16 and not a100.fp8 and not a100.wgmma
    assert l4.fp8 and not l4.wgmma
    assert h200.wgmma and not ArchCaps.of("sm_90").wgmma
    assert not b200.wgmma and not rtx50.wgmma  # Blackwell: the mma.sync path (tcgen05 is not built)
    assert (t4.max_shared_bytes, a100.max_shared_bytes, l4.max_shared_bytes, h200.max_shared_bytes,
            rtx50.max_shared_bytes) == (64 * 1024, 163 * 1024, 99 * 1024, 227 * 1024, 99 * 1024)
    assert "sm_75 lacks cp.async" in t4.lacks("cp_async") and "sm_80" in t4.lacks("cp_async")


@pytest.mark.parametrize("arch, says", [
    ("sm_70", "tile_nb builds for sm_75"), ("sm_61", "tile_nb builds for sm_75"),
    ("sm_91", "not a CUDA architecture nvcc 13 builds"), ("sm_80a", "exist from sm_90 on"),
    ("gfx90a", "expected sm_XY"),
])
def test_unsupported_architectures_are_refused_by_name(arch, says):
    with pytest.raises(UnsupportedArchError, match="unsupported CUDA arch") as info:
        parse_arch(arch)
    assert says in str(info.value) and repr(arch) in str(info.value)


# ----------------------------------------------------------------------------------------------
# CPU: the target

def test_the_arch_comes_from_the_caller_then_tile_nb_arch_then_the_device(monkeypatch):
    from tile_nb.backend import target as target_mod
    from tile_nb.backend.target import resolve_target, target_embeds_ptx, target_label

    monkeypatch.setattr(target_mod, "device_arch", lambda: "sm_90a")
    monkeypatch.delenv("TILE_NB_ARCH", raising=False)
    assert target_label(resolve_target(None)) == "sm_90a"
    monkeypatch.setenv("TILE_NB_ARCH", "sm_75")
    assert target_label(resolve_target(None)) == "sm_75"
    assert target_label(resolve_target("cuda")) == "sm_75"
    assert target_label(resolve_target("sm_120")) == "sm_120"  # the caller's arch wins
    monkeypatch.setenv("TILE_NB_ARCH", "compute_80")
    ptx = resolve_target(None)
    assert target_label(ptx) == "compute_80" and str(ptx.attrs["arch"]) == "sm_80" and target_embeds_ptx(ptx)
    assert not target_embeds_ptx(resolve_target("sm_80"))
    assert target_label(resolve_target("cuda -arch=compute_75")) == "compute_75"
    monkeypatch.setenv("TILE_NB_ARCH", "sm_70")
    with pytest.raises(ValueError, match="TILE_NB_ARCH") as info:
        resolve_target(None)
    assert "'sm_70'" in str(info.value) and "sm_75" in str(info.value)


def test_target_caps_are_those_of_the_arch_kernels_are_built_for(monkeypatch):
    """`tile_nb.backend.target_caps()`: what a notebook sizes its tiles by (05_flash_attention), the arch
    chosen as a compile chooses it; a compute_XY build has the limits of sm_XY."""
    from tile_nb.backend import target as target_mod
    from tile_nb.backend import target_caps

    monkeypatch.setattr(target_mod, "device_arch", lambda: "sm_80")
    monkeypatch.delenv("TILE_NB_ARCH", raising=False)
    assert (target_caps().arch, target_caps().max_shared_bytes) == ("sm_80", 163 * 1024)
    monkeypatch.setenv("TILE_NB_ARCH", "compute_75")
    t4 = target_caps()
    assert (t4.arch, t4.max_shared_bytes, t4.wgmma, t4.cp_async) == ("sm_75", 64 * 1024, False, False)
    assert target_caps("sm_90a").wgmma and target_caps("sm_120").max_shared_bytes == 99 * 1024
    monkeypatch.setattr(target_mod, "device_arch", lambda: None)
    monkeypatch.delenv("TILE_NB_ARCH")
    assert target_caps().arch == "sm_90a"  # no GPU, no TILE_NB_ARCH: the default


def test_the_arch_is_part_of_the_cache_key(monkeypatch):
    from kernels.seed import gemm_ir

    from tile_nb.runtime.compile import cache_key

    func = gemm_ir(256, 256, 256)
    keys = {a: cache_key(func, a)[0] for a in ("sm_75", "sm_80", "compute_80")}
    assert len(set(keys.values())) == 3
    monkeypatch.setenv("TILE_NB_ARCH", "compute_80")
    assert cache_key(func)[0] == keys["compute_80"]


@pytest.mark.parametrize("target, device, ok", [
    ("sm_90a", "sm_90a", True), ("sm_80", "sm_90a", False), ("compute_80", "sm_90a", True),
    ("compute_75", "sm_90a", True), ("compute_89", "sm_90a", True), ("compute_100", "sm_90a", False),
    ("compute_90a", "sm_100a", False), ("sm_80", "sm_80", True), ("compute_80", None, False),
])
def test_which_builds_load_on_which_gpu(target, device, ok):
    from tile_nb.backend.target import launch_problem, resolve_target

    problem = launch_problem(resolve_target(target), device)
    assert (problem is None) == ok, problem
    if target == "sm_80" and device == "sm_90a":
        assert "compute_80" in problem and "TILE_NB_ARCH" in problem  # says how to run it as PTX


@needs_nvcc
def test_a_compute_target_hands_tvm_ptx_and_still_checks_the_cubin():
    """TVM takes the callback's bytes as PTX when they start with '/': a compute_80 build gives it
    the PTX of the sm_80 code (the driver compiles it on the GPU), while ptxas still builds the
    sm_80 cubin and its resources."""
    import importlib

    from kernels.seed import gemm_ir

    from tile_nb.backend.build import BuildOptions, compiling_cuda

    build_mod = importlib.import_module("tile_nb.backend.build")  # the package's `build` is the function
    from tile_nb.runtime import compile as rt_compile

    source = rt_compile(gemm_ir(256, 256, 256), "compute_80", options={"cache": False}).cuda_source
    options = BuildOptions(compiler="nvcc")
    with compiling_cuda("sm_80", options, ptx=True) as capture:
        loaded = build_mod._callback(source)
    assert loaded.startswith(b"//") and b".target sm_80" in loaded and b"cp.async" in loaded
    (_, _, result), = capture.results
    assert result.cubin and result.resources
    with compiling_cuda("sm_80", options) as capture:
        assert build_mod._callback(source) == capture.results[0][2].cubin  # an sm_80 target: the cubin
    from tile_nb.backend.cuda_compile import CubinResult

    kept_none = CubinResult(cubin=b"", arch="sm_80", compiler="a compiler that keeps no PTX", seconds=0.0)
    made = build_mod._loadable_ptx(kept_none, "sm_80", source, options)  # then nvcc -ptx makes it
    assert made.startswith(b"//") and b".target sm_80" in made and kept_none.ptx


# ---------------------------------------------------------------------------------------------- CPU: the code

def _cuda(func, arch):
    import tvm

    from tile_nb.backend.target import resolve_target
    from tile_nb.lower import lower

    target = resolve_target(arch)
    with target:
        exe = tvm.compile(lower(func, target), target=target, tir_pipeline="tirx")
    return exe.mod.imports[0].inspect_source("cuda")


def test_sm75_gemm_uses_m16n8k8_and_plain_copies():
    from kernels.seed import gemm_ir

    func = gemm_ir(1000, 1032, 1000)  # edge tiles: the zero-filled copies too
    t4, a100 = _cuda(func, "sm_75"), _cuda(func, "sm_80")
    assert "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" in t4 and "m16n8k16" not in t4
    assert "ldmatrix.sync.aligned.m8n8.x4" in t4
    assert "cp.async." not in t4 and "tnb_copy_sync_16" in t4  # no cp.async instruction (nor commit / wait)
    assert "m16n8k16" in a100 and "cp.async.cg.shared.global" in a100 and "tnb_copy_sync" not in a100
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower import lower_with_plan

    t4_plan, a100_plan = (lower_with_plan(func, resolve_target(a))[1].summary() for a in ("sm_75", "sm_80"))
    assert t4_plan["mma"][0]["kind"] == "mma.sync m16n8k8 (two per k16)" and "sm_75 has no cp.async" in \
        " ".join(t4_plan["notes"])
    assert a100_plan["mma"][0]["kind"] == "mma.sync m16n8k16" and "cp.async" not in " ".join(
        a100_plan["notes"]
    )


def _refusal(func, arch):
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower import LoweringError, lower

    with pytest.raises(LoweringError) as info:
        lower(func, resolve_target(arch))
    return info.value


def _line_of(path: str, text: str, after: str) -> int:
    lines = Path(path).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def test_bf16_is_refused_on_sm75_at_the_first_line_using_it():
    from kernels import rowwise, seed
    from kernels.seed import gemm_ir

    err = _refusal(gemm_ir(256, 256, 256, in_dtype="bfloat16"), "sm_75")
    assert "A_shared is bfloat16: the target sm_75 lacks bfloat16" in str(err) and "sm_80 or newer" in str(
        err
    )
    assert err.lineno == _line_of(seed.__file__, "T.copy(A[bx", "def gemm_variant")
    err = _refusal(rowwise.softmax.specialize(M=64, N=256, dtype="bfloat16"), "sm_75")  # not only T.gemm
    assert "is bfloat16: the target sm_75 lacks bfloat16" in str(err) and err.lineno is not None
    _cuda(gemm_ir(256, 256, 256, in_dtype="bfloat16"), "sm_80")  # and sm_80 lowers it


@tile_nb.jit
def _round_through(X, Y, via: T.dtype = T.bfloat16):
    """Every buffer is float16 / float32: the narrow type lives only in a cast inside the expression."""
    M = T.const('M')
    X: T.Tensor[[M], T.float16]
    Y: T.Tensor[[M], T.float32]
    with T.Kernel(T.ceildiv(M, 64), threads=64) as bx:
        for i in T.Parallel(64):
            if bx * 64 + i < M:
                Y[bx * 64 + i] = T.cast(T.cast(X[bx * 64 + i], via), T.float32)


@pytest.mark.parametrize("via, arch, needs",
                         [("bfloat16", "sm_75", "sm_80"), ("float8_e4m3fn", "sm_80", "sm_89")])
def test_a_narrow_type_inside_an_expression_is_refused_at_its_line(via, arch, needs):
    """Seen on the H100 as compute_75 PTX (difftest elementwise seeds 4 and 8): a bf16 cast inside an
    expression of float16 / float32 buffers compiled on sm_75 and left the value unrounded (a silent
    difference from the interpreter), or nvrtc rejected it with a compiler dump. Now refused at the user's
    line like a bf16 buffer."""
    func = _round_through.specialize(M=100, via=via)
    err = _refusal(func, arch)
    message = str(err)
    assert f"a {via} value" in message and f"the target {arch} lacks" in message
    assert f"{needs} or newer" in message
    assert err.lineno == _line_of(__file__, "Y[bx * 64 + i] = T.cast(T.cast(X", "def _round_through")
    _cuda(func, needs)  # and the architecture that has the type lowers it


def test_int8_gemm_runs_on_the_cuda_cores_on_sm75_and_other_int8_mixes_are_refused_at_the_gemm_line():
    from kernels import seed
    from kernels.seed import gemm_int8, gemm_variant

    from tile_nb.backend.target import resolve_target
    from tile_nb.lower.analysis.plan import make_plan

    # int8 x int8 into int32 off wgmma: integer multiply-adds on the CUDA cores (test_fp8_fma_gemm.py)
    func = gemm_int8.specialize(M=256, N=256, K=256, block_N=128, block_K=64, num_stages=2)
    assert [k.value for k in make_plan(func, resolve_target("sm_75")).gemms.values()] == ["fma"]
    func = gemm_variant.specialize(M=256, N=256, K=256, in_dtype="int8", block_K=64, num_stages=2)
    err = _refusal(func, "sm_75")  # into a float32 accumulator: no path
    assert "T.gemm: operand A_shared is int8; the target sm_75 has tensor-core MMAs for float16" in str(err)
    assert err.lineno == _line_of(seed.__file__, "T.gemm(", "def gemm_variant")


def test_fp8_is_refused_below_sm89_at_the_first_line_using_it():
    from kernels import seed
    from kernels.seed import gemm_fp8

    func = gemm_fp8.specialize(M=256, N=256, K=256, block_N=128, block_K=128, threads=128, num_stages=2)
    for arch in ("sm_75", "sm_80", "sm_86"):
        err = _refusal(func, arch)
        assert f"the target {arch} lacks 8-bit float types" in str(err) and "sm_89" in str(err)
        assert err.lineno == _line_of(seed.__file__, "T.copy(A[", "def gemm_fp8")
    # the types exist; off wgmma, the 8-bit float T.gemm runs as FMAs on the CUDA cores (test_fp8_fma_gemm.py)
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower.analysis.plan import make_plan

    plan = make_plan(func, resolve_target("sm_89"))
    assert [k.value for k in plan.gemms.values()] == ["fma"]
    assert any("on the CUDA cores: the target sm_89 has no wgmma" in n for n in plan.notes), plan.notes


def test_nothing_hopper_specific_is_emitted_off_sm90a():
    from kernels.seed import gemm_ir

    func = gemm_ir(1024, 1024, 1024, block_N=256, block_K=64, threads=256, num_stages=2)
    for arch in ("sm_80", "sm_100a", "sm_120"):
        code = _cuda(func, arch)
        for hopper in ("wgmma", "cp.async.bulk", "mbarrier", "setmaxnreg", "fence.proxy.async"):
            assert hopper not in code, (arch, hopper)
    assert "wgmma" in _cuda(func, "sm_90a")


def test_a_jit_kernel_takes_the_arch_from_tile_nb_arch_and_says_what_it_refuses(monkeypatch):
    """In a notebook without a GPU: TILE_NB_ARCH=sm_75 makes the first interpreted call check the kernel
    against a T4 (a warning naming the line and what sm_75 lacks), and `.compile` build for it."""
    import torch

    import tile_nb
    import tile_nb.language as T
    from tile_nb.lower import LoweringError

    @tile_nb.jit
    def double_bf16(X, Y):
        X: T.Tensor[[256], T.bfloat16]
        Y: T.Tensor[[256], T.bfloat16]
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                Y[bx * 128 + i] = X[bx * 128 + i] * 2

    x, y = torch.arange(256, dtype=torch.bfloat16), torch.zeros(256, dtype=torch.bfloat16)
    monkeypatch.setenv("TILE_NB_ARCH", "sm_75")
    with pytest.warns(tile_nb.NotLowerableWarning, match="the target sm_75 lacks bfloat16"):
        double_bf16(x, y)
    assert torch.equal(y, x * 2)  # the interpreter ran it
    with pytest.raises(LoweringError, match="sm_75 lacks bfloat16") as info:
        double_bf16.compile(x, y)
    assert "Y[bx * 128 + i] = X[bx * 128 + i] * 2" in info.value.source_line()
    assert double_bf16.compile(x, y, target="sm_80").arch == "sm_80"


# ---------------------------------------------------------------------------------------------- GPU (H200)

@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["compute_75", "compute_80", "compute_89"])
def test_older_code_paths_run_on_the_h200_as_ptx(arch):
    """The sm_75 / sm_80 / sm_89 lowering, loaded as PTX that the H200's driver compiles: agrees with torch
    (correctness of those paths only; their speed is not measured here)."""
    import torch
    from kernels.seed import gemm_variant

    from tile_nb.runtime import compile as rt_compile

    torch.manual_seed(0)
    M, N, K = 1000, 1032, 1000
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float32)
    kernel = rt_compile(gemm_variant.specialize(M=M, N=N, K=K), arch, options={"cache": False})
    assert kernel.not_launchable_reason is None, kernel.not_launchable_reason
    kernel(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, (a.double() @ b.double()).float(), rtol=1e-3, atol=5e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["compute_75", "compute_80"])
def test_flash_attention_runs_as_older_ptx_on_the_h200(arch):
    import torch
    from kernels import reference as ref

    from tile_nb.runtime import compile as rt_compile

    torch.manual_seed(0)
    B, H, S, D = 1, 4, 512, 64
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    func = ref.flash_attention.specialize(B=B, H=H, S=S, D=D, block_M=64, block_N=64)
    kernel = rt_compile(func, arch, options={"cache": False})
    kernel(q, k, v, o)
    torch.cuda.synchronize()
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    torch.testing.assert_close(o.float(), want, rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------------------------------------- the table

def _outcome(name: str, arch: str) -> str:
    from tile_nb.backend.cuda_compile import CudaCompileError
    from tile_nb.lower import LoweringError

    try:
        kernel = _compile(name, arch)
    except LoweringError as err:
        first = str(err).splitlines()[0]
        return "refused: " + first.replace("|", "/")[:110]
    except CudaCompileError as err:
        return "COMPILER ERROR: " + str(err).splitlines()[1][:80]
    except Exception as err:  # noqa: BLE001 - a row of the table, not a test: say what failed and go on
        return f"ERROR {type(err).__name__}: " + str(err).splitlines()[0][:80]
    r = next(iter(kernel.resources_by_kernel.values()))
    return f"builds ({r.registers} regs, {r.total_shared_bytes // 1024} KiB smem)"


if __name__ == "__main__":
    archs = sys.argv[1:] or ARCHS
    print("| kernel | " + " | ".join(archs) + " |")
    print("|---|" + "---|" * len(archs))
    for kernel_name in sorted(_kernels()):
        print(f"| {kernel_name} | " + " | ".join(_outcome(kernel_name, a) for a in archs) + " |", flush=True)


def test_the_cuda_host_launcher_refuses_a_compute_target(tmp_path):
    """host='cuda_host' builds SASS for one GPU through tvm_ffi (no PTX): with compute_80 the
    H200 said "no kernel image is available" at launch (2026-12-05); now the build says why,
    naming the arch, before nvcc runs."""
    from tile_nb.backend.cuda_compile import CudaCompileError
    from tile_nb.backend.cuda_host import build_launcher

    with pytest.raises(CudaCompileError, match="compute_80 target, which hands PTX to the driver") as info:
        build_launcher("// not compiled", "compute_80", tmp_path)
    assert info.value.arch == "compute_80" and not (tmp_path / "kernel.cu").exists()


def test_cuda_host_with_a_compute_target_is_refused_before_anything_is_built(monkeypatch, tmp_path):
    """The check above sat in build_launcher, which took the target's arch (sm_80 for compute_80): on the H100
    as compute_80 / compute_75 (2026-12-05) four tests still launched an sm_80 cubin ("no kernel image is
    available"). Now runtime.compile (which the JIT calls) refuses the pair from the target's label, before
    building, also where no GPU is."""
    from kernels.seed import gemm_ir

    from tile_nb.backend.cuda_compile import CudaCompileError
    from tile_nb.runtime import compile as runtime_compile

    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path))
    with pytest.raises(CudaCompileError, match="compute_80 target, which hands PTX to the driver"):
        runtime_compile(gemm_ir(128, 128, 128), "compute_80", options={"host": "cuda_host"})
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("arch, expected", [(None, None), ("compute_80", "compute_80 target"),
                                            ("sm_90a", None), ("compute_75", "compute_75 target")])
def test_hopper_plan_tests_skip_on_an_older_target_of_the_same_device(arch, expected, monkeypatch):
    """The GPU tests that assert TMA / wgmma (tests/kernels/hopper.py) skip, saying why, when TILE_NB_ARCH
    runs older GPUs' code on an sm_90 device: on the H100 as compute_80 they failed instead (75 tests,
    2026-12-05)."""
    import torch
    from kernels.hopper import why_no_hopper_plan

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr("tile_nb.backend.target.device_arch", lambda *a, **k: "sm_90a", raising=False)
    if arch is None:
        monkeypatch.delenv("TILE_NB_ARCH", raising=False)
    else:
        monkeypatch.setenv("TILE_NB_ARCH", arch)
    why = why_no_hopper_plan()
    assert (why is None) if expected is None else (expected in why), why
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    assert "not sm_80" in why_no_hopper_plan()
